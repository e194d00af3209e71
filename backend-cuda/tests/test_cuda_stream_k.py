"""Stream-K GEMM for the last, partial wave of tiles (``kernels.gemm_stream_k``, the
``gemm_*_4096_sk`` rows): the whole waves as the persistent in-order kernel, the last wave's
k-tiles dealt out evenly to every block, each run's float32 sums added by the block that takes
its tile's last ticket, in block order. Checked against torch in host emulation (the
workspace of partial sums poisoned with NaN by the emulator, so a run read before it is
written shows), and in SASS at the bench size."""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import torch
from tilewright.testing import compare
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import checks  # noqa: E402 - after the sys.path setup
import kernels  # noqa: E402

TARGET = "cuda -arch=sm_90a"


def _runs(M, N, K, workers, block_M=128, block_N=256, block_K=64):
    """Per tile of the last wave, the (block, first k-tile, end) runs the kernel deals out:
    the test's own account of the split, to say which case each size covers."""
    tiles = -(-M // block_M) * -(-N // block_N)
    rest, k_tiles = tiles % workers, -(-K // block_K)
    work = rest * k_tiles
    out = {s: [] for s in range(rest)}
    for w in range(workers):
        start, end = w * work // workers, (w + 1) * work // workers
        for i in range(start, end):
            s = i // k_tiles
            if out[s] and out[s][-1][0] == w:
                out[s][-1][2] = i % k_tiles + 1
            else:
                out[s].append([w, i % k_tiles, i % k_tiles + 1])
    return tiles // workers, out


# (M, N, K, workers, what the size covers)
SIZES = {
    # 10 tiles on 4 blocks: 2 whole waves (the next tile's first loads before the epilogue),
    # then 2 tiles of 10 k-tiles in runs of 5 (each wraps the 3 stages), 2 fix-ups
    "two_waves": (640, 512, 640, 4),
    # 4 tiles on 3 blocks: one tile of 40 k-tiles in runs of 13, 13, 14 on three blocks
    "three_runs": (256, 512, 2560, 3),
    # 7 tiles on 4 blocks, 2 k-tiles a tile: block 1's runs over two tiles, block 3's run the
    # whole of tile 2 (one run, its own ticket the last)
    "whole_run": (896, 256, 128, 4),
    # partial tiles at the bottom and right edges, K not a multiple of the k-tile
    "edges": (300, 504, 1000, 4),
}


def test_the_sizes_cover_what_they_say():
    waves, runs = _runs(*SIZES["two_waves"])
    assert waves == 2 and [len(r) for r in runs.values()] == [2, 2]
    assert [len(r) for r in _runs(*SIZES["three_runs"])[1].values()] == [3]
    runs = _runs(*SIZES["whole_run"])[1]
    assert runs[2] == [[3, 0, 2]] and [r[0] for r in runs[0] + runs[1]].count(1) == 2


def _emulate(M, N, K, workers, dtype, tmp_path, calls=1):
    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    a, b = torch.randn(M, K).to(tdtype), torch.randn(K, N).to(tdtype)
    tickets = torch.zeros(kernels.stream_k_tickets(M, N, workers=workers), dtype=torch.int32)
    lowered = tilewright.lower(
        kernels.gemm_stream_k.fn(M, N, K, dtype, **kernels.GEMM, workers=workers), TARGET,
        kernels.STREAM_K_PASS_CONFIGS)
    outs = []
    for call in range(calls):
        c = torch.full((M, N), float("nan")).to(tdtype)
        hostemu.run(lowered.source.text, lowered.source.payload, tmp_path / str(call), a, b,
                    tickets, c)
        outs.append(c)
    return a, b, tickets, outs, lowered.source.text


@pytest.mark.emulator
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_stream_k_gemm_matches_torch(size, dtype, tmp_path):
    M, N, K, workers = SIZES[size]
    a, b, tickets, (c,), text = _emulate(M, N, K, workers, dtype, tmp_path)
    kernel = text[text.index('extern "C" __global__'):]
    # both k-loops take TMA in order (no cp.async), the fix-up is fenced around its ticket
    assert "tw_cp_async" not in kernel and kernel.count("tw_fence_gpu()") == 2
    assert "tw_tma_store_2d(" in kernel and "tw_atomic_add(" in kernel
    ref = a.float() @ b.float()
    tol = {"float16": 1e-2, "bfloat16": 2e-2}[dtype]
    torch.testing.assert_close(c.float(), ref, rtol=tol, atol=tol * K ** 0.5)
    assert not tickets.any()  # put back to 0 for the next call


@pytest.mark.emulator
def test_stream_k_gemm_gives_the_same_bits_call_after_call(tmp_path):
    # the counters the first call left at 0 serve the second; the runs are added in block
    # order whichever block comes last, so the bits are the first call's
    *_, tickets, (first, second), _ = _emulate(*SIZES["three_runs"], "float16", tmp_path, 2)
    assert torch.equal(first, second) and not tickets.any()


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_device_check_passes_in_emulation(dtype, tmp_path):
    # dialect-bench_gemm_*_sk as the check runner judges it on the GPU: each output (the
    # counters, C) against its float64 reference with the tolerance model
    check = next(c for c in checks.dialect() if c.name == f"dialect-bench_gemm_{dtype}_sk")
    lowered = tilewright.lower(check.make(), TARGET, check.pass_configs)
    (run,) = check.runs()
    assert [len(r) for r in _runs(256, 1024, 640, 3)[1].values()] == [2, 2]
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *run.args)
    for position, want in zip(run.outputs, run.expected):
        got = run.args[position]
        assert compare(got, want, dtype=str(got.dtype), reduction_length=check.reduction).ok


def test_stream_k_refuses_whole_waves():
    with pytest.raises(ValueError, match="no partial wave to deal out"):
        kernels.gemm_stream_k.fn(512, 512, 512, "float16", **kernels.GEMM, workers=4)


@pytest.mark.sass
def test_stream_k_bench_gemm_builds_without_spills():
    # the bench row at 4096^3 on 132 blocks: 512 tiles = 3 whole waves + 116 tiles of 64
    # k-tiles dealt out as 56-57 k-tiles a block
    text = tilewright.lower(kernels.gemm_stream_k.fn(4096, 4096, 4096, "float16",
                                                     **kernels.GEMM, workers=132),
                            TARGET, kernels.STREAM_K_PASS_CONFIGS).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "0 bytes spill stores" in log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= 255
    # the whole tiles leave by TMA store (4 boxes), the runs' ticket is one atomic between
    # two GPU fences; the fix-up's loads one per accumulator register and run
    assert code.count("UTMASTG.2D") == 4 and code.count("ATOMG.E.ADD.STRONG.GPU") == 1
    assert code.count("MEMBAR.SC.GPU") == 2 and code.count("HGMMA.64x256x16.F32") == 8
    # the whole tiles' k-loop is the persistent in-order one (pio: 122 instructions)
    assert len(sass.hot_loop(code)) <= 125
