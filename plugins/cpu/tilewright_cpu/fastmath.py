"""Vectorisable float32 ``exp`` and ``exp2`` for the CPU backend, and fast math: a faster
``exp``/``exp2`` and division by a loop-invariant float32 as a multiplication by its reciprocal.

LLVM lowers a vector ``exp`` to one libm call per lane, which makes a softmax or an attention
kernel several times slower than torch's vectorised one. So float32 ``exp`` and ``exp2`` are
rewritten as arithmetic LLVM vectorises (unless ``cpu.precise_math`` asks for libm's). Without
fast math it is Cody-Waite's range reduction ``x = n ln2 + r`` (ln2 in two parts, so that
``r`` is exact; for ``exp2``, ``r = (x - n) ln2``), Cephes' ``expf`` polynomial for ``e**r``
and ``2**n`` applied in two halves (so that results in the subnormal range round once, as
libm's do); NaN stays NaN, -inf gives 0, overflow gives inf. It is within 2 units in the last
place of the exact value over the whole float32 range (CUDA's ``expf`` bound; measured by the
tests against float64, below 1 ulp), where libm is within 1.

With fast math, ``2**x`` is split into
``2**n * 2**f`` with ``n = round(x)`` and ``|f| <= 0.5``: ``2**f`` is a degree-6 polynomial
(Cephes ``exp2f`` coefficients, relative error below 2e-7) and ``2**n`` is built in the exponent
bits; ``exp(x)`` is ``2**(x log2 e)``, up to 64 ulp off for large ``x`` (the product rounded to
float32), as CUDA's fast-math ``__expf`` is. Inputs are clamped to [-127, 128] so that -inf
gives 0 and large inputs give inf, as the attention kernels expect. Inside a loop, ``x / y``
with a float32 ``y`` that the loop does not change (a row sum, a norm) becomes
``x * (1 / y)``, which LLVM hoists out of the loop: a vector division costs several times a
multiplication, and the result differs from the quotient by at most one unit in the last place
more (as CUDA's fast-math division does).

Fast math is off unless the pass configs ask for it with TileLang's
``TL_ENABLE_FAST_MATH=True`` (or ``TL_DISABLE_FAST_MATH=False``), as in TileLang, whose default
is precise math: IEEE division. ``cpu.precise_math`` (libm's ``exp``) is refused beside
``TL_ENABLE_FAST_MATH=True``. Neither touches the contraction of ``a * b + c`` into fused
multiply-adds (TVM's LLVM target's own setting, the same in both).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import ConfigError
from tilewright.plugin.passconfig import fast_math
from tilewright.transform import prim_func_pass
from tvm import tirx

LOG2E = 1.4426950408889634
_P = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3,
      5.550332471162809e-2, 2.402264791363012e-1, 6.931472028550421e-1)


def _f32(v: float):
    return tirx.const(v, "float32")


def _power_of_two(k):
    """``2**k`` for an int32 ``k`` in [-126, 127], built in the exponent bits."""
    return tirx.reinterpret("float32", tirx.shift_left(k + tirx.const(127, "int32"),
                                                        tirx.const(23, "int32")))


def exp2_f32(x):
    x = tirx.Min(tirx.Max(x, _f32(-127.0)), _f32(128.0))
    n = tirx.round(x)
    f = x - n
    poly = _f32(_P[0])
    for c in _P[1:]:
        poly = poly * f + _f32(c)
    frac = poly * f + _f32(1.0)
    return frac * _power_of_two(tirx.Cast("int32", n))


_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4  # ln 2 = high + low; n * high is exact
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)  # Cephes expf: e**r = 1 + r + r*r * P(r)


def _let(name: str, value, body):
    """``body(v)`` with ``v`` bound to ``value`` once: each value below is used several times,
    and repeated as a tree the expression grows with every use (LLVM then re-vectorised the
    scalarised result with lane shuffles)."""
    var = tirx.Var(name, str(value.ty))
    return tirx.Let(var, value, body(var))


def exp_f32(x, *, base2: bool = False):
    """``e**x`` (``2**x`` with ``base2``) in float32 arithmetic within 2 ulp (see the module's
    docstring)."""

    def from_r(n, r):
        poly = _f32(_EXP_P[0])
        for c in _EXP_P[1:]:
            poly = poly * r + _f32(c)
        value = poly * (r * r) + r + _f32(1.0)
        whole = tirx.Cast("int32", n)
        half = tirx.shift_right(whole, tirx.const(1, "int32"))
        return value * _power_of_two(half) * _power_of_two(whole - half)

    def from_clamped(clamped):
        return _let("exp_n", tirx.round(clamped if base2 else clamped * _f32(LOG2E)),
                    lambda n: _let("exp_r", (clamped - n) * _f32(0.6931471805599453) if base2
                                   else clamped - n * _f32(_LN2_HIGH) - n * _f32(_LN2_LOW),
                                   lambda r: from_r(n, r)))

    # the bound first: TVM emits max(a, b) as ``a > b ? a : b``, which gives ``b`` -- a NaN
    # ``x`` -- when either is NaN, so NaN runs through to the result (a select on isnan(x)
    # instead made TVM scalarise the whole vector loop)
    low, high = _f32(-152.0 if base2 else -104.0), _f32(129.0 if base2 else 89.0)
    return _let("exp_clamped", tirx.Min(high, tirx.Max(low, x)), from_clamped)


# Cephes tanhf: tanh x = x + x**3 P(x**2) for |x| <= 0.625
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)


def tanh_f32(x):
    """``tanh x`` in float32 arithmetic within a few ulp: Cephes' odd polynomial where
    ``|x| <= 0.625``, else ``1 - 2 / (e**(2|x|) + 1)`` (:func:`exp_f32`) with the sign of
    ``x``. TVM's own expansion for LLVM, ``(1 - e**(-2x)) / (1 + e**(-2x))``, cancels for
    small ``|x|`` (tanh 1.5e-8 off by 1.7e7 ulp, the median of 1e-8..10 by 194)."""

    def of(v):
        magnitude = tirx.abs(v)
        square = v * v
        poly = _f32(_TANH_P[0])
        for c in _TANH_P[1:]:
            poly = poly * square + _f32(c)
        small = tirx.Select(v == _f32(0.0), v, poly * square * v + v)  # tanh -0 is -0
        large = _f32(1.0) - _f32(2.0) / (exp_f32(magnitude * _f32(2.0)) + _f32(1.0))
        return tirx.Select(magnitude <= _f32(0.625), small,
                           tirx.Select(v < _f32(0.0), _f32(0.0) - large, large))

    return _let("tanh_x", x, of)


def lower_tanh():
    """Float32 ``tanh`` as :func:`tanh_f32`, in every math mode."""
    tanh = tvm.ir.Op.get("tirx.tanh")

    def rewrite(call):
        if isinstance(call.op, tvm.ir.Op) and call.op.same_as(tanh) and \
                str(call.args[0].ty) == "float32":
            return tanh_f32(call.args[0])
        return call

    return prim_func_pass("CPUTanh", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))


def wanted(configs: dict) -> bool:
    """Whether fast math (the polynomial ``exp``, reciprocal division) is used for these
    validated pass configs: only when they ask for it."""
    fast, precise = fast_math(configs), configs.get("cpu.precise_math", False)
    if fast and precise:
        raise ConfigError("pass_configs ask for fast math (TL_ENABLE_FAST_MATH) and for "
                          "cpu.precise_math; keep one")
    return bool(fast)


def passes(configs: dict) -> list:
    """The math passes for these validated pass configs: fast math when they ask for it; else
    the vector ``exp`` within 2 ulp, unless ``cpu.precise_math`` asks for libm's."""
    if wanted(configs):
        return [lower_fast_math()]
    return [] if configs.get("cpu.precise_math", False) else [lower_exp()]


def _float32_exps(of_exp, of_exp2):
    """A rewrite of calls: float32 ``exp(x)`` becomes ``of_exp(x)``, ``exp2(x)``
    ``of_exp2(x)``; other calls stay."""
    exp, exp2 = tvm.ir.Op.get("tirx.exp"), tvm.ir.Op.get("tirx.exp2")

    def rewrite(call):
        if not isinstance(call.op, tvm.ir.Op) or len(call.args) != 1 or \
                str(call.args[0].ty) != "float32":
            return call
        if call.op.same_as(exp):
            return of_exp(call.args[0])
        if call.op.same_as(exp2):
            return of_exp2(call.args[0])
        return call

    return rewrite


def lower_fast_math():
    """Fast math: the polynomial ``exp``/``exp2`` and invariant divisions as reciprocals."""
    rewrite = _float32_exps(lambda x: exp2_f32(x * _f32(LOG2E)), exp2_f32)
    return prim_func_pass("CPUFastMath", lambda f: f.with_body(_reciprocals(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite)))))


def lower_exp():
    """Float32 ``exp`` and ``exp2`` as :func:`exp_f32` (without fast math)."""
    rewrite = _float32_exps(exp_f32, lambda x: exp_f32(x, base2=True))
    return prim_func_pass("CPUVectorExp", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))


def _uses(node, pred) -> bool:
    found = []
    tvm_ffi.structural_walk(node, [(tirx.Var, lambda v: found.append(v) if pred(v) else None),
                                   (tvm.ir.TensorLoad, lambda n: found.append(n)
                                    if pred(n.source) else None)])
    return bool(found)


def _reciprocals(body):
    """``x / y`` in a loop whose variable and stored buffers ``y`` does not use, with ``y`` a
    float32, becomes ``x * (1 / y)``."""

    def loop(stmt):
        stored = set()
        tvm_ffi.structural_walk(stmt.body, (tirx.BufferStore, lambda s: stored.add(s.buffer)))

        def invariant(y) -> bool:
            return not _uses(y, lambda v: v.same_as(stmt.loop_var) or any(
                v.same_as(b) for b in stored))

        def divide(node):
            if str(node.ty) != "float32" or not invariant(node.b):
                return node
            return node.a * (_f32(1.0) / node.b)

        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                        tvm_ffi.structural_map(stmt.body, (tirx.Div, divide)),
                        thread_binding=stmt.thread_binding, annotations=stmt.annotations,
                        span=stmt.span)

    return tvm_ffi.structural_map(body, (tirx.For, loop))
