// The emulator runtime: records each core's instruction queues, runs them adversarially,
// detects races with per-byte shadow state and vector clocks, and checks synchronisation.
#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <string>
#include <tuple>
#include <ucontext.h>

#include "kernel_operator.h"

namespace tw_emu {
namespace {
constexpr int CORES = 3;                 // AIC, AIV0, AIV1 of one AI core group
constexpr int LANES = CORES * NPIPE;     // one in-order queue per (core, pipe)
constexpr uint64_t GM_GRAIN = 32;        // GM shadow granule (bytes); on-chip is per byte
const char* PIPE_NAMES[NPIPE] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
const char* SPACE_NAMES[NSPACE] = {"GM", "UB", "L1", "L0A", "L0B", "L0C"};
const char* CORE_NAMES[CORES] = {"AIC", "AIV0", "AIV1"};
// A2's memories (UB: all 192 KiB, the 256 bytes ASC_UB_SIZE keeps back are the Matmul
// library's, see facts/arch.py; L1: 512 KiB less the 256 bytes ASC_L1_SIZE keeps back) until
// a launch sets its target's (set_capacities: Ascend 950 has 248 KiB UB, 256 KiB L0C)
uint64_t CAPACITY[NSPACE] = {0, 196608, 524032, 65536, 65536, 131072};

enum Kind { DATA, SET, WAIT, BARRIER, CSET, CWAIT };

struct Instr {
    Kind kind;
    int lane, line;
    const char* what;
    std::vector<Acc> acc;
    std::function<void()> fn;
    int src = 0, dst = 0, id = 0, group = 0, mode = 0;
    double cost = 0;
    uint64_t bytes = 0;
    uint32_t local = 0;  // position in its lane, from 1
    uint32_t fence = 0;  // a scalar read (GetValue) issued before this one (+1): runs first
    uint32_t epoch = 0;  // PipeBarriers of its pipe issued before it on its core
    bool atomic = false;  // issued under SetAtomicAdd/Max/Min (combines with GM, any order)
    bool is_fence = false;
    std::vector<uint32_t> snap;  // a fence's vector clock once it ran
};

struct Shadow { uint32_t w; uint32_t r[NPIPE]; };       // on-chip: instr ids (+1), 0 = none
struct GmShadow { uint32_t w; uint32_t r[LANES]; };

// a flag: raised or not, and the wait that last cleared it (a set not ordered after that wait
// may find the flag still raised: SetFlag-WaitFlag(ISASI).md calls that undefined behaviour)
// (vc starts at zero: a Run is a local, and a cross-core wait joins its flag's vc, so garbage
// there would order the waiting core after everything)
struct Flag { bool set = false; int line = 0; double time = 0; uint32_t vc[LANES] = {}; uint32_t waited = 0; int wait_line = 0; };
struct Cross { int count = 0; double time = 0; uint32_t vc[LANES] = {}; int line = 0; };

// GM shadow: one entry per 32-byte granule; a granule that an access covers only in part
// (DataCopyPad writes only the valid bytes) gets exact per-byte entries from then on, so
// disjoint bytes of one granule never race and overlapping bytes always do.
struct Arg {
    uint64_t begin, end; std::string name; std::vector<GmShadow> shadow;
    std::unordered_map<uint64_t, std::vector<GmShadow>> fine;
};
struct Name { int core, space; uint64_t off, len; std::string name; };

struct State {
    int blocks = 0, block = 0, core = 0;
    std::vector<uint8_t> mem[CORES][NSPACE];
    std::vector<Shadow> shadow[CORES][NSPACE];
    uint64_t inited[CORES][NSPACE];
    std::vector<Instr> instrs;
    std::vector<uint32_t> queue[LANES];
    std::vector<Arg> args;
    std::vector<Name> names;
    std::string report;
    int errors = 0, races = 0, groups = 0;
    bool over_budget = false;  // a block issued MAX_BLOCK_INSTRS: the launch stops
    uint32_t fence[CORES] = {0, 0, 0};
    uint32_t epoch[LANES] = {0};  // PipeBarriers issued so far per (core, pipe)
    int atomic[CORES] = {0, 0, 0};
    std::map<std::string, int> seen;
    // statistics
    uint64_t n_instr[CORES][NPIPE], n_bytes[CORES][NPIPE];
    double busy[CORES][NPIPE], overlap_mte2 = 0, mte2_total = 0, compute_total = 0, span = 0;
    std::vector<std::pair<double, double>> intervals[CORES][NPIPE];
};
State* S = nullptr;

std::string where(int line) { return "kernel.cpp:" + std::to_string(line); }
std::string lane_name(int lane) {
    return std::string(PIPE_NAMES[lane % NPIPE]) + "@" + CORE_NAMES[lane / NPIPE];
}

void add_report(const std::string& key, const std::string& text) {
    if (S->seen.count(key)) return;
    S->seen[key] = 1;
    if (S->errors < 50) S->report += "error: " + text + "\n";
    S->errors++;
}

std::string name_of(int core, int space, uint64_t off) {
    if (space == SGM) {
        for (auto& a : S->args)
            if (off >= a.begin && off < a.end) return "'" + a.name + "'";
        return "GM";
    }
    for (auto& n : S->names)
        if (n.core == core && n.space == space && off >= n.off && off < n.off + n.len)
            return "'" + n.name + "'";
    return "unnamed";
}

uint32_t* vc_of_lane(std::vector<std::vector<uint32_t>>& vc, int lane) { return vc[lane].data(); }
}  // namespace

bool is_aic() { return S->core == 0; }
bool is_aiv() { return S->core != 0; }
int block_idx() { return S->block; }
int block_num() { return S->blocks; }
int sub_block_idx() { return S->core == 0 ? 0 : S->core - 1; }
const char* space_name(int space) { return SPACE_NAMES[space]; }

void set_capacities(const uint64_t* bytes) {
    for (int space = 1; space < NSPACE; ++space) CAPACITY[space] = bytes[space - 1];
}

uint8_t* space_base(int space) { return core_space_base(S->core, space); }

uint8_t* core_space_base(int core, int space) {
    auto& m = S->mem[core][space];
    // cube memories start as NaN bytes, so padding a kernel forgets to zero shows in results
    if (m.empty()) m.assign(CAPACITY[space], space == SUB ? 0 : 0xFF);
    return m.data();
}

void error(int line, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    add_report(std::to_string(line) + buf, std::string(buf) + " (" + where(line) + ", block " +
               std::to_string(S->block) + " " + CORE_NAMES[S->core] + ")");
}

void init_buffer(int space, uint64_t bytes, int line) {
    if (space == SGM) return;
    if (S->core == 0 ? space == SUB : space != SUB) return;  // the other core type's memory
    if (bytes > CAPACITY[space])
        error(line, "InitBuffer asks %llu bytes of %s, which holds %llu bytes",
              (unsigned long long)bytes, SPACE_NAMES[space], (unsigned long long)CAPACITY[space]);
}

bool check_local(int space, uint64_t off, uint64_t bytes, int line) {
    bool ok = true;
    if (off % 32) {
        error(line, "%s tensor at offset %llu is not 32-byte aligned", SPACE_NAMES[space],
              (unsigned long long)off);
        ok = false;
    }
    if (off + bytes > CAPACITY[space]) {
        error(line, "%s tensor of %llu bytes at offset %llu exceeds the %llu bytes of %s",
              SPACE_NAMES[space], (unsigned long long)bytes, (unsigned long long)off,
              (unsigned long long)CAPACITY[space], SPACE_NAMES[space]);
        ok = false;
    }
    return ok;
}

void name_range(int space, uint64_t off, uint64_t len, const char* name) {
    for (auto& n : S->names)
        if (n.core == S->core && n.space == space && n.off == off && n.name == name) return;
    S->names.push_back({S->core, space, off, len, name});
}

// Instructions one block may issue (each is kept until the block ends, about 400 bytes with
// its closure): a kernel past it loops far longer than meant, and would take the host's memory
// (a trip count read from a tile whose bytes another buffer took ran until it held 14 GB).
constexpr size_t MAX_BLOCK_INSTRS = size_t(1) << 22;
void stop_issuing();  // after the cores' scheduler below

static void push(Instr in, int pipe) {
    if (S->instrs.size() >= MAX_BLOCK_INSTRS) {
        if (!S->over_budget)
            error(in.line, "block %d issued %llu instructions, the emulator's limit: a loop runs "
                  "far longer than meant (a trip count read from data no copy has written, or "
                  "that another buffer overwrote?); the launch stops here", S->block,
                  (unsigned long long)MAX_BLOCK_INSTRS);
        S->over_budget = true;
        stop_issuing();
        return;
    }
    in.lane = S->core * NPIPE + pipe;
    in.fence = S->fence[S->core];
    in.epoch = S->epoch[in.lane];
    in.atomic = S->atomic[S->core] != 0;
    S->instrs.push_back(std::move(in));
    S->queue[S->instrs.back().lane].push_back(uint32_t(S->instrs.size() - 1));
}

void fence_last() {
    S->instrs.back().is_fence = true;
    S->fence[S->core] = uint32_t(S->instrs.size());
}
int atomic_mode() { return S->atomic[S->core]; }
void set_atomic(int mode) { S->atomic[S->core] = mode; }
void assert_fail(int line, const char* msg) { error(line, "device assertion failed: %s", msg); }

bool issue(int pipe, const char* what, int line, std::vector<Acc> acc, std::function<void()> fn,
           double cost, uint64_t bytes) {
    for (auto& a : acc) {
        if (a.space == SGM && a.len) {
            bool inside = false;
            for (auto& arg : S->args) inside |= a.off >= arg.begin && a.off + a.len <= arg.end;
            if (!inside) {
                error(line, "%s touches %llu GM bytes outside every tensor argument", what,
                      (unsigned long long)a.len);
                return false;
            }
        }
        if (a.space == SGM || a.len == 0) continue;
        if (a.off + a.len > CAPACITY[a.space]) {
            error(line, "%s touches %s bytes [%llu, %llu), beyond its %llu bytes", what,
                  SPACE_NAMES[a.space], (unsigned long long)a.off,
                  (unsigned long long)(a.off + a.len), (unsigned long long)CAPACITY[a.space]);
            return false;
        }
    }
    Instr in{DATA, 0, line, what, std::move(acc), std::move(fn)};
    in.cost = cost;
    in.bytes = bytes;
    push(std::move(in), pipe);
    return true;
}

// The events each core of dav-2201 has: HardEventAic and HardEventAiv in
// impl/basic_api/kernel_event.h. Ids 6 and 7 exist but are the vendor's ("SetFlag/WaitFlag
// (ISASI)" in the API documentation: 6 for the system, 7 for TPipe's automatic sync).
static bool has_event(int core, int src, int dst) {
    static const int AIC[][2] = {{PMTE2, PMTE1}, {PMTE1, PMTE2}, {PMTE1, PM}, {PM, PMTE1},
        {PMTE3, PMTE1}, {PMTE1, PMTE3}, {PMTE2, PM}, {PM, PMTE2}, {PM, PFIX}, {PFIX, PM},
        {PMTE3, PMTE2}, {PMTE2, PMTE3}, {PS, PMTE2}, {PMTE2, PS}, {PS, PMTE3}, {PMTE3, PS},
        {PMTE2, PFIX}, {PFIX, PMTE2}, {PFIX, PS}, {PM, PS}, {PFIX, PMTE3}, {PMTE1, PFIX},
        {PFIX, PMTE1}, {PFIX, PFIX}};
    static const int AIV[][2] = {{PMTE2, PV}, {PV, PMTE2}, {PMTE3, PV}, {PV, PMTE3}, {PV, PV},
        {PMTE3, PMTE2}, {PMTE2, PMTE3}, {PS, PV}, {PV, PS}, {PS, PMTE2}, {PMTE2, PS},
        {PS, PMTE3}, {PMTE3, PS}};
    if (core == 0) {
        for (auto& e : AIC) if (e[0] == src && e[1] == dst) return true;
    } else {
        for (auto& e : AIV) if (e[0] == src && e[1] == dst) return true;
    }
    return false;
}

static bool event_ok(int src, int dst, int id, int line, const char* what) {
    if (!has_event(S->core, src, dst)) {
        error(line, "%s<%s_%s>(%d): %s has no event %s_%s (impl/basic_api/kernel_event.h)", what,
              PIPE_NAMES[src], PIPE_NAMES[dst], id, S->core == 0 ? "AIC" : "AIV",
              PIPE_NAMES[src], PIPE_NAMES[dst]);
        return false;
    }
    if (id < 0 || id > 7) {
        error(line, "%s<%s_%s>(%d): event id %d is out of range 0-7", what, PIPE_NAMES[src],
              PIPE_NAMES[dst], id, id);
        return false;
    }
    if (id > 5) {
        error(line, "%s<%s_%s>(%d): event id %d is reserved by the vendor (6: system, 7: TPipe's "
              "automatic synchronisation); kernels use ids 0-5", what, PIPE_NAMES[src],
              PIPE_NAMES[dst], id, id);
        return false;
    }
    return true;
}

void issue_set(int src, int dst, int id, int line) {
    if (!event_ok(src, dst, id, line, "SetFlag")) return;
    Instr in{SET, 0, line, "SetFlag"};
    in.src = src, in.dst = dst, in.id = id;
    push(std::move(in), src);
}

void issue_wait(int src, int dst, int id, int line) {
    if (!event_ok(src, dst, id, line, "WaitFlag")) return;
    Instr in{WAIT, 0, line, "WaitFlag"};
    in.src = src, in.dst = dst, in.id = id;
    push(std::move(in), dst);
}

void issue_pipe_barrier(int pipe, int line) {
    (void)line;
    S->epoch[S->core * NPIPE + pipe]++;
}

void issue_barrier_all(int line) {
    for (int p = 0; p < NPIPE; ++p) S->epoch[S->core * NPIPE + p]++;
    int group = ++S->groups;
    for (int p = 0; p < NPIPE; ++p) {
        Instr in{BARRIER, 0, line, "PipeBarrier<PIPE_ALL>"};
        in.group = group;
        push(std::move(in), p);
    }
}

void issue_cross_set(int pipe, int id, int mode, int line) {
    if (id < 0 || id > 10) { error(line, "CrossCoreSetFlag(%d): flag id out of range 0-10", id); return; }
    Instr in{CSET, 0, line, "CrossCoreSetFlag"};
    in.id = id, in.mode = mode;
    push(std::move(in), pipe);
}

void issue_cross_wait(int id, int line) {
    if (id < 0 || id > 10) { error(line, "CrossCoreWaitFlag(%d): flag id out of range 0-10", id); return; }
    // the scalar unit stalls at the wait: nothing issued after it starts before it returns
    int group = ++S->groups;
    for (int p = 0; p < NPIPE; ++p) {
        Instr in{CWAIT, 0, line, "CrossCoreWaitFlag"};
        in.id = id, in.group = group;
        push(std::move(in), p);
    }
}

namespace {
struct Run {
    std::vector<std::vector<uint32_t>> vc = std::vector<std::vector<uint32_t>>(LANES, std::vector<uint32_t>(LANES, 0));
    size_t head[LANES] = {0};
    double ready[LANES] = {0};
    Flag flags[CORES][NPIPE][NPIPE][8];
    Cross cross[CORES][11];
    std::vector<char> done;  // grows with the instructions issued (settle runs some early)
    size_t executed = 0;
    // per lane: how many of its own instructions are known finished through a flag round trip
    // (a SetFlag of the lane waits for them; a WaitFlag back on the lane learns it)
    uint32_t completed[LANES] = {0};
};

bool ordered(const Run& run, int lane, uint32_t prior) {
    if (prior == 0) return true;
    const Instr& p = S->instrs[prior - 1];
    return p.lane == lane || run.vc[lane][p.lane] >= p.local;
}

void race(const Instr& now, uint32_t prior, const Acc& a, uint64_t off, bool prior_write) {
    const Instr& p = S->instrs[prior - 1];
    int core = now.lane / NPIPE;
    std::string buf = name_of(core, a.space, off);
    std::string key = std::to_string(p.line) + "/" + std::to_string(now.line) + buf;
    const char* kind = prior_write ? (a.write ? "write-after-write" : "read-after-write")
                                   : "write-after-read";
    S->races++;
    add_report(key, std::string("race (") + kind + ") on " + SPACE_NAMES[a.space] + " buffer " +
               buf + ": " + now.what + " on " + lane_name(now.lane) + " (" + where(now.line) +
               ") is not ordered after " + p.what + " on " + lane_name(p.lane) + " (" +
               where(p.line) + "); add " +
               (p.lane / NPIPE == now.lane / NPIPE ? "set_flag/wait_flag" : "set_cross_flag/wait_cross_flag") +
               " between " + PIPE_NAMES[p.lane % NPIPE] + " and " + PIPE_NAMES[now.lane % NPIPE] +
               " (block " + std::to_string(S->block) + ")");
}

// Two accesses of one pipe to the same bytes, at least one a write, with no PipeBarrier of the
// pipe between them (the vector pipe and the DMA pipes; the cube and scalar pipes keep order)
bool same_pipe_unordered(const Run& run, const Instr& in, uint32_t prior, uint32_t id) {
    if (!prior || prior == id) return false;
    const Instr& p = S->instrs[prior - 1];
    int pipe = in.lane % NPIPE;
    if (in.atomic && p.atomic) return false;
    return p.lane == in.lane && p.epoch == in.epoch && p.local > run.completed[in.lane] &&
           pipe != PS && pipe != PM;
}

void same_pipe_race(const Instr& now, uint32_t prior, const Acc& a, uint64_t off, bool prior_write) {
    const Instr& p = S->instrs[prior - 1];
    std::string buf = name_of(now.lane / NPIPE, a.space, off);
    const char* kind = prior_write ? (a.write ? "write-after-write" : "read-after-write") : "write-after-read";
    S->races++;
    add_report("pipe" + std::to_string(p.line) + "/" + std::to_string(now.line) + buf,
               std::string("race (") + kind + ") on " + SPACE_NAMES[a.space] + " buffer " + buf + ": " +
               now.what + " (" + where(now.line) + ") and " + p.what + " (" + where(p.line) + ") on " +
               lane_name(now.lane) + " touch the same bytes with no PipeBarrier<PIPE_" +
               PIPE_NAMES[now.lane % NPIPE] + "> between them (block " + std::to_string(S->block) + ")");
}

void check_access(Run& run, const Instr& in, uint32_t id) {
    int lane = in.lane, core = lane / NPIPE, pipe = lane % NPIPE;
    for (const Acc& a : in.acc) {
        if (a.len == 0) continue;
        if (a.space == SGM) {
            for (auto& arg : S->args) {
                if (a.off + a.len <= arg.begin || a.off >= arg.end) continue;
                uint64_t lo = (std::max(a.off, arg.begin) - arg.begin) / GM_GRAIN;
                uint64_t hi = (std::min(a.off + a.len, arg.end) - arg.begin + GM_GRAIN - 1) / GM_GRAIN;
                uint64_t first = std::max(a.off, arg.begin) - arg.begin;
                uint64_t last = std::min(a.off + a.len, arg.end) - arg.begin;  // exclusive
                auto visit = [&](GmShadow& sh, uint64_t addr) {
                    if (!ordered(run, lane, sh.w)) race(in, sh.w, a, addr, true);
                    else if (same_pipe_unordered(run, in, sh.w, id)) same_pipe_race(in, sh.w, a, addr, true);
                    if (a.write)
                        for (int l = 0; l < LANES; ++l) {
                            if (!ordered(run, lane, sh.r[l])) race(in, sh.r[l], a, addr, false);
                            else if (same_pipe_unordered(run, in, sh.r[l], id)) same_pipe_race(in, sh.r[l], a, addr, false);
                        }
                    if (a.write) { sh.w = id; std::fill(sh.r, sh.r + LANES, 0u); }
                    else sh.r[lane] = id;
                };
                for (uint64_t g = lo; g < hi; ++g) {
                    uint64_t gb = g * GM_GRAIN, b0 = std::max(first, gb), b1 = std::min(last, gb + GM_GRAIN);
                    auto it = arg.fine.find(g);
                    if (it == arg.fine.end() && b0 == gb && b1 == gb + GM_GRAIN) {
                        visit(arg.shadow[g], arg.begin + gb);
                        continue;
                    }
                    if (it == arg.fine.end())  // split the granule into bytes
                        it = arg.fine.emplace(g, std::vector<GmShadow>(GM_GRAIN, arg.shadow[g])).first;
                    for (uint64_t b = b0; b < b1; ++b) visit(it->second[b - gb], arg.begin + b);
                }
            }
            continue;
        }
        auto& shadow = S->shadow[a.core >= 0 ? a.core : core][a.space];
        if (shadow.empty()) shadow.assign(CAPACITY[a.space], Shadow{});
        for (uint64_t b = a.off; b < a.off + a.len; ++b) {
            Shadow& sh = shadow[b];
            if (sh.w && !ordered(run, lane, sh.w)) race(in, sh.w, a, b, true);
            else if (same_pipe_unordered(run, in, sh.w, id)) same_pipe_race(in, sh.w, a, b, true);
            if (a.write) {
                for (int p = 0; p < NPIPE; ++p)
                    if (sh.r[p] && p != pipe && !ordered(run, lane, sh.r[p])) race(in, sh.r[p], a, b, false);
                if (same_pipe_unordered(run, in, sh.r[pipe], id)) same_pipe_race(in, sh.r[pipe], a, b, false);
                sh.w = id;
                std::fill(sh.r, sh.r + NPIPE, 0u);
            } else {
                sh.r[pipe] = id;
            }
        }
    }
}

bool runnable(Run& run, const Instr& in, bool force_sets) {
    int core = in.lane / NPIPE;
    if (in.fence && !run.done[in.fence - 1]) return false;  // issued after a scalar read
    switch (in.kind) {
    case SET:  // a set on a raised flag runs only when nothing else can (then it is reported)
        return force_sets || !run.flags[core][in.src][in.dst][in.id].set;
    case WAIT: return run.flags[core][in.src][in.dst][in.id].set;
    case BARRIER:
        for (int p = 0; p < NPIPE; ++p) {
            int l = core * NPIPE + p;
            if (run.head[l] >= S->queue[l].size()) return false;
            const Instr& h = S->instrs[S->queue[l][run.head[l]]];
            if (h.kind != BARRIER || h.group != in.group) return false;
        }
        return true;
    case CWAIT:
        if (run.cross[core][in.id].count < (core == 0 ? 2 : 1)) return false;
        for (int p = 0; p < NPIPE; ++p) {
            int l = core * NPIPE + p;
            if (run.head[l] >= S->queue[l].size()) return false;
            const Instr& h = S->instrs[S->queue[l][run.head[l]]];
            if (h.kind != CWAIT || h.group != in.group) return false;
        }
        return true;
    default: return true;
    }
}

void join(uint32_t* into, const uint32_t* from) {
    for (int l = 0; l < LANES; ++l) into[l] = std::max(into[l], from[l]);
}

void execute(Run& run, int lane) {
    uint32_t index = S->queue[lane][run.head[lane]];
    Instr& in = S->instrs[index];
    int core = lane / NPIPE, pipe = lane % NPIPE;
    uint32_t* vc = run.vc[lane].data();
    if (in.kind == BARRIER || in.kind == CWAIT) {
        std::vector<uint32_t> all(LANES, 0);
        double t = 0;
        if (in.fence) join(all.data(), S->instrs[in.fence - 1].snap.data());
        if (in.kind == CWAIT) {
            Cross& c = run.cross[core][in.id];
            c.count -= core == 0 ? 2 : 1;
            for (int p = 0; p < NPIPE; ++p)
                run.completed[core * NPIPE + p] = std::max(run.completed[core * NPIPE + p], c.vc[core * NPIPE + p]);
            join(all.data(), c.vc);
            t = c.time;
        }
        for (int p = 0; p < NPIPE; ++p) {
            int l = core * NPIPE + p;
            Instr& b = S->instrs[S->queue[l][run.head[l]]];
            run.done[S->queue[l][run.head[l]]] = 1;
            b.local = ++run.vc[l][l];
            join(all.data(), run.vc[l].data());
            t = std::max(t, run.ready[l]);
        }
        for (int p = 0; p < NPIPE; ++p) {
            int l = core * NPIPE + p;
            join(run.vc[l].data(), all.data());
            run.ready[l] = t;
            run.head[l]++;
        }
        return;
    }
    if (in.fence) join(vc, S->instrs[in.fence - 1].snap.data());
    in.local = ++vc[lane];
    run.done[index] = 1;
    double start = run.ready[lane];
    if (in.kind == DATA) {
        check_access(run, in, index + 1);
        if (in.fn) in.fn();
        if (in.is_fence) in.snap.assign(vc, vc + LANES);
        run.ready[lane] = start + in.cost;
        S->n_instr[core][pipe]++;
        S->n_bytes[core][pipe] += in.bytes;
        S->busy[core][pipe] += in.cost;
        S->intervals[core][pipe].push_back({start, start + in.cost});
    } else if (in.kind == SET) {
        Flag& f = run.flags[core][in.src][in.dst][in.id];
        if (f.set)
            add_report("set" + std::to_string(in.line) + "/" + std::to_string(S->block),
                       std::string("SetFlag<") + PIPE_NAMES[in.src] + "_" + PIPE_NAMES[in.dst] +
                       ">(" + std::to_string(in.id) + ") at " + where(in.line) +
                       " raises a flag that is already set (by " + where(f.line) +
                       ") and not yet waited: unpaired set");
        else if (f.waited && !ordered(run, lane, f.waited))
            add_report("set" + std::to_string(in.line) + "/" + std::to_string(S->block),
                       std::string("SetFlag<") + PIPE_NAMES[in.src] + "_" + PIPE_NAMES[in.dst] +
                       ">(" + std::to_string(in.id) + ") at " + where(in.line) +
                       " is not ordered after the WaitFlag at " + where(f.wait_line) +
                       " that clears the previous set (by " + where(f.line) +
                       "): the flag may be already set, a second set is undefined behaviour");
        f.set = true;
        f.line = in.line;
        f.time = start;
        std::copy(vc, vc + LANES, f.vc);
    } else if (in.kind == WAIT) {
        Flag& f = run.flags[core][in.src][in.dst][in.id];
        f.set = false;
        f.waited = index + 1;
        f.wait_line = in.line;
        run.completed[lane] = std::max(run.completed[lane], f.vc[lane]);
        join(vc, f.vc);
        vc[lane] = in.local;
        run.ready[lane] = std::max(start, f.time);
    } else if (in.kind == CSET) {
        std::vector<int> targets = core == 0 ? std::vector<int>{1, 2} : std::vector<int>{0};
        for (int t : targets) {
            Cross& c = run.cross[t][in.id];
            if (c.count >= 15)
                add_report("cross" + std::to_string(in.line), "CrossCoreSetFlag(" + std::to_string(in.id) +
                           ") at " + where(in.line) + " has more than 15 pending sets");
            c.count++;
            join(c.vc, vc);
            c.time = std::max(c.time, start);
            c.line = in.line;
        }
    }
    run.head[lane]++;
}

double union_overlap(std::vector<std::pair<double, double>> a, std::vector<std::pair<double, double>> b) {
    // length of (union of a) intersected with (union of b)
    auto merge = [](std::vector<std::pair<double, double>>& v) {
        std::sort(v.begin(), v.end());
        std::vector<std::pair<double, double>> out;
        for (auto& iv : v) {
            if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
            else out.push_back(iv);
        }
        v = out;
    };
    merge(a);
    merge(b);
    double total = 0;
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
        if (hi > lo) total += hi - lo;
        (a[i].second < b[j].second) ? ++i : ++j;
    }
    return total;
}

void check_pairs() {
    // every SetFlag of a (core, event, id) needs exactly one WaitFlag, and the other way round
    std::map<std::tuple<int, int, int, int>, std::pair<int, int>> count;
    std::map<std::tuple<int, int, int, int>, int> line;
    for (const Instr& in : S->instrs) {
        if (in.kind != SET && in.kind != WAIT) continue;
        auto key = std::make_tuple(in.lane / NPIPE, in.src, in.dst, in.id);
        (in.kind == SET ? count[key].first : count[key].second)++;
        line[key] = in.line;
    }
    for (auto& [key, c] : count) {
        if (c.first == c.second) continue;
        auto [core, src, dst, id] = key;
        add_report("pair" + std::to_string(line[key]),
                   std::string("unpaired flags: ") + std::to_string(c.first) + " SetFlag<" +
                   PIPE_NAMES[src] + "_" + PIPE_NAMES[dst] + ">(" + std::to_string(id) + ") but " +
                   std::to_string(c.second) + " WaitFlag on " + CORE_NAMES[core] + " (last at " +
                   where(line[key]) + ", block " + std::to_string(S->block) + ")");
    }
}

Run* RUN = nullptr;  // the running block's scheduler state: settle runs part of it early

// runs the next instruction (the latest issued of those that can run: adversarial); false when
// none can
bool step(Run& run) {
    run.done.resize(S->instrs.size(), 0);
    int best = -1;
    uint32_t best_index = 0;
    for (int force = 0; force < 2 && best < 0; ++force)
        for (int l = 0; l < LANES; ++l) {
            if (run.head[l] >= S->queue[l].size()) continue;
            uint32_t index = S->queue[l][run.head[l]];
            if (!runnable(run, S->instrs[index], force)) continue;
            if (best < 0 || index > best_index) best = l, best_index = index;  // latest first
        }
    if (best < 0) return false;
    Kind kind = S->instrs[best_index].kind;
    run.executed += kind == BARRIER || kind == CWAIT ? NPIPE : 1;
    execute(run, best);
    return true;
}

void report_stuck(const Run& run) {
    for (int l = 0; l < LANES; ++l) {
        if (run.head[l] >= S->queue[l].size()) continue;
        const Instr& in = S->instrs[S->queue[l][run.head[l]]];
        std::string what = in.kind == WAIT
            ? std::string("WaitFlag<") + PIPE_NAMES[in.src] + "_" + PIPE_NAMES[in.dst] + ">(" + std::to_string(in.id) + ")"
            : std::string(in.what);
        add_report("dead" + std::to_string(in.line),
                   what + " at " + where(in.line) + " on " + lane_name(l) +
                   " can never be satisfied: no matching set is left (deadlock; block " +
                   std::to_string(S->block) + ")");
    }
}

void run_block() {
    check_pairs();
    Run& run = *RUN;
    while (run.executed < S->instrs.size())
        if (!step(run)) {
            report_stuck(run);
            break;
        }
    for (int c = 0; c < CORES; ++c)
        for (int s = 0; s < NPIPE; ++s)
            for (int d = 0; d < NPIPE; ++d)
                for (int id = 0; id < 8; ++id)
                    if (run.flags[c][s][d][id].set)
                        add_report("left" + std::to_string(run.flags[c][s][d][id].line),
                                   std::string("SetFlag<") + PIPE_NAMES[s] + "_" + PIPE_NAMES[d] + ">(" +
                                   std::to_string(id) + ") at " + where(run.flags[c][s][d][id].line) +
                                   " is never waited: flag left set at kernel end (" + CORE_NAMES[c] + ")");
    double end = 0;
    for (int l = 0; l < LANES; ++l) end = std::max(end, run.ready[l]);
    S->span += end;
    for (int c = 0; c < CORES; ++c) {
        auto compute = S->intervals[c][PV];
        compute.insert(compute.end(), S->intervals[c][PM].begin(), S->intervals[c][PM].end());
        S->overlap_mte2 += union_overlap(S->intervals[c][PMTE2], compute);
        for (auto& iv : S->intervals[c][PMTE2]) S->mte2_total += iv.second - iv.first;
        for (auto& iv : compute) S->compute_total += iv.second - iv.first;
        for (int p = 0; p < NPIPE; ++p) S->intervals[c][p].clear();
    }
}
}  // namespace

// The cores of a group issue their code interleaved, as the NPU runs them side by side: each
// core's kernel body runs in a context of its own (ucontext, a stack each), AIC, then AIV0,
// then AIV1, each until its end or until its scalar unit stalls on a read that nothing issued
// so far lets finish (settle); then the next core issues, and a stalled core goes on once
// another has issued more. A kernel whose cores never stall issues as three whole cores one
// after another. When every unfinished core is stalled and none issued anything since, the
// first one's read can never finish: it is reported at its branch and that core goes on.
namespace {
struct CoreRun {
    ucontext_t ctx;
    bool done = false, stalled = false;
    size_t issued = 0;  // instructions issued (by every core) when it stalled
};
struct GroupRun {
    CoreRun core[CORES];
    ucontext_t main;
    const std::function<void()>* kernel = nullptr;
    bool give_up = false;  // the resumed core's read can never finish
};
// A context that runs ``entry`` on ``stack`` (``size`` bytes) and returns to ``link`` at its end:
// each core of a group and each thread of a SIMT vector function runs in one.
void start_context(ucontext_t& ctx, char* stack, size_t size, ucontext_t* link, void (*entry)()) {
    getcontext(&ctx);
    ctx.uc_stack.ss_sp = stack;
    ctx.uc_stack.ss_size = size;
    ctx.uc_link = link;
    makecontext(&ctx, entry, 0);
}

GroupRun* GROUP = nullptr;
constexpr size_t CORE_STACK = 16u << 20;  // a core's kernel body: locals, lambdas, SIMT calls
std::unique_ptr<char[]> core_stacks[CORES];

void core_entry() {
    (*GROUP->kernel)();
    GROUP->core[S->core].done = true;  // uc_link: back to the scheduler
}

// runs the kernel body of each core of the group, interleaved where a core stalls
void issue_group(const std::function<void()>& kernel) {
    GroupRun group;
    group.kernel = &kernel;
    GROUP = &group;
    for (int c = 0; c < CORES; ++c) {
        if (!core_stacks[c]) core_stacks[c].reset(new char[CORE_STACK]);
        start_context(group.core[c].ctx, core_stacks[c].get(), CORE_STACK, &group.main,
                      core_entry);
    }
    for (;;) {
        int next = -1;
        for (int c = 0; c < CORES && next < 0; ++c)  // a core not started yet
            if (!group.core[c].done && !group.core[c].stalled) next = c;
        for (int c = 0; c < CORES && next < 0; ++c)  // a stalled core, after more was issued
            if (group.core[c].stalled && S->instrs.size() > group.core[c].issued) next = c;
        for (int c = 0; c < CORES && next < 0; ++c)  // nothing can go on: the first stalled one
            if (group.core[c].stalled) next = c, group.give_up = true;
        if (next < 0) break;
        group.core[next].stalled = false;
        S->core = next;
        swapcontext(&group.main, &group.core[next].ctx);
    }
    GROUP = nullptr;
}
}  // namespace

// every core of the group done: the one issuing now is left for good (its stack is reused by
// the next launch), and the scheduler above ends the group
void stop_issuing() {
    if (!GROUP) return;
    for (int c = 0; c < CORES; ++c) GROUP->core[c].done = true;
    swapcontext(&GROUP->core[S->core].ctx, &GROUP->main);
}

void settle(int line) {
    uint32_t read = S->fence[S->core];  // this core's last scalar read (+1); 0: none
    auto finished = [&] { return read == 0 || (RUN->done.size() >= read && RUN->done[read - 1]); };
    bool hopeless = false;  // resumed with nothing new issued by any core
    while (!finished()) {
        while (step(*RUN))
            if (RUN->done[read - 1]) return;
        if (!GROUP || hopeless) {
            const Instr& in = S->instrs[read - 1];
            error(line, "a branch on the value %s reads at %s cannot be decided: that read waits "
                  "for an instruction that no core of the group issues before it (a deadlock)",
                  in.what, where(in.line).c_str());
            return;
        }
        // stall: the other cores issue until one of them may have let the read finish
        CoreRun& me = GROUP->core[S->core];
        me.stalled = true;
        me.issued = S->instrs.size();
        swapcontext(&me.ctx, &GROUP->main);
        hopeless = GROUP->give_up;
        GROUP->give_up = false;
    }
}

std::string format_slots(const char* fmt, const std::vector<PrintSlot>& slots) {
    std::string out;
    size_t next = 0;
    char buf[128];
    for (const char* p = fmt; *p; ++p) {
        if (*p != '%') { out += *p; continue; }
        if (p[1] == '%') { out += '%'; ++p; continue; }
        const char* start = p++;
        std::string spec = "%";
        while (*p && std::strchr("-+ #0123456789.", *p)) spec += *p++;
        while (*p && std::strchr("hlLqjzt", *p)) ++p;  // every slot is 64 bits wide
        const char conv = *p;
        if (!conv || !std::strchr("diuxXfFeEgGsp", conv) || next >= slots.size()) {
            out.append(start, conv ? p + 1 : p);  // no argument for it: printed as written
            if (!conv) break;
            continue;
        }
        const PrintSlot& s = slots[next++];
        if (conv == 'd' || conv == 'i') {
            std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), (long long)int64_t(s.bits));
        } else if (conv == 'u' || conv == 'x' || conv == 'X') {
            std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), (unsigned long long)s.bits);
        } else if (conv == 's') {
            out += s.kind == 's' ? s.text : "(null)";
            continue;
        } else if (conv == 'p') {
            std::snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)s.bits);
        } else {  // the slot's low 4 bytes as a float
            uint32_t u = uint32_t(s.bits);
            float f;
            std::memcpy(&f, &u, 4);
            std::snprintf(buf, sizeof buf, (spec + conv).c_str(), double(f));
        }
        out += buf;
    }
    return out;
}

int launch(int blocks, int nargs, void** args, const int64_t* sizes, const char** names,
           const std::function<void()>& kernel) {
    delete S;
    S = new State();
    S->blocks = blocks;
    for (int i = 0; i < nargs; ++i) {
        Arg a;
        a.begin = (uint64_t)(uintptr_t)args[i];
        a.end = a.begin + sizes[i];
        a.name = names[i];
        a.shadow.assign(sizes[i] / GM_GRAIN + 2, GmShadow{});
        S->args.push_back(std::move(a));
    }
    for (int b = 0; b < blocks; ++b) {
        S->block = b;
        S->instrs.clear();
        S->names.clear();
        for (int c = 0; c < CORES; ++c) S->fence[c] = 0, S->atomic[c] = 0;
        for (auto& a : S->args) std::fill(a.shadow.begin(), a.shadow.end(), GmShadow{}), a.fine.clear();
        for (int l = 0; l < LANES; ++l) S->queue[l].clear();
        for (int c = 0; c < CORES; ++c)
            for (int s = 0; s < NSPACE; ++s)
                if (!S->shadow[c][s].empty()) std::fill(S->shadow[c][s].begin(), S->shadow[c][s].end(), Shadow{});
        Run run;
        RUN = &run;
        issue_group(kernel);
        if (S->over_budget) {
            RUN = nullptr;
            break;
        }
        run_block();
        RUN = nullptr;
    }
    return S->errors;
}
// SIMT vector functions: each thread a context with its own stack, run to its next
// asc_syncthreads() (or its end) one after another; between two barriers each UB byte
// remembers the thread that wrote it and the thread that read it (-2: several).
SimtIndex simt_index;
namespace {
struct SimtThread { ucontext_t ctx; bool done = false, waiting = false; };
struct SimtByte { int writer = -1, reader = -1; };
struct SimtRun {
    std::vector<SimtThread> threads;
    ucontext_t main;
    std::function<void()> body;
    int current = 0, core = 0, line = 0;
    std::unordered_map<uint64_t, SimtByte> bytes;  // (space, offset) -> who touched it
};
SimtRun* SIMT = nullptr;
constexpr size_t SIMT_STACK = 64 * 1024;
std::vector<std::unique_ptr<char[]>> simt_stacks;  // one per thread, kept for the next call

void simt_entry() {
    SIMT->body();
    SIMT->threads[SIMT->current].done = true;
}

// ``other``: the thread that touched the byte before, -1 for several
void simt_race(int space, uint64_t off, int other, bool other_wrote, bool write, int line) {
    const char* kind = other_wrote ? (write ? "write-after-write" : "read-after-write")
                                   : "write-after-read";
    std::string buf = name_of(SIMT->core, space, off);
    S->races++;
    add_report("simt" + std::to_string(line) + buf,
               std::string("race (") + kind + ") on " + SPACE_NAMES[space] + " buffer " + buf +
               ": thread " + std::to_string(SIMT->current) + " of the SIMT vector function (" +
               where(line) + ") and " + (other < 0 ? std::string("other threads")
                                                   : "thread " + std::to_string(other)) +
               " (asc_vf_call at " + where(SIMT->line) + ") touch the same bytes with no "
               "asc_syncthreads() between them (block " + std::to_string(S->block) + " " +
               CORE_NAMES[SIMT->core] + ")");
}
}  // namespace

void simt_access(int space, uint64_t off, uint64_t len, bool write, int line) {
    if (!SIMT) return;
    int me = SIMT->current;
    for (uint64_t b = off; b < off + len; ++b) {
        SimtByte& at = SIMT->bytes[(uint64_t(space) << 56) | b];
        if (at.writer >= 0 && at.writer != me) {
            simt_race(space, b, at.writer, true, write, line);
        } else if (write && (at.reader == -2 || (at.reader >= 0 && at.reader != me))) {
            simt_race(space, b, at.reader == -2 ? -1 : at.reader, false, write, line);
        }
        if (write) at.writer = me;
        else at.reader = at.reader == -1 || at.reader == me ? me : -2;
    }
}

bool simt_bounds(int64_t i, uint32_t count, int line) {
    if (i >= 0 && uint64_t(i) < count) return true;
    error(line, "a SIMT thread touches element %lld of the %u elements of a UB tile or GM "
          "tensor window passed to its function",
          (long long)i, count);
    return false;
}

void simt_barrier() {
    if (!SIMT) return;
    SimtThread& t = SIMT->threads[SIMT->current];
    t.waiting = true;
    swapcontext(&t.ctx, &SIMT->main);
}

void simt_run(dim3 block, int core, int line, std::function<void()> body) {
    const uint32_t threads = block.x * block.y * block.z;
    SimtRun run;
    run.threads.resize(threads);
    run.body = std::move(body);
    run.core = core;
    run.line = line;
    SIMT = &run;
    while (simt_stacks.size() < threads) simt_stacks.emplace_back(new char[SIMT_STACK]);
    for (uint32_t i = 0; i < threads; ++i) {
        start_context(run.threads[i].ctx, simt_stacks[i].get(), SIMT_STACK, &run.main,
                      simt_entry);
    }
    for (;;) {  // one phase: every thread up to its next barrier or its end
        run.bytes.clear();
        uint32_t waiting = 0, done = 0;
        for (uint32_t i = 0; i < threads; ++i) {
            SimtThread& t = run.threads[i];
            if (t.done) { ++done; continue; }
            t.waiting = false;
            run.current = int(i);
            // thread i of the block: x fastest (thread_rank of cooperative_groups_impl.h)
            simt_index = SimtIndex{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
            swapcontext(&run.main, &t.ctx);
            if (t.waiting) ++waiting; else ++done;
        }
        if (waiting == 0) break;
        if (done) {
            error(line, "asc_syncthreads() reached by %u of the %u threads of a SIMT vector "
                  "function (the others ended without it)", waiting, threads);
            break;
        }
    }
    SIMT = nullptr;
}
}  // namespace tw_emu

extern "C" const char* tw_emu_report() { return tw_emu::S ? tw_emu::S->report.c_str() : ""; }

extern "C" const char* tw_emu_stats() {
    static std::string out;
    using namespace tw_emu;
    if (!S) return "{}";
    out = "{\"cycles\": " + std::to_string(S->span) + ", \"races\": " + std::to_string(S->races) +
          ", \"mte2_overlap\": " + std::to_string(std::min(S->mte2_total, S->compute_total) > 0
              ? S->overlap_mte2 / std::min(S->mte2_total, S->compute_total) : 0.0) +
          ", \"mte2_cycles\": " + std::to_string(S->mte2_total) +
          ", \"compute_cycles\": " + std::to_string(S->compute_total) +
          ", \"pipes\": {";
    bool first = true;
    for (int p = 0; p < NPIPE; ++p) {
        uint64_t n = 0, bytes = 0;
        double busy = 0;
        for (int c = 0; c < CORES; ++c) n += S->n_instr[c][p], bytes += S->n_bytes[c][p], busy += S->busy[c][p];
        if (!n) continue;
        out += std::string(first ? "" : ", ") + "\"" + PIPE_NAMES[p] + "\": {\"instructions\": " +
               std::to_string(n) + ", \"bytes\": " + std::to_string(bytes) + ", \"busy_cycles\": " +
               std::to_string(busy) + "}";
        first = false;
    }
    out += "}}";
    return out.c_str();
}
