"""Vectorisable float32 ``exp`` and ``exp2`` within 2 units in the last place: the CPU
backend's precise math (without ``TL_ENABLE_FAST_MATH``).

LLVM lowers a vector ``exp`` to one libm call per lane, which makes a softmax or an attention
kernel several times slower than its vector arithmetic. Instead, ``exp(x)`` is ``2**n * e**r``
with ``n = round(x / ln 2)`` and ``r = x - n * ln 2``, ``ln 2`` split in two constants
(Cody and Waite) so that ``r`` is exact to float32 rounding, ``|r| <= ln 2 / 2``, and
``e**r`` a degree-7 polynomial (Cephes ``expf``'s coefficients); ``2**n`` is built in the
exponent bits in two factors, so that results in the subnormal range are kept rather than
flushed. The error is within 2 ulp over float32's range (CUDA's ``expf`` without fast math
promises 2 ulp; libm's is below 1): measured against float64 in
``tests/test_pass_config_names.py``. NaN stays NaN, ``-inf`` gives 0, large inputs ``inf``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits
_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
      5.0000001201e-1)


def _f32(v: float):
    return tirx.const(v, "float32")


def _pow2(n):
    """``2**n`` as a float32 for an int32 ``n`` in [-126, 127]."""
    return tirx.reinterpret("float32", tirx.shift_left(n + tirx.const(127, "int32"),
                                                       tirx.const(23, "int32")))


def exp_f32(x, *, base2: bool = False):
    """``e**x`` (``2**x`` with ``base2``) of a float32 expression, vectorisable."""
    clamped = tirx.Min(tirx.Max(x, _f32(-152.0 if base2 else -105.0)),
                       _f32(129.0 if base2 else 89.0))
    n = tirx.round(clamped if base2 else clamped * _f32(LOG2E))
    r = (clamped - n) * _f32(0.6931471805599453) if base2 else \
        clamped - n * _f32(LN2_HI) - n * _f32(LN2_LO)
    poly = _f32(_P[0])
    for c in _P[1:]:
        poly = poly * r + _f32(c)
    e_r = poly * (r * r) + r + _f32(1.0)
    k = tirx.Cast("int32", n)
    half = tirx.shift_right(k, tirx.const(1, "int32"))  # k in [-152, 129]: normal factors
    value = e_r * _pow2(half) * _pow2(k - half)
    return tirx.Select(tirx.isnan(x), x, value)


def lower_exp():
    """The pass: float32 ``exp`` and ``exp2`` calls become :func:`exp_f32`."""
    exp, exp2 = tvm.ir.Op.get("tirx.exp"), tvm.ir.Op.get("tirx.exp2")

    def rewrite(call):
        if not isinstance(call.op, tvm.ir.Op) or len(call.args) != 1 or \
                str(call.args[0].ty) != "float32":
            return call
        if call.op.same_as(exp):
            return exp_f32(call.args[0])
        if call.op.same_as(exp2):
            return exp_f32(call.args[0], base2=True)
        return call

    return prim_func_pass("CPUVectorExp", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))
