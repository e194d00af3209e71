// tilewright: the atomics beyond add/max/min and memory orders (T.atomic_or / atomic_and /
// atomic_xor, T.atomic_*(..., memory_order=...), T.atomic_load, T.atomic_store), pasted after
// tw_cuda.h into the kernels that use them.
#ifndef TW_ATOMICS_H
#define TW_ATOMICS_H

// The bitwise kinds, chosen by the element's size (int64_t is long under nvcc on Linux and
// long long under NVRTC: sizes, not type names): atomicOr / atomicAnd / atomicXor on the
// unsigned int or unsigned long long of the same bits (CUDA's programming guide), and
// tw_cuda.h's compare-and-swap loop on the 32-bit word for 8- and 16-bit elements.
#define TW_BITWISE_OP(NAME, OP, NATIVE)                                                  \
  struct NAME {                                                                          \
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {      \
      return static_cast<T>(a OP b);                                                     \
    }                                                                                    \
    template <typename U> static __device__ __forceinline__ U native(U* a, U b) {        \
      return NATIVE(a, b);                                                               \
    }                                                                                    \
  };
TW_BITWISE_OP(TwAtomicOr, |, atomicOr)
TW_BITWISE_OP(TwAtomicAnd, &, atomicAnd)
TW_BITWISE_OP(TwAtomicXor, ^, atomicXor)

// The element's type is the address's: a value of another type (a literal the code generator
// printed as an int where the element is int64_t, char or short) converts to it, as
// atomicAdd's operand does, instead of failing the template's deduction.
template <typename T> struct TwElement { typedef T type; };

template <int BYTES> struct TwBitwiseAtomic;
template <> struct TwBitwiseAtomic<1> {
  template <typename OP, typename T> static __device__ __forceinline__ T run(T* a, T v) {
    return tw_atomic_narrow<T, unsigned char, OP>(a, v);
  }
};
template <> struct TwBitwiseAtomic<2> {
  template <typename OP, typename T> static __device__ __forceinline__ T run(T* a, T v) {
    return tw_atomic_narrow<T, unsigned short, OP>(a, v);
  }
};
template <> struct TwBitwiseAtomic<4> {
  template <typename OP, typename T> static __device__ __forceinline__ T run(T* a, T v) {
    return static_cast<T>(OP::native(reinterpret_cast<unsigned int*>(a),
                                     static_cast<unsigned int>(v)));
  }
};
template <> struct TwBitwiseAtomic<8> {
  template <typename OP, typename T> static __device__ __forceinline__ T run(T* a, T v) {
    return static_cast<T>(OP::native(reinterpret_cast<unsigned long long*>(a),
                                     static_cast<unsigned long long>(v)));
  }
};
template <typename T>
__device__ __forceinline__ T tw_atomic_or(T* address, typename TwElement<T>::type value) {
  return TwBitwiseAtomic<sizeof(T)>::template run<TwAtomicOr>(address, value);
}
template <typename T>
__device__ __forceinline__ T tw_atomic_and(T* address, typename TwElement<T>::type value) {
  return TwBitwiseAtomic<sizeof(T)>::template run<TwAtomicAnd>(address, value);
}
template <typename T>
__device__ __forceinline__ T tw_atomic_xor(T* address, typename TwElement<T>::type value) {
  return TwBitwiseAtomic<sizeof(T)>::template run<TwAtomicXor>(address, value);
}

// Memory orders, ids as C++'s std::memory_order: 0 relaxed, 1 consume, 2 acquire, 3 release,
// 4 acq_rel, 5 seq_cst. CUDA's atomics are relaxed at device scope (PTX atom without .sem). A
// fence.sc.gpu (__threadfence) before one makes it a release, after it an acquire: the PTX
// memory model's release and acquire patterns (a fence, then a strong operation; a strong
// operation, then a fence), stronger than C++ asks where it needs less, never weaker. The
// order is a constant, so the untaken fences fold away. A load and a store are volatile
// accesses of the element's bits (ld.volatile / st.volatile: strong, relaxed at system scope).
// Under TW_HOST_EMULATION blocks run one after another: a compiler and CPU fence suffices.
#ifndef TW_HOST_EMULATION
#define TW_ORDER_FENCE() __threadfence()
#else
#define TW_ORDER_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif
__device__ __forceinline__ void tw_order_before(int order) {
  if (order >= 3) TW_ORDER_FENCE();  // release, acq_rel, seq_cst
}
__device__ __forceinline__ void tw_order_after(int order) {
  if (order == 1 || order == 2 || order >= 4) TW_ORDER_FENCE();  // consume, acquire, ...
}
#define TW_ORDERED_ATOMIC(NAME)                                                          \
  template <typename T>                                                                  \
  __device__ __forceinline__ T NAME##_ordered(T* address,                                \
                                              typename TwElement<T>::type value,         \
                                              int order) {                               \
    tw_order_before(order);                                                              \
    const T old = NAME(address, value);                                                  \
    tw_order_after(order);                                                               \
    return old;                                                                          \
  }
TW_ORDERED_ATOMIC(tw_atomic_add)
TW_ORDERED_ATOMIC(tw_atomic_max)
TW_ORDERED_ATOMIC(tw_atomic_min)
TW_ORDERED_ATOMIC(tw_atomic_or)
TW_ORDERED_ATOMIC(tw_atomic_and)
TW_ORDERED_ATOMIC(tw_atomic_xor)

template <int BYTES> struct TwBits;
template <> struct TwBits<1> { typedef unsigned char type; };
template <> struct TwBits<2> { typedef unsigned short type; };
template <> struct TwBits<4> { typedef unsigned int type; };
template <> struct TwBits<8> { typedef unsigned long long type; };
template <typename T>
__device__ __forceinline__ T tw_atomic_load(T* address, int order) {
  typedef typename TwBits<sizeof(T)>::type Bits;
  if (order == 5) TW_ORDER_FENCE();  // seq_cst: after every earlier access
  Bits bits = *reinterpret_cast<volatile Bits*>(address);
  tw_order_after(order);
  return *reinterpret_cast<T*>(&bits);
}
template <typename T>
__device__ __forceinline__ void tw_atomic_store(T* address, typename TwElement<T>::type value,
                                                int order) {
  typedef typename TwBits<sizeof(T)>::type Bits;
  tw_order_before(order);
  *reinterpret_cast<volatile Bits*>(address) = *reinterpret_cast<Bits*>(&value);
  if (order == 5) TW_ORDER_FENCE();  // seq_cst: before every later access
}
#endif  // TW_ATOMICS_H
