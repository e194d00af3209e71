"""T.shift_left / T.shift_right (TileLang's names for ``<<`` and ``>>``) and
T.get_block_binding on the backends that execute here: a Python int operand is an int32 (TVM's
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

    assert "test_shift.py" in str(info.value)


def test_get_block_binding_checks_its_dimension():
    with pytest.raises(KernelError, match=r"T\.get_block_binding takes a grid dimension below 1"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "int32")):
            with T.Kernel(4):
                A[T.get_block_binding(1)] = 0
