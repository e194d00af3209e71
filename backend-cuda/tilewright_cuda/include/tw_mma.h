// tilewright tensor-core GEMM on shared-memory tiles (pasted into kernels that use it).
//
// tw_gemm_mma<M, N, K, TRANS_A, TRANS_B, THREADS>(A, lda, B, ldb, C, ldc): C += op(A) op(B)
// with C float32 (M x N, row-major, leading dimension ldc) and A, B half or bfloat16. Every
// thread of the block calls it; warp w computes the 16x8 output tiles w, w + WARPS, ... with
// mma.sync.m16n8k16, fragments loaded from shared memory in the layouts of the PTX ISA
// ("Matrix Fragments for mma.m16n8k16"): groupID = lane / 4, tig = lane % 4.
#pragma once

namespace tw {

template <class T>
__device__ __forceinline__ unsigned pack2(T lo, T hi) {
  unsigned short l = *reinterpret_cast<unsigned short*>(&lo);
  unsigned short h = *reinterpret_cast<unsigned short*>(&hi);
  return (unsigned)l | ((unsigned)h << 16);
}

template <class T> struct mma_kind;
template <> struct mma_kind<half> { static constexpr bool bf16 = false; };
#ifdef __CUDA_BF16_TYPES_EXIST__
template <> struct mma_kind<__nv_bfloat16> { static constexpr bool bf16 = true; };
#endif

template <class T>
__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, const unsigned* b) {
#if defined(TW_HOST_EMULATION)
  tw_emulate_mma_16816(c, a, b, mma_kind<T>::bf16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (mma_kind<T>::bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

}  // namespace tw

template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, class T>
__device__ __forceinline__ void tw_gemm_mma(const T* A, int lda, const T* B, int ldb, float* C,
                                            int ldc) {
  static_assert(M % 16 == 0 && N % 8 == 0 && K % 16 == 0, "tile not a multiple of 16x8x16");
  constexpr int WARPS = THREADS / 32, TILES_N = N / 8, TILES = (M / 16) * TILES_N;
  static_assert(TILES % WARPS == 0, "every warp must get the same number of tiles");
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  auto a_at = [&](int i, int k) { return TRANS_A ? A[k * lda + i] : A[i * lda + k]; };
  auto b_at = [&](int k, int j) { return TRANS_B ? B[j * ldb + k] : B[k * ldb + j]; };
  for (int tile = threadIdx.x / 32; tile < TILES; tile += WARPS) {
    const int r0 = (tile / TILES_N) * 16 + g, r1 = r0 + 8;
    const int col = (tile % TILES_N) * 8 + t * 2, n = (tile % TILES_N) * 8 + g;
    float c[4] = {C[r0 * ldc + col], C[r0 * ldc + col + 1], C[r1 * ldc + col],
                  C[r1 * ldc + col + 1]};
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int k = k0 + t * 2;
      unsigned a[4] = {tw::pack2(a_at(r0, k), a_at(r0, k + 1)),
                       tw::pack2(a_at(r1, k), a_at(r1, k + 1)),
                       tw::pack2(a_at(r0, k + 8), a_at(r0, k + 9)),
                       tw::pack2(a_at(r1, k + 8), a_at(r1, k + 9))};
      unsigned b[2] = {tw::pack2(b_at(k, n), b_at(k + 1, n)),
                       tw::pack2(b_at(k + 8, n), b_at(k + 9, n))};
      tw::mma_16816<T>(c, a, b);
    }
    C[r0 * ldc + col] = c[0];
    C[r0 * ldc + col + 1] = c[1];
    C[r1 * ldc + col] = c[2];
    C[r1 * ldc + col + 1] = c[3];
  }
}
