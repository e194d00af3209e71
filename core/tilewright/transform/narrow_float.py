"""Arithmetic and math functions on narrow floats, one rounding per operation.

The language's semantic for arithmetic on a narrow floating type (float8_e4m3fn, float8_e5m2,
bfloat16, float16): each operation computes the exact result rounded to its type (nearest
even; float8_e4m3fn saturating at +-448), as CUDA's ``__hmul``/``__hadd`` and its fp8
conversions do, and as TileLang's generated CUDA does. Computing in float32 and rounding the
result is the same thing: float32 has more than twice the precision of each narrow type plus
two bits, so rounding twice (to float32, then to the narrow type) gives the correctly rounded
result of ``+ - * /``. Comparisons, ``min`` and ``max`` are exact on the float32 values.

A math function (:data:`MATH`: ``exp``, ``log``, ``sqrt``, ``tanh``, ``floor``, ``fabs``
...) of narrow operands is the float32 function of the widened operands, rounded to the type
once, as CUDA's ``hexp``/``hlog``/``hsqrt``/``htanh`` of ``__nv_bfloat16`` and ``__half``
are (cuda_bf16.hpp: widen with ``__bfloat162float``, the float32 function, then
``__float2bfloat16_rn``) and as TileLang's 16-bit fast-math overloads are; the result is the
float32 function's, so it differs between backends only by that function's own ulp error,
which the rounding to a narrow type hides except next to a tie. Composed functions
(``T.sigmoid``, ``T.rsqrt`` = ``1 / sqrt``) round after each of their operations.

A backend whose target has no arithmetic of its own in such a type applies :func:`rewrite`
or :func:`narrow_float_arithmetic` before lowering the type's conversions: the CPU for bfloat16
and float8 (its bfloat16 rounding in integer code, since TVM's BF16ComputeLegalize drops a
conversion between operations) and for float16's math functions (TVM expands ``tanh`` for
LLVM in float16 arithmetic), CUDA for float8 (its ``hexp`` & co. of bfloat16 and float16
follow the rule already) and for the functions its half headers lack, the interpreter for
bfloat16 and float8.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .lanes import binary, by_lane, gathered, lane, lanes_of
from .walk import prim_func_pass

ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
COMPARISONS = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)
# The math functions whose operands and result have one floating type: each TVM op, by the
# name it is registered under (TVM 0.27 registers log2 and ceil as ``prim.``)
MATH = frozenset(tvm.ir.Op.get(name) for name in (
    "tirx.exp", "tirx.exp2", "tirx.exp10", "tirx.log", "prim.log2", "tirx.log10", "tirx.log1p",
    "tirx.sqrt", "tirx.rsqrt", "tirx.sin", "tirx.cos", "tirx.tan", "tirx.sinh", "tirx.cosh",
    "tirx.tanh", "tirx.asin", "tirx.acos", "tirx.atan", "tirx.asinh", "tirx.acosh",
    "tirx.atanh", "tirx.erf", "tirx.sigmoid", "tirx.floor", "prim.ceil", "tirx.round",
    "tirx.nearbyint", "tirx.trunc", "tirx.fabs", "tirx.pow", "tirx.atan2", "tirx.fmod",
    "tirx.hypot", "tirx.copysign"))


def rewrite(expr_root, dtypes: frozenset, compute: str = "float32", narrowed=tirx.Cast,
            arithmetic: bool = True, math: frozenset = MATH, by_lanes: bool = False):
    """``expr_root`` (a statement or expression) with each arithmetic operation, comparison
    and ``math`` call (default :data:`MATH`) on values of one of ``dtypes`` made on
    ``compute`` values, an arithmetic or math result converted back to its type by
    ``narrowed(dtype, value)`` (a conversion unless a backend whose legalisation drops
    conversions between operations gives its own rounding). Without ``arithmetic`` only the
    math calls: for a type whose arithmetic the target rounds per operation itself; a part of
    :data:`MATH` as ``math``: for a target that has the other functions in the type. A vector
    of one of ``dtypes`` (``bfloat16x2``) is computed on ``compute`` values of its lanes
    (``float32x2``), or with ``by_lanes`` one lane at a time, its conversions to and from other
    types too (:mod:`.lanes`): for a ``narrowed`` or a legalisation that takes scalars only."""

    def element(ty) -> str:
        return str(tvm.runtime.DataType(str(ty.dtype)).with_lanes(1))

    def rewritten(ty) -> bool:
        """Whether values of ``ty`` (a scalar, or a vector lane by lane) are rewritten."""
        return isinstance(ty, tvm.ir.PrimType) and element(ty) in dtypes

    def wide(ty) -> str:
        """``compute`` with the lanes of ``ty``."""
        return str(tvm.runtime.DataType(compute).with_lanes(lanes_of(ty)))

    def widened(value):
        return tirx.Cast(wide(value.ty), value)

    def visit(node):
        if not rewritten(node.a.ty):
            return node
        same = type(node)(widened(node.a), widened(node.b))
        return same if isinstance(node, COMPARISONS) else narrowed(str(node.a.ty), same)

    def call(node):
        if not rewritten(node.ty) or node.op not in math:
            return node
        return narrowed(str(node.ty), tvm.ir.Call(node.op, [widened(a) for a in node.args],
                                                  ret_ty=wide(node.ty), span=node.span))

    def conversion(node):  # by_lanes: a vector's conversion to or from one of dtypes
        if lanes_of(node.ty) == 1 or not (rewritten(node.ty) or rewritten(node.value.ty)):
            return node
        return gathered([tirx.Cast(element(node.ty), lane(node.value, k))
                         for k in range(lanes_of(node.ty))])

    def lane_call(node, k):
        return tvm.ir.Call(node.op, [lane(a, k) for a in node.args],
                           ret_ty=element(node.ty), span=node.span)

    def each(rule, rebuild, applies):
        return by_lane(rule, rebuild, applies) if by_lanes else rule

    rules = [(tvm.ir.Call, each(call, lane_call,
                                lambda node: rewritten(node.ty) and node.op in math))]
    if arithmetic:
        rules.append((ARITHMETIC + COMPARISONS, each(visit, binary,
                                                     lambda node: rewritten(node.a.ty))))
    if by_lanes:
        rules.append((tirx.Cast, conversion))
    return tvm_ffi.structural_map(expr_root, rules)


def narrow_float_arithmetic(dtypes, name: str, compute: str = "float32"):
    """A pass that makes every arithmetic operation and math call on ``dtypes`` a ``compute``
    one followed by a conversion to its type (see the module's docstring); ``name`` names it."""
    wanted = frozenset(dtypes)
    return prim_func_pass(name, lambda func: func.with_body(rewrite(func.body, wanted,
                                                                   compute)))
