"""TMA multicast (transforms/pipeline/multicast.py, pass config ``cuda.tma_multicast``): in a
warp-specialised loop on sm_90a, a tile that blocks 2c and 2c + 1 load from the same place is
loaded once per pair, the two blocks forming a cluster, each issuing half of the tile's boxes
into both blocks' shared memory. The host emulation runs the blocks of a cluster at once, each
with its own shared memory, so a block that waited for the wrong barrier, or a version
overwritten under the other block's wgmma, shows as a wrong result or an emulation abort."""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import torch
from test_cuda_pipeline import _emulate
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

TARGET = "cuda -arch=sm_90a"
MULTICAST = {"cuda.tma_multicast": True}


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _gemm(M, N, K, dtype="float16", **kw):
    return kernels.gemm.fn(M, N, K, dtype, **{**kernels.GEMM, **kw})


def test_pairs_of_blocks_load_their_shared_b_tile_once():
    # grid 2 x 4: blocks 2c and 2c + 1 are two row blocks of one column (T.use_swizzle);
    # 4 stages, C stored from the accumulators
    lowered = tilewright.lower(_gemm(512, 512, 512, num_stages=4, c_shared=False), TARGET,
                               MULTICAST)
    text, launch = lowered.source.text, lowered.source.payload
    kernel = _kernel(text)
    assert launch["cluster_dims"] == [2, 1, 1] and "__cluster_dims__(2, 1, 1)" in kernel
    # B's four 64-column boxes: the first two issued by rank 0, the last two by rank 1, each
    # to both blocks (mask 3); A's box stays the block's own
    issued = re.findall(r"if \(tw_cluster_ctarank\(\) == (\d)\) \{\s*"
                        r"tw_tma_load_multicast_2d\([^;]*?, 3, ", kernel)
    assert issued == ["0", "0", "1", "1"] and kernel.count("tw_tma_load_2d(") == 1
    # both blocks' barriers are set up before either reaches across; every version is
    # released in both blocks (16 arrivals: 8 warps each), the last one after the loop too
    assert "tw_cluster_sync();" in kernel and "__syncthreads();" not in kernel
    assert kernel.count("(uint)16);") == 4  # the four empty barriers
    assert kernel.count("tw_mbar_arrive_cluster(") == 4
    # the producer stays until both blocks read its last tiles
    drain = kernel[kernel.index("for (int drain = 0; drain < 4; ++drain)"):]
    assert drain.index("tw_mbar_wait(") < drain.index("tw_setmaxnreg_inc")


def test_without_the_config_or_a_shared_tile_there_is_no_cluster():
    cases = [(_gemm(512, 512, 512), {}),  # opt-in
             (_gemm(512, 256, 512), MULTICAST),  # one block column: an odd grid x
             (_gemm(512, 512, 512, panel=0), MULTICAST)]  # 2c, 2c + 1: one row, A shared,
    for func, configs in cases:                           # but A is a single box
        lowered = tilewright.lower(func, TARGET, configs)
        kernel = _kernel(lowered.source.text)
        assert "cluster_dims" not in lowered.source.payload
        assert "tw_tma_load_multicast" not in kernel and "tw_cluster" not in kernel


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_multicast_gemm_matches_torch(dtype, tmp_path):
    # 8 k-tiles through 4 stages: every version is refilled by both ranks twice
    text = _emulate(_gemm(512, 512, 512, dtype), "sm_90a", tmp_path, 512, 512, 512, dtype,
                    configs=MULTICAST)
    assert "tw_tma_load_multicast_2d(" in text


@pytest.mark.emulator
def test_multicast_attention_matches_torch(tmp_path):
    # query blocks 2c and 2c + 1 of one head read the same K and V tiles
    b, h, s, d = 1, 2, 512, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d).half() for _ in range(3))
    o = torch.full((b, s, h, d), float("nan")).half()
    func = kernels.attention.fn(b, h, s, d, "float16", **kernels.ATTENTION)
    lowered = tilewright.lower(func, TARGET, MULTICAST)
    assert lowered.source.payload["cluster_dims"] == [2, 1, 1]
    assert _kernel(lowered.source.text).count("tw_tma_load_multicast_4d(") == 4  # K, V: 2 each
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, k, v, o)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(o.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_multicast_sass_loads_with_utmaldg_multicast():
    text = tilewright.lower(_gemm(8192, 8192, 8192), TARGET, MULTICAST).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "0 bytes spill stores" in log
    assert code.count("UTMALDG.2D.MULTICAST") >= 2 and "UCGABAR_WAIT" in code
    # the remote arrival releases at CTA scope: no GPU-wide fence in the loop
    assert code.count("MEMBAR.ALL.GPU") <= 1  # fence.mbarrier_init's, before the roles


IN_ORDER_MULTICAST = {**kernels.GEMM_PASS_CONFIGS, **MULTICAST}


def test_in_order_pairs_release_each_version_in_both_blocks():
    # TMA issued in order by thread 0 (the bench GEMM's schedule), 3 stages, a wgmma group in
    # flight: iteration ko's barrier ends the reads of fill ko - 2, whose version the refill
    # (fill ko + 1) overwrites, so thread 0 releases it in both blocks (while a later fill
    # needs it: ko - 2 + 3 < 8), then waits for both blocks' release
    lowered = tilewright.lower(_gemm(512, 512, 512), TARGET, IN_ORDER_MULTICAST)
    kernel = _kernel(lowered.source.text)
    assert lowered.source.payload["cluster_dims"] == [2, 1, 1]
    assert kernel.count("(uint)2);") == 3  # the three empty barriers: one arrival a block
    loop = kernel[kernel.index("for (int ko = 0; ko < 8; ++ko)"):]
    release = loop.index("if ((2 <= ko) && (ko < 7)) {")
    assert loop.index("__syncthreads();") < release < loop.index("tw_mbar_arrive_cluster(") < \
        loop.index("if (ko < 7) {") < loop.index("tw_mbar_wait(") < \
        loop.index("tw_tma_load_multicast_2d(")
    assert loop.count("tw_mbar_arrive_cluster(") == 2
    issued = re.findall(r"if \(tw_cluster_ctarank\(\) == (\d)\) \{\s*"
                        r"tw_tma_load_multicast_2d\([^;]*?, 3, ", loop)
    assert issued == ["0", "0", "1", "1"]
    # set up in both blocks before either reaches across; neither exits while the other
    # may still arrive on its barriers
    assert kernel.count("tw_cluster_sync();") == 2
    assert kernel.index("tw_wgmma_wait<0>();") < kernel.rindex("tw_cluster_sync();") < \
        kernel.index("tw::store_pair(")


def test_in_order_multicast_spends_a_fourth_stage_on_the_other_blocks_lag():
    # 4 stages: the loads stay one k-tile ahead (one fill before the loop), and the refill at
    # ko (fill ko + 1) waits for the release of fill ko - 3, made at ko - 1 in both blocks:
    # the other block may be an iteration behind
    kernel = _kernel(tilewright.lower(_gemm(512, 512, 512, num_stages=4), TARGET,
                                      IN_ORDER_MULTICAST).source.text)
    loop = kernel.index("for (int ko = 0; ko < 8; ++ko)")
    assert kernel[:loop].count("tw_tma_load_2d(") == 1  # A's box of fill 0
    body = kernel[loop:]
    assert "if ((2 <= ko) && (ko < 6)) {" in body  # release fill ko - 2 (fill ko + 2 needs it)
    # empty[(ko - 2) % 4], written (ko + 2) % 4; the empty barriers from 24580
    assert "tw_mbar_arrive_cluster((&(((uint64_t*)tw_smem_ptr)[(((ko + 2) & 3) + 24580)])), " \
           "(uint)1);" in body
    assert "tw_mbar_wait((&(((uint64_t*)tw_smem_ptr)[(((ko + 1) & 3) + 24580)])), " \
           "((((ko + 1) >> 2) + 1) & 1));" in body


def test_in_order_default_unchanged_without_multicast():
    text = tilewright.lower(_gemm(512, 512, 512), TARGET, kernels.GEMM_PASS_CONFIGS).source.text
    assert "tw_cluster" not in _kernel(text) and "tw_mbar_arrive_cluster" not in _kernel(text)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype, m, n, k, stages", [
    ("float16", 512, 512, 576, 3),   # 2 x 4 blocks, 9 k-tiles: 3 stages wrap three times
    ("bfloat16", 448, 512, 520, 3),  # a partial row block (64 rows) and a partial k-tile
    ("float16", 448, 512, 520, 4),   # the same through the _mc_s4 rows' 4 stages
])
def test_in_order_multicast_gemm_matches_torch(dtype, m, n, k, stages, tmp_path):
    text = _emulate(_gemm(m, n, k, dtype, num_stages=stages), "sm_90a", tmp_path, m, n, k,
                    dtype, configs=IN_ORDER_MULTICAST)
    assert "tw_tma_load_multicast_2d(" in text and "tw_mbar_arrive_cluster(" in text


@pytest.mark.nvrtc
@pytest.mark.sass
def test_in_order_multicast_sass_loop():
    # the _mc bench rows' kernel: its loop issues A's box and its two of B's four boxes
    # (UTMALDG.2D + UTMALDG.2D.MULTICAST), releases the version in both blocks (two remote
    # arrivals, SYNCS.ARRIVE.TRANS64.RED) and waits for the pair's release and each stage's
    # bytes (two try-waits); the 4 HGMMA and one block barrier as in the default kernel
    func = _gemm(4096, 4096, 4096)
    cubin, log = executor.nvrtc_compile(tilewright.lower(func, TARGET, IN_ORDER_MULTICAST)
                                        .source.text, arch.get("sm_90a"), ".")
    assert "0 bytes spill stores" in log
    loop = sass.hot_loop(sass.dump(cubin))
    ops = loop
    assert ops.count("HGMMA.64x256x16.F32") == 4
    assert ops.count("UTMALDG.2D") == 1 and ops.count("UTMALDG.2D.MULTICAST") == 4
    assert ops.count("SYNCS.ARRIVE.TRANS64.RED.A1T0") == 2
    assert ops.count("SYNCS.PHASECHK.TRANS64.TRYWAIT") == 2
    assert ops.count("BAR.SYNC.DEFER_BLOCKING") == 1 and not any("MEMBAR" in op for op in ops)
