// The subset of the Ascend C API that tilewright-ascend generates, for the CPU emulator.
//
// Calls do not run when the kernel body reaches them: each data or synchronisation
// instruction is queued on its pipe (MTE1, MTE2, MTE3, M, V, FIX, S) together with the
// bytes it reads and writes; scalar code (loops, index arithmetic) runs at once. The
// runtime (tw_emu.cpp) then executes the queues adversarially -- each pipe as late as its
// flags allow -- and checks every access against per-byte shadow state.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#define __global__
#define __aicore__
#define __gm__
#define GM_ADDR uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(type)
#define ASCEND_IS_AIC (::tw_emu::is_aic())
#define ASCEND_IS_AIV (::tw_emu::is_aiv())
#define TW_DEBUG_NAME(t) ::tw_emu::name_tensor((t), #t)
#define TW_LINE int line = __builtin_LINE()

using half = _Float16;
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    bfloat16_t(float f) { uint32_t u; std::memcpy(&u, &f, 4); bits = uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
    operator float() const { uint32_t u = uint32_t(bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }
};

namespace tw_emu {
enum Pipe : int { PS = 0, PV, PM, PMTE1, PMTE2, PMTE3, PFIX, NPIPE };
enum Space : int { SGM = 0, SUB, SL1, SL0A, SL0B, SL0C, NSPACE };
struct Acc { int space; uint64_t off; uint64_t len; bool write; };

bool is_aic();
bool is_aiv();
int block_idx();
int block_num();
int sub_block_idx();
uint8_t* space_base(int space);
void error(int line, const char* fmt, ...);
void init_buffer(int space, uint64_t bytes, int line);
bool check_local(int space, uint64_t off, uint64_t bytes, int line);
void name_range(int space, uint64_t off, uint64_t len, const char* name);
void issue(int pipe, const char* what, int line, std::vector<Acc> acc, std::function<void()> fn,
           double cost, uint64_t bytes);
void issue_set(int src, int dst, int id, int line);
void issue_wait(int src, int dst, int id, int line);
void issue_barrier_all(int line);
void issue_cross_set(int pipe, int id, int mode, int line);
void issue_cross_wait(int id, int line);
const char* space_name(int space);
template <typename T> const char* type_name();
}  // namespace tw_emu

namespace AscendC {
enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, CO1, CO2 };
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
#define TW_EV(a, b) a##_##b = PIPE_##a * 8 + PIPE_##b
enum class HardEvent : int {
    TW_EV(MTE2, MTE1), TW_EV(MTE1, MTE2), TW_EV(MTE1, M), TW_EV(M, MTE1), TW_EV(MTE2, V),
    TW_EV(V, MTE2), TW_EV(MTE3, V), TW_EV(V, MTE3), TW_EV(M, V), TW_EV(V, M), TW_EV(V, V),
    TW_EV(MTE3, MTE1), TW_EV(MTE1, MTE3), TW_EV(MTE1, V), TW_EV(MTE2, M), TW_EV(M, MTE2),
    TW_EV(V, MTE1), TW_EV(M, FIX), TW_EV(FIX, M), TW_EV(MTE3, MTE2), TW_EV(MTE2, MTE3),
    TW_EV(S, V), TW_EV(V, S), TW_EV(S, MTE2), TW_EV(MTE2, S), TW_EV(S, MTE3), TW_EV(MTE3, S),
    TW_EV(MTE2, FIX), TW_EV(FIX, MTE2), TW_EV(FIX, S), TW_EV(M, S), TW_EV(FIX, MTE3),
};
#undef TW_EV
enum class RoundMode { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC };

inline constexpr int space_of(TPosition p) {
    return p == TPosition::A1 || p == TPosition::B1 ? tw_emu::SL1
         : p == TPosition::A2 ? tw_emu::SL0A
         : p == TPosition::B2 ? tw_emu::SL0B
         : p == TPosition::CO1 ? tw_emu::SL0C
         : p == TPosition::GM ? tw_emu::SGM : tw_emu::SUB;
}

template <typename T> struct GlobalTensor {
    T* ptr = nullptr;
    void SetGlobalBuffer(__gm__ T* p, uint64_t = 0) { ptr = p; }
    GlobalTensor operator[](uint64_t i) const { GlobalTensor g; g.ptr = ptr + i; return g; }
    uint64_t addr() const { return (uint64_t)(uintptr_t)ptr; }
    T* data() const { return ptr; }
    static constexpr int space = tw_emu::SGM;
};

template <typename T> struct LocalTensor {
    int space = tw_emu::SUB;
    uint64_t off = 0;  // bytes from the start of the memory
    uint8_t* base = nullptr;
    uint32_t count = 0;
    LocalTensor operator[](uint64_t i) const {
        LocalTensor t = *this; t.off += i * sizeof(T); t.count = count > i ? count - i : 0; return t;
    }
    T* data() const { return reinterpret_cast<T*>(base + off); }
    uint64_t addr() const { return off; }
    uint32_t GetSize() const { return count; }
};

template <TPosition P> struct TBuf {
    uint64_t size = 0;
    template <typename T> LocalTensor<T> GetWithOffset(uint32_t count, uint32_t offset, TW_LINE) {
        LocalTensor<T> t; t.space = space_of(P); t.off = offset; t.count = count;
        t.base = tw_emu::space_base(t.space);
        if (offset + uint64_t(count) * sizeof(T) > size)
            tw_emu::error(line, "GetWithOffset: %llu bytes at offset %u exceed the %llu bytes "
                          "given to this TBuf", (unsigned long long)count * sizeof(T), offset,
                          (unsigned long long)size);
        tw_emu::check_local(t.space, offset, uint64_t(count) * sizeof(T), line);
        return t;
    }
    template <typename T> LocalTensor<T> Get(TW_LINE) { return GetWithOffset<T>(size / sizeof(T), 0, line); }
};

struct TPipe {
    template <TPosition P> void InitBuffer(TBuf<P>& buf, uint32_t bytes, TW_LINE) {
        buf.size = bytes; tw_emu::init_buffer(space_of(P), bytes, line);
    }
};

struct DataCopyParams {
    uint16_t blockCount = 1, blockLen = 0, srcStride = 0, dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t c, uint16_t l, uint16_t s, uint16_t d)
        : blockCount(c), blockLen(l), srcStride(s), dstStride(d) {}
};
// ND model (see tilewright_ascend.lowering): repeatTimes source rows of dstGap elements,
// srcStride elements apart; ifTranspose writes the transpose.
struct LoadData2DParams {
    uint16_t startIndex = 0, repeatTimes = 0, srcStride = 0, sid = 0, dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
};
struct MmadParams { uint16_t m = 0, n = 0, k = 0; bool cmatrixInitVal = true; bool isBias = false; };
struct FixpipeParamsV220 { uint16_t nSize = 0, mSize = 0; uint32_t srcStride = 0, dstStride = 0; };
struct ShapeInfo {
    uint32_t dims = 0, shape[8] = {0};
    ShapeInfo() = default;
    ShapeInfo(uint32_t n, const uint32_t* s) : dims(n) { for (uint32_t i = 0; i < n && i < 8; ++i) shape[i] = s[i]; }
};

inline int64_t GetBlockIdx() { return tw_emu::is_aiv() ? tw_emu::block_idx() * 2 + tw_emu::sub_block_idx() : tw_emu::block_idx(); }
inline int64_t GetSubBlockIdx() { return tw_emu::sub_block_idx(); }
inline int64_t GetBlockNum() { return tw_emu::block_num(); }

template <typename T> inline tw_emu::Acc acc(const LocalTensor<T>& t, uint64_t bytes, bool w) {
    return tw_emu::Acc{t.space, t.off, bytes, w};
}
template <typename T> inline tw_emu::Acc acc(const GlobalTensor<T>& t, uint64_t bytes, bool w) {
    return tw_emu::Acc{tw_emu::SGM, t.addr(), bytes, w};
}

// -- strided block copies ---------------------------------------------------------------
template <typename T> inline void strided(T* dst, const T* src, const DataCopyParams& p) {
    const uint64_t per = 32 / sizeof(T), len = p.blockLen * per;
    for (uint32_t b = 0; b < p.blockCount; ++b)
        std::memcpy(dst + b * (len + p.dstStride * per), src + b * (len + p.srcStride * per), len * sizeof(T));
}
template <typename T> inline std::vector<tw_emu::Acc> strided_acc(int space, uint64_t off,
        const DataCopyParams& p, uint64_t gap, bool w) {
    std::vector<tw_emu::Acc> out;
    const uint64_t len = p.blockLen * 32ull;
    for (uint32_t b = 0; b < p.blockCount; ++b) out.push_back({space, off + b * (len + gap * 32ull), len, w});
    return out;
}
inline double copy_cost(uint64_t bytes, double per_cycle) { return 16.0 + bytes / per_cycle; }

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(tw_emu::SGM, src.addr(), p, p.srcStride, false);
    auto b = strided_acc<T>(dst.space, dst.off, p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    tw_emu::issue(tw_emu::PMTE2, "DataCopy", line, a, [=] { strided(dst.data(), src.data(), p); },
                  copy_cost(bytes, 64), bytes);
}
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(src.space, src.off, p, p.srcStride, false);
    auto b = strided_acc<T>(tw_emu::SGM, dst.addr(), p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    tw_emu::issue(tw_emu::PMTE3, "DataCopy", line, a, [=] { strided(dst.data(), src.data(), p); },
                  copy_cost(bytes, 64), bytes);
}
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(src.space, src.off, p, p.srcStride, false);
    auto b = strided_acc<T>(dst.space, dst.off, p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    int pipe = src.space == tw_emu::SUB && dst.space == tw_emu::SUB ? tw_emu::PV : tw_emu::PMTE1;
    tw_emu::issue(pipe, "DataCopy", line, a, [=] { strided(dst.data(), src.data(), p); },
                  copy_cost(bytes, 128), bytes);
}
template <typename D, typename S> void DataCopy(const D& dst, const S& src, uint32_t count, TW_LINE) {
    using T = std::remove_pointer_t<decltype(dst.data())>;
    if (count * sizeof(T) % 32) tw_emu::error(line, "DataCopy of %u elements (%llu bytes) is not a multiple of 32 bytes", count, (unsigned long long)(count * sizeof(T)));
    DataCopy(dst, src, DataCopyParams(1, uint16_t(count * sizeof(T) / 32), 0, 0), line);
}

// -- cube ---------------------------------------------------------------------------------
template <typename T>
void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p, TW_LINE) {
    const uint64_t rows = p.repeatTimes, cols = p.dstGap, ld = p.srcStride;
    std::vector<tw_emu::Acc> a;
    for (uint64_t r = 0; r < rows; ++r) a.push_back({src.space, src.off + r * ld * sizeof(T), cols * sizeof(T), false});
    a.push_back({dst.space, dst.off, rows * cols * sizeof(T), true});
    bool tr = p.ifTranspose;
    tw_emu::issue(tw_emu::PMTE1, "LoadData", line, a, [=] {
        T* d = dst.data(); const T* s = src.data();
        for (uint64_t r = 0; r < rows; ++r)
            for (uint64_t c = 0; c < cols; ++c) (tr ? d[c * rows + r] : d[r * cols + c]) = s[r * ld + c];
    }, copy_cost(rows * cols * sizeof(T), 256), rows * cols * sizeof(T));
}
template <typename C, typename A, typename B>
void Mmad(const LocalTensor<C>& c, const LocalTensor<A>& a, const LocalTensor<B>& b, const MmadParams& p, TW_LINE) {
    const uint64_t m = p.m, n = p.n, k = p.k;
    std::vector<tw_emu::Acc> acc = {{a.space, a.off, m * k * sizeof(A), false},
                                    {b.space, b.off, k * n * sizeof(B), false}};
    if (!p.cmatrixInitVal) acc.push_back({c.space, c.off, m * n * sizeof(C), false});
    acc.push_back({c.space, c.off, m * n * sizeof(C), true});
    bool init = p.cmatrixInitVal;
    tw_emu::issue(tw_emu::PM, "Mmad", line, acc, [=] {
        C* cd = c.data(); const A* ad = a.data(); const B* bd = b.data();
        for (uint64_t i = 0; i < m; ++i)
            for (uint64_t j = 0; j < n; ++j) {
                float s = init ? 0.0f : float(cd[i * n + j]);
                for (uint64_t q = 0; q < k; ++q) s += float(ad[i * k + q]) * float(bd[q * n + j]);
                cd[i * n + j] = C(s);
            }
    }, 16.0 + double(m * n * k) / 4096.0, m * k * sizeof(A) + k * n * sizeof(B));
}
template <typename D, typename S>
void Fixpipe(const GlobalTensor<D>& dst, const LocalTensor<S>& src, const FixpipeParamsV220& p, TW_LINE) {
    const uint64_t m = p.mSize, n = p.nSize, ss = p.srcStride ? p.srcStride : n, ds = p.dstStride;
    std::vector<tw_emu::Acc> a;
    for (uint64_t r = 0; r < m; ++r) {
        a.push_back({src.space, src.off + r * ss * sizeof(S), n * sizeof(S), false});
        a.push_back({tw_emu::SGM, dst.addr() + r * ds * sizeof(D), n * sizeof(D), true});
    }
    tw_emu::issue(tw_emu::PFIX, "Fixpipe", line, a, [=] {
        for (uint64_t r = 0; r < m; ++r)
            for (uint64_t c = 0; c < n; ++c) dst.data()[r * ds + c] = D(float(src.data()[r * ss + c]));
    }, copy_cost(m * n * sizeof(D), 64), m * n * sizeof(D));
}

// -- vector -------------------------------------------------------------------------------
template <typename T> inline double vec_cost(uint64_t count) { return 8.0 + count * sizeof(T) / 128.0; }
#define TW_BINARY(NAME, EXPR)                                                                 \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, const LocalTensor<T>& y,      \
              int32_t count, TW_LINE) {                                                       \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(y, nb, false), acc(d, nb, true)}, \
                      [=] { T* o = d.data(); const T* a = x.data(); const T* b = y.data();    \
                            for (int32_t i = 0; i < count; ++i) o[i] = T(EXPR); },            \
                      vec_cost<T>(count), nb);                                                \
    }
TW_BINARY(Add, float(a[i]) + float(b[i]))
TW_BINARY(Sub, float(a[i]) - float(b[i]))
TW_BINARY(Mul, float(a[i]) * float(b[i]))
TW_BINARY(Div, float(a[i]) / float(b[i]))
TW_BINARY(Max, std::fmax(float(a[i]), float(b[i])))
TW_BINARY(Min, std::fmin(float(a[i]), float(b[i])))
#undef TW_BINARY
#define TW_SCALAR(NAME, EXPR)                                                                 \
    template <typename T, typename U>                                                         \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, U s, int32_t count, TW_LINE) { \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        float b = float(s);                                                                   \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(d, nb, true)},         \
                      [=] { T* o = d.data(); const T* a = x.data();                           \
                            for (int32_t i = 0; i < count; ++i) o[i] = T(EXPR); },            \
                      vec_cost<T>(count), nb);                                                \
    }
TW_SCALAR(Adds, float(a[i]) + b)
TW_SCALAR(Muls, float(a[i]) * b)
TW_SCALAR(Maxs, std::fmax(float(a[i]), b))
TW_SCALAR(Mins, std::fmin(float(a[i]), b))
#undef TW_SCALAR
#define TW_UNARY(NAME, EXPR)                                                                  \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, int32_t count, TW_LINE) {     \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(d, nb, true)},         \
                      [=] { T* o = d.data(); const T* a = x.data();                           \
                            for (int32_t i = 0; i < count; ++i) { float v = float(a[i]); o[i] = T(EXPR); } }, \
                      vec_cost<T>(count), nb);                                                \
    }
TW_UNARY(Exp, std::exp(v))
TW_UNARY(Ln, std::log(v))
TW_UNARY(Abs, std::fabs(v))
TW_UNARY(Sqrt, std::sqrt(v))
TW_UNARY(Relu, v > 0 ? v : 0.0f)
TW_UNARY(Reciprocal, 1.0f / v)
#undef TW_UNARY
template <typename T, typename U>
void Duplicate(const LocalTensor<T>& d, U value, int32_t count, TW_LINE) {
    uint64_t nb = uint64_t(count) * sizeof(T);
    T v = T(float(value));
    tw_emu::issue(tw_emu::PV, "Duplicate", line, {acc(d, nb, true)},
                  [=] { for (int32_t i = 0; i < count; ++i) d.data()[i] = v; }, vec_cost<T>(count), nb);
}
template <typename D, typename S>
void Cast(const LocalTensor<D>& d, const LocalTensor<S>& x, RoundMode, int32_t count, TW_LINE) {
    tw_emu::issue(tw_emu::PV, "Cast", line, {acc(x, uint64_t(count) * sizeof(S), false), acc(d, uint64_t(count) * sizeof(D), true)},
                  [=] { for (int32_t i = 0; i < count; ++i) d.data()[i] = D(float(x.data()[i])); },
                  vec_cost<S>(count), uint64_t(count) * sizeof(S));
}

// -- synchronisation ------------------------------------------------------------------------
template <HardEvent E> void SetFlag(int32_t id, TW_LINE) { tw_emu::issue_set(int(E) / 8, int(E) % 8, id, line); }
template <HardEvent E> void WaitFlag(int32_t id, TW_LINE) { tw_emu::issue_wait(int(E) / 8, int(E) % 8, id, line); }
template <pipe_t P> void PipeBarrier(TW_LINE) {
    if (P == PIPE_ALL) tw_emu::issue_barrier_all(line);
    else if (P == PIPE_S) tw_emu::error(line, "PipeBarrier<PIPE_S> is a hardware error");
    // a barrier inside one pipe orders nothing across pipes; the pipes here run in order
}
template <int MODE, pipe_t P> void CrossCoreSetFlag(int32_t id, TW_LINE) { tw_emu::issue_cross_set(P, id, MODE, line); }
inline void CrossCoreWaitFlag(int32_t id, TW_LINE) { tw_emu::issue_cross_wait(id, line); }

// -- debugging ------------------------------------------------------------------------------
template <typename... Args> void printf(const char* fmt, Args... args) {
    std::printf(fmt, args...);
    std::fflush(stdout);
}
template <typename T> void DumpTensor(const LocalTensor<T>& t, uint32_t desc, uint32_t size, TW_LINE) {
    tw_emu::issue(tw_emu::PS, "DumpTensor", line, {acc(t, uint64_t(size) * sizeof(T), false)}, [=] {
        std::printf("DumpTensor: desc=%u, addr=%llu, data_type=%s, position=%s, dump_size=%u\n", desc,
                    (unsigned long long)t.off, tw_emu::type_name<T>(), tw_emu::space_name(t.space), size);
        for (uint32_t i = 0; i < size; ++i) std::printf(i + 1 < size ? "%g, " : "%g\n", double(float(t.data()[i])));
        std::fflush(stdout);
    }, 1.0, 0);
}
template <typename T> void DumpTensor(const LocalTensor<T>& t, uint32_t desc, uint32_t size, ShapeInfo, TW_LINE) {
    DumpTensor(t, desc, size, line);
}
template <typename T> void DumpTensor(const GlobalTensor<T>& t, uint32_t desc, uint32_t size, TW_LINE) {
    tw_emu::issue(tw_emu::PS, "DumpTensor", line, {acc(t, uint64_t(size) * sizeof(T), false)}, [=] {
        std::printf("DumpTensor: desc=%u, addr=%p, data_type=%s, position=GM, dump_size=%u\n", desc,
                    (void*)t.ptr, tw_emu::type_name<T>(), size);
        for (uint32_t i = 0; i < size; ++i) std::printf(i + 1 < size ? "%g, " : "%g\n", double(float(t.ptr[i])));
        std::fflush(stdout);
    }, 1.0, 0);
}
}  // namespace AscendC

namespace tw_emu {
template <typename T> const char* type_name() {
    if (sizeof(T) == 2 && !std::is_integral<T>::value) return std::is_same<T, half>::value ? "float16" : "bfloat16";
    if (std::is_same<T, float>::value) return "float32";
    if (std::is_same<T, int32_t>::value) return "int32";
    return "int";
}
template <typename T> void name_tensor(const AscendC::LocalTensor<T>& t, const char* name) {
    name_range(t.space, t.off, uint64_t(t.count) * sizeof(T), name);
}
}  // namespace tw_emu
