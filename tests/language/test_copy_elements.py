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


def padded_tile_copy(M, N, bm, bn, src, dst, pad, through_shared=False):
    """TileLang's safe-value copy: tiles of A, whose last ones pass its end, copied to B
    (directly, or through a shared tile); the padding reads ``T.annotate_safe_value``'s value."""
    PM, PN = -(-M // bm) * bm, -(-N // bn) * bn

    @T.prim_func
    def kernel(A: T.Tensor((M, N), src), B: T.Tensor((PM, PN), dst)):
        with T.Kernel(T.ceildiv(PN, bn), T.ceildiv(PM, bm), threads=128) as (bx, by):
            if pad is not None:
                T.annotate_safe_value({A: pad})
            if through_shared:
                tile = T.alloc_shared((bm, bn), dst)
                T.copy(A[by * bm, bx * bn], tile)
                T.copy(tile, B[by * bm, bx * bn])
            else:
                T.copy(A[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn],
                       B[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn])

    return kernel


def padded_reference(a, M, N, bm, bn, dst, pad):
    PM, PN = -(-M // bm) * bm, -(-N // bn) * bn
    want = torch.full((PM, PN), 0 if pad is None else pad, dtype=getattr(torch, dst))
    want[:M, :N] = a.to(getattr(torch, dst))
    return want


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src,dst,pad,shared", [("float32", "float32", -99, False),
                                                ("float32", "float16", -99, True),
                                                ("float32", "float32", None, False),
                                                ("int32", "int32", 7, True)])
def test_a_tile_copy_pads_with_the_safe_value(target, src, dst, pad, shared):
    """Before: a tile copy's reads outside A read 0 whatever T.annotate_safe_value said
    (TileLang's test_tilelang_copy_oob_safe_value_uses_annotation: silently other values)."""
    M, N, bm, bn = 70, 75, 32, 32
    a = (torch.randn(M, N) * 10).to(getattr(torch, src))
    kernel = tilewright.compile(padded_tile_copy(M, N, bm, bn, src, dst, pad, shared),
                                out_idx=[1], target=target)
    assert torch.equal(kernel(a), padded_reference(a, M, N, bm, bn, dst, pad))
