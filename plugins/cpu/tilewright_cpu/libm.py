"""Math functions TVM's LLVM target has no lowering for (``sinh``, ``cosh``, ``fmod``: "unknown
intrinsic" deep in its code generator), or lowers less precisely than libm (``atanh`` as half
the logarithm of a quotient, 4e-6 off in float32; ``exp10`` as ``exp(x ln 10)``, 5e-12 off in
float64), as calls of the C library's function for the value's type (``sinhf`` for float32,
``sinh`` for float64). Narrower floats reach this pass as float32 (``lowering_bfloat16``,
:mod:`tilewright.transform.narrow_float`)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

# TVM op -> libm's double-precision name (the float32 one ends in ``f``)
LIBM = {"tirx.sinh": "sinh", "tirx.cosh": "cosh", "tirx.fmod": "fmod", "tirx.atanh": "atanh",
        "tirx.exp10": "exp10"}
_SUFFIX = {"float32": "f", "float64": ""}


def lower_libm():
    """Each call of a :data:`LIBM` op on float32 or float64 values as the libm call."""

    def rewrite(call):
        if not isinstance(call.op, tvm.ir.Op):
            return call
        libm = LIBM.get(call.op.name)
        dtype = str(call.ty)
        if libm is None or dtype not in _SUFFIX:
            return call
        return tirx.call_pure_extern(dtype, libm + _SUFFIX[dtype], *call.args)

    return prim_func_pass("CPULibm", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))


def llvm_min_max(kind: str, a, b):
    """IEEE 754's maxNum / minNum of two float32 or float64 values: LLVM's ``llvm.maxnum`` /
    ``llvm.minnum`` (LangRef: a NaN operand gives the other one, NaN only when both are), one
    call, which the loop vectoriser widens; the language's NaN rule for ``T.max`` / ``T.min``
    (:mod:`tilewright.transform.float_min_max`) without binding the operands."""
    return tirx.call_llvm_pure_intrin(str(a.ty), f"llvm.{kind}num", a, b)
