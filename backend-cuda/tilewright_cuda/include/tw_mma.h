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

// One 16x8 output tile at (row0, col0): c (this lane's 4 accumulators) += A[row0:, :K] B[:K, col0:]
template <int K, bool TRANS_A, bool TRANS_B, class T>
__device__ __forceinline__ void tw_mma_tile(const T* A, int lda, const T* B, int ldb, int row0,
                                            int col0, float* c) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int r0 = row0 + g, r1 = r0 + 8, n = col0 + g;
  auto a_at = [&](int i, int k) { return TRANS_A ? A[k * lda + i] : A[i * lda + k]; };
  auto b_at = [&](int k, int j) { return TRANS_B ? B[j * ldb + k] : B[k * ldb + j]; };
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
}

// C in shared memory (float32, M x N, leading dimension ldc).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, class T>
__device__ __forceinline__ void tw_gemm_mma(const T* A, int lda, const T* B, int ldb, float* C,
                                            int ldc) {
  static_assert(M % 16 == 0 && N % 8 == 0 && K % 16 == 0, "tile not a multiple of 16x8x16");
  constexpr int WARPS = THREADS / 32, TILES_N = N / 8, TILES = (M / 16) * TILES_N;
  static_assert(TILES % WARPS == 0, "every warp must get the same number of tiles");
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  for (int tile = threadIdx.x / 32; tile < TILES; tile += WARPS) {
    const int row0 = (tile / TILES_N) * 16, col0 = (tile % TILES_N) * 8;
    float* p0 = C + (row0 + g) * ldc + col0 + t * 2;
    float* p1 = p0 + 8 * ldc;
    float c[4] = {p0[0], p0[1], p1[0], p1[1]};
    tw_mma_tile<K, TRANS_A, TRANS_B>(A, lda, B, ldb, row0, col0, c);
    p0[0] = c[0];
    p0[1] = c[1];
    p1[0] = c[2];
    p1[1] = c[3];
  }
}

// C in registers: this thread's accumulators of tiles warp, warp + WARPS, ... four each, in
// the mma.m16n8k16 C layout (the "local.mma_acc" fragment layout of the CUDA backend).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, class T>
__device__ __forceinline__ void tw_gemm_mma_rf(const T* A, int lda, const T* B, int ldb,
                                               float* acc) {
  static_assert(M % 16 == 0 && N % 8 == 0 && K % 16 == 0, "tile not a multiple of 16x8x16");
  constexpr int WARPS = THREADS / 32, TILES_N = N / 8, TILES = (M / 16) * TILES_N;
  static_assert(TILES % WARPS == 0, "every warp must get the same number of tiles");
#pragma unroll
  for (int i = 0; i < TILES / WARPS; ++i) {
    const int tile = threadIdx.x / 32 + i * WARPS;
    tw_mma_tile<K, TRANS_A, TRANS_B>(A, lda, B, ldb, (tile / TILES_N) * 16,
                                     (tile % TILES_N) * 8, acc + 4 * i);
  }
}
