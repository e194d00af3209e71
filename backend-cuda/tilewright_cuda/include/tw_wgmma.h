// tilewright wgmma GEMM (sm_90a): acc += A B with A and B swizzled tiles in shared memory
// (tilewright_cuda/swizzle.py) read through wgmma matrix descriptors.
//
// tw_gemm_wgmma<N, K, NC, BF16, B_MN, RA, WA, RB, WB>(A, B, acc, wg): warpgroup wg (128
// threads) issues rows 64 wg .. 64 wg + 63 of an M x N tile as wgmma.m64nNCk16 steps, one
// committed group; the caller retires it with tw_wgmma_wait<N>() before reading acc: A is
// [RA, K] (K-major), B is [RB = K, N] (MN-major, B_MN) or [RB = N, K] (K-major); WA, WB are
// the tiles' column-block widths in bytes. acc holds NC / 2 floats per N chunk in the PTX
// m64nNk16 D layout, which is the (warps x 1) warp grid of the "local.mma_acc" layout.
// Descriptor: start >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte offset
// >> 4 (32-45), swizzle mode (62-63: 1 = 128 B, 2 = 64 B, 3 = 32 B). K-major: SBO = 8 rows x
// W, LBO unused (16); MN-major: SBO = 8 K-rows x W, LBO = one column block (RB x W).
#ifndef TW_WGMMA_H
#define TW_WGMMA_H

__host__ __device__ inline unsigned long long tw_wgmma_desc(unsigned addr, unsigned lbo,
                                                            unsigned sbo, int width) {
  unsigned long long mode = width == 128 ? 1 : width == 64 ? 2 : 3;
  return (unsigned long long)((addr & 0x3FFFF) >> 4) |
         ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (mode << 62);
}

template <int NC, bool BF16, bool B_MN>
__device__ inline void tw_wgmma_m64k16(float* d, unsigned long long da, unsigned long long db);

#ifndef TW_HOST_EMULATION
__device__ __forceinline__ void tw_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tw_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// at most N committed wgmma groups of this warpgroup still in flight
template <int N>
__device__ __forceinline__ void tw_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
#else
inline unsigned tw_smem_u32(const void* p) {
  return (unsigned)((const unsigned char*)p - tw_smem_ptr);
}
inline void tw_wgmma_fence() {}
// element (row, col) of the operand a descriptor describes, decoded from the descriptor alone
inline float tw_wgmma_read(unsigned long long desc, bool mn_major, int row, int col,
                           bool bf16) {
  long long start = (long long)(desc & 0x3FFF) << 4;
  long long lbo = (long long)((desc >> 16) & 0x3FFF) << 4;
  long long sbo = (long long)((desc >> 32) & 0x3FFF) << 4;
  int mode = (int)(desc >> 62);
  int width = mode == 1 ? 128 : mode == 2 ? 64 : 32;
  long long o;
  if (!mn_major) {  // (row: M or N, col: K): 8-row groups SBO apart, rows `width` apart
    o = start + (row / 8) * sbo + (row % 8) * width + col * 2;
  } else {  // (row: K, col: N): column blocks LBO apart, 8 K-row groups SBO apart
    int per = width / 2;
    o = start + (col / per) * lbo + (row / 8) * sbo + (row % 8) * width + (col % per) * 2;
  }
  o = tw_swizzled(o, width);
  unsigned short bits;
  std::memcpy(&bits, tw_smem_ptr + o, 2);
  return tw_bits16_to_float(bits, bf16);
}
// wgmma is asynchronous: an instruction may read shared memory at any time until the
// wait_group that retires its group. The emulation computes each instruction's products when
// it is issued and again when it is retired, adds them to the accumulators at retirement,
// and aborts when the two differ: shared memory under a wgmma in flight was overwritten.
struct tw_wgmma_op {
  float* d;
  unsigned long long da, db;
  int nc;
  bool bf16, b_mn;
  std::vector<float> issued;
};
inline std::vector<float> tw_wgmma_products(const tw_wgmma_op& op) {
  int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  std::vector<float> out(op.nc / 2);
  for (int i = 0; i < op.nc / 2; ++i) {
    int row = 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    int col = (i / 4) * 8 + 2 * (lane % 4) + i % 2;
    float s = 0;
    for (int k = 0; k < 16; ++k)
      s += tw_wgmma_read(op.da, false, row, k, op.bf16) *
           (op.b_mn ? tw_wgmma_read(op.db, true, k, col, op.bf16)
                    : tw_wgmma_read(op.db, false, col, k, op.bf16));
    out[i] = s;
  }
  return out;
}
thread_local std::vector<tw_wgmma_op> tw_wgmma_open;               // issued, not committed
thread_local std::vector<std::vector<tw_wgmma_op>> tw_wgmma_groups;  // committed, in flight
template <int NC, bool BF16, bool B_MN>
inline void tw_wgmma_m64k16(float* d, unsigned long long da, unsigned long long db) {
  tw_wgmma_op op{d, da, db, NC, BF16, B_MN, {}};
  op.issued = tw_wgmma_products(op);
  tw_wgmma_open.push_back(std::move(op));
}
inline void tw_wgmma_commit() {
  tw_wgmma_groups.push_back(std::move(tw_wgmma_open));
  tw_wgmma_open.clear();
}
template <int N>
inline void tw_wgmma_wait() {
  while (tw_wgmma_groups.size() > (size_t)N) {
    for (auto& op : tw_wgmma_groups.front()) {
      std::vector<float> now = tw_wgmma_products(op);
      if (std::memcmp(now.data(), op.issued.data(), now.size() * sizeof(float)) != 0) {
        std::printf("tw emulation: block (%u, %u, %u) thread %u: shared memory read by a wgmma "
                    "in flight was overwritten before its wait_group\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        __trap();
      }
      for (size_t i = 0; i < now.size(); ++i) op.d[i] += now[i];
    }
    tw_wgmma_groups.erase(tw_wgmma_groups.begin());
  }
}
#endif

template <int N, int K, int NC, bool BF16, bool B_MN, int RA, int WA, int RB, int WB>
__device__ __forceinline__ void tw_gemm_wgmma(const void* A, const void* B, float* acc,
                                              int wg) {
  const unsigned a0 = tw_smem_u32(A), b0 = tw_smem_u32(B);
  tw_wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    const unsigned a = a0 + (k0 * 2 / WA) * RA * WA + 64 * wg * WA + (k0 * 2 % WA);
    const unsigned long long da = tw_wgmma_desc(a, 16, 8 * WA, WA);
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += NC) {
      unsigned long long db;
      if constexpr (B_MN) {
        db = tw_wgmma_desc(b0 + (n0 * 2 / WB) * RB * WB + k0 * WB, RB * WB, 8 * WB, WB);
      } else {
        db = tw_wgmma_desc(b0 + (k0 * 2 / WB) * RB * WB + n0 * WB + (k0 * 2 % WB), 16, 8 * WB,
                           WB);
      }
      tw_wgmma_m64k16<NC, BF16, B_MN>(acc + n0 / 2, da, db);
    }
  }
  tw_wgmma_commit();  // the gemm's own tw_wgmma_wait<0> (or <1> when pipelined) follows
}
#endif  // TW_WGMMA_H
