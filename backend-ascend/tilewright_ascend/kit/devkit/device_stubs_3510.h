// What bisheng builds in for __NPU_ARCH__ 3510 (Ascend 950) beyond device_stubs.h: the SIMT
// and VF function attributes, the 8-bit and 4-bit element types, the enums of the register API
// (used through static_cast only, so they need no enumerators unless the headers name one)
// and the register-API builtins (device_builtins_3510.inc). As device_stubs.h: nothing here
// runs, it only has to type-check.
#pragma once

#define __simt_callee__
#define __simt_vf__
#define __sync_noalias__
#define __aicore_simt__

#include <cmath>
#include <cstdlib>
using std::abs;

// an element type the headers only store, convert and pass through
#define TW_ELEMENT(name)                 \
    struct name {                        \
        uint8_t bits;                    \
        name() = default;                \
        name(float);                     \
        operator float() const;          \
    };
TW_ELEMENT(hifloat8_t)
TW_ELEMENT(int4x2_t)
TW_ELEMENT(float8_e5m2_t)
TW_ELEMENT(float8_e4m3_t)
TW_ELEMENT(float8_e8m0_t)
TW_ELEMENT(float4_e2m1x2_t)
TW_ELEMENT(float4_e1m2x2_t)
#undef TW_ELEMENT

// the enumerators the headers name (global enums of the register API and Fixpipe)
enum class Dist : int { DIST_BDINTLV, DIST_BLK, DIST_BRC_B16, DIST_BRC_B32, DIST_BRC_B8,
    DIST_DINTLV_B16, DIST_DINTLV_B32, DIST_DINTLV_B8, DIST_DS, DIST_DS_B16, DIST_DS_B8,
    DIST_E2B_B16, DIST_E2B_B32, DIST_FIRST_ELEMENT_B16, DIST_FIRST_ELEMENT_B32,
    DIST_FIRST_ELEMENT_B8, DIST_INTLV_B16, DIST_INTLV_B32, DIST_INTLV_B8, DIST_MRG2CHN_B16,
    DIST_MRG2CHN_B8, DIST_MRG4CHN_B8, DIST_NORM, DIST_NORM_B16, DIST_NORM_B32, DIST_NORM_B8,
    DIST_PACK, DIST_PACK4_B32, DIST_PACK_B16, DIST_PACK_B32, DIST_PACK_B64, DIST_PK,
    DIST_SPLT2CHN_B16, DIST_SPLT2CHN_B8, DIST_SPLT4CHN_B8, DIST_UNPACK4_B8, DIST_UNPACK_B16,
    DIST_UNPACK_B32, DIST_UNPACK_B8, DIST_US, DIST_US_B16, DIST_US_B8 };
enum class DistVST : int { DIST_NORM, DIST_NORM_B16, DIST_NORM_B32, DIST_NORM_B8 };
enum class Post : int { POST_UPDATE_VALUE };
enum class Part : int { HIGHEST, LOWEST };
enum class Part_T : int {};
enum class HiloPart : int { H, L };
enum class RoundingSaturation : int { RS_DISABLE_VALUE, RS_ENABLE_VALUE };
enum class Pos : int { E, LOWEST, O, P };
enum class Pat : int { ALL, ALLF };
enum class Spr : int {};
enum class Order : int { INCREASE_ORDER, INC_ORDER_VALUE, INVALID, ORDER_INDEX_VALUE,
    ORDER_ONLY_INDEX, ORDER_ONLY_VALUE, ORDER_VALUE_INDEX, UNDEF, UNSET };
enum class ROUND : int { A, C, F, H, O, R, Z, CAST_CEIL, CAST_FLOOR, CAST_HYBRID, CAST_ODD,
                         CAST_RINT, CAST_ROUND, CAST_TRUNC };
enum QuantMode_t { NoQuant, DEQF16, DEQS16, F322BF16, F322F16, QF162B8_PRE, QF162S16_PRE,
    QF162S4_PRE, QF322B8_PRE, QF322BF16_PRE, QF322F16_PRE, QF322F32_PRE, QF322FP8_PRE,
    QF322HIF8_PRE, QF322HIF8_PRE_HYBRID, QS322BF16_PRE, REQ4, REQ8, VDEQF16, VDEQS16,
    VQF162B8_PRE, VQF162S16_PRE, VQF162S4_PRE, VQF322B8_PRE, VQF322BF16_PRE, VQF322F16_PRE,
    VQF322F32_PRE, VQF322FP8_PRE, VQF322HIF8_PRE, VQF322HIF8_PRE_HYBRID, VQS322BF16_PRE,
    VREQ4, VREQ8 };
enum class QuantMode_post : int { NoConv };
enum class Mode : int {};
enum class StoreMode : int {};
enum class Bin : int {};
enum class LD_L2CacheType : int { L2_CACHE_HINT_NORMAL_FV };
enum class ST_L2CacheType : int { L2_CACHE_HINT_NORMAL_FV };
enum class L1CacheType : int { CACHEABLE, NON_CACHEABLE };

// the SIMT built-in variables and types (dim3 is cce's, and global: the C API's
// common_functions.h names it unqualified, the C++ API's kernel_simt_utils.h as cce::dim3)
namespace cce {
struct dim3 {
    uint32_t x, y, z;
    dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};
// launches F on the threads: declared only where F takes the arguments, as bisheng checks them
template <auto F, class... A>
auto async_invoke(dim3, A&&... a) -> decltype(F(static_cast<A&&>(a)...), void());
}  // namespace cce
using cce::dim3;
struct TwDim3 { uint32_t x, y, z; };
extern TwDim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

// a value of any type: what the register-API builtins return
struct TwAny {
    template <class T> operator T() const { return T(); }
    template <class T> TwAny& operator=(const T&) { return *this; }
};
// the SIMT atomics overload on the address space of their pointer (__gm__ / __ubuf__); with
// the qualifiers empty those overloads collide, so their implementations (the C++ API's and
// the C API's) are left out (the generated code calls none of them)
#define IMPL_SIMT_API_CPP_KERNEL_SIMT_ATOMIC_INTERFACE_IMPL_H
#define IMPL_SIMT_API_DEVICE_ATOMIC_FUNCTIONS_IMPL_H  // the C API's, as device_functions.h has it
#define __VEC_SCOPE__
namespace __cce_scalar {
template <class... A> void copy_ubuf_to_ubuf(A&&...);
}  // namespace __cce_scalar
#define TW_ANY_OPERATOR(op)                                                     \
    template <class T> inline TwAny operator op(const TwAny&, const T&) { return {}; } \
    template <class T, class = std::enable_if_t<!std::is_same_v<T, TwAny>>>     \
    inline TwAny operator op(const T&, const TwAny&) { return {}; }
TW_ANY_OPERATOR(+)
TW_ANY_OPERATOR(-)
TW_ANY_OPERATOR(*)
TW_ANY_OPERATOR(/)
TW_ANY_OPERATOR(==)
TW_ANY_OPERATOR(!=)
TW_ANY_OPERATOR(<)
TW_ANY_OPERATOR(>)
TW_ANY_OPERATOR(&)
TW_ANY_OPERATOR(|)
TW_ANY_OPERATOR(^)
#undef TW_ANY_OPERATOR
// the kit's 3510 DumpTensor calls asc_dump on every memory (device_stubs.h leaves the dump
// implementation out)
namespace __asc_aicore {
template <class... A> void asc_dump(A&&...);
}  // namespace __asc_aicore
// the builtins return a TwAny; the constants the headers pass them are TwAny values; the
// vector types (float2, vector_s32 ...) are structs of four lanes
#define TW_BUILTIN_ANY(name) \
    template <class... A> inline TwAny name(A&&...) { return {}; }
#define TW_CONSTANT(name) constexpr TwAny name{};
#define TW_TYPE(name) \
    struct name { TwAny x, y, z, w; TwAny operator[](int) const { return {}; } };
// conversions called with template arguments that are values (rounding, saturation)
#define TW_CONVERSION(name) \
    template <auto... P, class... A> inline TwAny name(A&&...) { return {}; }
#include "device_builtins_3510.inc"
#undef TW_BUILTIN_ANY
#undef TW_CONSTANT
#undef TW_TYPE
#undef TW_CONVERSION
