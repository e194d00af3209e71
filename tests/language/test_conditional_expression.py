"""``A if C else B`` in a kernel body: a Python condition picks one value as Python does; a
symbolic one selects between both, as ``T.if_then_else`` (TileLang's meaning; its varlen
attention examples write padding rows this way). On the backends that execute here."""

import pytest
import tilewright
import tilewright.language as T
import torch


def padded(n=16, valid=11, use_b=True):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                C[i] = A[i] if i < valid else (B[i] if use_b else T.cast(0, "float32"))

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("use_b", [True, False])
def test_a_symbolic_condition_selects_between_both_values(target, use_b):
    a, b = torch.randn(16), torch.randn(16)
    c = tilewright.compile(padded(use_b=use_b), out_idx=[-1], target=target)(a, b)
    want = torch.where(torch.arange(16) < 11, a, b if use_b else torch.zeros(16))
    assert torch.equal(c, want)
