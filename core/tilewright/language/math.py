"""Scalar expressions: ``T.max``, ``T.exp``, ``T.cast``, ``T.if_then_else`` ..."""

from __future__ import annotations

import builtins
import operator

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import (
    KernelIndexError,
    KernelTypeError,
    KernelValueError,
    kernel_error,
    user_location,
)
from ..ir import FAST_MATH_FUNCTIONS, integers
from ..ir.schema import writes_memory
from .buffer import TileBuffer, VarHandle, as_int, dtype_of, to_expr
from .dtypes import FLOAT_FORMATS, UNSIGNED_FORMATS, is_float, normalize_dtype


def _pair(a, b):
    """Both operands as PrimExprs of one dtype (Python scalars take the other side's)."""
    a, b = (v if dtype_of(v) is None else to_expr(v) for v in (a, b))
    a_py, b_py = dtype_of(a) is None, dtype_of(b) is None
    if a_py and b_py:
        a, b = to_expr(a), to_expr(b)
    elif a_py:
        a = to_expr(a, dtype_of(b))
    elif b_py:
        b = to_expr(b, dtype_of(a))
    if dtype_of(a) != dtype_of(b):
        target = promoted(dtype_of(a), dtype_of(b))
        a, b = to_expr(a, target), to_expr(b, target)
    return a, b


def _bits(dtype: str) -> int:
    return 1 if dtype == "bool" else int("".join(c for c in dtype.split("_")[0] if c.isdigit()))


def _wrapped(value: int, dtype: str):
    """The integer constant ``value`` converted to the integer ``dtype`` as C and torch
    convert it (modulo ``2**bits``, two's complement for a signed ``dtype``). Built here
    because TVM's own folding of a cast of a negative constant to an unsigned dtype stops
    the build."""
    bits = _bits(dtype)
    value %= 2 ** bits
    if not dtype.startswith("uint") and value >= 2 ** (bits - 1):
        value -= 2 ** bits
    return tirx.const(value, dtype)


def promoted(a: str, b: str) -> str:
    """The dtype two operands of different dtypes meet in, as TVM's arithmetic promotes: an
    integer meets a float in the float, two floats or two integers in the wider one (a signed
    and an unsigned integer of one width in the signed one)."""
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    if _bits(a) != _bits(b):
        return a if _bits(a) > _bits(b) else b
    if is_float(a):  # float16 and bfloat16: float32 holds both
        return "float32"
    return a if a.startswith("int") else b


def _reducer_update(op: str, a, b):
    """``T.max(acc[i], x)`` of an element of a reducer: the update TileLang writes as
    ``acc[i] = T.max(acc[i], x)`` (an element of a reducer answers ``reducer_combine``;
    :mod:`.reducer`), or None."""
    for element, other in ((a, b), (b, a)):
        combine = getattr(element, "reducer_combine", None)
        if combine is not None:
            return combine(op, other)
    return None


def max(a, b):  # noqa: A001 - the language's name
    """The larger of two values."""
    update = _reducer_update("max", a, b)
    if update is not None:
        return update
    a, b = _pair(a, b)
    return tirx.Max(a, b)


def min(a, b):  # noqa: A001 - the language's name
    """The smaller of two values."""
    update = _reducer_update("min", a, b)
    if update is not None:
        return update
    a, b = _pair(a, b)
    return tirx.Min(a, b)


def if_then_else(cond, then_value, else_value):
    """``then_value`` where ``cond`` holds, else ``else_value``; only the chosen side is read."""
    a, b = _pair(then_value, else_value)
    return tirx.if_then_else(to_expr(cond), a, b)


def Select(condition, true_value, false_value, span=None):  # noqa: N802 - TVM's name
    """TVM's (TileLang's) ``T.Select``: ``true_value`` where ``condition`` holds, else
    ``false_value``, both sides computed (a backend may make it a branch-free select); use
    :func:`if_then_else` where the other side must not be read."""
    a, b = _pair(true_value, false_value)
    return tirx.Select(to_expr(condition), a, b)


def Ramp(base, stride, lanes):  # noqa: N802 - TVM's (and TileLang's) name
    """The vector of ``lanes`` indices ``base, base + stride, ...`` (TVM's ``Ramp``): an index
    naming consecutive elements (``T.atomic_addx2(B[T.Ramp(i, 1, 2)], ...)``)."""
    return tirx.Ramp(to_expr(base), to_expr(stride), int(lanes))


def cast(value, dtype):
    """``value`` converted to ``dtype``. A Python int outside int32 is a constant of ``dtype``
    itself (``T.cast(0x80000000, "uint32")``), not first an int32 literal out of range; an
    integer constant cast to an integer dtype is that constant wrapped into it
    (``T.cast(T.int32(-3), "uint32")`` is ``2**32 - 3``)."""
    dtype = normalize_dtype(dtype)
    if isinstance(value, int) and not isinstance(value, bool) and \
            not -2**31 <= value < 2**31:
        try:
            return tirx.const(value, dtype)
        except ValueError as exc:
            raise kernel_error(f"T.cast of {value} to {dtype}: {exc}") from None
    value = to_expr(value)
    if isinstance(value, tirx.IntImm) and dtype.startswith(("int", "uint")) and \
            _bits(dtype) >= 8:
        return _wrapped(value.value, dtype)
    return tirx.Cast(dtype, value)


def Cast(dtype, value):  # noqa: N802 - TileLang's (and TVM's) name and argument order
    """``value`` converted to ``dtype`` (``T.cast`` with the arguments the other way round)."""
    return cast(value, dtype)


def clamp(value, min_val, max_val):
    """``value`` limited to ``[min_val, max_val]`` (TileLang's parameter names):
    ``T.min(T.max(value, min_val), max_val)``."""
    return min(max(value, min_val), max_val)


def reinterpret(value, dtype):
    """The bits of ``value`` read as ``dtype`` (of the same width): ``T.reinterpret(x,
    "uint32")`` is the IEEE-754 bit pattern of a float32 ``x``."""
    if isinstance(value, str):
        raise kernel_error(f"T.reinterpret({value!r}, ...): the value comes first and the dtype "
                           "second (TileLang's order; TVM's tir.reinterpret takes them the "
                           "other way round)")
    dtype = normalize_dtype(dtype)
    value = to_expr(value)
    if _width(dtype) != _width(str(value.ty)):
        raise kernel_error(f"T.reinterpret of a {value.ty} value as {dtype}: the widths differ "
                           f"({_width(str(value.ty))} and {_width(dtype)} bits)")
    return tirx.reinterpret(dtype, value)


def _width(dtype: str) -> int:
    """The bits of a value of ``dtype``, every lane of a vector dtype."""
    t = tvm.runtime.DataType(dtype)
    return t.bits * t.lanes


def extract_lane(vector, lane):
    """``T.extract_lane(v, k)``: lane ``k`` (a constant) of the vector value ``v``
    (``T.float32x2`` ...), a value of its element dtype."""
    if isinstance(vector, VarHandle):
        vector = vector.load()
    if not isinstance(vector, tvm.ir.Expr):
        raise KernelTypeError(f"T.extract_lane expects a PrimExpr vector, got "
                              f"{type(vector).__name__}", user_location())
    lanes = tvm.runtime.DataType(str(vector.ty)).lanes
    if lanes <= 1:
        raise KernelValueError(f"T.extract_lane expects a vector expression (float32x2 ...), "
                               f"got a {vector.ty} value", user_location())
    if isinstance(lane, tirx.IntImm):
        lane = int(lane.value)
    if not isinstance(lane, int) or isinstance(lane, bool):
        raise KernelTypeError(f"T.extract_lane takes the lane as a compile-time integer, got "
                              f"{lane!r}", user_location())
    if not 0 <= lane < lanes:
        raise KernelIndexError(f"T.extract_lane: lane {lane} is out of bounds of a {vector.ty} "
                               f"value (0..{lanes - 1})", user_location())
    return tirx.Shuffle([vector], [tirx.const(lane, "int32")])


def unpack(packed, index, bits: int = 4, signed: bool = False):
    """The ``index``-th ``bits``-wide field of the integer ``packed`` (field 0 in the least
    significant bits), as an integer of ``packed``'s width: unsigned, or sign-extended with
    ``signed``. ``T.unpack(Q[n, k // 2], k % 2, 4)`` is the k-th 4-bit weight of a row that
    packs two to a byte; ``index`` may be an expression."""
    value = to_expr(packed)
    dtype = str(value.ty)
    if dtype.startswith("float") or dtype.startswith("bfloat") or dtype == "bool":
        raise kernel_error(f"T.unpack of a {dtype} value: it reads fields of an integer")
    width = _bits(dtype)
    if not isinstance(bits, int) or bits <= 0 or width % bits:
        raise kernel_error(f"T.unpack of {bits}-bit fields from a {dtype} value: the field "
                           f"width must divide {width}")
    if isinstance(index, int) and not 0 <= index < width // bits:
        raise kernel_error(f"T.unpack field {index} of a {dtype} value: it holds "
                           f"{width // bits} fields of {bits} bits")
    unsigned = f"uint{width}"
    if isinstance(value, tirx.IntImm):  # TVM's reinterpret of a constant stops the build
        word = _wrapped(value.value, unsigned)
    else:
        word = value if dtype == unsigned else tirx.reinterpret(unsigned, value)
    offset = tirx.Cast(unsigned, to_expr(index, "int32") * bits)
    value = (word >> offset) & tirx.const((1 << bits) - 1, unsigned)
    if not signed:
        return value
    # two's complement of the field: minus twice its sign bit's weight
    wide = "int64" if width == 64 else "int32"
    sign = tirx.Cast(wide, value & tirx.const(1 << (bits - 1), unsigned))
    return tirx.Cast(f"int{width}", tirx.Cast(wide, value) - sign * tirx.const(2, wide))


def _shift(a, b, what: str):
    """Both operands of a shift as integer PrimExprs of one dtype: a Python int is an int32
    (TVM's rule), two integer types meet in the wider one (:func:`promoted`)."""
    a, b = to_expr(a), to_expr(b)
    for v in (a, b):
        if is_float(dtype_of(v)) or dtype_of(v) == "bool":
            raise kernel_error(f"T.{what} shifts integers; got an operand of type {dtype_of(v)}")
    if dtype_of(a) != dtype_of(b):
        target = promoted(dtype_of(a), dtype_of(b))
        a, b = to_expr(a, target), to_expr(b, target)
    return a, b


def shift_left(a, b):
    """``a << b`` of integers (the count below the type's bit width); a Python int when both
    are."""
    if isinstance(a, int) and isinstance(b, int):
        return a << b
    a, b = _shift(a, b, "shift_left")
    return tirx.shift_left(a, b)


def shift_right(a, b):
    """``a >> b`` of integers (the count below the type's bit width): arithmetic for a signed
    type, logical for an unsigned one; a Python int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return a >> b
    a, b = _shift(a, b, "shift_right")
    return tirx.shift_right(a, b)


def index_to_coordinates(index, shape) -> list:
    """The coordinates of the flat (row-major) ``index`` in ``shape``, outermost first:
    ``T.index_to_coordinates(i, (4, 8))`` is ``[i // 8, i % 8]``."""
    coordinates = []
    for extent in reversed(list(shape)):
        coordinates.append(floormod(index, extent))
        index = floordiv(index, extent)
    return coordinates[::-1]


DP4A_BYTES = ("int8", "uint8")


def dp4a(a, b, c) -> None:
    """``c += a[0] * b[0] + ... + a[3] * b[3]``: the dot product of four 8-bit integers from
    ``a`` on, four from ``b`` on (elements, ``A_local[k]``; the four are consecutive along the
    last dimension), widened to int32, added to the int32 element ``c`` (a statement, as
    TileLang's ``T.dp4a``)."""
    loads = []
    for what, value in (("a", a), ("b", b), ("c", c)):
        if not isinstance(value, tvm.ir.TensorLoad):
            raise kernel_error(f"T.dp4a takes buffer elements (A[i], B[i], C[0]); {what} is "
                               f"{type(value).__name__}")
        loads.append(value)
    for what, load in zip(("a", "b"), loads):
        if str(load.ty) not in DP4A_BYTES:
            raise kernel_error(f"T.dp4a: {what} must be int8 or uint8, got {load.ty}")
    if str(loads[2].ty) != "int32":
        raise kernel_error(f"T.dp4a accumulates into an int32 element, got {loads[2].ty}")

    def element(load, j):
        indices = list(load.indices)
        indices[-1] = indices[-1] + j
        return tirx.Cast("int32", tirx.BufferLoad(load.source, indices))

    total = loads[2]
    for j in range(4):
        total = total + element(loads[0], j) * element(loads[1], j)
    TileBuffer(loads[2].source)[tuple(loads[2].indices)] = total


# the operators the frontend folds on constants of a type whose arithmetic wraps
# (ir.integers): TVM folds two constants as the expression is built and stops where the exact
# result leaves the type (0U - 1U: "Minuend's value is 0U ... will cause a negative uint";
# int8 100 + 100: "Literal value 200 exceeds range of int8")
FOLDED = {"+": operator.add, "-": operator.sub, "*": operator.mul, "<<": operator.lshift}
# Python's bitwise operators, which take integers (and, but for shifts, bools) only
BITWISE_OPERATORS = {"&": operator.and_, "|": operator.or_, "^": operator.xor,
                     ">>": operator.rshift, "<<": operator.lshift, "~": operator.invert}


def refuse_float_operands(op: str, operands, hint: str, bools: bool = False) -> None:
    """A KernelError at the user's line when an operand of ``op`` is a float (a float
    expression or a Python float beside an expression): TVM would stop deep inside with an
    InternalError. Python values alone are left to Python."""
    types = [dtype_of(v) for v in operands]
    if all(t is None for t in types):
        return
    kinds = ("int", "uint", "bool") if bools else ("int", "uint")
    floats = [t for t in types if t is not None and not t.startswith(kinds)] + \
        [type(v).__name__ for v, t in zip(operands, types) if t is None and isinstance(v, float)]
    if floats:
        raise kernel_error(f"'{op}' needs integer operands, got {' and '.join(floats)}; "
                           f"{hint}")


def bitwise(op: str, *operands):
    """``a & b``, ``a | b``, ``a ^ b``, ``a >> b``, ``~a`` (``op`` a key of
    :data:`BITWISE_OPERATORS`) of integers or bools; a float operand is refused at the user's
    line (``T.reinterpret`` gives a float's bits)."""
    refuse_float_operands(op, operands, "T.reinterpret(x, T.int32) gives a float32's bits",
                          bools=op not in ("<<", ">>"))
    return keeping_effects(BITWISE_OPERATORS[op](*operands), *operands)


def arith(op: str, a, b):
    """``a op b`` (``op`` a key of :data:`FOLDED`) as Python or TVM computes it, except that
    two integer constants of one wrapping type (a constant of it, or a Python int of its range
    beside one) give the wrapped result, a constant of that type, as the language's
    arithmetic on their values would (``transform.wrapping_int``)."""
    if op == "<<":
        refuse_float_operands(op, (a, b), "T.reinterpret(x, T.int32) gives a float32's bits")
    folded = _wrapped_constant(op, a, b)
    return keeping_effects(FOLDED[op](a, b) if folded is None else folded, a, b)


def keeping_effects(result, *operands):
    """``result`` of an operation on ``operands``, with each operand that writes memory and
    that TVM's constant folding dropped as the expression was built (``T.atomic_add(C[0], 1,
    return_prev=True) * 0`` is 0, ``... % 1`` too) bound around it by an unused ``Let``, so
    that the write is still made where the expression is evaluated."""
    for operand in operands:
        if isinstance(operand, tvm.ir.Expr) and writes_memory(operand) and \
                not contains(result, operand):
            result = tirx.Let(tirx.Var("effect", operand.ty), operand, to_expr(result))
    return result


def contains(expr, node) -> bool:
    """Whether ``node`` itself (not a structurally equal copy) stands in ``expr``."""
    found = []
    if isinstance(expr, tvm.ir.Expr):
        tvm_ffi.structural_walk(expr, (type(node), lambda n: found.append(n)
                                       if n.same_as(node) else None))
    return bool(found)


def _wrapped_constant(op: str, a, b):
    """The constant ``a op b`` wraps to, or None where the operands are not such constants."""
    if any(isinstance(v, bool) or not isinstance(v, (int, tirx.IntImm)) for v in (a, b)):
        return None
    dtypes = {str(v.ty) for v in (a, b) if isinstance(v, tirx.IntImm)}
    if len(dtypes) != 1 or not integers.wrapping(dtype := dtypes.pop()):
        return None
    low, high = integers.value_range(dtype)
    x, y = (int(v.value) if isinstance(v, tirx.IntImm) else v for v in (a, b))
    if not (low <= x <= high and low <= y <= high) or (op == "<<" and not 0 <= y < 64):
        return None
    return tirx.const(integers.wrapped(FOLDED[op](x, y), dtype), dtype)


def floordiv(a, b):
    """Division rounding towards negative infinity; a Python int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    a, b = _pair(a, b)
    return keeping_effects(tirx.floordiv(a, b), a, b)


def likely(cond):
    """TileLang's ``T.likely``: a hint that ``cond`` is usually true; the condition itself
    (the backends' compilers place branches by their own analysis)."""
    return to_expr(cond)


def _integers(name: str, a, b):
    a, b = _pair(a, b)
    if is_float(dtype_of(a)) or dtype_of(a) == "bool":
        raise kernel_error(f"T.{name} needs integer arguments, got {dtype_of(a)}")
    return a, b


def truncdiv(a, b):
    """Integer division rounding towards zero (C's ``/``); a Python int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        quotient = builtins.abs(a) // builtins.abs(b)
        return quotient if (a < 0) == (b < 0) else -quotient
    return tirx.truncdiv(*_integers("truncdiv", a, b))


def truncmod(a, b):
    """The remainder of :func:`truncdiv` (the sign of ``a``, C's ``%``); a Python int when
    both are."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b * truncdiv(a, b)
    return tirx.truncmod(*_integers("truncmod", a, b))


def _bitwise(name: str, fn):
    def op(a, b):
        return fn(*_integers(name, a, b))

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = f"TileLang's ``T.{name}`` of two integers: the operator ``{fn.__name__}``."
    return op


# TileLang's functions for the bitwise operators
BITWISE = {"bitwise_and": _bitwise("bitwise_and", operator.and_),
           "bitwise_or": _bitwise("bitwise_or", operator.or_),
           "bitwise_xor": _bitwise("bitwise_xor", operator.xor)}
globals().update(BITWISE)


def bitwise_not(a):
    """TileLang's ``T.bitwise_not`` of an integer: the operator ``~``."""
    a = to_expr(a)
    if is_float(dtype_of(a)) or dtype_of(a) == "bool":
        raise kernel_error(f"T.bitwise_not needs an integer argument, got {dtype_of(a)}")
    return ~a


def _bit_count(name: str, fn):
    def op(x):
        x = to_expr(x)
        dtype = dtype_of(x)
        if dtype not in ("int32", "uint32", "int64", "uint64"):
            raise kernel_error(f"T.{name} needs a 32- or 64-bit integer, got {dtype}")
        unsigned = "u" + dtype.lstrip("u")
        return tirx.Cast(dtype, fn(x if dtype == unsigned else tirx.reinterpret(unsigned, x)))

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = (f"TileLang's ``T.{name}`` (TVM's) of a 32- or 64-bit integer's bits, in its "
                  "dtype; a signed value's two's-complement bits (every backend counts them "
                  "as unsigned: CUDA's ``__popc`` and ``__clz`` take them so)")
    return op


# the leading zero bits and the set bits of an integer's bits
BIT_COUNTS = {"clz": _bit_count("clz", tirx.clz), "popcount": _bit_count("popcount",
                                                                          tirx.popcount)}
globals().update(BIT_COUNTS)


def floormod(a, b):
    """The remainder of :func:`floordiv` (the sign of ``b``); a Python int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    a, b = _pair(a, b)
    return keeping_effects(tirx.floormod(a, b), a, b)


# the floating formats without an infinity, and what a value beyond their range becomes
_NO_INFINITY = {"float8_e4m3fn": "converts to NaN", "float8_e8m0fnu": "converts to NaN",
                "float4_e2m1fn": "saturates"}


def infinity(dtype):
    """Positive infinity of a floating-point ``dtype``."""
    dtype = normalize_dtype(dtype)
    if not is_float(dtype):
        raise kernel_error(f"T.infinity needs a floating-point dtype, got {dtype}")
    if dtype in ("float16", "float32", "float64"):
        return tirx.infinity(dtype)
    if dtype in _NO_INFINITY:
        raise kernel_error(f"T.infinity({dtype}): {dtype} has no infinity (a value beyond its "
                           f"largest finite one, T.max_value({dtype!r}), {_NO_INFINITY[dtype]})")
    # TVM has no infinity of bfloat16 or float8_e5m2; float32's converts to theirs
    return tirx.Cast(dtype, tirx.infinity("float32"))


def ceildiv(a, b):
    """``ceil(a / b)`` for integers; a Python int when both are. A divisor of 0 is refused at
    the user's line (Python's ZeroDivisionError named no line of the kernel)."""
    if as_int(b) == 0:
        raise kernel_error(f"T.ceildiv({a}, {b}): division by zero")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    a, b = _pair(a, b)
    return tirx.floordiv(a + b - 1, b)


def align_up(x, y):
    """``x`` rounded up to a multiple of ``y``: ``T.ceildiv(x, y) * y`` (TileLang's)."""
    return ceildiv(x, y) * y


def _float_unary(name: str, fn):
    def op(x):
        x = to_expr(x)
        if not is_float(dtype_of(x)):
            raise kernel_error(f"T.{name} needs a floating-point argument, got {dtype_of(x)}")
        return fn(x)

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = f"Elementwise ``{name}`` of a floating-point value."
    return op


def _rsqrt(x):
    return tirx.const(1, dtype_of(x)) / tirx.sqrt(x)


def _sigmoid(x):
    one = tirx.const(1, dtype_of(x))
    return one / (one + tirx.exp(tirx.const(0, dtype_of(x)) - x))


# The floating-point unary family, registered from one table.
UNARY = {name: _float_unary(name, fn) for name, fn in {
    "exp": tirx.exp, "exp2": tirx.exp2, "log": tirx.log, "log2": tirx.log2,
    "sqrt": tirx.sqrt, "rsqrt": _rsqrt, "tanh": tirx.tanh, "sigmoid": _sigmoid,
    "floor": tirx.floor, "ceil": tirx.ceil, "sin": tirx.sin, "cos": tirx.cos,
    "round": tirx.round, "trunc": tirx.trunc,
}.items()}
# TileLang's further math functions of C's libm (TVM's ops, which it re-exports): the backend
# feature ``extended_math`` (docs/writing-a-backend.md) says a backend computes them
UNARY.update({name: _float_unary(name, getattr(tirx, name)) for name in (
    "exp10", "log10", "log1p", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh",
    "acosh", "atanh", "erf", "nearbyint")})
globals().update(UNARY)


# the dtypes a fast-math function takes (TileLang's: the IEEE formats and bfloat16, not float8)
FAST_MATH_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _fast(fn: str):
    name = f"__{fn}"

    def op(x):
        x = to_expr(x)
        dtype = dtype_of(x)
        if dtype not in FAST_MATH_DTYPES:
            raise KernelTypeError(f"T.{name} only supports floating-point inputs, but got "
                                  f"{dtype} (it takes {', '.join(FAST_MATH_DTYPES)})",
                                  user_location())
        return tirx.call_intrin(dtype, f"tw.fast_{fn}", x)

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = (
        f"TileLang's fast ``{fn}``: ``{fn}(x)`` of a float16, bfloat16, float32 or float64 "
        f"value, at least as accurate as CUDA's ``__{fn}f`` intrinsic for float32 (the error "
        "bounds of CUDA's programming guide, appendix \"Intrinsic Functions\"; the other "
        f"dtypes get ``T.{fn}``'s accuracy). The precise ``T.{fn}`` meets that bound, so a "
        "backend may compute it instead: CUDA calls the intrinsic for float32, the other "
        "backends compute the precise function.")
    return op


# TileLang's fast-math names: T.__exp, T.__log ... (ir.FAST_MATH_FUNCTIONS)
FAST_MATH = {f"__{fn}": _fast(fn) for fn in FAST_MATH_FUNCTIONS}


def _float_binary(name: str, fn):
    def op(a, b):
        a, b = _pair(a, b)
        if not is_float(dtype_of(a)):
            raise kernel_error(f"T.{name} needs floating-point arguments, got {dtype_of(a)}")
        return fn(a, b)

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = f"Elementwise ``{name}`` of two floating-point values (C's libm function)."
    return op


def _pow(a, b):
    """TVM's ``pow`` takes float16/32/64 only: a narrower float's is the float32 power rounded
    once (as every math function of narrow floats, :mod:`tilewright.transform.narrow_float`)."""
    dtype = dtype_of(a)
    if dtype in ("float16", "float32", "float64"):
        return tirx.pow(a, b)
    return tirx.Cast(dtype, tirx.pow(tirx.Cast("float32", a), tirx.Cast("float32", b)))


# TileLang's two-argument libm functions (feature ``extended_math``, as the unary ones above)
BINARY = {name: _float_binary(name, _pow if name == "pow" else getattr(tirx, name))
          for name in ("pow", "fmod", "atan2", "hypot", "copysign")}
globals().update(BINARY)


def _float_predicate(name: str, fn):
    def op(x):
        x = to_expr(x)
        dtype = dtype_of(x)
        if is_float(dtype) and dtype not in ("float32", "float64"):
            # TVM's finiteness ops take only float16/32/64; float32 holds every narrower
            # float (bfloat16, float8) exactly
            x = tirx.Cast("float32", x)
        return fn(x)

    op.__name__, op.__qualname__ = name, f"T.{name}"  # Python names it in a TypeError
    op.__doc__ = (f"Whether a value is {name[2:]} (a bool; constant for integers: only "
                  f"floating-point values can be NaN or infinite), as TVM's ``{name}``.")
    return op


# TileLang's T.isnan, T.isinf and T.isfinite (TVM's ops, which it re-exports).
PREDICATES = {name: _float_predicate(name, getattr(tirx, name))
              for name in ("isnan", "isinf", "isfinite")}
globals().update(PREDICATES)


def abs(x):  # noqa: A001 - the language's name
    """Absolute value of an integer or floating-point value: TVM's ``abs``, whose ``fabs``
    call a float8 value gets too (TVM's constructor refuses float8; the backends compute it
    as every math function on narrow floats, :mod:`tilewright.transform.narrow_float`)."""
    x = to_expr(x)
    dtype = dtype_of(x)
    if is_float(dtype) and tvm.runtime.DataType(dtype).bits == 8:
        return tirx.call_intrin(dtype, "tirx.fabs", x)
    return tirx.abs(x)


# TVM gives float32's limits for bfloat16, which round to infinity in bfloat16
_BF16_MAX = 3.3895313892515355e38


# TileLang's T.fabs: abs of a floating-point value
fabs = _float_unary("fabs", abs)


def max_value(dtype):
    """The largest finite value of ``dtype``."""
    dtype = normalize_dtype(dtype)
    if dtype in UNSIGNED_FORMATS:  # TVM 0.27 gives 2^128 for float8_e8m0fnu, its NaN code
        return tirx.const(FLOAT_FORMATS[dtype].max_value, dtype)
    return tirx.const(_BF16_MAX, dtype) if dtype == "bfloat16" else tirx.max_value(dtype)


def min_value(dtype):
    """The lowest finite value of ``dtype`` (a positive one for float8_e8m0fnu, which has no
    sign and no zero: 2^-127)."""
    dtype = normalize_dtype(dtype)
    if dtype in UNSIGNED_FORMATS:  # TVM 0.27 gives 0.0, which float8_e8m0fnu cannot hold
        return tirx.const(FLOAT_FORMATS[dtype].value(0), dtype)
    return tirx.const(-_BF16_MAX, dtype) if dtype == "bfloat16" else tirx.min_value(dtype)
