"""Math functions on the vector path: those A2 has no instruction for written as float32
expressions of those it has (:data:`MATH`), and which of them the scalar unit lacks."""

from __future__ import annotations

import math
import struct

import tvm
import tvm_ffi
from tvm import tirx

from ..facts.instructions import ROUNDING_CASTS
from .tile_exprs import cast_to

# a math call -> the vector op that computes it (Exp, Ln, Abs, Sqrt, Rsqrt)
UNARY_CALLS = {"tirx.exp": "exp", "tirx.log": "ln", "tirx.fabs": "abs", "tirx.sqrt": "sqrt",
               "tirx.rsqrt": "rsqrt"}


def _f32(value: float):
    return tirx.const(value, "float32")


def _horner(t, coefficients):
    """c0 + t * (c1 + t * (c2 + ...)), as vector ops on the tile ``t``."""
    acc = _f32(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = _f32(c) + t * acc
    return acc


def _half_angle(x):
    """(sin h, cos h) of h = r / 2, r = x - 2 pi round(x / 2 pi) in [-pi, pi] (2 pi split in
    two constants, Cody-Waite: k * 6.28125 is exact, so the reduction loses little for
    moderate |x|): Taylor series of degrees 13 and 14 on [-pi/2, pi/2], each truncated below
    1e-9."""
    high = 6.28125  # 2 pi to 9 bits: k * high is exact
    k = tirx.round(x * _f32(1 / (2 * math.pi)))
    h = ((x - k * _f32(high)) - k * _f32(2 * math.pi - high)) * _f32(0.5)
    t = h * h
    sin_h = h * _horner(t, [(-1) ** n / math.factorial(2 * n + 1) for n in range(7)])
    cos_h = _horner(t, [(-1) ** n / math.factorial(2 * n) for n in range(8)])
    return sin_h, cos_h


def _sin(x):
    sin_h, cos_h = _half_angle(x)
    return _f32(2.0) * sin_h * cos_h


def _cos(x):
    sin_h, cos_h = _half_angle(x)
    return (cos_h - sin_h) * (cos_h + sin_h)  # relative errors of its factors: no 1 - 2 s^2


# Cephes tanhf: tanh x = x + x**3 P(x**2) for |x| <= 0.625
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)
_TANH_SPLIT = 0.625


def _tanh(x):
    """``tanh x`` without a select (A2's vector path has none): Cephes' odd polynomial ``s`` of
    ``x`` clamped to [-0.625, 0.625], ``b = sign(x) (1 - 2 / (e**2|x| + 1))`` (which cancels
    for small ``|x|``: 1.7e7 ulp off at 1e-8 alone), blended as ``s + w (b - s)`` with ``w`` 0 for
    ``|x| <= 0.625`` and 1 beyond; there ``b - s`` is exact (Sterbenz: ``b / s`` is within
    [1, 2]), so the sum is ``b``."""
    clamped = tirx.Min(tirx.Max(x, _f32(-_TANH_SPLIT)), _f32(_TANH_SPLIT))
    square = clamped * clamped
    poly = _f32(_TANH_P[0])
    for c in _TANH_P[1:]:
        poly = poly * square + _f32(c)
    small = clamped + clamped * square * poly
    magnitude = tirx.abs(x)
    # +-1 where the blend takes ``big`` (0.625 * float32(1.6) rounds to 1), finite for +-inf
    sign = clamped * _f32(1 / _TANH_SPLIT)
    big = sign * (_f32(1.0) - _f32(2.0) / (tirx.exp(magnitude * _f32(2.0)) + _f32(1.0)))
    step = tirx.Min(tirx.Max((magnitude - _f32(_TANH_SPLIT)) * _f32(2.0 ** 64), _f32(0.0)),
                    _f32(1.0))
    return small + step * (big - small)


# math functions A2 has no instruction for, as float32 expressions of those it has (a 16-bit
# argument is converted to float32 and the result back); each within a few float32 roundings
MATH = {
    "log2": lambda x: tirx.log(x) * _f32(1 / math.log(2.0)),
    "tanh": _tanh,
    "sin": _sin,
    "cos": _cos,
    **{name: lambda x, _n=name: getattr(tirx, _n)(x) for name in ROUNDING_CASTS},
}

# math functions A2 computes through another (exp2 as exp(x ln 2)) whose 16-bit argument is
# converted to float32 first: the language's 16-bit math is the float32 function rounded once
# (tilewright.transform.narrow_float), and x ln 2 rounded to float16 put exp2 two units in the
# last place off for x near 4
_ON_FLOAT32 = frozenset({"exp2"})


def math_name(e) -> str | None:
    if type(e).__name__ == "Call" and isinstance(e.op, tvm.ir.Op) and len(e.args) == 1:
        return str(e.op.name).split(".")[-1]
    return None


def expand_math(e):
    """``e`` with each math function of :data:`MATH` written with the instructions A2 has
    (a rounding function stays a call on float32: a Cast to an integral value)."""

    def expand(call):
        name = math_name(call)
        if name in _ON_FLOAT32 and str(call.ty) != "float32":
            wide = tvm.ir.Call(call.op, [cast_to(call.args[0], "float32")], ret_ty="float32",
                               span=call.span)
            return cast_to(wide, str(call.ty))
        if name not in MATH or (name in ROUNDING_CASTS and str(call.ty) == "float32"):
            return call
        dtype = str(call.ty)
        return cast_to(MATH[name](cast_to(call.args[0], "float32")), dtype)

    return tvm_ffi.structural_map(e, (tvm.ir.Call, expand))


def scalar_lacks(call) -> bool:
    """Whether ``call`` is a math function the vector path computes and the scalar unit does
    not (the printer's scalar calls are ``TW_FABS`` and ``TW_ISNAN``)."""
    name = str(call.op.name) if isinstance(call.op, tvm.ir.Op) else ""
    return name != "tirx.fabs" and (name in UNARY_CALLS or name == "tirx.exp2" or
                                    math_name(call) in MATH)


def lacking_math(stmt) -> bool:
    """Whether ``stmt`` calls a math function the scalar unit lacks."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if math_name(c)
                                   is not None and scalar_lacks(c) else None))
    return bool(found)


# math functions of a constant argument, computed when the kernel compiles (the scalar unit has
# none; a constant operand of a vector instruction is a scalar the program passes)
_CONSTANT = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2,
             "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x), "tanh": math.tanh,
             "sin": math.sin, "cos": math.cos, "fabs": abs, "floor": math.floor,
             "ceil": math.ceil, "trunc": math.trunc, "round": round,
             "nearbyint": round}


_ARITHMETIC = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b,
               "Mul": lambda a, b: a * b, "Div": lambda a, b: a / b, "Min": min, "Max": max}


def _rounded(value: float, dtype: str) -> float:
    """``value`` rounded to the nearest ``dtype`` (float16, bfloat16, float32; float64 as is)."""
    if dtype == "float16":
        return struct.unpack("<e", struct.pack("<e", value))[0]
    if dtype in ("float32", "bfloat16"):
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    if dtype == "bfloat16" and math.isfinite(value):
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # to nearest, ties to even
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
    return value


def _constant(e) -> float | None:
    """The value of a float expression of constants and math calls, each step rounded to its
    dtype; None when it reads anything else or a function fails on its argument."""
    kind, dtype = type(e).__name__, str(e.ty)
    if not dtype.startswith(("float", "bfloat")):
        return float(e.value) if kind == "IntImm" else None
    if kind == "FloatImm":
        return float(e.value)
    if kind == "Cast":
        inner = _constant(e.value)
    elif kind in _ARITHMETIC:
        a, b = _constant(e.a), _constant(e.b)
        inner = None if a is None or b is None else (a, b)
    elif math_name(e) in _CONSTANT:
        inner = _constant(e.args[0])
    else:
        return None
    if inner is None:
        return None
    try:
        if kind == "Cast":
            value = inner
        elif kind in _ARITHMETIC:
            value = _ARITHMETIC[kind](*inner)
        else:
            value = _CONSTANT[math_name(e)](inner)
        return _rounded(float(value), dtype)
    except (ValueError, OverflowError, ZeroDivisionError):
        return None


def fold_constant_math(node):
    """``node`` with each math call on a constant argument replaced by its value, computed in
    the call's dtype."""

    def fold(call):
        if math_name(call) not in _CONSTANT:
            return call
        value = _constant(call)
        return call if value is None else tirx.const(value, str(call.ty))

    return tvm_ffi.structural_map(node, (tvm.ir.Call, fold))
