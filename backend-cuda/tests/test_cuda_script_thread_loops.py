"""TVM script's thread loops (``for bx in T.thread_binding(n, thread="blockIdx.x")`` outside a
``T.Kernel``, with ``threadIdx`` loops inside) as CUDA kernels: the launch is the loops'
extents, the ``threadIdx`` loop variables CUDA's thread indices; run in the host emulation
against torch (the kernels of ``tests/language/test_script_thread_loops.py``)."""

import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "language"))
from test_script_thread_loops import scaled_plus_row, two_launches  # noqa: E402


@pytest.mark.emulator
def test_thread_loops_launch_as_their_extents(tmp_path):
    lowered = tilewright.lower(scaled_plus_row(), "cuda -arch=sm_90a")
    assert "__launch_bounds__(256)" in lowered.source.text
    x, y = torch.randn(64, 32), torch.zeros(64, 32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    assert torch.equal(y, x * 2 + torch.arange(16).repeat(4).float()[:, None])


@pytest.mark.emulator
def test_thread_loop_kernels_launch_in_order(tmp_path):
    lowered = tilewright.lower(two_launches(), "cuda -arch=sm_80")
    a, b = torch.zeros(8, 32), torch.zeros(8, 32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    assert torch.equal(a, torch.arange(256.0).reshape(8, 32)) and torch.equal(b, a.flip(1))
