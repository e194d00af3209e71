"""Arithmetic on narrow floats, one rounding per operation.

The language's semantic for arithmetic on a narrow floating type (float8_e4m3fn, float8_e5m2,
bfloat16, float16): each operation computes the exact result rounded to its type (nearest
even; float8_e4m3fn saturating at +-448), as CUDA's ``__hmul``/``__hadd`` and its fp8
conversions do, and as TileLang's generated CUDA does. Computing in float32 and rounding the
result is the same thing: float32 has more than twice the precision of each narrow type plus
two bits, so rounding twice (to float32, then to the narrow type) gives the correctly rounded
result of ``+ - * /``. Comparisons, ``min`` and ``max`` are exact on the float32 values.

A backend whose target has no arithmetic of its own in such a type applies :func:`rewrite`
or :func:`narrow_float_arithmetic` before lowering the type's conversions: the CPU for bfloat16
and float8 (its bfloat16 rounding in integer code, since TVM's BF16ComputeLegalize drops a
conversion between operations), CUDA for float8, the interpreter for bfloat16 and float8.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from .walk import prim_func_pass

ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
COMPARISONS = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def rewrite(expr_root, dtypes: frozenset, compute: str = "float32", narrowed=tirx.Cast):
    """``expr_root`` (a statement or expression) with each arithmetic operation and comparison
    on values of one of ``dtypes`` made on ``compute`` values, an arithmetic result converted
    back to its type by ``narrowed(dtype, value)`` (a conversion unless a backend whose
    legalisation drops conversions between operations gives its own rounding)."""

    def widened(value):
        return tirx.Cast(compute, value)

    def visit(node):
        dtype = str(node.a.ty)
        if dtype not in dtypes:
            return node
        same = type(node)(widened(node.a), widened(node.b))
        return same if isinstance(node, COMPARISONS) else narrowed(dtype, same)

    return tvm_ffi.structural_map(expr_root, (ARITHMETIC + COMPARISONS, visit))


def narrow_float_arithmetic(dtypes, name: str, compute: str = "float32"):
    """A pass that makes every arithmetic operation on ``dtypes`` a ``compute`` operation
    followed by a conversion to its type (see the module's docstring); ``name`` names it."""
    wanted = frozenset(dtypes)
    return prim_func_pass(name, lambda func: func.with_body(rewrite(func.body, wanted,
                                                                   compute)))
