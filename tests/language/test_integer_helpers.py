"""TileLang's integer helpers on the backends that execute here: T.dp4a (four 8-bit products
added to an int32), T.index_to_coordinates, T.get_block_binding, and T.shift_left /
T.shift_right (``<<`` and ``>>``): a Python int operand is an int32 (TVM's
rule, so ``T.shift_left(1, x)`` of a uint8 ``x`` is computed in int32, not wrapped in uint8),
signed right shifts are arithmetic, unsigned ones logical; a float operand is refused at the
user's line. (The CUDA backend: test_cuda_dialect_emulate.py's extern_call case.)"""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def shifts(n=64):
    @T.macro
    def fill(X, L, R, U):
        i = T.get_block_binding(0)
        for j in T.Parallel(n):
            L[i, j] = T.shift_left(1, X[i, j] % 24)
            R[i, j] = T.shift_right(T.cast(X[i, j], "int32") - 128, j % 8)
            U[i, j] = T.cast(T.shift_right(T.cast(X[i, j], "uint8") + T.cast(200, "uint8"),
                                           T.cast(j % 8, "uint8")), "int32")

    @T.prim_func
    def main(X: T.Tensor((2, n), "uint8"), L: T.Tensor((2, n), "int32"),
             R: T.Tensor((2, n), "int32"), U: T.Tensor((2, n), "int32")):
        with T.Kernel(2):
            fill(X, L, R, U)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_shifts_match_torch(target):
    kernel = tilewright.compile(shifts(), out_idx=[1, 2, 3], target=target)
    x = torch.randint(0, 256, (2, 64), dtype=torch.uint8)
    left, right, unsigned = kernel(x)
    j = torch.arange(64).view(1, 64)
    wide = x.long()
    assert torch.equal(left, (1 << (wide % 24)).int())
    assert torch.equal(right, ((wide - 128) >> (j % 8)).int())
    assert torch.equal(unsigned, (((wide + 200) % 256) >> (j % 8)).int())


def test_shifts_of_python_ints_are_python_ints():
    assert T.shift_left(3, 4) == 48 and T.shift_right(-64, 2) == -16


def test_a_float_shift_is_refused_at_the_users_line():
    with pytest.raises(KernelError, match=r"T\.shift_left shifts integers.*float32") as info:
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                for i in T.Parallel(4):
                    A[i] = T.shift_left(A[i], 1)

    assert "test_integer_helpers.py:" in str(info.value)


def test_get_block_binding_checks_its_dimension():
    with pytest.raises(KernelError, match=r"T\.get_block_binding takes a grid dimension below 1"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "int32")):
            with T.Kernel(4):
                A[T.get_block_binding(1)] = 0


def dot4(n=8, k=3):
    @T.prim_func
    def main(A: T.Tensor((n, 4 * k), "int8"), B: T.Tensor((n, 4 * k), "uint8"),
             C: T.Tensor((n,), "int32"), D: T.Tensor((n, 2), "int32")):
        with T.Kernel(n) as i:
            acc = T.alloc_local((1,), "int32")
            acc[0] = 7
            for kk in T.serial(k):
                T.dp4a(A[i, kk * 4], B[i, kk * 4], acc[0])
            C[i] = acc[0]
            row, col = T.index_to_coordinates(i * 5 + 3, (16, 5))
            D[i, 0] = row
            D[i, 1] = col

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_dp4a_and_index_to_coordinates_match_torch(target):
    kernel = tilewright.compile(dot4(), out_idx=[2, 3], target=target)
    a = torch.randint(-128, 128, (8, 12), dtype=torch.int8)
    b = torch.randint(0, 256, (8, 12), dtype=torch.uint8)
    c, d = kernel(a, b)
    assert torch.equal(c, ((a.int() * b.int()).sum(1) + 7).int())
    flat = torch.arange(8) * 5 + 3
    assert torch.equal(d, torch.stack([flat // 5, flat % 5], 1).int())
    assert T.index_to_coordinates(13, (4, 5)) == [2, 3]


def test_dp4a_checks_its_operands_at_the_users_line():
    with pytest.raises(KernelError, match=r"T\.dp4a: a must be int8 or uint8, got float32"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32"), C: T.Tensor((1,), "int32")):
            with T.Kernel(1):
                T.dp4a(A[0], A[0], C[0])
