"""A TMA box is at most 256 elements in each dimension (cuTensorMapEncodeTiled's boxDim). A
tile wider than that moves as several boxes on the same mbarrier (rules/tma.py): 576 columns
of a row-major tile as boxes of 256 + 256 + 64 columns, one row deep, repeated over the rows
(a box lands densely in shared memory, so a part of a row needs its own rows); 320 rows as
256 + 64 rows. The expected-transaction count stays the whole tile's. The host emulation runs
each box as a tiled copy, so a misplaced part gives wrong values (dialect_cases'
``wide_tma_copy`` at 64 x 576 and 320 x 64, run by test_cuda_dialect_emulate.py)."""

import json

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from dialect_cases import wide_tma_copy
from test_cuda_pipeline import _emulate, gemm
from tilewright_cuda import arch, executor


def wide_store(rows=32, cols=576, dtype="float16"):
    """A tile made in shared memory and stored with T.tma_copy: the stores split alike."""

    @T.prim_func
    def main(A: T.Tensor((rows, cols), dtype), O: T.Tensor((rows, cols), dtype)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((rows, cols), dtype)
            T.copy(A, S)
            for i, j in T.Parallel(rows, cols):
                S[i, j] = S[i, j] * 2
            T.tma_copy(S, O[0:rows, :])
            T.tma_store_wait(0)

    return main


def _kernel(lowered) -> str:
    text = lowered.source.text
    return text[text.index('extern "C" __global__'):]


def _maps(lowered) -> list:
    return [p for p in lowered.source.payload["params"] if p["kind"] == "tensormap"]


def test_a_576_column_box_is_three_boxes_on_one_barrier():
    lowered = tilewright.lower(wide_tma_copy(), "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == [[256, 1], [64, 1]]
    text = _kernel(lowered)
    # one expect_tx of the whole tile; per row, three loads at columns 0, 256 and 512
    assert text.count("tw_mbar_expect_tx(") == 1 and f"(uint){64 * 576 * 2})" in text
    assert "for (int tma_part = 0; tma_part < 64; ++tma_part)" in text
    assert text.count("tw_tma_load_2d(") == 3
    assert "((tma_part * 1152) + 1024))), 512, tma_part);" in text


def test_a_tall_box_splits_its_rows():
    lowered = tilewright.lower(wide_tma_copy(320, 64, "float16"), "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == [[64, 256], [64, 64]]
    assert _kernel(lowered).count("tw_tma_load_2d(") == 2


@pytest.mark.emulator
@pytest.mark.parametrize("rows, cols, dtype", [(8, 600, "float32")])
def test_wide_boxes_match_torch(rows, cols, dtype, tmp_path):
    lowered = tilewright.lower(wide_tma_copy(rows, cols, dtype), "cuda -arch=sm_90a")
    q = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)).to(
        getattr(torch, dtype))
    out = torch.full_like(q, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, out)
    torch.testing.assert_close(out, q, rtol=0, atol=0)


@pytest.mark.emulator
def test_a_wide_tma_store_matches_torch(tmp_path):
    lowered = tilewright.lower(wide_store(), "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == [[256, 1], [64, 1]]
    a = torch.randn(32, 576, generator=torch.Generator().manual_seed(1)).half()
    out = torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    torch.testing.assert_close(out, a * 2, rtol=0, atol=0)


@pytest.mark.emulator
def test_a_pipelined_copy_of_320_rows_becomes_tma_loads(tmp_path):
    # B's tile is 320 x 64 (swizzled, one 128-byte column block): 256 + 64 rows, each part
    # starting on the swizzle's 1024-byte period; it used to stay on cp.async
    func = gemm(128, 128, 640, bm=64, bn=64, bk=320, stages=2, threads=128)
    text = _emulate(func, "sm_90", tmp_path, 128, 128, 640)
    assert "tw_tma_load_2d(" in text and "tw_cp_async16(" not in text[text.index("__global__"):]
    lowered = tilewright.lower(func, "cuda -arch=sm_90")
    assert [64, 256] in [m["box"] for m in _maps(lowered)]
    assert [64, 64] in [m["box"] for m in _maps(lowered)]


@pytest.mark.nvrtc
def test_wide_boxes_build_with_nvrtc(tmp_path):
    lowered = tilewright.lower(wide_tma_copy(), "cuda -arch=sm_90a")
    cubin, _ = executor.nvrtc_compile(lowered.source.text, arch.get("sm_90a"), tmp_path)
    assert cubin
    json.dumps(lowered.source.payload)  # the launch description stays plain data
