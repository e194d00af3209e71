"""Cube GEMMs with a one-wide operand (decode-style GEMV: one row of A, or one column of B),
written with ``T.gemm_v0`` of the Ascend dialect, against torch on the emulator. A2's Mmad
multiplies a one-row A in GEMV mode (L0A read as one ND row, Mmad.md), so the one row runs as a
fractal of 16 rows; a one-column region of GM is K rows of one element."""

import pytest
import tilewright
import torch
from ascend_kernels import gemm


@pytest.mark.parametrize(("M", "N", "block_M", "block_N"), [
    (1, 64, 1, 32),   # one row of A: GEMV
    (16, 1, 16, 1),   # one column of B: matrix-vector product
    (1, 1, 1, 1),     # a dot product
    (3, 64, 1, 32),   # one row per block
])
def test_a_one_wide_gemm_operand_runs_on_the_cube(M, N, block_M, block_N):
    kernel = tilewright.compile(gemm(M, N, 128, block_M, block_N, 64, kL0Size=64),
                                out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    if block_M == 1:  # not m = 1: that is GEMV mode, which reads L0A as one ND row
        assert "mp.m = 16;" in text and "mp.m = 1;" not in text
    g = torch.Generator().manual_seed(M * 100 + N)
    a = torch.randn(M, 128, generator=g).half()
    b = torch.randn(128, N, generator=g).half()
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=1e-2,
                               atol=1e-2)


def test_the_gemv_kernels_compile_against_the_vendor_headers(asc_check):
    sources = {f"gemv_{m}x{n}": tilewright.lower(gemm(m, n, 128, bm, bn, 64, kL0Size=64),
                                                 target="ascend").source.text
               for m, n, bm, bn in [(1, 64, 1, 32), (16, 1, 16, 1)]}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
