"""float32 GEMMs on the cube in every transpose combination: a float32 operand whose fractals
must be transposed (B not transposed, A transposed) is stored in L1 as rows of fractals and
moved to L0 by LoadDataWithTranspose (16 x 16 squares of two fractals)."""

import pytest
import tilewright
import tilewright.language as T
import torch


def _gemm(M, N, K, ta, tb, bm=32, bn=32, bk=16):
    a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    a_tile, b_tile = ((bk, bm) if ta else (bm, bk)), ((bn, bk) if tb else (bk, bn))

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float32"), B: T.Tensor(b_shape, "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared(a_tile, "float32")
            B_s = T.alloc_shared(b_tile, "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if ta:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if tb:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=ta, transpose_B=tb)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_float32_gemm_every_transpose(ta, tb):
    M, N, K = 40, 24, 40  # partial tiles in M, N and K; N not a multiple of 16
    kernel = tilewright.compile(_gemm(M, N, K, ta, tb), target="ascend")
    source = kernel.get_kernel_source()
    assert ("LoadDataWithTranspose" in source) == (ta or not tb), source
    torch.manual_seed(1)
    a = torch.randn(K, M) if ta else torch.randn(M, K)
    b = torch.randn(N, K) if tb else torch.randn(K, N)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    ref = (a.T if ta else a) @ (b.T if tb else b)
    torch.testing.assert_close(c, ref, rtol=1e-4, atol=1e-4)


# (operands transposed, generated text, its wrong variant): each must give wrong numbers or a
# report, so the emulator's LoadDataWithTranspose and the square layout pin the parameters
MUTATIONS = [
    ((False, False), "LoadData2dTransposeParams{0, 2, 1, 0, 1, 0}",
     "LoadData2dTransposeParams{0, 2, 1, 0, 0, 0}"),  # second fractal of a square misplaced
    ((False, False), "LoadData2dTransposeParams{0, 2, 1, 0, 1, 0}",
     "LoadData2dTransposeParams{0, 2, 0, 0, 1, 0}"),  # every repeat reads the first square
    ((True, True), "LoadData2dTransposeParams{0, 2, 1, 1, 0, 0}",
     "LoadData2dTransposeParams{0, 2, 1, 0, 0, 0}"),  # A's m blocks not KB8 fractals apart
    ((False, False), ", 0, 32, 16, 1, 0));", ", 0, 32, 8, 1, 0));"),  # Nd2Nz: plain NZ
]


@pytest.mark.parametrize("n", range(len(MUTATIONS)))
def test_wrong_transpose_parameters_give_wrong_numbers(n, tmp_path):
    from tilewright_ascend.executor import EmulatorError, compile_and_run_source

    (ta, tb), good, bad = MUTATIONS[n]
    low = tilewright.lower(_gemm(32, 32, 32, ta, tb), target="ascend")
    assert good in low.source.text, low.source.text
    torch.manual_seed(2)
    a = torch.randn(32, 32)
    b = torch.randn(32, 32)
    ref = (a.T if ta else a) @ (b.T if tb else b)
    out = torch.zeros(32, 32)
    if n == 0:  # the harness itself is right: the unchanged source matches
        (tmp_path / "good").mkdir()
        compile_and_run_source(low.source.text, low.source.payload, (a, b, out),
                               tmp_path / "good")
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        out.zero_()
    try:
        compile_and_run_source(low.source.text.replace(good, bad), low.source.payload,
                               (a, b, out), tmp_path)
    except EmulatorError:
        return
    assert not torch.allclose(out, ref, rtol=1e-3, atol=1e-3)
