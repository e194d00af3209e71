/* Runtime helpers that generated CPU kernels call: atomics on every dtype tilewright supports.
 * Built by tilewright_cpu.runtime with the host C compiler and loaded with RTLD_GLOBAL so that
 * kernels (shared libraries or in-memory LLVM modules) resolve these symbols. */
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
  _Float16 v;
  memcpy(&v, &h, sizeof v);
  return (float)v;
}

static inline uint16_t f32_to_f16(float f) {
  _Float16 v = (_Float16)f;
  uint16_t h;
  memcpy(&h, &v, sizeof h);
  return h;
}

#define ADD(a, b) ((a) + (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* Floats and integers of 8 to 64 bits: compare-and-swap loop on the bit pattern. An 8- or
 * 16-bit integer sum wraps modulo its size, as C's narrowing conversion does. */
#define CAS_OP(NAME, T, U, OP)                                                        \
  T NAME(T *addr, T value) {                                                          \
    U *bits = (U *)addr;                                                              \
    U old = __atomic_load_n(bits, __ATOMIC_RELAXED);                                  \
    for (;;) {                                                                        \
      T cur, next;                                                                    \
      memcpy(&cur, &old, sizeof cur);                                                 \
      next = OP(cur, value);                                                          \
      U want;                                                                         \
      memcpy(&want, &next, sizeof want);                                              \
      if (__atomic_compare_exchange_n(bits, &old, want, 1, __ATOMIC_SEQ_CST,          \
                                      __ATOMIC_RELAXED))                              \
        return cur;                                                                   \
    }                                                                                 \
  }

/* 16-bit floats: widen to float, combine, narrow. */
#define CAS_OP16(NAME, TO_F32, FROM_F32, OP)                                          \
  float NAME(uint16_t *addr, float value) {                                           \
    uint16_t old = __atomic_load_n(addr, __ATOMIC_RELAXED);                           \
    for (;;) {                                                                        \
      float cur = TO_F32(old);                                                        \
      uint16_t want = FROM_F32(OP(cur, value));                                       \
      if (__atomic_compare_exchange_n(addr, &old, want, 1, __ATOMIC_SEQ_CST,          \
                                      __ATOMIC_RELAXED))                              \
        return cur;                                                                   \
    }                                                                                 \
  }

#define INTEGERS(KIND, OP)                                                            \
  CAS_OP(tw_atomic_##KIND##_int8, int8_t, uint8_t, OP)                                \
  CAS_OP(tw_atomic_##KIND##_int16, int16_t, uint16_t, OP)                             \
  CAS_OP(tw_atomic_##KIND##_int32, int32_t, uint32_t, OP)                             \
  CAS_OP(tw_atomic_##KIND##_int64, int64_t, uint64_t, OP)                             \
  CAS_OP(tw_atomic_##KIND##_uint8, uint8_t, uint8_t, OP)                              \
  CAS_OP(tw_atomic_##KIND##_uint16, uint16_t, uint16_t, OP)                           \
  CAS_OP(tw_atomic_##KIND##_uint32, uint32_t, uint32_t, OP)                           \
  CAS_OP(tw_atomic_##KIND##_uint64, uint64_t, uint64_t, OP)

#define FAMILY(KIND, OP)                                                              \
  CAS_OP(tw_atomic_##KIND##_float32, float, uint32_t, OP)                             \
  CAS_OP(tw_atomic_##KIND##_float64, double, uint64_t, OP)                            \
  INTEGERS(KIND, OP)                                                                  \
  CAS_OP16(tw_atomic_##KIND##_float16, f16_to_f32, f32_to_f16, OP)                    \
  CAS_OP16(tw_atomic_##KIND##_bfloat16, bf16_to_f32, f32_to_bf16, OP)

FAMILY(add, ADD)
FAMILY(max, MAX)
FAMILY(min, MIN)

/* The bitwise kinds take integers only. */
#define OR(a, b) ((a) | (b))
#define AND(a, b) ((a) & (b))
#define XOR(a, b) ((a) ^ (b))
INTEGERS(or, OR)
INTEGERS(and, AND)
INTEGERS(xor, XOR)

/* T.atomic_load / T.atomic_store: sequentially consistent whatever order the kernel names
 * (the strongest order is a valid implementation of each weaker one). 16-bit floats travel as
 * float, like the read-modify-writes above; a float16/bfloat16 value converts back exactly. */
#define LOAD_STORE(NAME, T)                                                           \
  T tw_atomic_load_##NAME(T *addr) {                                                  \
    T value;                                                                          \
    __atomic_load(addr, &value, __ATOMIC_SEQ_CST);                                    \
    return value;                                                                     \
  }                                                                                   \
  void tw_atomic_store_##NAME(T *addr, T value) {                                     \
    __atomic_store(addr, &value, __ATOMIC_SEQ_CST);                                   \
  }

#define LOAD_STORE16(NAME, TO_F32, FROM_F32)                                          \
  float tw_atomic_load_##NAME(uint16_t *addr) {                                       \
    return TO_F32(__atomic_load_n(addr, __ATOMIC_SEQ_CST));                           \
  }                                                                                   \
  void tw_atomic_store_##NAME(uint16_t *addr, float value) {                          \
    __atomic_store_n(addr, FROM_F32(value), __ATOMIC_SEQ_CST);                        \
  }

LOAD_STORE(float32, float)
LOAD_STORE(float64, double)
LOAD_STORE(int8, int8_t)
LOAD_STORE(int16, int16_t)
LOAD_STORE(int32, int32_t)
LOAD_STORE(int64, int64_t)
LOAD_STORE(uint8, uint8_t)
LOAD_STORE(uint16, uint16_t)
LOAD_STORE(uint32, uint32_t)
LOAD_STORE(uint64, uint64_t)
LOAD_STORE16(float16, f16_to_f32, f32_to_f16)
LOAD_STORE16(bfloat16, bf16_to_f32, f32_to_bf16)
