"""The language's integer types as values: their ranges, which of them wrap, and a value
reduced into one (the exact result modulo ``2**bits``, two's complement for a signed type), as
torch, NumPy and the interpreter compute. The frontend folds constants with it
(``language.math.arith``); ``transform.wrapping_int`` makes the same arithmetic of values."""

from __future__ import annotations

import tvm

INT, UINT = tvm.runtime.DataTypeCode.INT, tvm.runtime.DataTypeCode.UINT


def wrapping(dtype) -> bool:
    """Whether the language's arithmetic on ``dtype`` wraps where TVM's folding stops."""
    dtype = tvm.runtime.DataType(str(dtype))
    return (dtype.type_code == UINT and 8 <= dtype.bits <= 32) or \
        (dtype.type_code == INT and 8 <= dtype.bits < 32)


def value_range(dtype) -> tuple[int, int] | None:
    """The lowest and highest value of the integer ``dtype``; None for another type."""
    dtype = tvm.runtime.DataType(str(dtype))
    if dtype.type_code == UINT:
        return 0, 2 ** dtype.bits - 1
    if dtype.type_code == INT:
        return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1
    return None


def wrapped(value: int, dtype) -> int:
    """``value`` reduced into the integer ``dtype``: modulo ``2**bits``, into its range."""
    low, high = value_range(dtype)
    return (value - low) % (high - low + 1) + low
