"""Python ints beside integer expressions (tilewright.language.int_operands): TVM 0.27 passed
an int operand of ``& | ^ << >>`` to C++ as a 32-bit int (``x & 0x7FFFFFFFFFFFFFFF`` of an
int64 became ``x & -1``), refused a negative one beside a uint32 and could not convert one
above 2**63. TileLang's own test (testing/python/language/test_tilelang_intimm.py) and kernels
computing with such constants, against torch."""

import operator

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tvm import tirx


def test_tilelangs_intimm_test():
    T.int32(0x7FFFFFFF)
    T.int32(-0x7FFFFFFF - 1)
    T.uint32(0xFFFFFFFF)
    T.int64(0x7FFFFFFFFFFFFFFF)
    T.int64(-0x7FFFFFFFFFFFFFFF - 1)
    T.uint64(0xFFFFFFFFFFFFFFFF)
    assert str(T.int32() & 0x7FFFFFFF) == "v & 2147483647"
    assert str(T.uint32() & 0xFFFFFFFF) == "v & T.uint32(4294967295)"
    assert str(T.int64() & 0x7FFFFFFFFFFFFFFF) == "v & T.int64(9223372036854775807)"
    assert str(T.uint64() & T.uint64(0xFFFFFFFFFFFFFFFF)) == "v & T.uint64(18446744073709551615)"


@pytest.mark.parametrize("dtype, op, value, text", [
    ("int32", operator.and_, 2**40, 'T.Cast("int64", x) & T.int64(1099511627776)'),  # was x & 0
    ("uint32", operator.add, -1, "x + T.uint32(4294967295)"),  # modulo 2**32, as C converts
    ("uint64", operator.add, 2**63 + 5, "x + T.uint64(9223372036854775813)"),
    ("uint32", operator.xor, 0xFFFFFFF0, "x ^ T.uint32(4294967280)"),
])
def test_constants_outside_int32(dtype, op, value, text):
    assert str(op(tirx.Var("x", dtype), value)) == text


def test_small_constants_keep_tvms_promotion():
    x = tirx.Var("x", "int8")
    assert str((x + 5).ty) == "int32"  # C's: the narrow value is widened
    assert str((tirx.Var("y", "uint8") - 1).ty) == "int32"


@pytest.mark.parametrize("make, message", [
    (lambda: tirx.Var("x", "int32") << 32, r"a shift of a int32 value by 32: the amount must "
                                           r"be in 0..31"),
    (lambda: tirx.Var("x", "int64") >> -1, r"by -1"),
    (lambda: tirx.Var("x", "uint64") < -1, r"the constant -1 beside a uint64 value"),
    (lambda: tirx.Var("x", "int64") + 2**64, r"fits neither int64"),
])
def test_constants_without_a_meaning_are_refused(make, message):
    with pytest.raises(KernelError, match=message):
        make()


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_kernels_compute_with_wide_constants(target):
    @T.prim_func
    def main(A: T.Tensor((4,), "int64"), B: T.Tensor((4,), "int64"),
             C: T.Tensor((4,), "uint32"), D: T.Tensor((4,), "uint32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(4):
                B[i] = (A[i] & 0x7FFFFFFFFFFFFFFF) ^ 0x100000000
                C[i] = T.cast(A[i], "uint32") & 0xFFFFFFF0
                D[i] = T.cast(A[i], "uint32") + -1

    a = torch.tensor([-1, 5, 2**40 + 3, -2**62], dtype=torch.int64)
    b = torch.zeros(4, dtype=torch.int64)
    c, d = torch.zeros(4, dtype=torch.uint32), torch.zeros(4, dtype=torch.uint32)
    tilewright.compile(main, target=target)(a, b, c, d)
    assert b.tolist() == [(v & 0x7FFFFFFFFFFFFFFF) ^ 0x100000000 for v in a.tolist()]
    low = [v % 2**32 for v in a.tolist()]
    assert [v % 2**32 for v in c.tolist()] == [v & 0xFFFFFFF0 for v in low]
    assert [v % 2**32 for v in d.tolist()] == [(v - 1) % 2**32 for v in low]
