"""Every example kernel builds to a cubin for sm_90a with NVRTC, without a GPU."""

from __future__ import annotations

import re

import cuda_cases as kernels
import pytest
from tilewright.jit import compile as tw_compile


def _cubin_log(kernel) -> str:
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"
    with open(f"{kernel.artifact_dir}/build.log") as f:
        return f.read()


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", kernels.NAMES)
def test_nvrtc_builds_sm_90a(name):
    kernel = tw_compile(kernels.func(name), target="cuda -arch=sm_90a",
                        execution_backend="nvrtc")
    log = _cubin_log(kernel)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert "Used" in log and spills and max(spills) == 0, log
