// tilewright tensor-core GEMM on shared-memory tiles (pasted into kernels that use it).
//
// The register variant, tw_gemm_mma_rf with template arguments M, N, K, TRANS_A, TRANS_B,
// THREADS, WM, WN, LA, LB and arguments (A, B, acc): acc += op(A) op(B), with A and B half or
// bfloat16 tiles in shared memory and acc this thread's float32 accumulators. The
// WARPS = THREADS / 32 warps form a WM x WN grid; warp w = wm * WN + wn owns the
// (M / WM) x (N / WN) warp tile at (wm, wn): MI x NI tiles of 16x8, MI = M / WM / 16,
// NI = N / WN / 8, whose accumulators are acc[(mi * NI + ni) * 4 + q] in the PTX C layout of
// mma.m16n8k16 (row = 16 mi + lane / 4 + 8 (q / 2), column = 8 ni + 2 (lane % 4) + q % 2) --
// the "local.mma_acc" layout of the CUDA backend (lowering.mma_acc_element). Per k16 step a
// warp loads its MI A fragments and NI B fragments once (ldmatrix.x4 / .x2, .trans where the
// operand is stored k-major in the other direction) and issues MI x NI mma.sync.
// tw_gemm_mma (same template arguments; A, B, C, ldc) is the same with C a float32 row-major
// tile in shared memory.
//
// LA and LB give the element offset of (row, column) of the tile as stored: tw::rowmajor<LD,
// LDSM> (LDSM: rows are 16-byte aligned, so ldmatrix may read them) or tw::swizzled<R, W, B>
// (tilewright_cuda/layout.py).
#pragma once

namespace tw {

template <int LD, bool LDSM>
struct rowmajor {
  static constexpr bool ldsm = LDSM;
  static __device__ __forceinline__ int at(int r, int c) { return r * LD + c; }
};

template <int R, int W, int B>
struct swizzled {
  static constexpr bool ldsm = true;
  static __device__ __forceinline__ int at(int r, int c) {
    constexpr int PER_ROW = W / 2;
    int e = (c / PER_ROW) * (R * PER_ROW) + r * PER_ROW + c % PER_ROW;
    return e ^ (((e >> 6) & ((1 << B) - 1)) << 3);
  }
};

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

// ldmatrix.sync.aligned.m8n8.x{N}[.trans].shared.b16: lane l gives the address of row l % 8
// of matrix l / 8; register j receives matrix j (transposed with TRANS).
template <int N, bool TRANS>
__device__ __forceinline__ void ldmatrix(unsigned* d, const void* row) {
#if defined(TW_HOST_EMULATION)
  tw_emulate_ldmatrix(d, row, N, TRANS);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 4 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr));
  } else if constexpr (N == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr));
  } else if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(d[0]), "=r"(d[1]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(d[0]), "=r"(d[1]) : "r"(addr));
  }
#endif
}

// The A fragment (16x16 at m0, k0) in registers a[0..3]: matrices (rows m0 / m0 + 8) x
// (k0 / k0 + 8) in the order of the PTX A layout.
template <bool TRANS_A, class L, class T>
__device__ __forceinline__ void load_a(unsigned* a, const T* A, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  if constexpr (L::ldsm) {
    const int j = lane / 8, i = lane % 8;
    const int m = m0 + (j & 1) * 8, k = k0 + (j >> 1) * 8;
    // stored [M][K]: row m + i; stored [K][M]: row k + i, transposed
    ldmatrix<4, TRANS_A>(a, TRANS_A ? A + L::at(k + i, m) : A + L::at(m + i, k));
  } else {
    const int g = lane >> 2, t = (lane & 3) * 2;
    auto at = [&](int i, int k) { return TRANS_A ? A[L::at(k, i)] : A[L::at(i, k)]; };
    const int r0 = m0 + g, r1 = r0 + 8, k = k0 + t;
    a[0] = pack2(at(r0, k), at(r0, k + 1));
    a[1] = pack2(at(r1, k), at(r1, k + 1));
    a[2] = pack2(at(r0, k + 8), at(r0, k + 9));
    a[3] = pack2(at(r1, k + 8), at(r1, k + 9));
  }
}

// NB B fragments (k16 x n8 each, NB = 1 or 2) at (k0, n0), n0 + 8: b[2 * nb + h] holds
// k0 + 8 h .. + 7 of column tile nb.
template <int NB, bool TRANS_B, class L, class T>
__device__ __forceinline__ void load_b(unsigned* b, const T* B, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  if constexpr (L::ldsm) {
    const int j = (lane / 8) % (2 * NB), i = lane % 8;
    const int k = k0 + (j & 1) * 8, n = n0 + (j >> 1) * 8;
    // stored [N][K]: row n + i; stored [K][N]: row k + i, transposed
    ldmatrix<2 * NB, !TRANS_B>(b, TRANS_B ? B + L::at(n + i, k) : B + L::at(k + i, n));
  } else {
    const int g = lane >> 2, t = (lane & 3) * 2;
    auto at = [&](int k, int j) { return TRANS_B ? B[L::at(j, k)] : B[L::at(k, j)]; };
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int n = n0 + nb * 8 + g, k = k0 + t;
      b[2 * nb] = pack2(at(k, n), at(k + 1, n));
      b[2 * nb + 1] = pack2(at(k + 8, n), at(k + 9, n));
    }
  }
}

// One warp tile: acc[(mi * NI + ni) * 4 ..] += A[m0 + 16 mi, :K] B[:K, n0 + 8 ni].
template <int MI, int NI, int K, bool TRANS_A, bool TRANS_B, class LA, class LB, class T>
__device__ __forceinline__ void warp_tile(const T* A, const T* B, int m0, int n0, float* acc) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    unsigned a[MI][4], b[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) load_a<TRANS_A, LA>(a[mi], A, m0 + mi * 16, k0);
#pragma unroll
    for (int ni = 0; ni + 1 < NI; ni += 2) load_b<2, TRANS_B, LB>(b[ni], B, k0, n0 + ni * 8);
    if constexpr (NI % 2) load_b<1, TRANS_B, LB>(b[NI - 1], B, k0, n0 + (NI - 1) * 8);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma_16816<T>(acc + (mi * NI + ni) * 4, a[mi], b[ni]);
  }
}

// Two adjacent accumulators (a row's pair of columns) as one 2-element store, rounded to T.
template <class T>
__device__ __forceinline__ void store_pair(T* p, float a, float b) {
#if defined(TW_HOST_EMULATION)
  p[0] = T(a);
  p[1] = T(b);
#else
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
#ifdef __CUDA_BF16_TYPES_EXIST__
  } else if constexpr (mma_kind<T>::bf16) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
#endif
  } else {
    *reinterpret_cast<half2*>(p) = __floats2half2_rn(a, b);
  }
#endif
}

}  // namespace tw

// C in registers (the "local.mma_acc" fragment layout, see above).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma_rf(const T* A, const T* B, float* acc) {
  static_assert(WM * WN * 32 == THREADS, "the warp grid must cover the block's warps");
  static_assert(M % (16 * WM) == 0 && N % (8 * WN) == 0 && K % 16 == 0,
                "the warp tile must be a multiple of 16x8x16");
  constexpr int TM = M / WM, TN = N / WN;
  const int warp = threadIdx.x / 32;
  tw::warp_tile<TM / 16, TN / 8, K, TRANS_A, TRANS_B, LA, LB>(A, B, (warp / WN) * TM,
                                                               (warp % WN) * TN, acc);
}

// C in shared memory (float32, row-major, leading dimension ldc).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma(const T* A, const T* B, float* C, int ldc) {
  static_assert(WM * WN * 32 == THREADS, "the warp grid must cover the block's warps");
  static_assert(M % (16 * WM) == 0 && N % (8 * WN) == 0 && K % 16 == 0,
                "the warp tile must be a multiple of 16x8x16");
  constexpr int TM = M / WM, TN = N / WN, MI = TM / 16, NI = TN / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int m0 = (warp / WN) * TM, n0 = (warp % WN) * TN;
  float acc[MI * NI * 4];
#pragma unroll
  for (int i = 0; i < MI * NI; ++i) {
    float* p = C + (m0 + (i / NI) * 16 + g) * ldc + n0 + (i % NI) * 8 + t * 2;
    acc[4 * i] = p[0];
    acc[4 * i + 1] = p[1];
    acc[4 * i + 2] = p[8 * ldc];
    acc[4 * i + 3] = p[8 * ldc + 1];
  }
  tw::warp_tile<MI, NI, K, TRANS_A, TRANS_B, LA, LB>(A, B, m0, n0, acc);
#pragma unroll
  for (int i = 0; i < MI * NI; ++i) {
    float* p = C + (m0 + (i / NI) * 16 + g) * ldc + n0 + (i % NI) * 8 + t * 2;
    p[0] = acc[4 * i];
    p[1] = acc[4 * i + 1];
    p[8 * ldc] = acc[4 * i + 2];
    p[8 * ldc + 1] = acc[4 * i + 3];
  }
}
