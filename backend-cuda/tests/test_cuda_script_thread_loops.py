"""TVM script's thread loops (``for bx in T.thread_binding(n, thread="blockIdx.x")`` outside a
``T.Kernel``, with ``threadIdx`` loops inside) as CUDA kernels: the launch is the loops'
extents, the ``threadIdx`` loop variables CUDA's thread indices; run in the host emulation
against torch (the kernels of ``tests/language/test_script_thread_loops.py``)."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch


def grid_of_rows():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((64, 32), "float32")):
        for by in T.thread_binding(4, thread="blockIdx.y"):
            for bx in T.thread_binding(0, 2, thread="blockIdx.x"):
                for ty in T.thread_binding(16, thread="threadIdx.y"):
                    for tx in T.thread_binding(16, thread="threadIdx.x"):
                        B[by * 16 + ty, bx * 16 + tx] = A[by * 16 + ty, bx * 16 + tx] * 2.0 + ty

    return main


def two_launches():
    @T.prim_func
    def main(A: T.Tensor((8, 32), "float32"), B: T.Tensor((8, 32), "float32")):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                A[bx, tx] = T.cast(bx * 32 + tx, "float32")
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                B[bx, tx] = A[bx, 31 - tx]

    return main


@pytest.mark.emulator
def test_thread_loops_launch_as_their_extents(tmp_path):
    lowered = tilewright.lower(grid_of_rows(), "cuda -arch=sm_90a")
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
