"""The CUDA generated for the examples computes what torch computes, run on the host with one
thread per CUDA thread (see hostemu.py): indexing, guards, barriers, shuffles, atomics and the
mma.sync fragment layouts (emulated per warp) are checked without a GPU. Outputs start as
NaN."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright


@pytest.mark.emulator
@pytest.mark.parametrize("name", kernels.EMULATED)
def test_generated_cuda_matches_torch(name, tmp_path):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    case = kernels.case(name)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()
