"""The cube path in the hardware's fractal formats: GM (ND) -> L1 (NZ) by Nd2Nz, L1 -> L0A
(ZZ) / L0B (ZN) by LoadData, Mmad into L0C (NZ), Fixpipe NZ -> ND. The emulator implements the
formats byte for byte, so a wrong parameter in the generated code gives wrong numbers or a
report; partial tiles are zero-padded in L1."""

import re

import ascend_kernels as K
import pytest
import tilewright
import tilewright.language as PT
import torch


def _gemm(M, N, K_, ta, tb, dtype, bm=32, bn=16, bk=32):
    a_shape, b_shape = ((K_, M) if ta else (M, K_)), ((N, K_) if tb else (K_, N))
    as_shape, bs_shape = ((bk, bm) if ta else (bm, bk)), ((bn, bk) if tb else (bk, bn))

    @PT.prim_func
    def main(A: PT.Tensor(a_shape, dtype), B: PT.Tensor(b_shape, dtype),
             C: PT.Tensor((M, N), dtype)):
        with PT.Kernel(PT.ceildiv(N, bn), PT.ceildiv(M, bm)) as (bx, by):
            A_s = PT.alloc_shared(as_shape, dtype)
            B_s = PT.alloc_shared(bs_shape, dtype)
            C_f = PT.alloc_fragment((bm, bn), "float32")
            PT.clear(C_f)
            for k in PT.Pipelined(PT.ceildiv(K_, bk), num_stages=2):
                if ta:
                    PT.copy(A[k * bk, by * bm], A_s)
                else:
                    PT.copy(A[by * bm, k * bk], A_s)
                if tb:
                    PT.copy(B[bx * bn, k * bk], B_s)
                else:
                    PT.copy(B[k * bk, bx * bn], B_s)
                PT.gemm(A_s, B_s, C_f, transpose_A=ta, transpose_B=tb)
            PT.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_partial_tiles_are_zero_padded_in_l1(ta, tb):
    M, N, K_ = 40, 24, 72  # none a multiple of its tile (32, 16, 32)
    kernel = tilewright.compile(_gemm(M, N, K_, ta, tb, "bfloat16"), out_idx=[-1],
                                target="ascend")
    src = kernel.get_kernel_source()
    assert "InitConstValue(" in src and "fp.mSize = tw_rows" in src
    a = torch.randn((K_, M) if ta else (M, K_)).bfloat16()
    b = torch.randn((N, K_) if tb else (K_, N)).bfloat16()
    ref = (a.T if ta else a).float() @ (b.T if tb else b).float()
    torch.testing.assert_close(kernel(a, b).float(), ref, rtol=2e-2, atol=5e-2)


def test_float32_cube_b_transposed_or_not():
    """B transposed loads with LoadData2D; B not transposed with LoadDataWithTranspose (every
    combination: test_ascend_fp32_gemm.py)."""
    a, b = torch.randn(32, 64), torch.randn(16, 64)
    kernel = tilewright.compile(_gemm(32, 16, 64, False, True, "float32"), out_idx=[-1],
                                target="ascend")
    torch.testing.assert_close(kernel(a, b), a @ b.T, rtol=1e-4, atol=1e-4)
    kernel = tilewright.compile(_gemm(32, 16, 64, False, False, "float32"), out_idx=[-1],
                                target="ascend")
    assert "LoadDataWithTranspose(" in kernel.get_kernel_source()
    torch.testing.assert_close(kernel(a, b.T.contiguous()), a @ b.T, rtol=1e-4, atol=1e-4)


def test_hand_written_l0_loads_and_mma():
    kernel = tilewright.compile(K.mma_tile(48, 32, 64), out_idx=[-1], target="ascend")
    src = kernel.get_kernel_source()
    assert re.search(r"LoadData\(b_l0\[kb \* 512\], b_l1\[\(0 \* 4 \+ kb\) \* 256\], "
                     r"LoadData2DParams\{0, 2, 4, 0, 0, true, 0\}\);", src), src
    a, b = torch.randn(48, 64).half(), torch.randn(64, 32).half()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def _filled_gemm(value, clear_first, M=32, N=32, K_=48, bk=16):
    @PT.prim_func
    def main(A: PT.Tensor((M, K_), "float16"), B: PT.Tensor((K_, N), "float16"),
             C: PT.Tensor((M, N), "float32")):
        with PT.Kernel(1, 1) as (bx, by):
            A_s = PT.alloc_shared((M, bk), "float16")
            B_s = PT.alloc_shared((bk, N), "float16")
            C_f = PT.alloc_fragment((M, N), "float32")
            PT.fill(C_f, value)
            for k in PT.serial(K_ // bk):
                PT.copy(A[0, k * bk], A_s)
                PT.copy(B[k * bk, 0], B_s)
                PT.gemm(A_s, B_s, C_f, clear_accum=clear_first and k == 0)
            PT.copy(C_f, C[0, 0])

    return main


def test_a_filled_accumulator_starts_from_its_value_or_is_cleared():
    """A2's cube has no fill of L0C: an accumulator filled with a nonzero value that the GEMMs
    accumulate onto is filled in UB by the vector core, which adds the cube's products (the
    split); a fill the K loop's first GEMM clears (clear_accum=k == 0) is dead and the kernel
    stays on the cube, its first Mmad initialising L0C."""
    a, b = torch.randn(32, 48).half(), torch.randn(48, 32).half()
    product = a.float() @ b.float()
    onto = tilewright.compile(_filled_gemm(7.0, False), out_idx=[-1], target="ascend")
    torch.testing.assert_close(onto(a, b), product + 7.0, rtol=1e-3, atol=1e-3)
    assert "Duplicate(" in onto.get_kernel_source()
    cleared = tilewright.compile(_filled_gemm(7.0, True), out_idx=[-1], target="ascend")
    torch.testing.assert_close(cleared(a, b), product, rtol=1e-3, atol=1e-3)
    source = cleared.get_kernel_source()
    assert "ASCEND_IS_AIV" not in source and "mp.cmatrixInitVal = ((k == 0)) && kk == 0;" in source
