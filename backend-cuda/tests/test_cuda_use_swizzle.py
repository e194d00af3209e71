"""``T.use_swizzle(panel_size, order)`` on CUDA: block rasterisation in panels
(transforms/threads.py). The host emulation launches blocks in order (x fastest), so a block that
takes a ticket from a global counter records its launch position."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch

TARGET = "cuda -arch=sm_90a"


def order_kernel(gx, gy, panel=None, order="row"):
    @T.prim_func
    def main(Cnt: T.Tensor((1,), "int32"), Out: T.Tensor((gy, gx), "int32")):
        with T.Kernel(gx, gy, threads=32) as (bx, by):
            if panel:
                T.use_swizzle(panel_size=panel, order=order)
            Out[by, bx] = T.atomic_add(Cnt[0], 1, return_prev=True)

    return main


def expected(gx, gy, panel, order):
    """Launch position of each block (y, x): panels of ``panel`` rows (or columns) walked
    column by column (row by row), every other panel backwards."""
    out = torch.full((gy, gx), -1, dtype=torch.int32)
    major, minor = (gy, gx) if order == "row" else (gx, gy)
    position = 0
    for first in range(0, major, panel):
        width = min(panel, major - first)
        index = first // panel
        steps = range(minor - 1, -1, -1) if index % 2 else range(minor)
        for m in steps:
            for r in range(first, first + width):
                y, x = (r, m) if order == "row" else (m, r)
                out[y, x] = position
                position += 1
    return out


def _launch_order(func, gx, gy, tmp_path):
    lowered = tilewright.lower(func, TARGET)
    cnt, out = torch.zeros(1, dtype=torch.int32), torch.full((gy, gx), -1, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, cnt, out)
    return out


@pytest.mark.emulator
@pytest.mark.parametrize("gx, gy, panel, order", [(5, 7, 3, "row"), (5, 7, 2, "col"),
                                                  (4, 4, 8, "row"), (6, 3, 1, "col")])
def test_use_swizzle_launches_blocks_in_panels(gx, gy, panel, order, tmp_path):
    got = _launch_order(order_kernel(gx, gy, panel, order), gx, gy, tmp_path)
    assert torch.equal(got, expected(gx, gy, panel, order)), got
    assert sorted(got.flatten().tolist()) == list(range(gx * gy))  # a bijection


@pytest.mark.emulator
def test_without_use_swizzle_blocks_keep_launch_order(tmp_path):
    got = _launch_order(order_kernel(5, 3), 5, 3, tmp_path)
    assert torch.equal(got, torch.arange(15, dtype=torch.int32).reshape(3, 5))


def test_use_swizzle_remaps_block_indices_in_codegen():
    plain = tilewright.lower(order_kernel(5, 7), TARGET).source.text
    text = tilewright.lower(order_kernel(5, 7, 3, "row"), TARGET).source.text
    kernel = text[text.index('extern "C" __global__'):]
    assert "min(3, (7 - " in kernel  # the rows of the (last, narrower) panel
    assert "? (4 - " in kernel  # every other panel walks its columns backwards
    assert "min(3" not in plain[plain.index('extern "C" __global__'):]


def test_use_swizzle_on_a_one_dimensional_grid_is_left_alone():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            T.use_swizzle(panel_size=4)
            for i in T.Parallel(32):
                A[bx * 32 + i] = 1.0

    text = tilewright.lower(main, TARGET).source.text
    assert "A_ptr[((((int)blockIdx.x) * 32) + ((int)threadIdx.x))] = " in text
