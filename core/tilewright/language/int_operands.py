"""Python integers as operands of TVM expressions: a constant of the other operand's type.

TVM 0.27's operators pass a Python ``int`` operand of an expression's ``&``, ``|``, ``^``,
``<<`` and ``>>`` to C++ as an ``int``: ``x & 0x7FFFFFFFFFFFFFFF`` of an int64 ``x`` became
``x & -1`` (its low 32 bits, sign-extended: a wrong answer, silently), ``x & 0xFFFFFFF0`` of a
uint32 ``x`` stopped the build in ``MakeConstScalar`` ("cannot make uint from negative
value"), and any arithmetic of a uint64 expression with an int above ``2**63`` failed to
convert. TileLang's TVM makes such an int a constant of the expression's type (its tests:
``T.uint32() & 0xFFFFFFFF``, ``T.int64() & 0x7FFFFFFFFFFFFFFF``).

Importing ``tilewright.language`` therefore wraps the binary operators of TVM's expressions:
an ``int`` operand (not a ``bool``) outside the int32 range beside an integer expression
becomes a constant of the expression's type when it fits that type, else an int64 (or uint64)
constant, which TVM's type promotion widens the expression to (as it did for the arithmetic
operators). A negative one beside a uint32 or uint64 value (TVM stopped at "cannot make uint
from negative value") is, for ``+ - * & | ^``, the constant C converts it to (``x + -1`` is
``x - 1`` modulo 2**32, as the language's unsigned arithmetic is modular), and for a
comparison or a division the exact value in int64. A shift of a 32- or 64-bit value by a
constant outside 0 .. bits - 1 (undefined in C; TVM stopped the build) and what no rule above
gives (a uint64 value beside a negative one in a comparison) are refused at the user's line.
An int32 value beside a signed or narrow value keeps TVM's conversion (``int8_value + 5`` is
int32, as C computes it); floating-point expressions and other operands are left as they
were.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir.expr import ExprWithOp

from ..errors import kernel_error

_OPERATORS = ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "lshift", "rshift",
              "lt", "le", "gt", "ge")
_SHIFTS = ("lshift", "rshift")
_MODULAR = ("add", "sub", "mul", "and", "or", "xor")  # exact modulo 2**bits


def _range(dtype: str) -> tuple[int, int]:
    bits = tvm.runtime.DataType(dtype).bits
    if dtype.startswith("uint"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _constant(expr, value: int, op: str, reflected: bool):
    """``value`` as a constant beside integer expression ``expr`` (see the module's doc); an
    int32 value is left to TVM (its promotion rules, which the language's arithmetic keeps),
    except a negative one beside a 32- or 64-bit unsigned value, which TVM refuses."""
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, tvm.ir.PrimType) or not str(ty).startswith(("int", "uint")):
        return value
    dtype = str(ty)
    bits = tvm.runtime.DataType(dtype).bits
    unsigned_wide = dtype in ("uint32", "uint64")
    # TVM refuses a constant amount outside 0 .. bits - 1 of a 32- or 64-bit value (C leaves
    # it undefined); the language defines 8- and 16-bit shifts by up to 63 (modular)
    limit = bits if bits >= 32 else 64
    if op in _SHIFTS and not reflected and not 0 <= value < limit:
        raise kernel_error(f"a shift of a {dtype} value by {value}: the amount must be in "
                           f"0..{limit - 1}")
    if -(1 << 31) <= value < (1 << 31) and not (value < 0 and unsigned_wide):
        return value
    lo, hi = _range(dtype)
    if lo <= value <= hi:
        return tirx.const(value, dtype)
    if value < 0 and unsigned_wide and op in _MODULAR and value >= -(1 << bits):
        # C converts it to the unsigned type; the language's arithmetic is modular
        return tirx.const(value % (1 << bits), dtype)
    if dtype != "uint64":
        for candidate in ("int64", "uint64"):  # the expression is widened: exact
            lo, hi = _range(candidate)
            if lo <= value <= hi:
                return tirx.const(value, candidate)
    raise kernel_error(f"the constant {value} beside a {dtype} value: it fits neither {dtype} "
                       "nor a wider integer type the value converts to exactly; cast one of "
                       "them")


def _wrap(name: str, reflected: bool):
    attr = f"__{'r' if reflected else ''}{name}__"
    original = getattr(ExprWithOp, attr, None)
    if original is None or getattr(original, "_tilewright_int_operands", False):
        return

    def method(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            other = _constant(self, other, name, reflected)
        return original(self, other)

    method.__name__ = attr
    method.__doc__ = original.__doc__
    method._tilewright_int_operands = True
    setattr(ExprWithOp, attr, method)


for _name in _OPERATORS:
    _wrap(_name, False)
    if _name not in ("lt", "le", "gt", "ge"):
        _wrap(_name, True)
