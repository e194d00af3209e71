"""The CUDA generated for the examples computes what torch computes, run on the host with one
thread per CUDA thread (see hostemu.py): indexing, guards, barriers, shuffles, atomics and the
mma.sync fragment layouts (emulated per warp) are checked without a GPU. Outputs start as
NaN."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch


@pytest.mark.emulator
@pytest.mark.parametrize("name", kernels.EMULATED)
def test_generated_cuda_matches_torch(name, tmp_path):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    case = kernels.case(name)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()


def _rows_by_scalar():
    """A grid over an integer scalar argument (TileLang's varlen attention launches
    ``T.ceildiv(max_seqlen, block)`` blocks)."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(T.ceildiv(rows, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                if bx * 32 + i < rows:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0
    return main


@pytest.mark.nvrtc
@pytest.mark.emulator
def test_grid_over_a_scalar_argument(tmp_path):
    func = _rows_by_scalar()
    kernel = tilewright.compile(func, target="cuda -arch=sm_90a", execution_backend="nvrtc")
    assert kernel.executor == "nvrtc"
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    launch = lowered.source.payload
    assert launch["symbols"] == {"rows": [2]}, launch
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 100)
    torch.testing.assert_close(y[:100], x[:100] * 2)
    assert y[100:].isnan().all()  # the grid's 4 blocks cover 128 rows; rows 100.. untouched
