"""Comparisons of an unsigned value with 0 (found by the differential fuzzer: TVM's
LowerIntrin aborted the process on ``if u < 0`` of a let-bound unsigned value)."""

import pytest
import tilewright
import tilewright.language as T
import torch


@tilewright.jit(out_idx=[-1], target="cpu")
def sign_test(test):
    @T.prim_func
    def main(X: T.Tensor((1, 1), "uint8"), Y: T.Tensor((1, 1), "uint8")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((1, 1), "uint8")
            T.copy(X[by, bx], x)
            y = T.alloc_fragment((1, 1), "uint8")
            for i, j in T.Parallel(1, 1):  # `by + i` also here: one let binding for both
                y[i, j] = T.if_then_else(x[i, j] > T.uint8(6), T.cast(by + i, "uint8"), x[i, j])
            for i, j in T.Parallel(1, 1):
                if test(T.cast(by + i, "uint8")):
                    y[i, j] = y[i, j] + T.uint8(3)
            T.copy(y, Y[by, bx])
    return main


TESTS = {"u < 0": (lambda u: u < T.uint8(0), 0), "0 > u": (lambda u: T.uint8(0) > u, 0),
         "u >= 0": (lambda u: u >= T.uint8(0), 3), "0 <= u": (lambda u: T.uint8(0) <= u, 3)}


@pytest.mark.parametrize("name", TESTS)
def test_unsigned_compared_with_zero(name):
    test, added = TESTS[name]
    kernel = sign_test(test)
    for value in (3, 9):
        x = torch.tensor([[value]], dtype=torch.uint8)
        torch.testing.assert_close(kernel(x), torch.where(x > 6, 0, x) + added)
