"""Integer arithmetic, comparisons and floor divisions written so that TVM 0.27's build, which
stops, aborts or computes a wrapping unsigned value wrongly on some of theirs, takes them."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass, wrapping_integer_arithmetic
from tvm import sym, tirx

from .irutil import calls_out, const_int


def _unsigned(expr) -> bool:
    return str(expr.ty).startswith("uint")


def fold_unsigned_sign_tests():
    """``u < 0`` and ``0 > u`` of an unsigned ``u`` become ``False``, ``u >= 0`` and ``0 <= u``
    ``True``. TVM 0.27's LowerIntrin aborts the process on an ``if`` whose condition is
    ``u < 0`` of a let-bound unsigned value ("Check failed: literal_constraints_.size() ==
    new_literal_size", thrown from a destructor: ``std::terminate``), which common-
    subexpression elimination makes of a kernel comparing an unsigned cast with 0 (found by
    the differential fuzzer). Other comparisons are made in int64 by :func:`wrap_integers`."""

    def fold(node):
        lhs_zero, rhs_zero = const_int(node.a) == 0, const_int(node.b) == 0
        if isinstance(node, (tirx.LT, tirx.GE)) and rhs_zero and _unsigned(node.a):
            return tirx.const(isinstance(node, tirx.GE), str(node.ty))
        if isinstance(node, (tirx.GT, tirx.LE)) and lhs_zero and _unsigned(node.b):
            return tirx.const(isinstance(node, tirx.LE), str(node.ty))
        return node

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.LT, tirx.GE, tirx.GT, tirx.LE), fold)))

    return prim_func_pass("CPUFoldUnsignedSignTests", run)


def reinterpret_integers_unfolded():
    """The integer operand of a ``reinterpret`` (``T.reinterpret``, and ``T.unpack`` of a
    signed value) passes through ``&`` with all ones of its type, which TVM 0.27's simplifier
    does not fold (and LLVM drops). Its LLVM code generator takes the ``reinterpret`` of an
    integer constant 0 for a null pointer and stops on any other result type ("A zero
    reinterpret shortcut requires pointer result type"), and its simplifier makes such a
    constant of an operand that only depends on loop variables of one iteration or the block
    index of a one-block grid (``T.unpack(T.cast(i + j, "int32"), j % 8, 4)`` in a
    ``T.Parallel(1, 1)``; fuzzer seed 409)."""

    def unfold(node):
        if not isinstance(node.op, tvm.ir.Op) or node.op.name != "tirx.reinterpret":
            return node
        value = node.args[0]
        source = tvm.runtime.DataType(str(value.ty))
        if source.type_code not in (tvm.runtime.DataTypeCode.INT,
                                    tvm.runtime.DataTypeCode.UINT) or \
                isinstance(node.ty, tvm.ir.PointerType) or isinstance(value, tvm.ir.TensorLoad):
            # a loaded operand never folds into a constant, and is left as it is: the code
            # generator wants the load itself in an address made a pointer
            # (``T.make_tensor(ptrs[g], ...)``) and in ``address_of`` of a float8 element
            return node
        scalar = str(source.with_lanes(1))
        ones = tirx.const(-1 if source.type_code == tvm.runtime.DataTypeCode.INT else
                          2 ** source.bits - 1, scalar)
        ones = ones if source.lanes == 1 else tirx.Broadcast(ones, source.lanes)
        # the node itself: the ``&`` operator folds two constants
        return tirx.reinterpret(str(node.ty), tirx.BitwiseAnd(value, ones))

    def run(func):
        return func.with_body(tvm_ffi.structural_map(func.body, (tvm.ir.Call, unfold)))

    return prim_func_pass("CPUReinterpretIntegersUnfolded", run)


def wrap_integers():
    """Arithmetic on ``uint8``, ``uint16``, ``uint32``, ``int8`` and ``int16`` values and
    conversions to and from them made in int64 and wrapped into their type
    (``tilewright.transform.wrapping_int``), as torch computes them. Left to TVM 0.27, the
    result of such an operation that wraps is wrong or stops the build:

    - its LLVM code generator marks a ``uint32`` (and ``uint64``) addition, subtraction and
      multiplication ``nuw`` (no unsigned wrap), so one that wraps is poison, and LLVM
      optimises what uses it as if it had not wrapped (``(i - 3) & (5 - i)`` of ``uint32``
      gave 0 instead of 4 at ``i = 7``, and so did comparisons, ``min``/``max`` and shifts of
      such a difference);
    - its bound analysis does not wrap unsigned values: LowerIntrin lowers the floor division
      or modulo of an unsigned value it bounds below 0 as a signed one, offset into positive
      range (``(u32(bx) - 1) // 3`` as ``(u32(bx) - 1 + 3) / 3 - 1``, which is ``2**32 - 1``
      at ``bx = 0``, not ``(2**32 - 1) // 3``);
    - its constant folding stops on a value that does not fit its type once it knows an
      operand (a block index of a one-block grid is 0): ``0U - 1U`` ("Minuend's value is 0U")
      and ``Cast(uint8, -2)`` ("cannot make uint from negative value")."""
    return wrapping_integer_arithmetic("CPUWrapIntegers")


def _uint64_const(value: int, lanes: int):
    scalar = tirx.const(value, "uint64")
    return scalar if lanes == 1 else tirx.Broadcast(scalar, lanes)


def _uint64_sum(node):
    """``node`` (a ``uint64`` addition, subtraction or multiplication) modulo ``2**64`` from
    32-bit halves: every addition, subtraction and multiplication made stays below ``2**64``
    (so TVM's ``nuw`` is true), and the one that wraps is the final left shift of the high
    half, which TVM gives no flag. ``a - b`` is ``a + ~b + 1``, the halves of ``~b`` made as
    ``2**32 - 1`` minus those of ``b``."""
    lanes = tvm.runtime.DataType(str(node.ty)).lanes
    mask, shift = _uint64_const(0xFFFFFFFF, lanes), _uint64_const(32, lanes)

    def low(x):  # the node itself: TVM's simplifier folds no ``&``, so no operand is constant
        return tirx.BitwiseAnd(x, mask)

    def high(x):
        return tirx.RShift(x, shift)

    a, b = node.a, node.b
    if isinstance(node, tirx.Mul):
        product = low(a) * low(b)
        cross = low(high(a) * low(b)) + low(low(a) * high(b))
        top, bottom = high(product) + cross, low(product)
    else:
        if isinstance(node, tirx.Sub):
            lows = low(a) + (mask - low(b)) + _uint64_const(1, lanes)
            top = high(a) + (mask - high(b)) + high(lows)
        else:
            lows = low(a) + low(b)
            top = high(a) + high(b) + high(lows)
        bottom = low(lows)
    return tirx.BitwiseOr(tirx.LShift(top, shift), bottom)


def uint64_arithmetic_without_nuw():
    """Additions, subtractions and multiplications of ``uint64`` values made so that no LLVM
    operation with a flag wraps (:func:`_uint64_sum`), as torch computes them; and the
    operand of a conversion of a signed value to ``uint64`` passed through ``& -1`` (which
    TVM's simplifier does not fold). TVM 0.27's LLVM code generator marks a ``uint64``
    addition, subtraction and multiplication ``nuw``, so one that wraps is poison and LLVM
    optimises what uses it as if it had not wrapped: ``(i - 3) // (i - 9)``,
    ``(i - 3) * (5 - i)``, comparisons, ``min``/``max``, shifts and bitwise operations of such
    differences were wrong. Its constant folding stopped on ``0U - 1U`` and on a negative
    value converted to ``uint64`` ("cannot make uint from negative value") once it knew the
    operands (a one-block grid). (Computing them in ``int64`` would trade ``nuw`` for
    ``nsw``, poison where the signed value overflows.)"""

    def uint64(dtype) -> bool:
        dtype = tvm.runtime.DataType(str(dtype))
        return dtype.type_code == tvm.runtime.DataTypeCode.UINT and dtype.bits == 64

    def arithmetic(node):
        return _uint64_sum(node) if uint64(node.ty) else node

    def conversion(node):
        source = tvm.runtime.DataType(str(node.value.ty))
        if not uint64(node.ty) or source.type_code != tvm.runtime.DataTypeCode.INT:
            return node
        ones = tirx.const(-1, str(source.with_lanes(1)))
        ones = ones if source.lanes == 1 else tirx.Broadcast(ones, source.lanes)
        return tirx.Cast(str(node.ty), tirx.BitwiseAnd(node.value, ones))

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, [((tirx.Add, tirx.Sub, tirx.Mul), arithmetic), (tirx.Cast, conversion)]))

    return prim_func_pass("CPUUint64ArithmeticWithoutNuw", run)


def _floor_from_truncated(node):
    """``node`` (a floor division or modulo of signed integers) written with truncating
    division and a correction, without bindings. The correction is integer arithmetic, not a
    comparison: where common-subexpression elimination binds a vectorised part of it (a
    division of a division repeats the inner one), LowerIntrin bounds the binding's value, and
    TVM 0.27's bound of a vector comparison stops the build ("IntImm can only take scalar, but
    boolx8 was supplied")."""
    a, b = node.a, node.b
    dtype = str(node.ty)
    bits = tvm.runtime.DataType(dtype).bits
    rmod = tirx.Mod(a, b)  # truncating: the sign of ``a``, and |rmod| < |b|
    # the truncated quotient is one above the floor where the remainder is not zero and its
    # sign is not the divisor's: -1 there, 0 elsewhere (the sign bits of rmod ^ b and of
    # rmod | -rmod, which is negative where rmod is not zero, spread by an arithmetic shift)
    signs = tirx.bitwise_and(tirx.bitwise_xor(rmod, b),
                             tirx.bitwise_or(rmod, tirx.const(0, dtype) - rmod))
    past = tirx.shift_right(signs, tirx.const(bits - 1, dtype))
    if isinstance(node, tirx.FloorDiv):
        return tirx.Div(a, b) + past
    return rmod + tirx.bitwise_and(b, past)


def lower_floor_division():
    """A floor division or modulo of signed integers whose divisor is not a positive constant
    is written with truncating division and a correction, without bindings, unless both
    operands are known to be at least 0 (wrapped unsigned values, which TVM lowers to a
    truncating division). TVM 0.27's LowerIntrin writes such a division with its remainder and
    quotient bound (``T.Let`` of ``rmod`` and ``rdiv``) inside the expression, and its LLVM
    code generator binds a ``Let``'s variable in its analyzer twice when the ``Let`` sits in
    the value of another one (once where it generates the inner value, once where it
    simplifies the outer value, which the analyzer simplifies differently): a division of a
    division stopped the build ("Binding of variable rmod as I.Range(0, 1) conflicts with
    previous binding"; found by the differential fuzzer). A positive constant divisor TVM
    lowers without bindings (a shift, or a truncating division and a correction), and LLVM
    merges the repeated operands written here."""

    analyzer = sym.Analyzer()

    def lower(node):
        divisor = const_int(node.b)
        if not str(node.ty).startswith("int") or divisor is not None and divisor > 0:
            return node
        if all(analyzer.const_int_bound(x).min_value >= 0 for x in (node.a, node.b)):
            return node  # TVM lowers it as a truncating division (wrapped unsigned operands)
        return _floor_from_truncated(node)

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.FloorDiv, tirx.FloorMod), lower)))

    return prim_func_pass("CPULowerFloorDivision", run)


def clz_defined_at_zero():
    """``T.clz`` of zero is its operand's width: each count is selected against its operand's
    zero test, which LLVM folds into one ``llvm.ctlz`` defined at zero. TVM 0.27's LLVM
    lowering of ``clz`` is ``llvm.ctlz`` with ``is_zero_poison`` set, so a count of a value LLVM
    proves zero (a tile filled with 0 and read back) was poison: the int64 ``T.clz`` of such an
    element stored whatever the output's memory held, not 64 (found by the differential
    fuzzer, seed 41). (``llvm.ctlz`` called with the flag clear cannot be written here: the
    flag is one bit for every lane, which TVM's vectoriser broadcasts.) The operand is read
    twice; one that calls out of the kernel (a runtime atomic) is bound once."""

    def define(call):
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "prim.clz":
            return call
        value = call.args[0]
        vtype = str(value.ty)
        bits = tvm.runtime.DataType(vtype).bits
        opaque = calls_out(value)
        operand = tirx.Var("clz_operand", vtype) if opaque else value
        count = tirx.clz(operand)
        count = tirx.Select(operand == tirx.const(0, vtype), tirx.const(bits, str(count.ty)),
                            count)
        return tirx.Let(operand, value, count) if opaque else count

    return prim_func_pass("CPUClzDefinedAtZero", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, define))))


FLOAT16_MAX = 65504  # and an integer from 65520 on converts to infinity


def float16_of_integers_in_range():
    """A conversion of a scalar integer value that may lie beyond float16's largest finite
    value (65504) to float16 converts the value clamped into +-65504, and gives an infinity
    from +-65520 on: the same value (an integer between 65504 and 65520 rounds to 65504).
    TVM 0.27's LLVM code generator bounds the value of each ``Let`` it binds, converting the
    bounds of a conversion to the conversion's type, and stops where an integer bound is not
    a float16 ("Literal value -2.14748e+09 exceeds minimum of float16": a saturated
    conversion of a float16 value to int32, converted back to float16 in the argument of a
    tanh, which binds it; fuzzer seed 406)."""

    def in_range(node):
        value, dtype = node.value, str(node.ty)
        source = tvm.runtime.DataType(str(value.ty))
        if dtype != "float16" or source.lanes != 1 or \
                source.type_code not in (tvm.runtime.DataTypeCode.INT,
                                         tvm.runtime.DataTypeCode.UINT) or \
                source.bits < (16 if source.type_code == tvm.runtime.DataTypeCode.UINT else 32):
            return node
        itype = str(value.ty)
        clamped = tirx.Min(value, tirx.const(FLOAT16_MAX, itype))
        if source.type_code == tvm.runtime.DataTypeCode.INT:
            clamped = tirx.Max(clamped, tirx.const(-FLOAT16_MAX, itype))
            converted = tirx.Select(value <= tirx.const(-FLOAT16_MAX - 16, itype),
                                    tirx.const(float("-inf"), dtype), tirx.Cast(dtype, clamped))
        else:
            converted = tirx.Cast(dtype, clamped)
        return tirx.Select(value >= tirx.const(FLOAT16_MAX + 16, itype),
                           tirx.const(float("inf"), dtype), converted)

    def run(func):
        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Cast, in_range)))

    return prim_func_pass("CPUFloat16OfIntegers", run)
