// float8_e5m2 conversions, pasted into a kernel that converts to float8_e5m2. The language
// rounds to nearest even and, as torch's float8_e5m2 conversion does, overflows to +-inf (the
// format has infinities); CUDA's __nv_fp8_e5m2(x) constructor saturates instead
// (__NV_SATFINITE: +-57344 for +-inf and for values past 61440). __nv_cvt_float_to_fp8 with
// __NV_NOSAT converts without saturating (cuda_fp8.hpp; in integer code: PTX's cvt to the
// float8 pairs takes .satfinite only). float8_e4m3fn has no infinities: its constructor's
// saturation to +-448 is torch's rule too, and it keeps the constructor.
#pragma once
#include <cuda_fp8.h>

__device__ __forceinline__ __nv_fp8_e5m2 tw_fp8_e5m2(float x) {
  __nv_fp8_e5m2 r;
  r.__x = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
  return r;
}
