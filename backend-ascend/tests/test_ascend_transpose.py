"""``T.transpose`` on Ascend: a loop of the scalar unit over UB tiles, synchronised with the
copies around it; a transposed tile that a GEMM reads goes to the cube through a GM workspace
as any vector-side tile does. ``T.pdl_trigger`` / ``T.pdl_sync`` write nothing but a
comment: kernels run one after another."""

import tilewright
import tilewright.language as T
import torch


def transposed(M, N, bm=16, bn=32, gemm=False):
    """B = A^T tile by tile; with ``gemm``, C = t^T t of the last tile too (t^T: the
    transposed tile)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((N, M), "float16"),
             C: T.Tensor((bn, bn), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            t = T.alloc_shared((bm, bn), "float16")
            tt = T.alloc_shared((bn, bm), "float16")
            T.pdl_sync()
            T.copy(A[by * bm, bx * bn], t)
            T.transpose(t, tt)
            T.copy(tt, B[bx * bn, by * bm])
            if gemm:
                acc = T.alloc_fragment((bn, bn), "float32")
                T.gemm(tt, t, acc, clear_accum=True)
                if by == T.ceildiv(M, bm) - 1:
                    T.copy(acc, C)
            T.pdl_trigger()

    return main


def test_a_scalar_loop_between_the_copies():
    kernel = tilewright.compile(transposed(70, 50), out_idx=[1], target="ascend")
    a = torch.randn(70, 50).half()
    assert torch.equal(kernel(a, torch.zeros(32, 32)), a.T)
    text = kernel.get_kernel_source()
    assert "T.transpose: each element moves to its transposed place" in text
    assert "// T.pdl_sync(): kernels run one after another here" in text


def test_a_transposed_tile_into_a_gemm():
    a = torch.randn(64, 32).half()
    b, c = torch.zeros(32, 64).half(), torch.zeros(32, 32)
    tilewright.compile(transposed(64, 32, gemm=True), target="ascend")(a, b, c)
    last = a[48:64].float()
    assert torch.equal(b, a.T)
    torch.testing.assert_close(c, last.T @ last, rtol=1e-3, atol=1e-3)
