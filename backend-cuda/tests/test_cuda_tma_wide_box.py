"""A TMA box is at most 256 elements in each dimension (cuTensorMapEncodeTiled's boxDim).
Rows of a row-major tile wider than that are one box of a view of the tensor where one fits
(rules/tma.py's ``_fold``): 576 columns as [192, 3], the tensor map's innermost dimension seen
as two (``fold`` in the launch description, encoded by runtime/cuda.py). Where none fits (a row
length known only at run time), 576 columns move as boxes of 256 + 256 + 64 columns, one row
deep, repeated over the rows (a box lands densely in shared memory, so a part of a row needs
its own rows); 320 rows as 256 + 64 rows. A box's first column must be on a 16-byte boundary
(the H200 raises an illegal instruction otherwise): such a copy is refused when it lowers, and
the host emulation traps at one. The expected-transaction count stays
the whole tile's. The host emulation runs each box as a tiled copy, so a misplaced part gives
wrong values (here, and dialect_cases' ``wide_tma_copy`` at 64 x 576 and 320 x 64, run by
test_cuda_dialect_emulate.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from dialect_cases import wide_tma_copy
from test_cuda_pipeline import _emulate, gemm
from tilewright.errors import KernelError
from tilewright.runtime.cuda import tensor_map_layout
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


def part_copy(shape, r0, c0, rows, cols, dtype="float16"):
    """T.tma_copy of ``Q[r0:r0 + rows, c0:c0 + cols]`` into a row-major tile, copied out."""

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), O: T.Tensor((rows, cols), dtype)):
        with T.Kernel(1, threads=128):
            Q_s = T.alloc_shared((rows, cols), dtype)
            bar = T.alloc_barrier(128)
            T.tma_copy(Q[r0:r0 + rows, c0:c0 + cols], Q_s, barrier=bar)
            T.mbarrier_arrive(bar)
            T.mbarrier_wait_parity(bar, 0)
            T.copy(Q_s, O)

    return main


def test_a_576_column_box_is_one_load_of_a_folded_view():
    lowered = tilewright.lower(wide_tma_copy(), "cuda -arch=sm_90a")
    assert [(m["box"], m["rank"], m.get("fold")) for m in _maps(lowered)] == \
        [([192, 3, 64], 3, 192)]
    text = _kernel(lowered)
    # one expect_tx of the whole tile, one load (64 x 576 bf16 was 192 loads, 3 a row)
    assert text.count("tw_mbar_expect_tx(") == 1 and f"(uint){64 * 576 * 2})" in text
    assert text.count("tw_tma_load_3d(") == 1 and "tma_part" not in text
    assert "tw_tma_load_2d(" not in text


def test_rows_stay_boxes_per_row_when_no_fold_fits():
    # a row length known only at run time: no fold divides it, so each row moves as boxes
    # of 256 + 256 + 64 columns, from column 8 (16 bytes) on
    lowered = tilewright.lower(part_copy((64, T.symbolic("n")), 0, 8, 64, 576),
                               "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == [[256, 1], [64, 1]]
    assert not any("fold" in m for m in _maps(lowered))
    text = _kernel(lowered)
    assert "for (int tma_part = 0; tma_part < 64; ++tma_part)" in text
    assert text.count("tw_tma_load_2d(") == 3
    assert "((tma_part * 1152) + 1024))), 520, tma_part);" in text


@pytest.mark.parametrize("c0", [4, 2, 6])
def test_a_box_off_a_16_byte_column_boundary_is_refused(c0):
    # the H200 raised "an illegal instruction was encountered" at the first TMA load of
    # columns 4 .. 580 of a float16 tensor (8-byte start; findings/tma: 4, 8 and 12 bytes
    # trap, 0, 16 and 32 run); cuTensorMapEncodeTiled cannot see it, the coordinates are the
    # kernel's
    with pytest.raises(KernelError, match="16-byte boundary"):
        tilewright.lower(part_copy((8, 600), 0, c0, 8, 576), "cuda -arch=sm_90a")
    with pytest.raises(KernelError, match="16-byte boundary"):
        tilewright.lower(part_copy((8, 64), 0, c0, 8, 32), "cuda -arch=sm_90a")


def test_the_launcher_encodes_the_folded_view():
    q = torch.zeros(4, 576, dtype=torch.bfloat16)
    p = {"tensor": "Q", "rank": 3, "fold": 192}
    assert tensor_map_layout(p, q) == ([192, 3, 4], [2, 384, 1152])
    with pytest.raises(RuntimeError, match="rows of 600 elements as parts of 192"):
        tensor_map_layout(p, torch.zeros(4, 600, dtype=torch.bfloat16))


def test_a_tall_box_splits_its_rows():
    lowered = tilewright.lower(wide_tma_copy(320, 64, "float16"), "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == [[64, 256], [64, 64]]
    assert _kernel(lowered).count("tw_tma_load_2d(") == 2


@pytest.mark.emulator
@pytest.mark.parametrize("shape, r0, c0, maps", [
    ((40, 704), 8, 64, [[64, 9, 32]]),  # folded: columns 64 .. 640 are parts 1 .. 9 of 64
    ((8, 600), 0, 8, [[256, 1], [64, 1]]),  # per row (the row length a symbol)
])
def test_wide_boxes_match_torch(shape, r0, c0, maps, tmp_path):
    rows = shape[0] - r0
    declared = (shape[0], T.symbolic("n")) if maps[0][1:] == [1] else shape
    lowered = tilewright.lower(part_copy(declared, r0, c0, rows, 576), "cuda -arch=sm_90a")
    assert [m["box"] for m in _maps(lowered)] == maps
    q = torch.randn(shape, generator=torch.Generator().manual_seed(0)).half()
    out = torch.full((rows, 576), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, out)
    torch.testing.assert_close(out, q[r0:, c0:c0 + 576], rtol=0, atol=0)


@pytest.mark.emulator
def test_a_wide_tma_store_matches_torch(tmp_path):
    lowered = tilewright.lower(wide_store(), "cuda -arch=sm_90a")
    assert [(m["box"], m["fold"]) for m in _maps(lowered)] == [([192, 3, 32], 192)]
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


_EMULATE = """
import json, sys
from pathlib import Path
import hostemu, torch
work = Path(sys.argv[1])
q = torch.randn(8, 600).half()
hostemu.run((work / "kernel.cu").read_text(), json.loads((work / "launch.json").read_text()),
            work, q, torch.zeros(8, 576).half())
"""


@pytest.mark.emulator
def test_the_emulation_traps_at_a_box_off_a_16_byte_column_boundary(tmp_path):
    # the legal per-row kernel from column 8, its coordinates moved to column 4 as the
    # H200's failing bundle had them: the emulation stops as the GPU did (in a child
    # process: the trap aborts it)
    lowered = tilewright.lower(part_copy((8, T.symbolic("n")), 0, 8, 8, 576),
                               "cuda -arch=sm_90a")
    text = lowered.source.text
    for old, new in ((", 8, tma_part)", ", 4, tma_part)"), (", 264, tma_part)", ", 260, tma_part)"),
                     (", 520, tma_part)", ", 516, tma_part)")):
        assert old in text
        text = text.replace(old, new)
    (tmp_path / "kernel.cu").write_text(text)
    (tmp_path / "launch.json").write_text(json.dumps(lowered.source.payload))
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tests), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", _EMULATE, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode != 0
    assert "not on a 16-byte boundary" in done.stderr
