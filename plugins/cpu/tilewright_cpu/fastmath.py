"""Vectorisable float32 ``exp`` and ``exp2`` for the CPU backend.

LLVM lowers a vector ``exp`` to one libm call per lane. Instead, ``2**x`` is split into
``2**n * 2**f`` with ``n = round(x)`` and ``|f| <= 0.5``: ``2**f`` is a degree-6 polynomial
(Cephes ``exp2f`` coefficients, relative error below 2e-7) and ``2**n`` is built in the exponent
bits. Inputs are clamped to [-127, 128] so that -inf gives 0 and large inputs give inf, as the
attention kernels expect. It is on unless the pass configs ask for precise math:
``cpu.precise_math``, or TileLang's ``TL_ENABLE_FAST_MATH=False`` / ``TL_DISABLE_FAST_MATH``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.engine.passconfig import fast_math
from tilewright.errors import ConfigError
from tilewright.transform import prim_func_pass
from tvm import tirx

LOG2E = 1.4426950408889634
_P = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3,
      5.550332471162809e-2, 2.402264791363012e-1, 6.931472028550421e-1)


def _f32(v: float):
    return tirx.const(v, "float32")


def exp2_f32(x):
    x = tirx.Min(tirx.Max(x, _f32(-127.0)), _f32(128.0))
    n = tirx.round(x)
    f = x - n
    poly = _f32(_P[0])
    for c in _P[1:]:
        poly = poly * f + _f32(c)
    frac = poly * f + _f32(1.0)
    bits = tirx.shift_left(tirx.Cast("int32", n) + tirx.const(127, "int32"),
                           tirx.const(23, "int32"))
    return frac * tirx.reinterpret("float32", bits)


def wanted(configs: dict) -> bool:
    """Whether the polynomial ``exp`` is used for these validated pass configs."""
    fast, precise = fast_math(configs), configs.get("cpu.precise_math", False)
    if fast and precise:
        raise ConfigError("pass_configs ask for fast math (TL_ENABLE_FAST_MATH) and for "
                          "cpu.precise_math; keep one")
    return not precise if fast is None else fast


def lower_fast_math():
    exp, exp2 = tvm.ir.Op.get("tirx.exp"), tvm.ir.Op.get("tirx.exp2")

    def rewrite(call):
        if not isinstance(call.op, tvm.ir.Op) or len(call.args) != 1 or \
                str(call.args[0].ty) != "float32":
            return call
        if call.op.same_as(exp2):
            return exp2_f32(call.args[0])
        if call.op.same_as(exp):
            return exp2_f32(call.args[0] * _f32(LOG2E))
        return call

    return prim_func_pass("CPUFastMath", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))
