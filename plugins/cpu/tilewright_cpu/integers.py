"""Integer comparisons and floor divisions written so that TVM 0.27's build, which stops or
aborts on some of theirs, takes them."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

from .irutil import const_int


def _unsigned(expr) -> bool:
    return str(expr.ty).startswith("uint")


def fold_unsigned_sign_tests():
    """``u < 0`` and ``0 > u`` of an unsigned ``u`` become ``False``, ``u >= 0`` and ``0 <= u``
    ``True``; other comparisons of two unsigned values of up to 32 bits are made in int64.
    TVM 0.27's LowerIntrin aborts the process on an ``if`` whose condition is
    ``u < 0`` of a let-bound unsigned value ("Check failed: literal_constraints_.size() ==
    new_literal_size", thrown from a destructor: ``std::terminate``), which common-
    subexpression elimination makes of a kernel comparing an unsigned cast with 0 (found by
    the differential fuzzer)."""

    def fold(node):
        lhs_zero, rhs_zero = const_int(node.a) == 0, const_int(node.b) == 0
        if isinstance(node, (tirx.LT, tirx.GE)) and rhs_zero and _unsigned(node.a):
            return tirx.const(isinstance(node, tirx.GE), str(node.ty))
        if isinstance(node, (tirx.GT, tirx.LE)) and lhs_zero and _unsigned(node.b):
            return tirx.const(isinstance(node, tirx.LE), str(node.ty))
        if _unsigned(node.a) and _unsigned(node.b) and tvm.DataType(str(node.a.ty)).bits <= 32:
            # compared as int64 (every value kept): TVM's simplifier moves an unsigned
            # comparison's operands to one side, and its constant folding stops on the
            # negative difference ("Minuend's value is 0U ... which will cause a negative
            # uint": u < 1 of a u known to be 0)
            return type(node)(tirx.Cast("int64", node.a), tirx.Cast("int64", node.b))
        return node

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.LT, tirx.GE, tirx.GT, tirx.LE), fold)))

    return prim_func_pass("CPUFoldUnsignedSignTests", run)


def _floor_from_truncated(node):
    """``node`` (a floor division or modulo of signed integers) written with truncating
    division and a correction, without bindings."""
    a, b = node.a, node.b
    dtype = str(node.ty)
    zero = tirx.const(0, dtype)
    rmod = tirx.Mod(a, b)  # truncating: the sign of ``a``
    # the truncated quotient is one above the floor where the remainder is not zero and its
    # sign is not the divisor's
    past = tirx.Or(tirx.And(rmod < zero, b > zero), tirx.And(rmod > zero, b < zero))
    if isinstance(node, tirx.FloorDiv):
        return tirx.Div(a, b) - tirx.Cast(dtype, past)
    return rmod + tirx.Select(past, b, zero)


def lower_floor_division():
    """A floor division or modulo of signed integers whose divisor is not a positive constant
    is written with truncating division and a correction, without bindings. TVM 0.27's
    LowerIntrin writes such a division with its remainder and quotient bound (``T.Let`` of
    ``rmod`` and ``rdiv``) inside the expression, and its LLVM code generator binds a ``Let``'s
    variable in its analyzer twice when the ``Let`` sits in the value of another one (once
    where it generates the inner value, once where it simplifies the outer value, which the
    analyzer simplifies differently): a division of a division stopped the build ("Binding of
    variable rmod as I.Range(0, 1) conflicts with previous binding"; found by the differential
    fuzzer). A positive constant divisor TVM lowers without bindings (a shift, or a truncating
    division and a correction), and LLVM merges the repeated operands written here."""

    def lower(node):
        divisor = const_int(node.b)
        if not str(node.ty).startswith("int") or divisor is not None and divisor > 0:
            return node
        return _floor_from_truncated(node)

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.FloorDiv, tirx.FloorMod), lower)))

    return prim_func_pass("CPULowerFloorDivision", run)
