"""The register-level instructions of ``T.simd`` (``T.SimdVF``, target ``ascend-950``) and the
arch-3510 register API that runs them: the basic API's ``AscendC::Reg`` namespace
(``include/basic_api/reg_compute/``, implemented for 3510 in
``impl/basic_api/reg_compute/dav_3510/``), used inside a vector function (``__simd_vf__``,
started with ``asc_vf_call`` of ``include/basic_api/kernel_common.h``).

:data:`REGISTER_OPS` is the one table: a ``T.simd`` instruction (its IR name) -> the vendor
function, the template arguments the generated call gives it, its declaration in the header
named, the form of its call and the element types it takes. Registers are
``Reg::RegTensor<T>`` (256 bytes: :data:`REGISTER_BYTES`), masks ``Reg::MaskReg`` made by
``Reg::CreateMask<T, Reg::MaskPattern::ALL>()`` (every lane of ``T``) or, for the first
``count`` lanes (a tail), by ``Reg::UpdateMask<T>(count)`` (the ``pset.count`` row: ``plt`` in
``impl/basic_api/reg_compute/dav_3510/kernel_reg_compute_maskreg_impl.h``, lane ``i`` active
where ``i < count``; it also lowers ``count`` by the lanes of ``T``, which the generated code
does not use again).
"""

from __future__ import annotations

from dataclasses import dataclass

from .arch import ARCHS

REGISTER_BYTES = ARCHS["ascend-950"].vector_bits // 8
_H = "include/basic_api/reg_compute/"
DATACOPY = _H + "kernel_reg_compute_datacopy_intf.h"
BINARY = _H + "kernel_reg_compute_vec_binary_intf.h"
UNARY = _H + "kernel_reg_compute_vec_unary_intf.h"
SCALAR = _H + "kernel_reg_compute_vec_binary_scalar_intf.h"
REDUCE = _H + "kernel_reg_compute_vec_reduce_intf.h"
DUPLICATE = _H + "kernel_reg_compute_vec_duplicate_intf.h"
CONVERT = _H + "kernel_reg_compute_vec_vconv_intf.h"
MASK = _H + "kernel_reg_compute_maskreg_intf.h"
MEMBAR = _H + "kernel_reg_compute_membar_intf.h"
VF_CALL = "include/basic_api/kernel_common.h"
FLOATS = frozenset({"float16", "float32"})
NUMBERS = frozenset({"float16", "float32", "int16", "int32", "uint16", "uint32", "int8",
                     "uint8", "bfloat16"})


@dataclass(frozen=True)
class RegisterOp:
    """One register instruction: ``Reg::<function><template>(args)``.

    ``form`` says which arguments the call takes: ``load`` (dst, UB address), ``store`` (UB
    address, src, mask), ``binary`` (dst, src0, src1, mask), ``unary`` and ``reduce`` and
    ``lane0`` (dst, src, mask), ``scalar`` (dst, src, scalar, mask), ``fill`` (dst, scalar,
    mask), ``convert`` (dst, src, mask; the template names a ``Reg::CastTrait`` of the
    generated file, see :data:`CAST_TRAITS`)."""

    form: str  # also ``mask`` (a mask register of the first ``scalar`` lanes)
    function: str
    template: str
    declaration: str
    header: str
    dtypes: frozenset = NUMBERS


def _op(form, function, declaration, header, template="", dtypes=NUMBERS):
    return RegisterOp(form, function, template, declaration, header, dtypes)


_BIN = "template <typename T, MaskMergeMode mode, typename U> void {f}(U& dstReg, U& srcReg0, " \
       "U& srcReg1, MaskReg& mask)"
_UN = "template <typename T, auto mode, typename U> void {f}(U& dstReg, U& srcReg, " \
      "MaskReg& mask)"
_SCA = "template <typename T, typename U, MaskMergeMode mode, typename S> void {f}(S& dstReg, " \
       "S& srcReg, U scalarValue, MaskReg& mask)"
_RED = "template <ReduceType type, typename T, typename U, MaskMergeMode mode, typename S, " \
       "typename V> void Reduce(S& dstReg, V srcReg, MaskReg mask)"
_CVT = "template <typename T, typename U, const CastTrait& trait, typename S, typename V> " \
       "void Cast(S& dstReg, V& srcReg, MaskReg& mask)"

_LOAD = "template <typename T, LoadDist dist, typename U> void LoadAlign(U& dstReg, " \
        "__ubuf__ T* srcAddr)"
_STORE = "template <typename T, StoreDist dist, typename U> void StoreAlign(__ubuf__ T* " \
         "dstAddr, U& srcReg, MaskReg& mask)"
_16BIT = frozenset({"float16", "bfloat16", "int16", "uint16"})

REGISTER_OPS = {
    # a mask of the first count lanes (count taken at the instruction)
    "pset.count": _op("mask", "UpdateMask", "template <typename T, const RegTrait& regTrait> "
                      "MaskReg UpdateMask(uint32_t& scalarValue)", MASK, "{T}"),
    "vld": _op("load", "LoadAlign", _LOAD, DATACOPY),
    # 16-bit elements into the even lanes (each zero-extended into its 32-bit slot)
    "vld.unpack": _op("load", "LoadAlign", _LOAD, DATACOPY,
                      "{T}, Reg::LoadDist::DIST_UNPACK_B16", _16BIT),
    "vsts": _op("store", "StoreAlign", _STORE, DATACOPY),
    # the low 16 bits of each 32-bit slot (the even lanes of a 16-bit register), packed
    "vsts.pack": _op("store", "StoreAlign", _STORE, DATACOPY,
                     "{T}, Reg::StoreDist::DIST_PACK_B32", _16BIT),
    "vdup": _op("fill", "Duplicate", "template <typename T, MaskMergeMode mode, typename U, "
                "typename S> void Duplicate(S& dstReg, U scalarValue, MaskReg& mask)",
                DUPLICATE),
    # lane 0 (HighLowPart::LOWEST, the default) in every lane
    "vdup.lane0": _op("lane0", "Duplicate", "template <typename T, HighLowPart pos, "
                      "MaskMergeMode mode, typename S> void Duplicate(S& dstReg, S& srcReg, "
                      "MaskReg& mask)", DUPLICATE),
    "vadd": _op("binary", "Add", _BIN.format(f="Add"), BINARY),
    "vsub": _op("binary", "Sub", _BIN.format(f="Sub"), BINARY),
    "vmul": _op("binary", "Mul", _BIN.format(f="Mul"), BINARY),
    "vdiv": _op("binary", "Div", "template <typename T, auto mode, typename U> void Div(U& "
                "dstReg, U& srcReg0, U& srcReg1, MaskReg& mask)", BINARY),
    "vmax": _op("binary", "Max", _BIN.format(f="Max"), BINARY),
    "vmin": _op("binary", "Min", _BIN.format(f="Min"), BINARY),
    "vexp": _op("unary", "Exp", _UN.format(f="Exp"), UNARY, dtypes=FLOATS),
    "vln": _op("unary", "Ln", _UN.format(f="Ln"), UNARY, dtypes=FLOATS),
    "vsqrt": _op("unary", "Sqrt", _UN.format(f="Sqrt"), UNARY, dtypes=FLOATS),
    "vabs": _op("unary", "Abs", "template <typename T, MaskMergeMode mode, typename U> void "
                "Abs(U& dstReg, U& srcReg, MaskReg& mask)", UNARY),
    "vrelu": _op("unary", "Relu", "template <typename T, MaskMergeMode mode, typename U> void "
                 "Relu(U& dstReg, U& srcReg, MaskReg& mask)", UNARY),
    "vadds": _op("scalar", "Adds", _SCA.format(f="Adds"), SCALAR),
    "vmuls": _op("scalar", "Muls", _SCA.format(f="Muls"), SCALAR),
    "vmaxs": _op("scalar", "Maxs", _SCA.format(f="Maxs"), SCALAR),
    "vmins": _op("scalar", "Mins", _SCA.format(f="Mins"), SCALAR),
    # the lanes into lane 0, the other lanes zero (MaskMergeMode::ZEROING)
    "vcadd": _op("reduce", "Reduce", _RED, REDUCE, "ReduceType::SUM"),
    "vcmax": _op("reduce", "Reduce", _RED, REDUCE, "ReduceType::MAX"),
    "vcmin": _op("reduce", "Reduce", _RED, REDUCE, "ReduceType::MIN"),
    # float16/bfloat16 <-> float32 through the even (RegLayout::ZERO) or odd (ONE) lanes of
    # the 16-bit register; narrowing rounds to nearest even (RoundMode::CAST_RINT)
    "vcvt.even": _op("convert", "Cast", _CVT, CONVERT, "{T}, {S}, {trait}",
                     frozenset({"float16", "bfloat16", "float32"})),
    "vcvt.odd": _op("convert", "Cast", _CVT, CONVERT, "{T}, {S}, {trait}",
                    frozenset({"float16", "bfloat16", "float32"})),
}

# the CastTrait constants a generated file defines for vcvt: (widen or narrow, part) -> name
# and initialiser (layout, saturation, merge mode, rounding), as the vendor's CastTrait
# (include/basic_api/reg_compute/kernel_reg_compute_utils.h) orders its fields
CAST_TRAITS = {
    ("widen", "even"): ("tw_widen_even", "Reg::RegLayout::ZERO, Reg::SatMode::UNKNOWN, "
                        "Reg::MaskMergeMode::ZEROING, RoundMode::UNKNOWN"),
    ("widen", "odd"): ("tw_widen_odd", "Reg::RegLayout::ONE, Reg::SatMode::UNKNOWN, "
                       "Reg::MaskMergeMode::ZEROING, RoundMode::UNKNOWN"),
    ("narrow", "even"): ("tw_narrow_even", "Reg::RegLayout::ZERO, Reg::SatMode::NO_SAT, "
                         "Reg::MaskMergeMode::ZEROING, RoundMode::CAST_RINT"),
    ("narrow", "odd"): ("tw_narrow_odd", "Reg::RegLayout::ONE, Reg::SatMode::NO_SAT, "
                        "Reg::MaskMergeMode::ZEROING, RoundMode::CAST_RINT"),
}
# the mask of every lane of T (MASK); the order of a vector function's earlier UB accesses of
# one kind before its later ones of another (MEMBAR: VEC_STORE -> VEC_LOAD, VEC_LOAD ->
# VEC_STORE, VEC_STORE -> VEC_STORE are among the pairs LocalMemBar takes); the call that
# starts a vector function (VF_CALL)
CREATE_MASK = "Reg::CreateMask<{T}, Reg::MaskPattern::ALL>()"
MEMORY_BARRIER = "Reg::LocalMemBar<Reg::MemType::{before}, Reg::MemType::{after}>();"
VF_ATTRIBUTE = "__simd_vf__"
VF_LAUNCH = "asc_vf_call"

