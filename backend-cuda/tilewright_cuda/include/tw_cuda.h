// tilewright CUDA device helpers, pasted into every generated kernel source.
#pragma once

// __match_all_sync without its predicate output (T.match_all_sync: the mask or 0)
template <typename T>
__device__ __forceinline__ unsigned tw_match_all_sync(unsigned mask, T value) {
  int all;
  return __match_all_sync(mask, value, &all);
}

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

// int64_t / uint64_t are long / unsigned long under nvcc on Linux (long long / unsigned long
// long under NVRTC), which CUDA's atomics do not take: the same 64 bits as the long long types.
#ifndef _WIN32
#define TW_LONG_ATOMICS(T, WORD)                                                         \
  __device__ __forceinline__ T tw_atomic_add(T* address, T value) {                     \
    return (T)atomicAdd((unsigned long long*)address, (unsigned long long)value);        \
  }                                                                                      \
  __device__ __forceinline__ T tw_atomic_max(T* address, T value) {                     \
    return (T)atomicMax((WORD*)address, (WORD)value);                                    \
  }                                                                                      \
  __device__ __forceinline__ T tw_atomic_min(T* address, T value) {                     \
    return (T)atomicMin((WORD*)address, (WORD)value);                                    \
  }
TW_LONG_ATOMICS(long, long long)
TW_LONG_ATOMICS(unsigned long, unsigned long long)
#endif

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

// 8- and 16-bit integers: add (wrapping modulo 2^bits), max and min by a compare-and-swap loop
// on the aligned 32-bit word that holds the element (CUDA's atomics take 32- and 64-bit
// integers; atomicCAS on an unsigned int is native on every architecture this backend
// targets). The element's neighbours in the word are compared with the rest of it and written
// back as they were, so an update of theirs between the read and the swap makes it retry.
struct TwAtomicAdd {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct TwAtomicMax {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct TwAtomicMin {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
template <typename T, typename BITS, typename OP>
__device__ __forceinline__ T tw_atomic_narrow(T* address, T value) {
  const unsigned long long at = reinterpret_cast<unsigned long long>(address);
  unsigned int* word = reinterpret_cast<unsigned int*>(at & ~3ull);
  const unsigned int shift = static_cast<unsigned int>(at & 3ull) * 8u;
  const unsigned int mask = static_cast<unsigned int>(static_cast<BITS>(~BITS(0))) << shift;
  unsigned int old = *word, assumed;
  T current;
  do {
    assumed = old;
    current = static_cast<T>(static_cast<BITS>((assumed & mask) >> shift));
    const T next = OP()(current, value);
    if (next == current) break;  // max/min that keep the element, an add of 0
    const unsigned int bits = static_cast<unsigned int>(static_cast<BITS>(next)) << shift;
    old = atomicCAS(word, assumed, (assumed & ~mask) | bits);
  } while (assumed != old);
  return current;
}
#define TW_NARROW_ATOMIC(T, BITS)                                                        \
  __device__ __forceinline__ T tw_atomic_add(T* address, T value) {                     \
    return tw_atomic_narrow<T, BITS, TwAtomicAdd>(address, value);                        \
  }                                                                                      \
  __device__ __forceinline__ T tw_atomic_max(T* address, T value) {                     \
    return tw_atomic_narrow<T, BITS, TwAtomicMax>(address, value);                        \
  }                                                                                      \
  __device__ __forceinline__ T tw_atomic_min(T* address, T value) {                     \
    return tw_atomic_narrow<T, BITS, TwAtomicMin>(address, value);                        \
  }
TW_NARROW_ATOMIC(signed char, unsigned char)
TW_NARROW_ATOMIC(unsigned char, unsigned char)
TW_NARROW_ATOMIC(short, unsigned short)
TW_NARROW_ATOMIC(unsigned short, unsigned short)

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
