"""A persistent kernel's in-order TMA pipeline in clusters of two (``TmaPlan.in_order_tiles``
with ``cuda.tma_multicast``): blocks 2c and 2c + 1 of ``T.Persistent`` walk their tiles
together -- in every round the pair takes tiles 2k and 2k + 1 of the walk, two row blocks of
one column of C, so they share the B panel -- and each block loads half of B's boxes into both
blocks' shared memory. The empty barriers' handshake across the pair carries on from tile to
tile as the full barriers' phases do: a fill's version is released in both blocks one barrier
after its last read (the last fills of a tile at the next tile's first iterations), and the
next tile's first load goes before the epilogue once both blocks released the version it
overwrites. The host emulation runs the two blocks of a cluster at once, each with its own
shared memory, so a version overwritten under the other block's wgmma shows as a wrong
result, and a handshake that does not carry on as a deadlock."""

import re
import sys
from pathlib import Path

import pytest
import sass
import tilewright
from test_cuda_pipeline import _emulate
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

TARGET = "cuda -arch=sm_90a"
IN_ORDER_MULTICAST = {**kernels.GEMM_PASS_CONFIGS, "cuda.tma_multicast": True}


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _persistent(M, N, K, workers, dtype="float16", **kw):
    return kernels.gemm_persistent.fn(M, N, K, dtype, workers=workers,
                                      **{"num_stages": 3, "tma_store": True, **kw})


def test_pairs_walk_their_tiles_together_and_release_across_tiles():
    # 8 tiles (4 row blocks x 2 columns) over one pair, 4 rounds of 9 k-tiles: every round
    # a tile for both blocks, so the tile loop has no guard
    lowered = tilewright.lower(_persistent(512, 512, 576, 2), TARGET, IN_ORDER_MULTICAST)
    kernel = _kernel(lowered.source.text)
    assert lowered.source.payload["cluster_dims"] == [2, 1, 1]
    top, tiles = kernel.split("for (int wave = 0; wave < 4; ++wave)")
    assert "blockIdx.x)) < 8)" not in tiles
    # three full barriers (one arrival) and three empty ones (one arrival from each block),
    # set up once, in both blocks before either reaches across
    assert top.count("(uint)1);") == 3 and top.count("(uint)2);") == 3
    assert "tw_mbar_init(" not in tiles
    assert top.index("tw_fence_barrier_init();") < top.index("tw_cluster_sync();")
    # the first tile's first load: A's box and two of B's four boxes into both blocks
    issued = re.findall(r"if \(tw_cluster_ctarank\(\) == (\d)\) \{\s*"
                        r"tw_tma_load_multicast_2d\([^;]*?, 3, ", top)
    assert issued == ["0", "0", "1", "1"] and top.count("tw_tma_load_2d(") == 1
    # in the k-loop: the fill read two iterations ago (counted over the tiles: the previous
    # tile's last two at a tile's first two iterations) released in both blocks, then the
    # wait for the pair's release of the version the refill overwrites
    loop = tiles[tiles.index("for (int ko = 0; ko < 9; ++ko)"):tiles.index("tw_wgmma_wait<1>();")]
    release = loop.index("if (2 <= (ko_count_base + ko)) {")
    assert loop.index("__syncthreads();") < release < loop.index("if (ko < 8) {") < \
        loop.index("tw_mbar_wait(") < loop.index("tw_tma_load_multicast_2d(")
    assert loop.count("tw_mbar_arrive_cluster(") == 2
    # after the k-loop, if the block has a next tile: the wait for both blocks' release of
    # fill count + 9 - 3, then its multicast loads, all before the drain and the epilogue
    rest = tiles.split("tw_wgmma_wait<1>();", 1)[1]
    following = rest[:rest.index("tw_wgmma_wait<0>();")]
    assert "if ((wave < 3)" in following and "int bn_next = " in following
    assert following.index("tw_mbar_wait(") < following.index("tw_tma_load_multicast_2d(")
    assert following.count("tw_tma_load_multicast_2d(") == 4
    assert "__syncthreads" not in following and "tw_mbar_arrive_cluster" not in following
    # neither block exits while the other may still arrive on its barriers
    end = tiles.rindex("tw_cluster_sync();")
    assert tiles.rindex("tw::store_pair(") < end < tiles.rindex("tw_tma_store_wait<0>();")


def test_a_pair_with_a_tile_in_one_block_only_is_refused():
    # 3 tiles over one pair: in round 1 block 0 has tile 2, block 1 none
    with pytest.raises(KernelError, match=r"cuda\.tma_multicast: the two blocks of a cluster "
                       r".*round 1 one of blocks 0 and 1 has a tile and the other none.*"
                       r"even number of workers and of tiles") as caught:
        tilewright.lower(_persistent(384, 256, 256, 2), TARGET, IN_ORDER_MULTICAST)
    assert "kernels.py" in str(caught.value)  # at T.Persistent's line


def test_pairs_that_share_no_tile_or_an_odd_worker_count_stay_unclustered():
    # 3 row blocks a column: tiles 2 and 3 lie in two columns (no B panel shared every round);
    # 3 workers: no pairs. Both keep the persistent in-order form without a cluster
    for func in (_persistent(384, 512, 256, 2), _persistent(512, 512, 256, 3)):
        lowered = tilewright.lower(func, TARGET, IN_ORDER_MULTICAST)
        kernel = _kernel(lowered.source.text)
        assert "cluster_dims" not in lowered.source.payload and "tw_cluster" not in kernel
        assert "_next = " in kernel and "tw_tma_load_multicast" not in kernel


@pytest.mark.emulator
@pytest.mark.parametrize("M, N, K, workers, dtype, kw", [
    # 8 tiles, 4 whole rounds (no guard) of 9 k-tiles each: the 3 versions wrap within a
    # tile and carry on
    (512, 512, 576, 2, "float16", {}),
    (512, 512, 640, 2, "bfloat16", {}),
    # partial row block (64 rows), column block (128 columns) and k-tile (8 deep), 12 tiles
    # over two pairs: TMA clips the stores and zero-fills the loads in both blocks
    (448, 640, 520, 4, "float16", {}),
    # 8 tiles over three pairs: pair 0 walks two rounds, pairs 1 and 2 one
    (512, 512, 320, 6, "bfloat16", {}),
    # 4 stages (the loads still one ahead: the other block may lag a k-tile), C from the
    # accumulators; 5 k-tiles
    (512, 768, 320, 2, "float16", {"num_stages": 4, "tma_store": False}),
    # 2 stages, no wgmma group in flight: a fill is released at the barrier after its read
    (512, 512, 192, 2, "float16", {"num_stages": 2, "tma_store": False, "c_shared": True}),
    # one k-tile a tile: every release and every wait for one crosses a tile
    (512, 512, 64, 2, "bfloat16", {}),
    # more workers than tiles: the second pair has none
    (256, 256, 256, 4, "float16", {}),
    # the dialect-bench_gemm_*_pio_mc checks' kernel: 4 tiles over one pair, 2 whole rounds
    (256, 512, 576, 2, "bfloat16", {}),
])
def test_persistent_multicast_gemm_matches_torch(M, N, K, workers, dtype, kw, tmp_path):
    text = _emulate(_persistent(M, N, K, workers, dtype, **kw), "sm_90a", tmp_path, M, N, K,
                    dtype, configs=IN_ORDER_MULTICAST)
    kernel = _kernel(text)
    assert "tw_tma_load_multicast_2d(" in kernel and "tw_mbar_arrive_cluster(" in kernel
    tiles = -(-M // 128) * -(-N // 256)
    assert ("_next = " in kernel) == (tiles > workers)
    if tiles % workers == 0:  # whole rounds (the _pio_mc128 rows' form): no guard
        assert f"for (int wave = 0; wave < {tiles // workers}; ++wave)" in kernel
        assert f"+ ((int)blockIdx.x)) < {tiles})" not in kernel


@pytest.mark.nvrtc
@pytest.mark.sass
def test_persistent_multicast_bench_gemm_sass():
    # the _pio_mc rows' kernel at 4096^3: 512 tiles on 66 pairs (132 blocks), 4 or 3 rounds
    # a pair. The k-loop: A's box and this block's two of B's four boxes (UTMALDG.2D +
    # UTMALDG.2D.MULTICAST), two remote arrivals releasing fill count - 2 in both blocks, the
    # pair's release and the stage's bytes waited for; after it the next tile's loads (the
    # same five) before the drain, the TMA store's wait and the pair stores
    text = tilewright.lower(_persistent(4096, 4096, 4096, 132), TARGET,
                            IN_ORDER_MULTICAST).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "0 bytes spill stores" in log
    loop = sass.hot_loop(code)
    assert loop.count("HGMMA.64x256x16.F32") == 4
    assert loop.count("UTMALDG.2D") == 1 and loop.count("UTMALDG.2D.MULTICAST") == 4
    assert loop.count("SYNCS.ARRIVE.TRANS64.RED.A1T0") == 2
    assert loop.count("BAR.SYNC.DEFER_BLOCKING") == 1 and not any("MEMBAR" in op for op in loop)
    after = code[code.rindex("WARPGROUP.DEPBAR.LE gsb0, 0x1"):]
    drain = after.index("WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert after[:drain].count("UTMALDG.2D.MULTICAST") == 4
    assert drain < after.index("DEPBAR.LE SB0, 0x0") < after.index("STS ")
    assert "UTMALDG" not in after[drain:] and code.count("UTMASTG.2D") == 4
