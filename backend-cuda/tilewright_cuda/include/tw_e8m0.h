// float8_e8m0fnu conversions (the OCP MX scale format: code c is 2^(c - 127), 255 is NaN; no
// sign, zero or infinity), pasted into a kernel that converts to or from it. A kernel holds
// its values one code a byte, as torch's float8_e8m0fnu tensors do.
//
// The conversion from float is torch's, c10::detail::fp8e8m0fnu_from_fp32_value (torch 2.13:
// torch/headeronly/util/Float8_e8m0fnu.h; the language states it as
// tilewright.language.dtypes.ScaleFormat.encode): float32's biased exponent field, the sign
// ignored, plus one where the mantissa bits it drops are above half, or exactly half under a
// normal's implicit one (a subnormal's tie rounds down); NaN and +-inf give 255 (NaN), and so
// does an exponent field of 254 that rounds up. CUDA's own __nv_cvt_float_to_e8m0
// (cuda_fp8.h) offers only rounding toward zero and up (cudaRoundZero / cudaRoundPosInf),
// neither of them this rule, so it is not used. Plain bit manipulation (__float_as_uint /
// __uint_as_float): the same on every architecture and in the host emulation.
#pragma once

__device__ __forceinline__ unsigned char tw_e8m0_encode(float x) {
  unsigned bits = __float_as_uint(x);
  unsigned exponent = (bits >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xff;
  unsigned guard = (bits >> 22) & 1u;
  unsigned up = guard & (((bits & 0x3fffffu) != 0u) | (exponent != 0u));
  return static_cast<unsigned char>(exponent + up);  // 254 rounded up: 255, NaN
}

// 2^(code - 127): the code as float32's exponent field; code 0 is 2^-127, float32's subnormal
// 0x00400000; 255 a quiet NaN
__device__ __forceinline__ float tw_e8m0_decode(unsigned char code) {
  unsigned bits = code == 0 ? 0x00400000u : code == 0xff ? 0x7fc00000u : unsigned(code) << 23;
  return __uint_as_float(bits);
}
