"""``T.copy(A[i, j], B[i, j])`` inside ``T.Parallel``: TileLang's element copy, each
iteration's element converted to the destination's dtype, with the safe-memory rules of a
load and a store (TileLang's ``test_tilelang_elementwise_copy_oob_safe_value_non_regression``:
the padding reads ``T.annotate_safe_value``'s value)."""

import pytest
import tilewright
import tilewright.language as T
import torch

TARGETS = ["cpu", "interp"]


def padded_copy(M, N, PM, PN, src, dst, pad):
    @T.prim_func
    def kernel(A: T.Tensor((M, N), src), B: T.Tensor((PM, PN), dst)):
        with T.Kernel(1, threads=128):
            if pad is not None:
                T.annotate_safe_value({A: pad})
            for i, j in T.Parallel(PM, PN):
                T.copy(A[i, j], B[i, j])

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src,dst,pad", [("float32", "float32", -99), ("float32", "float16", -99),
                                         ("bfloat16", "float32", None)])
def test_element_copies_in_parallel_pad_with_the_safe_value(target, src, dst, pad):
    M, N, PM, PN = 70, 75, 96, 96
    a = torch.randn(M, N).to(getattr(torch, src))
    kernel = tilewright.compile(padded_copy(M, N, PM, PN, src, dst, pad), out_idx=[1],
                                target=target)
    b = kernel(a)
    want = torch.full((PM, PN), 0 if pad is None else pad, dtype=getattr(torch, dst))
    want[:M, :N] = a.to(getattr(torch, dst))
    assert torch.equal(b, want)


def test_an_element_copy_outside_parallel_stays_a_tile_copy_of_one_element():
    @T.prim_func
    def kernel(A: T.Tensor((4,), T.float32), B: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=32):
            T.copy(A[2], B[1])

    a, b = torch.arange(4.0), torch.zeros(4)
    tilewright.compile(kernel, target="cpu")(a, b)
    assert b.tolist() == [0, 2, 0, 0]
