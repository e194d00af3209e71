// float4_e2m1fn conversions, pasted into a kernel that converts to or from float4. A kernel
// holds float4 values one code a byte (the low four bits), as the call passes them; CUDA's
// cuda_fp4.h converts: to nearest even, saturating to +-6, NaN to +6 (cvt.rn.satfinite.e2m1x2
// on sm_100+, the same in integer code elsewhere).
#pragma once
#include <cuda_fp4.h>

__device__ __forceinline__ unsigned char tw_fp4_encode(float x) {
  return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
}

__device__ __forceinline__ float tw_fp4_decode(unsigned char code) {
  return __half2float(__half(__nv_cvt_fp4_to_halfraw(code, __NV_E2M1)));
}
