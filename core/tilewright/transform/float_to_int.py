"""Conversions from a floating type to an integer type: one semantic on every backend.

``T.cast(x, "int8")`` of a floating ``x`` (any width: float64 to float8) rounds toward zero
and saturates at the integer type's bounds; NaN gives 0. That is PTX's ``cvt.rzi`` into an
integer of the destination's width (``cvt.rzi.s8.f16`` in CUDA's ``__half2char_rz``; the
``signed char``, ``short`` and ``int`` conversion operators of ``__half``,
``__nv_bfloat16`` and ``__nv_fp8_e4m3``/``__nv_fp8_e5m2``, cuda_fp16.hpp, cuda_bf16.hpp and
cuda_fp8.hpp, clamp and give 0 for NaN, on the device and the host alike). The targets
differ without it: C and LLVM leave an out-of-range conversion undefined (LLVM's
``fptosi`` gives poison; x86 gives the integer's minimum for int32 and the low bits of
that for narrower types), nvcc turns ``(signed char)f`` of a float32 into
``cvt.rzi.s32.f32`` and a byte store (the int32 saturated, then wrapped), and NumPy wraps.

Each backend applies :func:`saturating_float_to_int` before its own lowering, so the
conversion it lowers is only ever given a value in range: the selects below decide NaN and
the two bounds on the value widened exactly to float32 (float64 stays float64).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .walk import prim_func_pass

INTEGER = (tvm.runtime.DataTypeCode.INT, tvm.runtime.DataTypeCode.UINT)
NOT_FLOAT = (*INTEGER, tvm.runtime.DataTypeCode.BOOL, tvm.runtime.DataTypeCode.HANDLE)


def saturated(value, dtype: str):
    """``value`` (floating) converted to the integer ``dtype`` by the module's rule."""
    target = tvm.runtime.DataType(dtype)
    source = str(value.ty)
    wide = "float64" if tvm.runtime.DataType(source).bits == 64 else "float32"
    w = value if source == wide else tirx.Cast(wide, value)
    signed = target.type_code == tvm.runtime.DataTypeCode.INT
    bits = target.bits
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else (0, 2 ** bits)
    # powers of two (and 0): exact in float32 and float64
    converted = tirx.Select(
        w >= tirx.const(float(high), wide), tirx.max_value(dtype),
        tirx.Select(w <= tirx.const(float(low), wide), tirx.min_value(dtype),
                    tirx.Cast(dtype, w)))
    return tirx.Select(tirx.isnan(w), tirx.const(0, dtype), converted)


def rewrite(expr_root):
    """``expr_root`` with each scalar conversion from a floating type to an integer type
    made :func:`saturated`."""

    def visit(cast):
        target, source = tvm.runtime.DataType(str(cast.ty)), str(cast.value.ty)
        if target.type_code not in INTEGER or target.lanes != 1 or \
                tvm.runtime.DataType(source).type_code in NOT_FLOAT:
            return cast
        return saturated(cast.value, str(cast.ty))

    return tvm_ffi.structural_map(expr_root, (tirx.Cast, visit))


def saturating_float_to_int(name: str):
    """A pass that makes every conversion from a floating type to an integer type follow
    the module's rule; ``name`` names it."""
    return prim_func_pass(name, lambda func: func.with_body(rewrite(func.body)))
