// tilewright tensor-core GEMM on shared-memory tiles (pasted into kernels that use it).
//
// The register variant, tw_gemm_mma_rf with template arguments M, N, K, TRANS_A, TRANS_B,
// THREADS, WM, WN, LA, LB and arguments (A, B, acc): acc += op(A) op(B), with A and B tiles in
// shared memory of an element type T with an mma.sync form (tw::mma_kind: half and bfloat16
// into float32 with m16n8k16; int8 into int32 and fp8 e4m3/e5m2 into float32 with m16n8k32)
// and acc this thread's accumulators. The
// WARPS = THREADS / 32 warps form a WM x WN grid; warp w = wm * WN + wn owns the
// (M / WM) x (N / WN) warp tile at (wm, wn): MI x NI tiles of 16x8, MI = M / WM / 16,
// NI = N / WN / 8, whose accumulators are acc[(mi * NI + ni) * 4 + q] in the PTX C layout of
// mma.m16n8k16 and .m16n8k32 (row = 16 mi + lane / 4 + 8 (q / 2), column = 8 ni + 2 (lane % 4)
// + q % 2) -- the "local.mma_acc" layout of the CUDA backend (lowering.mma_acc_element). Per
// k step of the instruction a
// warp loads its MI A fragments and NI B fragments once (ldmatrix.x4 / .x2, .trans where the
// operand is stored k-major in the other direction) and issues MI x NI mma.sync.
// tw_gemm_mma (same template arguments; A, B, C, ldc) is the same with C a row-major tile of
// the accumulator type in shared memory.
//
// LA and LB give the element offset of (row, column) of the tile as stored: tw::rowmajor<LD,
// LDSM> (LDSM: rows are 16-byte aligned, so ldmatrix may read them) or tw::swizzled<R, W, B,
// S> (tilewright_cuda/layout.py; S the element size in bytes). Each also says which steps
// move every element by the same constant: at(r + i * ROW_PERIOD, c) = at(r, c) +
// offset(i * ROW_PERIOD, 0), and, where COL_ADD, at(r, c + j * COL_PERIOD) = at(r, c) +
// offset(0, j * COL_PERIOD), for every r, c >= 0. The warp tile loads its fragments at
// compile-time steps from one lane address: the part of a step that is such a constant goes
// into the ldmatrix's immediate offset, so only the few addresses of the remaining steps are
// registers (they are invariant in a loop around the gemm, and the compiler keeps them live
// across it, beside the accumulators).
#pragma once

namespace tw {

template <int LD, bool LDSM>
struct rowmajor {
  static constexpr bool ldsm = LDSM;
  static constexpr int ROW_PERIOD = 1, COL_PERIOD = 1;
  static constexpr bool COL_ADD = true;
  static __device__ __forceinline__ int at(int r, int c) { return r * LD + c; }
  static constexpr __device__ int offset(int dr, int dc) { return dr * LD + dc; }
};

// S: the element size in bytes (2 or 1); the swizzle moves the 16-byte chunks of each
// 128-byte line by the line's number: element (r, c) is line * LINE + (its offset in the line
// ^ flip(line)). A step of 2^B lines (ROW_PERIOD rows) keeps the flip; so does a step of one
// column block (COL_PERIOD) when the block holds a multiple of 2^B lines.
template <int R, int W, int B, int S = 2>
struct swizzled {
  static constexpr bool ldsm = true;
  static constexpr int PER_ROW = W / S, LINE = 128 / S;
  // W < 128: 2 or 4 rows share a line, and the tile is one column block (c < PER_ROW)
  static constexpr int ROWS_PER_LINE = LINE / PER_ROW;
  static constexpr int ROW_PERIOD = ROWS_PER_LINE << B, COL_PERIOD = PER_ROW;
  static constexpr bool COL_ADD = R % ROW_PERIOD == 0;
  static __device__ __forceinline__ int at(int r, int c) {
    constexpr int LOG_S = S == 2 ? 1 : 0;
    const int line = (c / PER_ROW) * (R / ROWS_PER_LINE) + r / ROWS_PER_LINE;
    const int in_line = (r % ROWS_PER_LINE) * PER_ROW + c % PER_ROW;
    return line * LINE + (in_line ^ ((line & ((1 << B) - 1)) << (4 - LOG_S)));
  }
  static constexpr __device__ int offset(int dr, int dc) {
    return (dc / PER_ROW) * R * PER_ROW + (dr / ROWS_PER_LINE) * LINE;
  }
};

// The 32-bit register holding 4 / sizeof(T) consecutive elements, the first in the low bits.
template <class T, class F>
__device__ __forceinline__ unsigned pack(F at) {
  constexpr int E = 4 / sizeof(T);
  unsigned r = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    T v = at(e);
    unsigned bits = sizeof(T) == 2 ? *reinterpret_cast<unsigned short*>(&v)
                                   : *reinterpret_cast<unsigned char*>(&v);
    r |= bits << (8 * sizeof(T) * e);
  }
  return r;
}

// The mma.sync form of each operand type: K of one instruction, the accumulator type, and the
// instruction (m16n8k16 for 16-bit operands, m16n8k32 for 8-bit ones; the same A/B/C fragment
// layout in 32-bit registers, each holding 4 / sizeof(T) consecutive k).
template <class T> struct mma_kind;
#ifdef __CUDA_FP16_TYPES_EXIST__
template <> struct mma_kind<half> {
  static constexpr int k = 16, code = 0;
  using acc = float;
};
#endif
#ifdef __CUDA_BF16_TYPES_EXIST__
template <> struct mma_kind<__nv_bfloat16> {
  static constexpr int k = 16, code = 1;
  using acc = float;
};
#endif
template <> struct mma_kind<signed char> {
  static constexpr int k = 32, code = 2;
  using acc = int;
};
#ifdef __CUDA_FP8_TYPES_EXIST__
template <> struct mma_kind<__nv_fp8_e4m3> {
  static constexpr int k = 32, code = 3;
  using acc = float;
};
template <> struct mma_kind<__nv_fp8_e5m2> {
  static constexpr int k = 32, code = 4;
  using acc = float;
};
#endif

// one mma.sync OP into four float accumulators
#define TW_MMA_F32(OP)                                                                        \
  asm volatile(OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                  \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

// c += a b: one mma.sync of T's form (mma_kind).
template <class T, class C>
__device__ __forceinline__ void mma(C* c, const unsigned* a, const unsigned* b) {
  constexpr int code = mma_kind<T>::code;
#if defined(TW_HOST_EMULATION)
  tw_emulate_mma(c, a, b, code);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (code == 0) {
    TW_MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
  } else if constexpr (code == 1) {
    TW_MMA_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
  } else if constexpr (code == 2) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (code == 3) {
    TW_MMA_F32("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
  } else {
    TW_MMA_F32("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32");
  }
#endif
}
#undef TW_MMA_F32

// ldmatrix.sync.aligned.m8n8.x{N}[.trans].shared.b16: lane l gives the address of row l % 8
// of matrix l / 8 (row, plus OFF bytes taken as the instruction's immediate offset); register
// j receives matrix j (transposed with TRANS).
template <int N, bool TRANS, int OFF = 0>
__device__ __forceinline__ void ldmatrix(unsigned* d, const void* row) {
#if defined(TW_HOST_EMULATION)
  tw_emulate_ldmatrix(d, static_cast<const char*>(row) + OFF, N, TRANS);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 4 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4+%5];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr), "n"(OFF));
  } else if constexpr (N == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4+%5];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(addr), "n"(OFF));
  } else if constexpr (N == 2 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2+%3];\n"
                 : "=r"(d[0]), "=r"(d[1]) : "r"(addr), "n"(OFF));
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2+%3];\n"
                 : "=r"(d[0]), "=r"(d[1]) : "r"(addr), "n"(OFF));
  } else if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1+%2];\n"
                 : "=r"(d[0]) : "r"(addr), "n"(OFF));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1+%2];\n"
                 : "=r"(d[0]) : "r"(addr), "n"(OFF));
  }
#endif
}

// ldmatrix of the rows at (r + DR, c + DC) of a tile in layout L: the constant part of the
// step (whole periods of L, see the layouts above) as the immediate offset.
template <int N, bool TRANS, class L, int DR, int DC, class T>
__device__ __forceinline__ void ldmatrix_at(unsigned* d, const T* tile, int r, int c) {
  constexpr int LR = DR % L::ROW_PERIOD, LC = L::COL_ADD ? DC % L::COL_PERIOD : DC;
  constexpr int OFF = L::offset(DR - LR, DC - LC) * static_cast<int>(sizeof(T));
  ldmatrix<N, TRANS, OFF>(d, tile + L::at(r + LR, c + LC));
}

// The A fragment (16 x KS at m0, k0; KS = mma_kind<T>::k) in registers a[0..3]: matrices
// (rows m0 / m0 + 8) x (the two 16-byte halves of k) in the order of the PTX A layout.
// ldmatrix moves 16-bit elements, so 8-bit A takes it only stored [M][K] (no byte transpose).
// DM and DK: compile-time steps added to m0 and k0 (the warp tile's).
template <bool TRANS_A, class L, int DM = 0, int DK = 0, class T>
__device__ __forceinline__ void load_a(unsigned* a, const T* A, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  constexpr int H = 16 / sizeof(T);  // elements in 16 bytes: half of KS
  if constexpr (L::ldsm && (sizeof(T) == 2 || !TRANS_A)) {
    const int j = lane / 8, i = lane % 8;
    const int m = m0 + (j & 1) * 8, k = k0 + (j >> 1) * H;
    // stored [M][K]: row m + i; stored [K][M]: row k + i, transposed
    if constexpr (TRANS_A) {
      ldmatrix_at<4, true, L, DK, DM>(a, A, k + i, m);
    } else {
      ldmatrix_at<4, false, L, DM, DK>(a, A, m + i, k);
    }
  } else {
    constexpr int E = 4 / sizeof(T);
    const int g = lane >> 2, t = (lane & 3) * E;
    auto at = [&](int i, int k) { return TRANS_A ? A[L::at(k, i)] : A[L::at(i, k)]; };
    const int r0 = m0 + DM + g, r1 = r0 + 8, k = k0 + DK + t;
    a[0] = pack<T>([&](int e) { return at(r0, k + e); });
    a[1] = pack<T>([&](int e) { return at(r1, k + e); });
    a[2] = pack<T>([&](int e) { return at(r0, k + H + e); });
    a[3] = pack<T>([&](int e) { return at(r1, k + H + e); });
  }
}

// NB B fragments (KS x n8 each, NB = 1 or 2) at (k0, n0), n0 + 8: b[2 * nb + h] holds the
// h-th 16-byte half of k of column tile nb. 8-bit B takes ldmatrix only stored [N][K].
// DK and DN: compile-time steps added to k0 and n0 (the warp tile's).
template <int NB, bool TRANS_B, class L, int DK = 0, int DN = 0, class T>
__device__ __forceinline__ void load_b(unsigned* b, const T* B, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  constexpr int H = 16 / sizeof(T);
  if constexpr (L::ldsm && (sizeof(T) == 2 || TRANS_B)) {
    const int j = (lane / 8) % (2 * NB), i = lane % 8;
    const int k = k0 + (j & 1) * H, n = n0 + (j >> 1) * 8;
    // stored [N][K]: row n + i; stored [K][N]: row k + i, transposed
    if constexpr (TRANS_B) {
      ldmatrix_at<2 * NB, false, L, DN, DK>(b, B, n + i, k);
    } else {
      ldmatrix_at<2 * NB, true, L, DK, DN>(b, B, k + i, n);
    }
  } else {
    constexpr int E = 4 / sizeof(T);
    const int g = lane >> 2, t = (lane & 3) * E;
    auto at = [&](int k, int j) { return TRANS_B ? B[L::at(j, k)] : B[L::at(k, j)]; };
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int n = n0 + DN + nb * 8 + g, k = k0 + DK + t;
      b[2 * nb] = pack<T>([&](int e) { return at(k + e, n); });
      b[2 * nb + 1] = pack<T>([&](int e) { return at(k + H + e, n); });
    }
  }
}

// One warp tile: acc[(mi * NI + ni) * 4 ..] += A[m0 + 16 mi, :K] B[:K, n0 + 8 ni].
// The fragments of one k step: A's MI row tiles from I on, B's NI column tiles from I on.
template <bool TRANS_A, class L, int K0, int I, int MI, class T>
__device__ __forceinline__ void load_a_tiles(unsigned (*a)[4], const T* A, int m0) {
  if constexpr (I < MI) {
    load_a<TRANS_A, L, I * 16, K0>(a[I], A, m0, 0);
    load_a_tiles<TRANS_A, L, K0, I + 1, MI>(a, A, m0);
  }
}

template <bool TRANS_B, class L, int K0, int I, int NI, class T>
__device__ __forceinline__ void load_b_tiles(unsigned (*b)[2], const T* B, int n0) {
  if constexpr (I < NI) {  // two column tiles a load, the last one alone when NI is odd
    load_b<I + 1 < NI ? 2 : 1, TRANS_B, L, K0, I * 8>(b[I], B, 0, n0);
    load_b_tiles<TRANS_B, L, K0, I + 2, NI>(b, B, n0);
  }
}

// One warp tile: acc[(mi * NI + ni) * 4 ..] += A[m0 + 16 mi, :K] B[:K, n0 + 8 ni], from the
// k step K0 on. The steps of k, the rows and the columns are template arguments: compile-time
// steps from the lane's addresses at (m0, 0) and (0, n0).
template <int MI, int NI, int K, bool TRANS_A, bool TRANS_B, class LA, class LB, int K0 = 0,
          class T, class C>
__device__ __forceinline__ void warp_tile(const T* A, const T* B, int m0, int n0, C* acc) {
  if constexpr (K0 < K) {
    unsigned a[MI][4], b[NI][2];
    load_a_tiles<TRANS_A, LA, K0, 0, MI>(a, A, m0);
    load_b_tiles<TRANS_B, LB, K0, 0, NI>(b, B, n0);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma<T>(acc + (mi * NI + ni) * 4, a[mi], b[ni]);
    warp_tile<MI, NI, K, TRANS_A, TRANS_B, LA, LB, K0 + mma_kind<T>::k>(A, B, m0, n0, acc);
  }
}

// 2:4 structured-sparse A (T.gemm_sp): mma.sp::ordered_metadata m16n8k32 for 16-bit operands
// (mma_kind's code 0 half, 1 bfloat16). A holds the kept values, [M][K / 2]: their fragment is
// the m16n8k16 A fragment of the values. B is the dense m16n8k32 fragment: the two m16n8k16
// fragments of k0 and k0 + 16. The metadata register is include/tw_cuda.h's tw_sparse_meta.

template <class T, class C>
__device__ __forceinline__ void mma_sp(C* c, const unsigned* a, const unsigned* b, unsigned e) {
  constexpr int code = mma_kind<T>::code;
  static_assert(code < 2, "mma.sp is lowered for 16-bit operands only");
#if defined(TW_HOST_EMULATION)
  tw_emulate_mma_sp(c, a, b, e, code);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TW_MMA_SP(TYPE)                                                                       \
  asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32." TYPE "." TYPE    \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n" \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), \
                 "r"(b[3]), "r"(e))
  if constexpr (code == 0) {
    TW_MMA_SP("f16");
  } else {
    TW_MMA_SP("bf16");
  }
#undef TW_MMA_SP
#endif
}

// One warp tile of a sparse gemm: acc[(mi * NI + ni) * 4 ..] += A[m0 + 16 mi, :K] B[:K,
// n0 + 8 ni] with A given as its kept values and metadata (K counts dense columns).
template <int MI, int NI, int K, bool TRANS_B, class LA, class LB, int LDE, class T, class C>
__device__ __forceinline__ void warp_tile_sp(const T* A, const void* E, const T* B, int m0,
                                             int n0, C* acc) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 32) {
    unsigned a[MI][4], b[NI][4], e[MI];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      load_a<false, LA>(a[mi], A, m0 + mi * 16, k0 / 2);
      e[mi] = tw_sparse_meta<LDE>(E, m0 + mi * 16, k0);
    }
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      load_b<1, TRANS_B, LB>(b[ni], B, k0, n0 + ni * 8);
      load_b<1, TRANS_B, LB>(b[ni] + 2, B, k0 + 16, n0 + ni * 8);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma_sp<T>(acc + (mi * NI + ni) * 4, a[mi], b[ni], e[mi]);
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
  } else if constexpr (mma_kind<T>::code == 1) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
#endif
#ifdef __CUDA_FP16_TYPES_EXIST__
  } else {
    *reinterpret_cast<half2*>(p) = __floats2half2_rn(a, b);
#endif
  }
#endif
}

}  // namespace tw

// C in registers (the "local.mma_acc" fragment layout, see above).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma_rf(const T* A, const T* B,
                                               typename tw::mma_kind<T>::acc* acc) {
  static_assert(WM * WN * 32 == THREADS, "the warp grid must cover the block's warps");
  static_assert(M % (16 * WM) == 0 && N % (8 * WN) == 0 && K % tw::mma_kind<T>::k == 0,
                "the warp tile must be a multiple of the instruction's 16 x 8 x k");
  constexpr int TM = M / WM, TN = N / WN;
  const int warp = threadIdx.x / 32;
  tw::warp_tile<TM / 16, TN / 8, K, TRANS_A, TRANS_B, LA, LB>(A, B, (warp / WN) * TM,
                                                               (warp % WN) * TN, acc);
}

// C in shared memory (float32, row-major, leading dimension ldc).
template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma(const T* A, const T* B,
                                            typename tw::mma_kind<T>::acc* C, int ldc) {
  static_assert(WM * WN * 32 == THREADS, "the warp grid must cover the block's warps");
  static_assert(M % (16 * WM) == 0 && N % (8 * WN) == 0 && K % tw::mma_kind<T>::k == 0,
                "the warp tile must be a multiple of the instruction's 16 x 8 x k");
  constexpr int TM = M / WM, TN = N / WN, MI = TM / 16, NI = TN / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int m0 = (warp / WN) * TM, n0 = (warp % WN) * TN;
  typename tw::mma_kind<T>::acc acc[MI * NI * 4];
#pragma unroll
  for (int i = 0; i < MI * NI; ++i) {
    auto* p = C + (m0 + (i / NI) * 16 + g) * ldc + n0 + (i % NI) * 8 + t * 2;
    acc[4 * i] = p[0];
    acc[4 * i + 1] = p[1];
    acc[4 * i + 2] = p[8 * ldc];
    acc[4 * i + 3] = p[8 * ldc + 1];
  }
  tw::warp_tile<MI, NI, K, TRANS_A, TRANS_B, LA, LB>(A, B, m0, n0, acc);
#pragma unroll
  for (int i = 0; i < MI * NI; ++i) {
    auto* p = C + (m0 + (i / NI) * 16 + g) * ldc + n0 + (i % NI) * 8 + t * 2;
    p[0] = acc[4 * i];
    p[1] = acc[4 * i + 1];
    p[8 * ldc] = acc[4 * i + 2];
    p[8 * ldc + 1] = acc[4 * i + 3];
  }
}

// T.gemm_sp with C in registers (the "local.mma_acc" layout, as tw_gemm_mma_rf): A the kept
// values [M][K / 2], E the metadata in rows of LDE bytes, K the dense depth.
template <int M, int N, int K, bool TRANS_B, int THREADS, int WM, int WN, class LA, class LB,
          int LDE, class T>
__device__ __forceinline__ void tw_gemm_mma_sp_rf(const T* A, const void* E, const T* B,
                                                  typename tw::mma_kind<T>::acc* acc) {
  static_assert(WM * WN * 32 == THREADS, "the warp grid must cover the block's warps");
  static_assert(M % (16 * WM) == 0 && N % (8 * WN) == 0 && K % 32 == 0,
                "the warp tile must be a multiple of the instruction's 16 x 8 x 32");
  constexpr int TM = M / WM, TN = N / WN;
  const int warp = threadIdx.x / 32;
  tw::warp_tile_sp<TM / 16, TN / 8, K, TRANS_B, LA, LB, LDE>(A, E, B, (warp / WN) * TM,
                                                             (warp % WN) * TN, acc);
}

// A gemm of MV = 2..15 rows (a decode GEMV of a few tokens) on mma.sync: op(A)'s rows padded
// to the instruction's 16 with zeros in registers (the rows from MV on are never read), C a
// row-major tile of MV rows in shared memory (leading dimension ldc; the padded rows are
// neither read nor stored). The WARPS = THREADS / 32 warps split N: warp w owns the
// N / WARPS columns at w * N / WARPS, NI = N / WARPS / 8 tiles of 16x8.
template <int MV, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, class LA, class LB,
          class T>
__device__ __forceinline__ void tw_gemm_mma_rows(const T* A, const T* B,
                                                 typename tw::mma_kind<T>::acc* C, int ldc) {
  constexpr int WARPS = THREADS / 32, TN = N / WARPS, NI = TN / 8, E = 4 / sizeof(T);
  constexpr int H = 16 / sizeof(T);
  static_assert(1 < MV && MV < 16 && N % (8 * WARPS) == 0 && K % tw::mma_kind<T>::k == 0,
                "2..15 rows, N a multiple of 8 columns per warp, K of the instruction's k");
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int n0 = (threadIdx.x / 32) * TN;
  typename tw::mma_kind<T>::acc acc[NI * 4];
#pragma unroll
  for (int ni = 0; ni < NI; ++ni) {
    auto* p = C + g * ldc + n0 + ni * 8 + t * 2;
    acc[4 * ni] = g < MV ? p[0] : 0;
    acc[4 * ni + 1] = g < MV ? p[1] : 0;
    acc[4 * ni + 2] = g + 8 < MV ? p[8 * ldc] : 0;
    acc[4 * ni + 3] = g + 8 < MV ? p[8 * ldc + 1] : 0;
  }
  auto at = [&](int i, int k) { return TRANS_A ? A[LA::at(k, i)] : A[LA::at(i, k)]; };
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += tw::mma_kind<T>::k) {
    unsigned a[4], b[NI][2];
    const int k = k0 + t * E;
    a[0] = g < MV ? tw::pack<T>([&](int e) { return at(g, k + e); }) : 0u;
    a[1] = g + 8 < MV ? tw::pack<T>([&](int e) { return at(g + 8, k + e); }) : 0u;
    a[2] = g < MV ? tw::pack<T>([&](int e) { return at(g, k + H + e); }) : 0u;
    a[3] = g + 8 < MV ? tw::pack<T>([&](int e) { return at(g + 8, k + H + e); }) : 0u;
#pragma unroll
    for (int ni = 0; ni + 1 < NI; ni += 2) tw::load_b<2, TRANS_B, LB>(b[ni], B, k0, n0 + ni * 8);
    if constexpr (NI % 2) tw::load_b<1, TRANS_B, LB>(b[NI - 1], B, k0, n0 + (NI - 1) * 8);
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) tw::mma<T>(acc + ni * 4, a, b[ni]);
  }
#pragma unroll
  for (int ni = 0; ni < NI; ++ni) {
    auto* p = C + g * ldc + n0 + ni * 8 + t * 2;
    if (g < MV) {
      p[0] = acc[4 * ni];
      p[1] = acc[4 * ni + 1];
    }
    if (g + 8 < MV) {
      p[8 * ldc] = acc[4 * ni + 2];
      p[8 * ldc + 1] = acc[4 * ni + 3];
    }
  }
}

// The CUDA dialect's per-thread tensor-core primitives (T.ptx_ldmatrix, T.ptx_mma), on
// thread-local arrays of any element type: the registers are copied in and out whole.

// T.ptx_ldmatrix: ldmatrix .xN (.trans) of the calling warp; this lane's row address is row,
// the N registers it receives land in dst (4 N bytes).
template <int N, bool TRANS, class D, class S>
__device__ __forceinline__ void tw_ldmatrix(D* dst, const S* row) {
  unsigned r[N];
  tw::ldmatrix<N, TRANS>(r, row);
  memcpy(dst, r, sizeof r);
}

// T.ptx_mma: one mma.sync of T's form (tw::mma_kind) of the calling warp: c[0..3] += a b,
// a the 4 A registers, b the 2 B registers, in the PTX fragment layouts.
template <class T, class C>
__device__ __forceinline__ void tw_mma_sync(C* c, const T* a, const T* b) {
  unsigned ra[4], rb[2];
  memcpy(ra, a, sizeof ra);
  memcpy(rb, b, sizeof rb);
  tw::mma<T>(c, ra, rb);
}

// T.ptx_mma's int4 form: mma.sync.m16n8k32.s32.s4.s4.s32, A two registers and B one of
// int8 arrays holding two signed 4-bit values a byte (the first in the low bits).
__device__ __forceinline__ void tw_mma_sync_s4(int* c, const signed char* a,
                                               const signed char* b) {
  unsigned ra[2], rb[1];
  memcpy(ra, a, sizeof ra);
  memcpy(rb, b, sizeof rb);
#if defined(TW_HOST_EMULATION)
  tw_emulate_mma_s4(c, ra, rb);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(ra[0]), "r"(ra[1]), "r"(rb[0]));
#endif
}

#ifdef __CUDA_FP16_TYPES_EXIST__
// ... with float16 accumulators (mma.sync.m16n8k16.f16.f16.f16.f16: c[0..3] two half2).
template <class T>
__device__ __forceinline__ void tw_mma_sync(half* c, const T* a, const T* b) {
  unsigned ra[4], rb[2];
  memcpy(ra, a, sizeof ra);
  memcpy(rb, b, sizeof rb);
#if defined(TW_HOST_EMULATION)
  float f[4];
  for (int i = 0; i < 4; ++i) f[i] = __half2float(c[i]);
  tw_emulate_mma(f, ra, rb, tw::mma_kind<T>::code);
  for (int i = 0; i < 4; ++i) c[i] = __float2half(f[i]);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(tw::mma_kind<T>::code == 0, "float16 accumulators take float16 operands");
  unsigned rc[2];
  memcpy(rc, c, sizeof rc);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
      "{%0,%1};\n"
      : "+r"(rc[0]), "+r"(rc[1])
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  memcpy(c, rc, sizeof rc);
#endif
}
#endif
