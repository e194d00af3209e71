// tilewright CUDA dialect (sm_90+): TMA, mbarriers, named barriers, register budgets,
// cp.async copies that arrive on an mbarrier.
// Under TW_HOST_EMULATION (tests/hostemu.py) the same functions run on the host: a TMA load is
// a tiled copy honouring the box and the swizzle mode that lands when a wait sees its
// mbarrier's phase complete, a TMA store reads its box when a bulk wait retires its group,
// an mbarrier a counter with a phase bit, a named barrier a barrier of the role's threads
// (the emulation's tw_sync).
#ifndef TW_HOPPER_H
#define TW_HOPPER_H
#define TW_TMAP(k) (&tw_tmap_##k)

#ifndef TW_HOST_EMULATION
// CUtensorMap (cuda.h): 128 opaque bytes, 64-byte aligned, built by the launcher.
struct alignas(64) tw_tensormap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned tw_smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void* tw_offset_bytes(void* p, int bytes) {
  return static_cast<char*>(p) + bytes;
}
__device__ __forceinline__ void tw_mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tw_smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void tw_fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void tw_mbar_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_mbar_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(tw_smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tw_mbar_wait(void* bar, int parity) {
  asm volatile("{\n .reg .pred p;\n TW_WAIT_%=:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra TW_WAIT_%=;\n}" :: "r"(tw_smem_u32(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void tw_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// T.ptx_cp_async: one thread's cp.async of N = 4, 8 or 16 bytes (16: bypassing L1)
template <int N> __device__ __forceinline__ void tw_cp_async_bytes(void* dst, const void* src) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(tw_smem_u32(dst)), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                 :: "r"(tw_smem_u32(dst)), "l"(src), "n"(N) : "memory");
  }
}
// T.cp_async_barrier_noinc: the thread's arrival on bar once its earlier cp.async copies land
__device__ __forceinline__ void tw_cp_async_mbar_arrive_noinc(void* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
               :: "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
// T.sync_threads(id, count): the same instruction, named apart from the roles' own barriers
__device__ __forceinline__ void tw_bar_sync(int id, int threads) {
  tw_named_barrier_sync(id, threads);
}
// PTX ISA, "bar.arrive": the calling warps count towards barrier id's threads and go on
__device__ __forceinline__ void tw_named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
template <int N> __device__ __forceinline__ void tw_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}
template <int N> __device__ __forceinline__ void tw_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}
__device__ __forceinline__ void tw_tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void tw_tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
#define TW_DESC(d) "l"(reinterpret_cast<unsigned long long>(d))
__device__ __forceinline__ void tw_tma_load_1d(const void* d, void* bar, void* dst,
                                               int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2}], [%3];"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_tma_load_2d(const void* d, void* bar, void* dst,
                                               int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(tw_smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void tw_tma_load_3d(const void* d, void* bar, void* dst,
                                               int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2),
                  "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_tma_load_4d(const void* d, void* bar, void* dst,
                                               int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_tma_load_5d(const void* d, void* bar, void* dst,
                                               int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"(c4), "r"(tw_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tw_tma_store_1d(const void* d, void* src, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];"
               :: TW_DESC(d), "r"(tw_smem_u32(src)), "r"(c0) : "memory");
}
__device__ __forceinline__ void tw_tma_store_2d(const void* d, void* src, int c0,
                                                int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: TW_DESC(d), "r"(tw_smem_u32(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tw_tma_store_3d(const void* d, void* src, int c0,
                                                int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], "
               "[%1];" :: TW_DESC(d), "r"(tw_smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void tw_tma_store_4d(const void* d, void* src, int c0,
                                                int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}],"
               " [%1];" :: TW_DESC(d), "r"(tw_smem_u32(src)), "r"(c0), "r"(c1), "r"(c2),
               "r"(c3) : "memory");
}
__device__ __forceinline__ void tw_tma_store_5d(const void* d, void* src, int c0,
                                                int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group "
               "[%0, {%2, %3, %4, %5, %6}], [%1];"
               :: TW_DESC(d), "r"(tw_smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"(c4) : "memory");
}
// thread-block clusters: this block's rank, a barrier of every thread of the cluster, an
// arrival on the mbarrier at the same shared-memory offset in block `rank` of the cluster
// (release at CTA scope, as CUTLASS's ClusterBarrier: it orders this block's reads of its own
// tiles, done by then, before the TMA writes the arrival lets the other block issue), and TMA
// loads that land in every block of `mask` (same offset, each block's own mbarrier)
__device__ __forceinline__ unsigned tw_cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void tw_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void tw_mbar_arrive_cluster(void* bar, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote)
               : "r"(tw_smem_u32(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
}
#define TW_TMA_MC " .shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
__device__ __forceinline__ void tw_tma_load_multicast_1d(const void* d, void* bar, void* dst,
                                                         unsigned short mask, int c0) {
  asm volatile("cp.async.bulk.tensor.1d" TW_TMA_MC " [%0], [%1, {%2}], [%3], %4;"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(tw_smem_u32(bar)), "h"(mask)
               : "memory");
}
__device__ __forceinline__ void tw_tma_load_multicast_2d(const void* d, void* bar, void* dst,
                                                         unsigned short mask, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d" TW_TMA_MC " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(tw_smem_u32(bar)),
                  "h"(mask) : "memory");
}
__device__ __forceinline__ void tw_tma_load_multicast_3d(const void* d, void* bar, void* dst,
                                                         unsigned short mask, int c0, int c1,
                                                         int c2) {
  asm volatile("cp.async.bulk.tensor.3d" TW_TMA_MC " [%0], [%1, {%2, %3, %4}], [%5], %6;"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2),
                  "r"(tw_smem_u32(bar)), "h"(mask) : "memory");
}
__device__ __forceinline__ void tw_tma_load_multicast_4d(const void* d, void* bar, void* dst,
                                                         unsigned short mask, int c0, int c1,
                                                         int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d" TW_TMA_MC " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"(tw_smem_u32(bar)), "h"(mask) : "memory");
}
__device__ __forceinline__ void tw_tma_load_multicast_5d(const void* d, void* bar, void* dst,
                                                         unsigned short mask, int c0, int c1,
                                                         int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d" TW_TMA_MC
               " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;"
               :: "r"(tw_smem_u32(dst)), TW_DESC(d), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"(c4), "r"(tw_smem_u32(bar)), "h"(mask) : "memory");
}
#undef TW_TMA_MC
#undef TW_DESC

#else  // TW_HOST_EMULATION
#define __grid_constant__
#define __cluster_dims__(...)
// what the host emulation's launcher fills in place of a CUtensorMap
struct tw_tensormap {
  unsigned char* base;
  long long rank, elem_bytes, swizzle;   // swizzle: 0, 32, 64 or 128 bytes
  long long dims[5], strides[5], box[5];  // innermost first; strides in bytes
};
// the mbarriers' and named barriers' state is the shim's (tw_mbars, tw_named in
// tests/hostemu.py): each kernel library's own, cleared as each cluster of blocks starts
inline void tw_mbar_complete(tw_mbar_state& s) {
  if (s.pending == 0 && s.tx == 0) { s.phase ^= 1; s.pending = s.expected; ++s.completed; }
}
inline void* tw_offset_bytes(void* p, int bytes) { return (char*)p + bytes; }
inline void tw_mbar_init(void* bar, unsigned count) {
  tw_mbars[bar] = {count, count, 0, 0};
}
inline void tw_fence_barrier_init() {}
inline void tw_fence_proxy_async() {}
inline tw_mbar_state& tw_mbar_get(void* bar) {
  auto it = tw_mbars.find(bar);
  if (it == tw_mbars.end()) { std::fprintf(stderr, "mbarrier used before init\n"); __trap(); }
  return it->second;
}
inline void tw_mbar_arrive(void* bar) {
  tw_mbar_state& s = tw_mbar_get(bar);
  if (--s.pending < 0) { std::fprintf(stderr, "mbarrier: more arrivals than its count\n"); __trap(); }
  tw_mbar_complete(s);
}
// cp.async lands when its group's wait retires it (the shim's tw_emu_cp_*); the noinc
// arrival lands every copy the thread issued before it, then arrives
template <int N> inline void tw_cp_async_bytes(void* dst, const void* src) {
  tw_emu_cp_async(dst, src, N, N);
}
inline void tw_cp_async_mbar_arrive_noinc(void* bar) {
  tw_emu_cp_land_all();
  tw_mbar_arrive(bar);
}
inline void tw_mbar_expect_tx(void* bar, unsigned bytes) {
  tw_mbar_get(bar).tx += bytes;
}
inline void tw_mbar_complete_tx(void* bar, long long bytes) {
  tw_mbar_state& s = tw_mbar_get(bar);
  s.tx -= bytes;
  tw_mbar_complete(s);
}
// PTX ISA, mbarrier: the bytes a TMA load counts against a phase are visible to the threads
// that observe the phase complete by a wait; here they land at the first such wait, so a
// read of a TMA destination before its wait sees what was there (the pool's poison, an
// older stage's tile)
inline void tw_mbar_wait(void* bar, int parity) {
  while (tw_mbar_get(bar).phase == (parity & 1)) tw_wait_turn();
  tw_mbar_state& s = tw_mbar_get(bar);
  auto done = std::stable_partition(s.landings.begin(), s.landings.end(),
                                    [&](const tw_landing& l) { return l.phase >= s.completed; });
  for (auto it = done; it != s.landings.end(); ++it)
    std::memcpy(it->dst, it->bytes.data(), it->bytes.size());
  s.landings.erase(done, s.landings.end());
  tw_progress();
}
inline tw_sync* tw_named_barrier(int id, int threads) {
  return &tw_named.try_emplace((tw_cta_rank * 64LL + id) * 4096LL + threads, threads)
              .first->second;
}
inline void tw_named_barrier_sync(int id, int threads) {
  tw_named_barrier(id, threads)->arrive_and_wait();
}
inline void tw_named_barrier_arrive(int id, int threads) {
  tw_named_barrier(id, threads)->arrive();
}
inline void tw_bar_sync(int id, int threads) { tw_named_barrier_sync(id, threads); }
template <int N> inline void tw_setmaxnreg_inc() {}
template <int N> inline void tw_setmaxnreg_dec() {}
inline void tw_tma_store_commit() { tw_emu_bulk_commit(); }
template <int N> inline void tw_tma_store_wait() { tw_emu_bulk_wait(N); }
// the shared-memory byte offset of box element `linear` under the swizzle mode
inline long long tw_swizzled(long long o, long long swizzle) {
  long long mask = swizzle == 128 ? 7 : swizzle == 64 ? 3 : swizzle == 32 ? 1 : 0;
  return o ^ (((o >> 7) & mask) << 4);
}
inline long long tw_tma_walk(const tw_tensormap* d, unsigned char* smem, const int* c,
                             bool load) {
  long long n = 1;
  for (int i = 0; i < d->rank; ++i) n *= d->box[i];
  for (long long linear = 0; linear < n; ++linear) {
    long long rest = linear, offset = 0;
    bool inside = true;
    for (int i = 0; i < d->rank; ++i) {
      long long x = c[i] + rest % d->box[i];
      rest /= d->box[i];
      inside = inside && x >= 0 && x < d->dims[i];
      offset += x * (i == 0 ? d->elem_bytes : d->strides[i]);
    }
    unsigned char* s = smem + tw_swizzled(linear * d->elem_bytes, d->swizzle);
    if (load) {
      if (inside) std::memcpy(s, d->base + offset, d->elem_bytes);
      else std::memset(s, 0, d->elem_bytes);
    } else if (inside) {
      std::memcpy(d->base + offset, s, d->elem_bytes);
    }
  }
  return n * d->elem_bytes;
}
// the H200 raises an illegal instruction at a box whose first column is off a 16-byte
// boundary of the row (rules/tma.py's _check_inner_start refuses such a box when it lowers)
inline void tw_tma_check_start(const tw_tensormap* d, const int* c) {
  if ((c[0] * d->elem_bytes) % 16) {
    std::fprintf(stderr, "TMA box starts at column %d (%lld bytes), not on a 16-byte boundary: "
                 "an illegal instruction on the GPU\n", c[0], c[0] * d->elem_bytes);
    __trap();
  }
}
template <class... C> inline void tw_tma_load(const void* d, void* bar, void* dst,
                                              C... coords) {
  int c[] = {coords...};
  if ((long long)sizeof...(C) != ((const tw_tensormap*)d)->rank) { std::fprintf(stderr, "TMA rank\n"); __trap(); }
  tw_tma_check_start((const tw_tensormap*)d, c);
  const tw_tensormap* map = (const tw_tensormap*)d;
  long long n = map->elem_bytes;
  for (int i = 0; i < map->rank; ++i) n *= map->box[i];
  tw_mbar_state& s = tw_mbar_get(bar);
  tw_landing landing{s.completed, (unsigned char*)dst, std::vector<unsigned char>(n)};
  tw_tma_walk(map, landing.bytes.data(), c, true);  // the box as it will land, swizzled
  s.landings.push_back(std::move(landing));
  tw_mbar_complete_tx(bar, n);
}
inline void tw_tma_store_run(const tw_bulk_store& store) {
  tw_tma_walk((const tw_tensormap*)store.map, store.src, store.c, false);
}
// the box is read from shared memory when the store's bulk group retires (the shim's
// tw_emu_bulk_*), not here
template <class... C> inline void tw_tma_store(const void* d, void* src, C... coords) {
  int c[] = {coords...};
  tw_tma_check_start((const tw_tensormap*)d, c);
  tw_bulk_store store{tw_tma_store_run, d, (unsigned char*)src, {}};
  for (int i = 0; i < (int)sizeof...(C); ++i) store.c[i] = c[i];
  tw_emu_bulk_store(store);
}
#define tw_tma_load_1d tw_tma_load
#define tw_tma_load_2d tw_tma_load
#define tw_tma_load_3d tw_tma_load
#define tw_tma_load_4d tw_tma_load
#define tw_tma_load_5d tw_tma_load
#define tw_tma_store_1d tw_tma_store
#define tw_tma_store_2d tw_tma_store
#define tw_tma_store_3d tw_tma_store
#define tw_tma_store_4d tw_tma_store
#define tw_tma_store_5d tw_tma_store
// clusters: hostemu.py runs the blocks of one cluster at once, each with its own shared
// memory (tw_cta_smem[rank]); these reach into a block of the cluster by rank
inline unsigned tw_cluster_ctarank() { return tw_cta_rank; }
inline void tw_cluster_sync() { tw_cluster_barrier->arrive_and_wait(); }
inline void* tw_in_cta(void* p, unsigned rank) {  // the same offset in block `rank`
  return tw_cta_smem[rank] + ((unsigned char*)p - tw_cta_smem[tw_cta_rank]);
}
inline void tw_mbar_arrive_cluster(void* bar, unsigned rank) { tw_mbar_arrive(tw_in_cta(bar, rank)); }
template <class... C> inline void tw_tma_load_multicast(const void* d, void* bar, void* dst,
                                                        unsigned short mask, C... coords) {
  for (unsigned r = 0; r < TW_MAX_CLUSTER; ++r)  // hostemu.py runs at most that many
    if (mask >> r & 1) tw_tma_load(d, tw_in_cta(bar, r), tw_in_cta(dst, r), coords...);
}
#define tw_tma_load_multicast_1d tw_tma_load_multicast
#define tw_tma_load_multicast_2d tw_tma_load_multicast
#define tw_tma_load_multicast_3d tw_tma_load_multicast
#define tw_tma_load_multicast_4d tw_tma_load_multicast
#define tw_tma_load_multicast_5d tw_tma_load_multicast
#endif  // TW_HOST_EMULATION
#endif  // TW_HOPPER_H
