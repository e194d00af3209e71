// Unsigned 4-bit codes to float16, eight at a time (the dequantisation of a W4A16 GEMM), pasted
// into a kernel whose T.Parallel nest dequantises runs of eight codes with one zero point and
// one scale (transforms/distribute.py chooses it). Per pair of codes (one byte): a byte permute
// (PRMT) copies the byte into bytes 0 and 2 of a word; one LOP3 keeps the low code in bits 0-3
// and the high one in bits 20-23 and ORs in 0x6400 below and 0x5400 above (float16 1024, whose
// last mantissa bit weighs 1, and 64, whose fifth-last weighs 1): the halves are 1024 + lo and
// 64 + hi exactly, and one HADD2 of (-1024, -64) leaves (lo, hi). Then (code - zero) * scale as
// one HADD2 and one HMUL2: the two roundings of the scalar code, so the result is bit-exact
// with it. Under TW_HOST_EMULATION (tests/hostemu.py) the byte permute and the LOP3 are
// emulated; the half arithmetic is cuda_fp16.h's host side.
#pragma once
#include <cuda_fp16.h>

#if defined(TW_HOST_EMULATION)
// PTX prmt (default mode): byte i of the result is byte (sel >> 4i) & 7 of the pair {b, a}
inline unsigned tw_byte_perm(unsigned a, unsigned b, unsigned sel) {
  const unsigned long long both = (static_cast<unsigned long long>(b) << 32) | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    r |= static_cast<unsigned>((both >> (8 * ((sel >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  }
  return r;
}
// (a & mask) | c, one LOP3 (immLut 0xea)
inline unsigned tw_and_or(unsigned a, unsigned mask, unsigned c) { return (a & mask) | c; }
#else
__device__ __forceinline__ unsigned tw_byte_perm(unsigned a, unsigned b, unsigned sel) {
  return __byte_perm(a, b, sel);
}
// (a & mask) | c as one LOP3: written apart, ptxas gives the two constants two LOP3s
__device__ __forceinline__ unsigned tw_and_or(unsigned a, unsigned mask, unsigned c) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(mask), "r"(c));
  return r;
}
#endif

__device__ __forceinline__ __half2 tw_half2_bits(unsigned bits) {
  return *reinterpret_cast<const __half2*>(&bits);
}

// (code 2b - zero, code 2b + 1 - zero) * scale of byte b of word: one PRMT, one LOP3, two
// HADD2 and one HMUL2 (z, s: the zero point and scale in both halves)
__device__ __forceinline__ __half2 tw_dequant_u4x2_f16(unsigned word, int b, __half2 z,
                                                       __half2 s) {
  const __half2 bias = tw_half2_bits(0xd400e400u);  // (-1024, -64)
  // byte b in bytes 0 and 2, zeros in bytes 1 and 3
  const unsigned pair = tw_byte_perm(word, 0u, 0x4040u | (b << 8) | b);
  const __half2 codes = __hadd2(tw_half2_bits(tw_and_or(pair, 0x00f0000fu, 0x54006400u)),
                                bias);
  return __hmul2(__hsub2(codes, z), s);
}

// dst[0..7] = (code k - zero) * scale, code k in bits [4k, 4k + 4) of the 32-bit word at src
// (the order T.unpack(Q[.., k // 2], k % 2, 4) reads them); src 4-byte and dst 16-byte aligned.
__device__ __forceinline__ void tw_dequant_u4x8_f16(half* dst, const unsigned char* src,
                                                    half zero, half scale) {
  const unsigned word = *reinterpret_cast<const unsigned*>(src);
  const __half2 z = __half2half2(zero), s = __half2half2(scale);
  alignas(16) __half2 out[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    out[b] = tw_dequant_u4x2_f16(word, b, z, s);
  }
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
}

// Eight codes into a thread's wgmma register A operand, in the nibble order of
// examples/gemm_w4a16.py's wgmma_order: the pair of registers 4 b and 4 b + 1 from dst (columns
// 8 b + 2 t and 8 b + 2 t + 1 of a row's k32 step in the wgmma A layout, t = lane % 4) is
// nibbles b and b + 4 of the word at src, so that each pair is one LOP3 of the word (b = 0, 1)
// or of it shifted by a byte (b = 2, 3): nibbles in bits 0-3 and 16-19 under 0x6400 (1024 +
// code), or in bits 4-7 and 20-23 under 0x5400 (64 + code); one SHF, four LOP3 where the byte
// order takes four PRMT and four LOP3. Then the same three half2 operations and roundings as
// tw_dequant_u4x8_f16: bit-exact with the scalar code. src and dst 4-byte aligned.
__device__ __forceinline__ void tw_dequant_u4x8_f16_a(half* dst, const unsigned char* src,
                                                      half zero, half scale) {
  const unsigned word = *reinterpret_cast<const unsigned*>(src);
  const __half2 z = __half2half2(zero), s = __half2half2(scale);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const unsigned w = b < 2 ? word : word >> 8;
    const __half2 codes =
        b % 2 == 0 ? __hadd2(tw_half2_bits(tw_and_or(w, 0x000f000fu, 0x64006400u)),
                             tw_half2_bits(0xe400e400u))   // - (1024, 1024)
                   : __hadd2(tw_half2_bits(tw_and_or(w, 0x00f000f0u, 0x54005400u)),
                             tw_half2_bits(0xd400d400u));  // - (64, 64)
    *reinterpret_cast<__half2*>(dst + 4 * b) = __hmul2(__hsub2(codes, z), s);
  }
}
