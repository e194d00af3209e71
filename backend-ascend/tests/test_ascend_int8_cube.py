"""int8 GEMMs on the cube: int8 fractals (32 bytes a row) through L1 and L0A/L0B, Mmad into an
int32 L0C, Fixpipe to GM without quantisation; the emulator sums in int32 as the cube does
(sums past 2^24 stay exact); operands whose int8 fractals would need a transpose are refused
with the layout that works; K padded to whole int8 fractals."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def _gemm(M, N, K, tb=True, bm=32, bn=32, bk=64):
    b_shape, b_tile = ((N, K), (bn, bk)) if tb else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor((M, K), "int8"), B: T.Tensor(b_shape, "int8"),
             C: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "int8")
            B_s = T.alloc_shared(b_tile, "int8")
            C_l = T.alloc_fragment((bm, bn), "int32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                if tb:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=tb)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def test_int8_gemm_accumulates_exactly_in_int32():
    M, N, K = 40, 48, 1100  # partial tiles in M and K; sums up to 127 * 127 * 1100 > 2^24
    kernel = tilewright.compile(_gemm(M, N, K), target="ascend")
    source = kernel.get_kernel_source()
    assert "LocalTensor<int32_t> C_l = l0c_mem" in source
    assert "Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>" in source
    assert "QuantMode_t::NoQuant" in source
    gen = torch.Generator().manual_seed(4)
    a = torch.randint(-128, 128, (M, K), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (N, K), generator=gen, dtype=torch.int8)
    a[:4], b[:4] = 127, 127  # rows whose sums float32 cannot hold exactly
    c = torch.full((M, N), -7, dtype=torch.int32)
    kernel(a, b, c)
    assert torch.equal(c, (a.long() @ b.long().T).int())


def test_int8_b_stored_k_by_n_is_refused_with_the_layout_that_works():
    with pytest.raises(KernelError) as info:
        tilewright.lower(_gemm(64, 64, 64, tb=False), target="ascend")
    assert "T.gemm(A_s, B_s, C_l, transpose_B=tb)" in str(info.value)  # the user's line
    assert "B in int8 needs its fractals transposed" in str(info.value)
    assert "a int8 GEMM needs A not transposed and B transposed " \
           "(T.gemm(A, B, C, transpose_B=True) with B stored N x K)" in str(info.value)


@pytest.mark.parametrize("bk", [16, 48])
def test_int8_gemm_whose_k_step_is_not_a_whole_int8_fractal(bk):
    """K padded to 16, not to C0 = 32 int8 elements: LoadData moved bk // 32 fractals (none
    for bk = 16) and the cube read stale L0A/L0B; every element wrong (fuzzer, seed 1)."""
    M, N, K = 16, 16, bk
    kernel = tilewright.compile(_gemm(M, N, K, bm=16, bn=16, bk=bk), target="ascend")
    gen = torch.Generator().manual_seed(5)
    a = torch.randint(-128, 128, (M, K), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (N, K), generator=gen, dtype=torch.int8)
    c = torch.zeros((M, N), dtype=torch.int32)
    kernel(a, b, c)
    assert torch.equal(c, (a.long() @ b.long().T).int())
