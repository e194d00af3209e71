"""T.any_of / T.all_of (TileLang's block-sparse tests): a block-sparse GEMM skipping K blocks
by a global mask, on the CPU and the interpreter, against torch; bad regions refused at the
line."""

import itertools

import pytest
import tilewright
import tilewright.language as T
import torch


def block_sparse(M, N, K, flags, test, where, bm=32, bn=32, bk=16):
    """C = sum over the K blocks whose mask passes ``test`` (any_of / all_of) of A_k @ B_k;
    the flags are read from global memory or from a shared / local copy (``where``)."""
    op = getattr(T, test)

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             Mask: T.Tensor((M // bm, N // bn, K // bk, flags), "bool"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_shared((bm, bk), "float16")
            b = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            copy = T.alloc_shared((flags,), "bool") if where == "shared" else \
                T.alloc_local((flags,), "bool")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if where == "global":
                    mask = Mask[by, bx, k, :]
                else:
                    for i in T.serial(flags):
                        copy[i] = Mask[by, bx, k, i]
                    mask = copy
                if op(mask):
                    T.copy(A[by * bm, k * bk], a)
                    T.copy(B[k * bk, bx * bn], b)
                    T.gemm(a, b, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def reference(a, b, mask, test, bm=32, bn=32, bk=16):
    c = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for i, j, k in itertools.product(*(range(n) for n in mask.shape[:3])):
        flags = mask[i, j, k]
        if flags.any() if test == "any_of" else flags.all():
            c[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] += \
                a[i * bm:(i + 1) * bm, k * bk:(k + 1) * bk].double() @ \
                b[k * bk:(k + 1) * bk, j * bn:(j + 1) * bn].double()
    return c


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("test,where", [("any_of", "global"), ("all_of", "shared"),
                                        ("any_of", "local")])
def test_block_sparse_gemm_skips_masked_blocks(target, test, where):
    M = N = 64
    K = 96
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    mask = torch.rand(2, 2, 6, 2, generator=gen) > 0.5
    mask[:, :, 0] = False  # every first K block skipped: the clear must still hold
    kernel = tilewright.compile(block_sparse(M, N, K, 2, test, where), target=target)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, mask, c)
    torch.testing.assert_close(c.double(), reference(a, b, mask, test), atol=1e-3, rtol=1e-3)


def test_a_tile_of_numbers_is_true_where_nonzero():
    @T.prim_func
    def main(X: T.Tensor((4, 3), "int32"), Y: T.Tensor((4, 2), "int32")):
        with T.Kernel(4) as bx:
            row = T.alloc_shared((1, 3), "int32")
            T.copy(X[bx, 0], row)
            Y[bx, 0] = T.if_then_else(T.any_of(row), 1, 0)
            Y[bx, 1] = T.if_then_else(T.all_of(row[0, 1:3]), 1, 0)

    x = torch.tensor([[0, 0, 0], [0, 5, -1], [3, 0, 2], [1, 1, 1]], dtype=torch.int32)
    for target in ("cpu", "interp"):
        y = torch.zeros(4, 2, dtype=torch.int32)
        tilewright.compile(main, target=target)(x, y)
        assert y.tolist() == [[0, 0], [1, 1], [1, 0], [1, 1]], target


def test_regions_of_unknown_or_large_shape_are_refused_at_the_line():
    n = T.dynamic("n")
    with pytest.raises(tilewright.KernelError, match=r"T.any_of: the region of 'X' has shape "
                                                     r"\(n,\); it needs a constant shape"):
        @T.prim_func
        def dynamic(X: T.Tensor((n,), "bool"), Y: T.Tensor((1,), "int32")):
            with T.Kernel(1) as _bx:
                Y[0] = T.if_then_else(T.any_of(X[0:n]), 1, 0)

    with pytest.raises(tilewright.KernelError, match="has 4096 elements, more than 256") as err:
        @T.prim_func
        def large(X: T.Tensor((64, 64), "bool"), Y: T.Tensor((1,), "int32")):
            with T.Kernel(1) as _bx:
                Y[0] = T.if_then_else(T.all_of(X), 1, 0)
    assert "test_any_all_of.py" in str(err.value)
