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
