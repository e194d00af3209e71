"""Scalar expressions: ``T.max``, ``T.exp``, ``T.cast``, ``T.if_then_else`` ..."""

from __future__ import annotations

from tvm import tirx

from ..errors import kernel_error
from .buffer import dtype_of, to_expr
from .dtypes import is_float, normalize_dtype


def _pair(a, b):
    """Both operands as PrimExprs of one dtype (Python scalars take the other side's)."""
    a_py, b_py = dtype_of(a) is None, dtype_of(b) is None
    if a_py and b_py:
        a, b = to_expr(a), to_expr(b)
    elif a_py:
        a = to_expr(a, dtype_of(b))
    elif b_py:
        b = to_expr(b, dtype_of(a))
    if dtype_of(a) != dtype_of(b):
        raise kernel_error(f"operands have different dtypes ({dtype_of(a)} and {dtype_of(b)}); "
                           "use T.cast")
    return a, b


def max(a, b):  # noqa: A001 - the language's name
    """The larger of two values."""
    a, b = _pair(a, b)
    return tirx.Max(a, b)


def min(a, b):  # noqa: A001 - the language's name
    """The smaller of two values."""
    a, b = _pair(a, b)
    return tirx.Min(a, b)


def if_then_else(cond, then_value, else_value):
    """``then_value`` where ``cond`` holds, else ``else_value``; only the chosen side is read."""
    a, b = _pair(then_value, else_value)
    return tirx.if_then_else(to_expr(cond), a, b)


def cast(value, dtype):
    """``value`` converted to ``dtype``."""
    return tirx.Cast(normalize_dtype(dtype), to_expr(value))


def infinity(dtype):
    """Positive infinity of a floating-point ``dtype``."""
    dtype = normalize_dtype(dtype)
    if not is_float(dtype):
        raise kernel_error(f"T.infinity needs a floating-point dtype, got {dtype}")
    return tirx.infinity(dtype)


def ceildiv(a, b):
    """``ceil(a / b)`` for integers; a Python int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    a, b = _pair(a, b)
    return tirx.floordiv(a + b - 1, b)


def _float_unary(name: str, fn):
    def op(x):
        x = to_expr(x)
        if not is_float(dtype_of(x)):
            raise kernel_error(f"T.{name} needs a floating-point argument, got {dtype_of(x)}")
        return fn(x)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}`` of a floating-point value."
    return op


UNARY = {name: _float_unary(name, getattr(tirx, name)) for name in ("exp", "exp2")}
exp = UNARY["exp"]
exp2 = UNARY["exp2"]
