"""Execution on a GPU: the float32 examples through the NVRTC executor, outputs poisoned."""

from __future__ import annotations

import cuda_cases as kernels
import pytest
from tilewright.jit import compile as tw_compile


@pytest.mark.gpu
@pytest.mark.nvrtc
@pytest.mark.parametrize("name", kernels.FLOAT32)
def test_example_runs_on_the_gpu(name):
    import torch

    kernel = tw_compile(kernels.func(name), target="cuda", execution_backend="nvrtc")
    case = kernels.case(name)
    on_gpu = [a.cuda() for a in case.args]
    kernel._fn(*on_gpu)  # every parameter, outputs included (poisoned with NaN)
    torch.cuda.synchronize()
    for host, device in zip(case.args, on_gpu):
        host.copy_(device.cpu())
    case.check()
