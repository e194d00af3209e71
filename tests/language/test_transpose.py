"""``T.transpose(src, dst)``: a tile written transposed into another, on the CPU and the
interpreter, against torch; its operands checked at the user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, KernelValueError

TARGETS = ["cpu", "interp"]


def tiled(M, N, bm, bn, dtype="float16", out=None, frag=False):
    """TileLang's transpose test: each (bm, bn) tile of A transposed into B = A^T (in
    ``out``'s dtype when given: converted)."""
    out = out or dtype

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), out)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_shared((bm, bn), dtype)
            tile_t = T.alloc_fragment((bn, bm), out) if frag else T.alloc_shared((bn, bm), out)
            T.copy(A[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], tile)
            T.transpose(tile, tile_t)
            T.copy(tile_t, B[bx * bn:(bx + 1) * bn, by * bm:(by + 1) * bm])

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M, N, bm, bn", [(128, 128, 64, 64), (256, 256, 128, 128),
                                           (128, 256, 128, 256), (70, 50, 16, 32)])
def test_tiles_transposed_like_torch(target, M, N, bm, bn):
    a = torch.randn(M, N).half()
    b = tilewright.compile(tiled(M, N, bm, bn), out_idx=[1], target=target)(a)
    assert torch.equal(b, a.T)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, out", [("float32", "bfloat16"), ("int32", "float32"),
                                        ("float16", "float16")])
def test_into_a_fragment_converted(target, dtype, out):
    a = (torch.randn(40, 24) * 50).to(getattr(torch, dtype))
    kernel = tilewright.compile(tiled(40, 24, 16, 8, dtype, out, frag=True), out_idx=[1],
                                target=target)
    assert torch.equal(kernel(a), a.T.to(getattr(torch, out)))


def batched(B, M, N, dtype="float32"):
    """A [B, M, N] tile transposed into [B, N, M] (the leading dimension kept), and its second
    stage alone into an (N, M) tile."""

    @T.prim_func
    def main(A: T.Tensor((B, M, N), dtype), C: T.Tensor((B, N, M), dtype),
             D: T.Tensor((N, M), dtype)):
        with T.Kernel(1, threads=128) as _bx:
            s = T.alloc_shared((B, M, N), dtype)
            t = T.alloc_shared((B, N, M), dtype)
            u = T.alloc_fragment((N, M), dtype)
            T.copy(A, s)
            T.transpose(s, t)
            T.transpose(s[1, :, :], u)
            T.copy(t, C)
            T.copy(u, D)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_leading_dimensions_and_a_stage(target):
    a = torch.randn(3, 8, 16)
    c, d = tilewright.compile(batched(3, 8, 16), out_idx=[1, 2], target=target)(a)
    assert torch.equal(c, a.transpose(1, 2)) and torch.equal(d, a[1].T)


def _kernel(body, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((16, 32), dtype)):
        with T.Kernel(1, threads=128) as _bx:
            s = T.alloc_shared((16, 32), dtype)
            t = T.alloc_shared((32, 16), dtype)
            v = T.alloc_shared((32,), dtype)
            body(A, s, t, v)

    return main


@pytest.mark.parametrize("body, error, message", [
    (lambda A, s, t, v: T.transpose(s, s[0:16, 0:16]), KernelError, "into itself"),
    (lambda A, s, t, v: T.transpose(A, t), KernelError, "global tensor"),
    (lambda A, s, t, v: T.transpose(s, t[0:16, 0:16]), KernelValueError,
     r"source 's' region \(16, 32\) transposes to \(32, 16\), but destination 't' region is "
     r"\(16, 16\)"),
    (lambda A, s, t, v: T.transpose(v, v), KernelError, "into itself"),
    (lambda A, s, t, v: T.transpose(v, t), KernelValueError, "needs two dimensions"),
    (lambda A, s, t, v: T.transpose(s, t, annotations=[1]), KernelError,
     "annotations must be a dict"),
])
def test_operands_checked_at_the_line(body, error, message):
    with pytest.raises(error, match=message) as err:
        _kernel(body)
    assert "test_transpose.py" in str(err.value)


def test_a_tile_op_outside_parallel_loops():
    with pytest.raises(KernelError, match="cannot be used inside a T.Parallel loop"):

        @T.prim_func
        def main(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128) as _bx:
                s = T.alloc_shared((16, 32), "float32")
                t = T.alloc_shared((32, 16), "float32")
                for _i in T.Parallel(4):
                    T.transpose(s, t)
