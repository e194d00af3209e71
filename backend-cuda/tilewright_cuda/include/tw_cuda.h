// tilewright CUDA device helpers, pasted into every generated kernel source.
#pragma once

template <typename T>
__device__ __forceinline__ T tw_atomic_add(T* address, T value) {
  return atomicAdd(address, value);
}

__device__ __forceinline__ long long tw_atomic_add(long long* address, long long value) {
  return (long long)atomicAdd((unsigned long long*)address, (unsigned long long)value);
}

// max/min: native for integers, a compare-and-swap loop for floating point.
template <typename T>
__device__ __forceinline__ T tw_atomic_max(T* address, T value) {
  return atomicMax(address, value);
}
template <typename T>
__device__ __forceinline__ T tw_atomic_min(T* address, T value) {
  return atomicMin(address, value);
}

#define TW_FLOAT_ATOMIC(NAME, T, BITS, CMP)                                              \
  template <>                                                                            \
  __device__ __forceinline__ T NAME<T>(T* address, T value) {                            \
    BITS* raw = reinterpret_cast<BITS*>(address);                                        \
    BITS old = *raw, assumed;                                                            \
    do {                                                                                 \
      assumed = old;                                                                     \
      T current = *reinterpret_cast<T*>(&assumed);                                       \
      if (!(value CMP current)) break;                                                   \
      old = atomicCAS(raw, assumed, *reinterpret_cast<BITS*>(&value));                   \
    } while (assumed != old);                                                            \
    return *reinterpret_cast<T*>(&old);                                                  \
  }

TW_FLOAT_ATOMIC(tw_atomic_max, float, unsigned int, >)
TW_FLOAT_ATOMIC(tw_atomic_min, float, unsigned int, <)
TW_FLOAT_ATOMIC(tw_atomic_max, double, unsigned long long, >)
TW_FLOAT_ATOMIC(tw_atomic_min, double, unsigned long long, <)

// float16/bfloat16 max/min: a compare-and-swap loop on the 16-bit word (atomicCAS on
// unsigned short is native from sm_70, the oldest architecture this backend targets). Values
// are compared as float; a NaN value leaves memory unchanged, like the float helpers above.
#define TW_HALF_ATOMIC(NAME, T, TO_FLOAT, CMP)                                           \
  template <>                                                                            \
  __device__ __forceinline__ T NAME<T>(T* address, T value) {                            \
    unsigned short* raw = reinterpret_cast<unsigned short*>(address);                    \
    unsigned short old = *raw, assumed;                                                  \
    const float wanted = TO_FLOAT(value);                                                \
    do {                                                                                 \
      assumed = old;                                                                     \
      if (!(wanted CMP TO_FLOAT(*reinterpret_cast<T*>(&assumed)))) break;                \
      old = atomicCAS(raw, assumed, *reinterpret_cast<unsigned short*>(&value));         \
    } while (assumed != old);                                                            \
    return *reinterpret_cast<T*>(&old);                                                  \
  }

#ifdef __CUDA_FP16_TYPES_EXIST__
TW_HALF_ATOMIC(tw_atomic_max, __half, __half2float, >)
TW_HALF_ATOMIC(tw_atomic_min, __half, __half2float, <)
#endif
#ifdef __CUDA_BF16_TYPES_EXIST__
TW_HALF_ATOMIC(tw_atomic_max, __nv_bfloat16, __bfloat162float, >)
TW_HALF_ATOMIC(tw_atomic_min, __nv_bfloat16, __bfloat162float, <)
#endif

// The metadata register of a 2:4 sparse tensor-core step over 16 rows from m0 and 32 columns
// of K from k0, for 16-bit operands: mma.sp m16n8k32 (include/tw_mma.h) and each warp's 16
// rows of wgmma.mma_async.sp m64nNk32 (include/tw_wgmma.h), which the PTX ISA lays out alike.
// The metadata E is a row of 4-bit fields per row of A, one per group of 4 along K, filling
// each element from its low bits up (tilewright.sparse): K bits a row whatever its element
// type, read 16 at a time from a row of LDE bytes. With selector 0, lane 4 g + h (h = 0, 1)
// gives the 16 bits of k0 + 16 h for row g (low half) and row g + 8 (high half); the other
// lanes' metadata is not read.
template <int LDE>
__device__ __forceinline__ unsigned tw_sparse_meta(const void* E, int m0, int k0) {
  const int lane = threadIdx.x % 32, g = lane >> 2, k = k0 + 16 * (lane & 1);
  const unsigned char* rows = static_cast<const unsigned char*>(E);
  auto bits16 = [&](int r) {
    return unsigned(*reinterpret_cast<const unsigned short*>(rows + r * LDE + k / 8));
  };
  return bits16(m0 + g) | bits16(m0 + g + 8) << 16;
}
