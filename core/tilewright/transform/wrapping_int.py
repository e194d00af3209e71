"""Arithmetic on unsigned and narrow integer types, wrapping: one semantic on every backend.

The language's semantic for ``+ - * // % min max <<`` and ``~`` on ``uint8``, ``uint16``,
``uint32``, ``int8`` and ``int16`` values, and for a conversion to or from one of these types:
the exact result reduced modulo ``2**bits`` (two's complement for a signed type), as torch,
NumPy and the interpreter compute. Comparisons compare the exact values.

TVM 0.27 does not compute that. Its constant folding (``arith/const_fold.h`` and
``tvm::cast``, run by every ``Simplify``) builds the exact result of an operation on two
constants with ``make_const`` of the operation's type, and stops the build when that result
does not fit the type. It sees constants as soon as it knows an operand's value: a block index
of a one-block grid axis is 0, a loop of one iteration, an unrolled loop. The errors:

- ``Cast(uint32, -3)``: "cannot make uint from negative value -3" (``MakeConstScalar``);
- ``0U - 1U`` in an unsigned type: "Minuend's value is 0U and it's dtype is uint while
  Subtrahend's ... will cause a negative uint" (``TryConstFold<Sub>``); its simplifier makes
  such a subtraction of a comparison too (``u < 1`` becomes ``u - 1 < 0``);
- ``Cast(int8, 129)`` or an ``int8`` sum of 129: "Literal value 129 exceeds range of int8"
  (the ``IntImm`` constructor).

And CUDA C (and C) promotes an 8- or 16-bit operand to ``int``: ``(uint16)0 - 1`` divided
by 3 is 0 there, 21845 in the language.

:func:`rewrite` makes each such operation in a wider working type that no result of it
overflows and reduces the result into its type with ``&`` of a mask (which TVM's simplifier
does not fold, and its ``&`` operator folds right on any constant), so the conversion back
never sees a constant outside its type. The working type is the narrowest that holds every
result (:func:`working_type`): ``int32`` for the 8- and 16-bit types (a sum, difference,
quotient or product of two of their values lies within 32 signed bits; a GPU computes 64-bit
integers with several 32-bit instructions), except a ``uint16`` product (up to
``0xFFFE0001``), made in ``uint32``; ``int64`` for ``uint32``, whose product is made of two
partial products of 48 bits, and for a left shift (its count may reach 63). Comparisons are
made on the operands in that type. The CUDA and CPU backends both run it (the CPU for two
more TVM behaviours its ``integers.wrap_integers`` names).
``int32``, 64-bit and sub-byte types keep TVM's arithmetic, and so does a conversion to a
type that holds every value of its source (``uint8`` to ``int32``) and a conversion between
two types outside the set (``int64`` to ``int32`` of an index).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.integers import UINT, value_range, wrapping
from .lanes import binary, by_lane, lane
from .walk import prim_func_pass

WIDE = "int64"
ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod,
              tirx.Min, tirx.Max, tirx.LShift)
COMPARISONS = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def _scalar(dtype) -> tvm.runtime.DataType:
    return tvm.runtime.DataType(str(dtype)).with_lanes(1)


def _lanes(dtype, scalar: str) -> str:
    return str(tvm.runtime.DataType(scalar).with_lanes(tvm.runtime.DataType(str(dtype)).lanes))


def _const(value: int, dtype: str):
    lanes = tvm.runtime.DataType(dtype).lanes
    scalar = tirx.const(value, str(_scalar(dtype)))
    return scalar if lanes == 1 else tirx.Broadcast(scalar, lanes)


def _fits_int32(dtype) -> bool:
    """Whether ``int32`` holds every value of the integer ``dtype``."""
    low, high = value_range(dtype)
    return -(2 ** 31) <= low and high < 2 ** 31


def working_type(node) -> str:
    """The scalar type in which :func:`rewrite` makes ``node`` (an operation, comparison or
    conversion of a :func:`wrapping` type): one that holds its operands and exact result."""
    dtype = _scalar(node.ty)
    if isinstance(node, tirx.LShift):
        return WIDE
    if isinstance(node, tirx.Cast):
        source = _scalar(node.value.ty)
        return "int32" if _fits_int32(source) and _fits_int32(dtype) else WIDE
    if isinstance(node, COMPARISONS):
        dtype = _scalar(node.a.ty)
    if dtype.bits > 16:
        return WIDE
    if isinstance(node, tirx.Mul) and dtype.type_code == UINT and dtype.bits == 16:
        return "uint32"
    return "int32"


def widened(value, wide: str = WIDE):
    """``value`` (of an integer type of up to 32 bits) as a value of the scalar type ``wide``
    (``int64`` by default) with ``value``'s lanes."""
    wide = _lanes(value.ty, wide)
    return value if str(value.ty) == wide else tirx.Cast(wide, value)


def wrapped(wide, dtype: str):
    """The value ``wide`` (of a working type that holds it) reduced into the integer
    ``dtype`` (modulo ``2**bits``, two's complement for a signed one) and converted to it. A
    signed result is its low bits with the sign bit flipped, less the sign bit's weight:
    nothing overflows the working type (an ``int32`` converted to ``int8`` in ``int32``), and
    the ``&`` and ``^`` are one ``LOP3`` on the GPU."""
    dtype = tvm.runtime.DataType(dtype)
    bits, mask = dtype.bits, _const(2 ** dtype.bits - 1, str(wide.ty))
    if dtype.type_code == UINT:
        return tirx.Cast(str(dtype), tirx.bitwise_and(wide, mask))
    half = _const(2 ** (bits - 1), str(wide.ty))
    return tirx.Cast(str(dtype), tirx.bitwise_xor(tirx.bitwise_and(wide, mask), half) - half)


def _product(a, b, dtype):
    """``a * b`` of two values of the ``dtype`` in their working type: a ``uint32`` product
    (up to 64 bits, beyond ``int64``) is ``a * low(b) + (a * high(b) mod 2**16) * 2**16``,
    each part below 2**49; the others fit."""
    if tvm.runtime.DataType(str(dtype)).bits < 32:
        return a * b
    low = tirx.bitwise_and(b, _const(0xFFFF, str(b.ty)))
    high = b >> _const(16, str(b.ty))
    upper = tirx.bitwise_and(a * high, _const(0xFFFF, str(b.ty)))
    return a * low + (upper << _const(16, str(b.ty)))


def rewrite(expr_root):
    """``expr_root`` (a statement or expression) with each arithmetic operation, comparison,
    left shift, bitwise not and conversion of a :func:`wrapping` type made by the module's
    rule; one of vectors lane by lane."""

    def arithmetic(node):
        dtype = str(node.ty)
        if not wrapping(dtype):
            return node
        work = working_type(node)
        a, b = widened(node.a, work), widened(node.b, work)
        wide = _product(a, b, dtype) if isinstance(node, tirx.Mul) else type(node)(a, b)
        return wrapped(wide, dtype)

    def bitwise_not(node):
        dtype = str(node.ty)
        if not wrapping(dtype):
            return node
        return wrapped(tirx.bitwise_not(widened(node.a, working_type(node))), dtype)

    def comparison(node):
        if not wrapping(node.a.ty):
            return node
        work = working_type(node)
        return type(node)(widened(node.a, work), widened(node.b, work))

    def cast(node):
        dtype, source = str(node.ty), str(node.value.ty)
        into, held = value_range(dtype), value_range(source)
        if into is None or held is None or not (wrapping(dtype) or wrapping(source)) or \
                into[0] <= held[0] and held[1] <= into[1] or \
                tvm.runtime.DataType(source).bits > 64 or source.startswith("uint64") or \
                tvm.runtime.DataType(dtype).bits >= 64:  # into 64 bits: no int64 mask holds it
            return node
        return wrapped(widened(node.value, working_type(node)), dtype)

    return tvm_ffi.structural_map(expr_root, [
        (ARITHMETIC, by_lane(arithmetic, binary)),
        (COMPARISONS, by_lane(comparison, binary)),
        (tirx.BitwiseNot, by_lane(bitwise_not, lambda n, k: tirx.bitwise_not(lane(n.a, k)))),
        (tirx.Cast, by_lane(cast, lambda n, k: tirx.Cast(str(_scalar(n.ty)), lane(n.value, k))))])


def wrapping_integer_arithmetic(name: str):
    """A pass that makes the arithmetic and conversions of unsigned and narrow integer types
    follow the module's rule; ``name`` names it."""
    return prim_func_pass(name, lambda func: func.with_body(rewrite(func.body)))
