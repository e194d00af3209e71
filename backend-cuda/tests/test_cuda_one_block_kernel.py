"""``with T.Kernel(threads=n):`` without grid dimensions as a CUDA kernel: a launch of one
block (TileLang's mixed-dtype atomic test, at 32 threads: the backend runs whole warps); run
in the host emulation against torch (the kernel of
``tests/language/test_tilelang_tests_gaps.py``)."""

import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "language"))
from test_tilelang_tests_gaps import atomic_add_from_fragment  # noqa: E402


@pytest.mark.emulator
@pytest.mark.parametrize("src_dtype", ["float32", "bfloat16"])
def test_a_kernel_without_grid_dimensions_launches_one_block(src_dtype, tmp_path):
    lowered = tilewright.lower(atomic_add_from_fragment(src_dtype, threads=32), "cuda -arch=sm_80")
    assert lowered.source.payload["grid"] == ["1", "1", "1"]
    assert lowered.source.payload["block"] == [32, 1, 1]
    src = torch.arange(1, 65).to(getattr(torch, src_dtype))
    out, where = torch.ones(64), torch.full((2,), -1, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, src, out, where)
    assert torch.equal(out, 1 + src.float())
    assert where.tolist() == [0, 1]


@pytest.mark.nvrtc
def test_a_kernel_without_grid_dimensions_compiles_to_one_block():
    kernel = tilewright.compile(atomic_add_from_fragment("float32", threads=32),
                                target="cuda -arch=sm_80")
    assert kernel.executable.launch["grid"] == ["1", "1", "1"]
    assert "__launch_bounds__(32)" in kernel.get_kernel_source()
