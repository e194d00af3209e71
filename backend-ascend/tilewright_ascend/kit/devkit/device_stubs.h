// What bisheng builds in and the asc-devkit headers take for granted, stubbed for a host C++
// front end (g++ -fsyntax-only), so the vendor's Ascend C headers parse and generated kernels
// are checked against their declarations. Nothing here runs: it only has to type-check.
//
// - address-space qualifiers and function attributes: empty;
// - the compiler's element types (half, bfloat16_t) and enums (pipe_t, event_t, QuantMode_t as
//   the Fixpipe documentation defines it, and the enums whose enumerators the headers name);
// - the device builtins (copy_gm_to_ubuf, vadd, set_flag, ...): variadic templates that take
//   anything, listed in TW_BUILTINS below (found by compiling the headers and every generated
//   kernel: a builtin missing here shows as "was not declared in this scope").
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#define __aicore__
#define __global__
#define __host_aicore__
#define __simd_callee__
#define __simd_vf__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __biasbuf__
#define __ssbuf__
#define __sync_alias__
#define __check_sync_alias__
#define __inout_pipe__(x)
#define __in_pipe__(x)
#define __out_pipe__(x)

using half = _Float16;
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    bfloat16_t(float);
    operator float() const;
};
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4,
              PIPE_MTE5, PIPE_V2, PIPE_FIX };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6,
               EVENT_ID7 };
// docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md
#if !defined(__NPU_ARCH__) || __NPU_ARCH__ != 3510  // 3510's longer list: device_stubs_3510.h
enum QuantMode_t { NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8,
                   VREQ8 };
#endif
enum ub_addr8_t { VA0, VA1, VA2, VA3, VA4, VA5, VA6, VA7 };
enum vld_half_t { L128, H128 };
enum addr_cal_mode_t { inc, dec };
enum class mem_t : int {};
enum class mem_dsb_t : int {};
enum class atomic_op_t : int {};
enum class atomic_type_t : int {};
enum class cache_line_t { ENTIRE_DATA_CACHE, SINGLE_CACHE_LINE };
enum class dcci_dst_t { CACHELINE_ALL, CACHELINE_ATOMIC, CACHELINE_OUT, CACHELINE_UB };
enum class pad_t { PAD_NONE };
enum class Order_t { INDEX_VALUE, ONLY_INDEX, ONLY_VALUE, VALUE_INDEX };
// register types of the 3510 register API, declared by headers every arch includes
struct vector_bool {};
struct vector_align {};
struct vector_address {};
struct UnalignRegForLoad {};
struct UnalignRegForStore {};
struct AddrReg {};
namespace bisheng {
namespace cce {
template <class... A> void metrics_prof_start(A...);
template <class... A> void metrics_prof_stop(A...);
template <pipe_t P, class... A> void mark_stamp(A...);
}  // namespace cce
}  // namespace bisheng

// every device builtin: instructions return nothing; the builtins the headers use as values
// (addresses, counters, special registers) return an integer
#define TW_BUILTIN(name) \
    template <class... A> inline void name(A&&...) {}
#define TW_BUILTIN_VALUE(name) \
    template <class... A> inline int64_t name(A&&...) { return 0; }
#include "device_builtins.inc"
#if !defined(__NPU_ARCH__) || __NPU_ARCH__ != 3510
TW_BUILTIN(vsel)  // Select's (2201); 3510's register API declares its own (device_stubs_3510.h)
TW_BUILTIN(vnot)  // Not's (2201), likewise
#endif
#undef TW_BUILTIN
#undef TW_BUILTIN_VALUE

// impl/utils/debug/asc_aicore_dump_impl.h overloads asc_dump on the address space of its
// pointer; with the qualifiers empty those overloads collide, so that file is left out and the
// functions DumpTensor calls from it are declared here.
#define IMPL_UTILS_DEBUG_ASC_AICORE_DUMP_IMPL_H
namespace __asc_aicore {
void asc_dump_shape_impl(const uint32_t shapeDim, const uint32_t* shape);
#define TW_DUMP(name)                                                                         \
    template <typename T> void name(T* input, uint32_t desc, uint32_t dump_size);             \
    template <typename T>                                                                     \
    void name(T* input, uint32_t desc, uint32_t dump_size, const uint32_t* shape, uint32_t dim);
TW_DUMP(asc_dump_gm)
TW_DUMP(asc_dump_ubuf)
TW_DUMP(asc_dump_cbuf)
TW_DUMP(asc_dump_l1buf)
#undef TW_DUMP
}  // namespace __asc_aicore

#if defined(__NPU_ARCH__) && __NPU_ARCH__ == 3510
#include "device_stubs_3510.h"
#endif
