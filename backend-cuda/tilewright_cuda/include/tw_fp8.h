// float8_e5m2 conversions, pasted into a kernel that converts to float8_e5m2. The language
// rounds to nearest even and, as torch's float8_e5m2 conversion does, overflows to +-inf (the
// format has infinities); CUDA's __nv_fp8_e5m2(x) constructor saturates instead
// (__NV_SATFINITE: +-57344 for +-inf and for values past 61440). On sm_89 and newer the
// hardware conversion, which PTX gives with .satfinite only (cvt.rn.satfinite.e5m2x2.f32), and
// tw_fp8_e5m2_unsaturate putting the infinities back; before sm_89 __nv_cvt_float_to_fp8 with
// __NV_NOSAT (cuda_fp8.hpp's software conversion). float8_e4m3fn has no infinities: its
// constructor's saturation to +-448 is torch's rule too, and it keeps the constructor.
#pragma once
#include <cuda_fp8.h>

// The non-saturating e5m2 code of x from its .satfinite one ``sat``: from 61440 on (the
// midpoint between the largest finite value, 57344, and 65536, which rounds to the even
// 65536: an overflow) and for inf, +-inf; NaN (never >= 61440) keeps its NaN code.
__device__ __forceinline__ unsigned char tw_fp8_e5m2_unsaturate(float x, unsigned char sat) {
  return fabsf(x) >= 61440.0f ? static_cast<unsigned char>((sat & 0x80u) | 0x7cu) : sat;
}

__device__ __forceinline__ __nv_fp8_e5m2 tw_fp8_e5m2(float x) {
  __nv_fp8_e5m2 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short pair;  // x in the low byte
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
  r.__x = tw_fp8_e5m2_unsaturate(x, static_cast<unsigned char>(pair & 0xffu));
#else
  r.__x = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
#endif
  return r;
}
