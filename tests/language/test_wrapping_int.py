"""Unsigned and narrow integer arithmetic (tilewright.transform.wrapping_int) wraps as torch
does, and TVM's simplifier takes the rewritten expressions once it knows an operand's value:
without the rewrite its constant folding stops on each of these (``Cast(uint32, -3)``,
``0U - 1U``, an int8 sum of 129). What it leaves (it does not fold ``&``) is evaluated here
with C's rules on the values."""

import pytest
import tvm
import tvm_ffi
from tilewright.transform import wrapping_int
from tvm import sym, tirx

x = tirx.Var("x", "int32")
u16 = tirx.Cast("uint16", x)


def _uint32(value):
    return tirx.Cast("uint32", value)


@pytest.mark.parametrize(("expr", "want"), [
    (lambda: _uint32(x - 3), 2 ** 32 - 3),
    (lambda: tirx.Cast("int32", _uint32(x - 3) - tirx.const(2, "uint32")), -5),
    (lambda: tirx.FloorDiv(u16 - tirx.const(1, "uint16"), tirx.const(3, "uint16")), 21845),
    (lambda: tirx.Cast("int8", x + 129), -127),
    (lambda: tirx.Cast("int8", x + 100) + tirx.Cast("int8", x + 29), -127),
    (lambda: tirx.Cast("int16", x - 1) * tirx.const(-32768, "int16"), -32768),
    (lambda: _uint32(x + 65537) * _uint32(x + 65537), 131073),
    (lambda: tirx.LShift(tirx.Cast("uint8", x + 255), tirx.const(1, "uint8")), 254),
    (lambda: tirx.bitwise_not(tirx.Cast("uint8", x)), 255),
    (lambda: tirx.LT(u16, tirx.const(1, "uint16")), True),
    # boundary values: each product or quotient leaves the type, made in 32 bits
    (lambda: tirx.Cast("uint8", x + 255) * tirx.Cast("uint8", x + 255), 1),  # 0xFE01
    (lambda: u16 - tirx.const(65535, "uint16"), 1),
    (lambda: tirx.Cast("uint16", x + 65535) * tirx.Cast("uint16", x + 65535), 1),  # 0xFFFE0001
    (lambda: tirx.Cast("uint16", x + 65535) * tirx.const(65535, "uint16"), 1),
    (lambda: tirx.Cast("int16", x - 32768) * tirx.Cast("int16", x - 1), -32768),
    (lambda: tirx.Cast("int16", x - 32768) * tirx.Cast("int16", x - 32768), 0),
    (lambda: tirx.FloorDiv(tirx.Cast("int16", x - 32768), tirx.const(-1, "int16")), -32768),
    (lambda: tirx.Cast("int8", x - 128) * tirx.Cast("int8", x - 128), 0),
    (lambda: tirx.FloorDiv(tirx.Cast("int8", x - 128), tirx.const(-1, "int8")), -128),
    (lambda: tirx.Cast("int8", x - 128) - tirx.const(1, "int8"), 127),
    (lambda: tirx.bitwise_not(tirx.Cast("int16", x + 32767)), -32768),
    # an int32 of any value converted in int32: the sign flip does not overflow
    (lambda: tirx.Cast("int8", x + 2 ** 31 - 1), -1),
    (lambda: tirx.Cast("int16", x - 2 ** 31), 0),
    (lambda: tirx.Cast("uint8", x - 2 ** 31 + 129), 129),
    (lambda: tirx.Cast("int8", tirx.Cast("uint16", x + 65535)), -1),
])
def test_folds_to_the_wrapped_value(expr, want):
    at_zero = tvm_ffi.structural_map(wrapping_int.rewrite(expr()), (
        tirx.Var, lambda v: tirx.const(0, "int32") if v.same_as(x) else v))
    folded = sym.Analyzer().simplify(at_zero)
    assert _value(folded) == want, folded


def _types(expr) -> set[str]:
    found = set()
    tvm_ffi.structural_walk(expr, (tvm.ir.Expr, lambda e: found.add(str(e.ty))))
    return found


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
@pytest.mark.parametrize("op", [tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod,
                                tirx.Min, tirx.Max, tirx.LT])
def test_narrow_operations_are_made_in_32_bits(dtype, op):
    """A GPU makes a 64-bit integer operation of several 32-bit instructions: an 8- or 16-bit
    operation is made in int32, a uint16 product (up to 0xFFFE0001) in uint32."""
    a, b = tirx.Var("a", dtype), tirx.Var("b", dtype)
    types = _types(wrapping_int.rewrite(op(a, b)))
    assert "int64" not in types, types
    assert ("uint32" in types) == (op is tirx.Mul and dtype == "uint16"), types


def test_uint32_products_and_shifts_stay_in_64_bits():
    """A uint32 product and a left shift (its count may reach 63) need int64."""
    a, b = tirx.Var("a", "uint32"), tirx.Var("b", "uint8")
    assert "int64" in _types(wrapping_int.rewrite(a * a))
    assert "int64" in _types(wrapping_int.rewrite(tirx.LShift(b, b)))
    assert "int64" not in _types(wrapping_int.rewrite(tirx.Cast("int8", x)))
    assert "int64" in _types(wrapping_int.rewrite(tirx.Cast("int8", tirx.Var("u", "uint32"))))


OPS = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
       tirx.FloorDiv: lambda a, b: a // b, tirx.BitwiseAnd: lambda a, b: a & b,
       tirx.BitwiseXor: lambda a, b: a ^ b,
       tirx.LShift: lambda a, b: a << b, tirx.RShift: lambda a, b: a >> b,
       tirx.LT: lambda a, b: a < b}


def _value(expr) -> int:
    """The value of a constant expression, each intermediate checked to lie in its type."""
    if isinstance(expr, tirx.IntImm):
        return expr.value
    if isinstance(expr, tirx.Cast):
        value = _value(expr.value)
    elif isinstance(expr, tirx.BitwiseNot):
        value = ~_value(expr.a)
    else:
        value = OPS[type(expr)](_value(expr.a), _value(expr.b))
    low, high = wrapping_int.value_range(expr.ty) or (0, 1)
    assert low <= value <= high, f"{value} out of {expr.ty}: {expr}"
    return value


def test_widening_and_index_conversions_are_kept():
    for expr in (tirx.Cast("int32", tirx.Var("u", "uint8")), tirx.Cast("int32", tirx.Var(
            "i", "int64")), x + 1,
                 # into 64 bits (an int64 mask cannot hold 2**64 - 1: the cpu conformance's
                 # int8 -> uint64 cast stopped in TVM)
                 tirx.Cast("uint64", tirx.Var("s", "int8"))):
        assert wrapping_int.rewrite(expr).same_as(expr)


def wrapped_constants():
    """Constants of wrapping types written in a kernel, each widened to int64 to be stored."""
    import tilewright.language as T

    @T.prim_func
    def wrapped_constants(Y: T.Tensor((8,), "int64")):
        with T.Kernel(1, threads=32) as _:
            Y[0] = T.cast(T.uint8(0) - T.uint8(1), "int64")
            Y[1] = T.cast(T.uint8(3) - 5, "int64")
            Y[2] = T.cast(1 - T.uint16(2), "int64")
            Y[3] = T.cast(T.int8(100) + T.int8(100), "int64")
            Y[4] = T.cast(T.int16(-32768) * T.int16(-1), "int64")
            Y[5] = T.cast(T.uint32(0) - T.uint32(1), "int64")
            Y[6] = T.cast(T.uint8(1) << T.uint8(9), "int64")
            Y[7] = T.cast(-T.uint8(1), "int64")

    return wrapped_constants


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_constants_of_a_wrapping_type_fold_wrapped_in_a_kernel(target):
    """Found by fuzzing the cuda backend (seed 59): ``T.uint8(0) - T.uint8(1)`` stopped the
    trace in TVM ("Minuend's value is 0U ... will cause a negative uint"); the frontend folds
    such constants as the language's arithmetic on their values wraps."""
    import tilewright
    import torch

    y = torch.zeros(8, dtype=torch.int64)
    tilewright.compile(wrapped_constants(), target=target)(y)
    assert y.tolist() == [255, 254, 65535, -56, -32768, 2 ** 32 - 1, 0, 255]


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_bitwise_not_of_an_unsigned_constant_wraps(target):
    """Found by the fuzzer's new ``~`` draws: the interpreter evaluated ``~T.uint8(0)`` as
    Python's ``~0``, -1, and failed to store it into a uint8 tile (OverflowError) instead of
    giving 255."""
    import tilewright
    import tilewright.language as T
    import torch

    @T.prim_func
    def unsigned_not(X: T.Tensor((4,), "uint8"), Y: T.Tensor((4,), "uint8"),
                     Z: T.Tensor((4,), "uint16")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(4):
                Y[i] = ~T.uint8(0) - X[i]
                Z[i] = (~T.uint16(1)) // T.uint16(3) + T.cast(X[i], "uint16")

    x = torch.tensor([0, 1, 7, 200], dtype=torch.uint8)
    y, z = tilewright.compile(unsigned_not, out_idx=[1, 2], target=target)(x)
    assert y.tolist() == [255 - v for v in x.tolist()]
    assert z.tolist() == [21844 + v for v in x.tolist()]


def test_other_constants_keep_tvms_arithmetic():
    import tilewright.language as T
    from tilewright.language.math import arith

    assert arith("+", 2, 3) == 5 and arith("+", (1,), (2,)) == (1, 2)
    assert arith("-", T.int32(0), T.int32(1)).value == -1  # int32: TVM's own folding
    folded = arith("*", T.float32(1.5), T.float32(2.0))
    assert str(folded.ty) == "float32" and folded.value == 3.0
