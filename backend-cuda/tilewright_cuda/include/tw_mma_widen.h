// tilewright float8 GEMM on the float16 mma.sync (pasted after tw_mma.h into kernels that use
// it: architectures before sm_89, which have no float8 mma.sync).
//
// tw_gemm_mma_widened, tw_gemm_mma_rf_widened and tw_gemm_mma_rows_widened are tw_mma.h's
// tw_gemm_mma, tw_gemm_mma_rf and tw_gemm_mma_rows (same template arguments and arguments) on
// float8 e4m3/e5m2 tiles: the fragments are loaded as for m16n8k32 (ldmatrix of the 8-bit
// tiles, or bytes gathered), and each k32 step's mma is two m16n8k16 .f16 on the fragments
// widened to float16 in registers. Every e4m3 and e5m2 value is a float16 value, so the
// products are exact and accumulate into float32 as the float8 instruction's do (in another
// order). A 4-byte fragment register holds k = 4 t .. 4 t + 3 (t = lane % 4) of its row or
// column, the 16-bit form's register k' = 2 t, 2 t + 1: the low two bytes widened take the
// k' = 2 t pair, the high two the k' = 2 t + 8 pair; A and B map k the same way, so the two
// m16n8k16 sum the products of the m16n8k32. In this source tw::mma of the float8 types is
// this form (the explicit specialisations below).
#pragma once

namespace tw {

// __byte_perm(x, y, s): byte n of the result is byte (s >> 4 n) & 7 of y:x (x bytes 0..3).
__device__ __forceinline__ unsigned byte_perm(unsigned x, unsigned y, unsigned s) {
#if defined(TW_HOST_EMULATION)
  unsigned long long both = (unsigned long long)y << 32 | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= (unsigned)(both >> 8 * ((s >> 4 * n) & 7) & 0xff) << 8 * n;
  return r;
#else
  return __byte_perm(x, y, s);
#endif
}

// Two float16 times 256 (exact here: the e4m3 values scaled by 2^-8, results up to 448).
__device__ __forceinline__ unsigned half2_times_256(unsigned h) {
#if defined(TW_HOST_EMULATION)
  unsigned r = 0;
  for (int n = 0; n < 2; ++n) {
    __half_raw x = __float2half_rn(tw_bits16_to_float(h >> 16 * n & 0xffffu, false) * 256.0f);
    r |= (unsigned)x.x << 16 * n;
  }
  return r;
#else
  unsigned r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(0x5c005c00u));
  return r;
#endif
}

// The four float8 values of r (code 3: e4m3, 4: e5m2, as mma_kind numbers them) as float16
// pairs: lo holds bytes 0, 1, hi bytes 2, 3 (the first of each in the low half).
// e5m2 is float16's high byte. e4m3 (bias 7, no infinities, NaN 0x7f): its magnitude bits
// placed at float16's bits 13..7 give the value times 2^-8 (normal and subnormal alike), the
// multiply by 256 the value; a NaN code also sets bit 14, so the exponent is all ones.
template <int CODE>
__device__ __forceinline__ void widen(unsigned r, unsigned& lo, unsigned& hi) {
  if constexpr (CODE == 4) {
    lo = byte_perm(r, 0u, 0x1404u);
    hi = byte_perm(r, 0u, 0x3424u);
  } else {
    const unsigned mag = r & 0x7f7f7f7fu;
    // per byte: sign, NaN, exponent, the mantissa's high 2 bits (float16's high byte) ...
    const unsigned high = (r & 0x80808080u) | (mag >> 1 & 0x3f3f3f3fu) |
                          ((mag + 0x01010101u) >> 1 & 0x40404040u);
    const unsigned low = r << 7 & 0x80808080u;  // ... and the mantissa's low bit (low byte)
    lo = half2_times_256(byte_perm(high, low, 0x1504u));
    hi = half2_times_256(byte_perm(high, low, 0x3726u));
  }
}

// c += a b, one m16n8k32 step of float8 fragments as two m16n8k16 .f16 on them widened.
template <class T>
__device__ __forceinline__ void mma_widened(float* c, const unsigned* a, const unsigned* b) {
  constexpr int code = mma_kind<T>::code;
  unsigned a0[4], a1[4], b0[2], b1[2];
  widen<code>(a[0], a0[0], a0[2]);
  widen<code>(a[1], a0[1], a0[3]);
  widen<code>(a[2], a1[0], a1[2]);
  widen<code>(a[3], a1[1], a1[3]);
  widen<code>(b[0], b0[0], b0[1]);
  widen<code>(b[1], b1[0], b1[1]);
  mma<half>(c, a0, b0);
  mma<half>(c, a1, b1);
}

template <>
__device__ __forceinline__ void mma<__nv_fp8_e4m3, float>(float* c, const unsigned* a,
                                                          const unsigned* b) {
  mma_widened<__nv_fp8_e4m3>(c, a, b);
}

template <>
__device__ __forceinline__ void mma<__nv_fp8_e5m2, float>(float* c, const unsigned* a,
                                                          const unsigned* b) {
  mma_widened<__nv_fp8_e5m2>(c, a, b);
}

}  // namespace tw

template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma_rf_widened(const T* A, const T* B, float* acc) {
  tw_gemm_mma_rf<M, N, K, TRANS_A, TRANS_B, THREADS, WM, WN, LA, LB>(A, B, acc);
}

template <int M, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, int WM, int WN,
          class LA, class LB, class T>
__device__ __forceinline__ void tw_gemm_mma_widened(const T* A, const T* B, float* C, int ldc) {
  tw_gemm_mma<M, N, K, TRANS_A, TRANS_B, THREADS, WM, WN, LA, LB>(A, B, C, ldc);
}

template <int MV, int N, int K, bool TRANS_A, bool TRANS_B, int THREADS, class LA, class LB,
          class T>
__device__ __forceinline__ void tw_gemm_mma_rows_widened(const T* A, const T* B, float* C,
                                                         int ldc) {
  tw_gemm_mma_rows<MV, N, K, TRANS_A, TRANS_B, THREADS, LA, LB>(A, B, C, ldc);
}
