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
