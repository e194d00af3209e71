"""Warp specialisation of a persistent kernel (transforms/pipeline/persistent.py,
``TileLoop``): when the ``T.Pipelined`` loop sits in the serial loop over tiles that
``T.Persistent`` makes, the producer warpgroup walks the tiles by itself (computing each tile's
indices on its own) and so loads the next tile's first stages while the compute warpgroups
store the last tile. Both roles count the loop's iterations across tiles, so versions and
barrier phases carry on from one tile to the next."""

import re
import sys
from pathlib import Path

import pytest
import sass
import tilewright
import tilewright.language as T
from test_cuda_pipeline import _emulate
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

TARGET = "cuda -arch=sm_90a"


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _persistent(M, N, K, workers, dtype="float16", **kw):
    return kernels.gemm_persistent.fn(M, N, K, dtype, workers=workers, **kw)


def test_the_producer_walks_the_tiles_and_runs_ahead():
    kernel = _kernel(tilewright.lower(_persistent(512, 512, 256, 3), TARGET).source.text)
    # the producer keeps 56 registers (its tile indices, guard and counter), the compute
    # warpgroups get the rest: (168 x 384 - 56 x 128) / 256 = 224
    producer, compute = kernel.split("tw_setmaxnreg_inc<224>();")
    assert "tw_setmaxnreg_dec<56>();" in producer
    # its own tile loop, guard and tile indices; iterations counted over the tiles
    assert "for (int wave_load = 0; wave_load < 16; ++wave_load)" in producer
    assert "if (((wave_load * 3) + ((int)blockIdx.x)) < 8)" in producer
    assert "int bn_load = " in producer and "ko_issued_ptr[0] = (ko_issued_base + 4);" in producer
    assert "((((ko_issued_base + ko_load) >> 2) + 1) & 1)" in producer  # the empty phase
    # the compute warpgroups release the tile's last version after its last wgmma group, so
    # the producer can refill it for the next tile while they store this one
    assert "for (int wave = 0; wave < 16; ++wave)" in compute
    tail = compute[compute.index("tw_wgmma_wait<0>();"):]
    counted = "ko_consumed_ptr[0] = (ko_consumed_base + 4);"
    assert tail.index("tw_mbar_arrive(") < tail.index(counted)
    assert "__syncthreads" not in compute


@pytest.mark.emulator
@pytest.mark.parametrize("M, N, K, workers, dtype", [
    (512, 512, 256, 3, "float16"),  # 8 tiles over 3 blocks: 3, 3 and 2 tiles
    (384, 768, 200, 5, "bfloat16"),  # 9 tiles, partial k-tile (zero fill)
    (256, 256, 512, 4, "float16"),  # fewer tiles than blocks: one idles
])
def test_persistent_warp_specialised_gemm_matches_torch(M, N, K, workers, dtype, tmp_path):
    text = _emulate(_persistent(M, N, K, workers, dtype), "sm_90a", tmp_path, M, N, K, dtype)
    assert "tw_setmaxnreg_dec<56>();" in text


def tile_code_gemm(M, N, K, tile_code, workers=2, bm=128, bn=256, bk=64):
    """A persistent GEMM whose tile code writes shared memory before the pipelined loop:
    ``"clear_b"`` clears the B tile, ``"shared_column"`` stores B's column in ``col[0]``,
    which B's copy reads."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(workers, threads=256) as w:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            if tile_code == "shared_column":
                col = T.alloc_shared((1,), "int32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            for i, j in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], workers, w):
                if tile_code == "shared_column":
                    col[0] = j * bn
                T.clear(C_l)
                if tile_code == "clear_b":
                    T.clear(B_s)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                    T.copy(A[i * bm, k * bk], A_s)
                    if tile_code == "shared_column":
                        T.copy(B[k * bk, col[0]], B_s)
                    else:
                        T.copy(B[k * bk, j * bn], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[i * bm, j * bn])

    return main


@pytest.mark.emulator
def test_tile_code_that_writes_the_pipelined_tiles_gets_no_producer_warpgroup(tmp_path):
    # a producer would fill B_s for the next tile while this one still clears it
    text = _emulate(tile_code_gemm(512, 512, 256, "clear_b"), "sm_90a", tmp_path, 512, 512, 256)
    assert "tw_setmaxnreg" not in _kernel(text)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_persistent_bench_gemm_builds_without_spills():
    text = tilewright.lower(_persistent(8192, 8192, 8192, 132), TARGET).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "0 bytes spill stores" in log and "HGMMA.64x256x16.F32" in code
    assert "UTMALDG.2D" in code and int(re.search(r"Used (\d+) registers", log).group(1)) <= 168


@pytest.mark.nvrtc
@pytest.mark.sass
def test_whole_rounds_keep_the_compute_loops_stage_arithmetic_uniform():
    # the _pts rows at 4096^3: on 132 blocks the tile loop's guard stays (a partial last
    # round) and ptxas keeps the k-loop's stage and barrier addresses in vector registers,
    # moved to the uniform ones (R2UR) for every wgmma and wait (32 in the loop: 152
    # instructions, two k-tiles); on 128 blocks (4 whole rounds, no guard) they stay on the
    # uniform datapath (6 R2UR, 122 instructions)
    loops = {}
    for workers in (132, 128):
        text = tilewright.lower(_persistent(4096, 4096, 4096, workers, **kernels.GEMM,
                                            tma_store=True),
                                TARGET).source.text
        cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
        assert "0 bytes spill stores" in log
        loops[workers] = sass.hot_loop(sass.dump(cubin))
        assert loops[workers].count("HGMMA.64x256x16.F32") == 8
    r2ur = {w: sum(op.startswith("R2UR") for op in loop) for w, loop in loops.items()}
    assert r2ur[128] <= 8 < 24 <= r2ur[132]
    assert len(loops[128]) + 24 <= len(loops[132])


@pytest.mark.emulator
def test_a_load_that_reads_shared_memory_the_tile_code_writes_stays_with_it(tmp_path):
    # B's column comes from col[0], which the compute threads write per tile: B's copy stays
    # with them (element-wise: col[0]'s alignment is unknown); only A's box is the producer's
    text = _emulate(tile_code_gemm(512, 512, 256, "shared_column"), "sm_90a", tmp_path,
                    512, 512, 256)
    producer, compute = _kernel(text).split("tw_setmaxnreg_inc<")
    assert producer.count("tw_tma_load_2d(") == 1 and "col" not in producer
    assert "B_ptr[" in compute and "B_ptr[" not in producer


@pytest.mark.emulator
@pytest.mark.parametrize("M, N, K, workers, dtype", [
    (512, 512, 256, 3, "float16"),  # 8 tiles over 3 blocks: the shared tile reused per tile
    (384, 640, 200, 2, "bfloat16"),  # partial tiles in N and K: the 16-byte stores guarded
])
def test_persistent_gemm_storing_through_a_swizzled_shared_tile_matches_torch(
        M, N, K, workers, dtype, tmp_path):
    text = _emulate(_persistent(M, N, K, workers, dtype, num_stages=3, c_shared=True),
                    "sm_90a", tmp_path, M, N, K, dtype)
    epilogue = _kernel(text).split("tw::store_pair(")
    # the epilogue tile is swizzled (a warp's pair stores cover eight bank groups) and leaves
    # in 16-byte chunks, after a barrier of the compute warpgroups only
    assert "^" in epilogue[1].split(";")[0] and len(epilogue) == 65
    assert "tw_named_barrier_sync(1, 256);" in epilogue[-1] and "tw_copy16(" in epilogue[-1]


@pytest.mark.emulator
@pytest.mark.parametrize("M, N, K, workers, dtype, configs", [
    # 8 tiles over 3 blocks (three tiles for block 0), 9 k-tiles: the 3 stages wrap within a
    # tile and carry on across tiles; the producer at its own 56 registers
    (512, 512, 576, 3, "float16", {}),
    # a partial row block (64 rows) and a partial k-tile: TMA clips the store, zero-fills the
    # loads; the producer at 24 registers (cuda.producer_registers)
    (448, 512, 520, 3, "bfloat16", {"cuda.producer_registers": 24}),
    # the _pts128 rows' form: 8 tiles over 2 blocks, 4 whole rounds of 9 k-tiles, both roles'
    # tile loops without a guard
    (512, 512, 576, 2, "bfloat16", {}),
])
def test_persistent_gemm_with_tma_stores_matches_torch(M, N, K, workers, dtype, configs,
                                                       tmp_path):
    func = _persistent(M, N, K, workers, dtype, num_stages=3, tma_store=True)
    text = _emulate(func, "sm_90a", tmp_path, M, N, K, dtype, configs=configs)
    tiles = -(-M // 128) * -(-N // 256)
    if tiles % workers == 0:
        rounds = tiles // workers
        assert f"for (int wave_load = 0; wave_load < {rounds}; ++wave_load)" in text
        assert f"for (int wave = 0; wave < {rounds}; ++wave)" in text
        assert f"+ ((int)blockIdx.x)) < {tiles})" not in text
    compute = _kernel(text).split("tw_setmaxnreg_inc<")[1]
    # per tile: the last tile's store has read C_s (wait, barrier) before the pair stores
    # overwrite it; the pairs visible to TMA (fence, barrier) before thread 0's four boxes of
    # 64 columns in one commit group; once more after the tile loop, before the block exits
    tile = compute[compute.index("for (int wave = 0;"):]
    wait = tile.index("tw_tma_store_wait<0>();")
    assert wait < tile.index("tw::store_pair(") < tile.rindex("tw::store_pair(") < \
        tile.rindex("tw_fence_proxy_async();") < tile.index("tw_tma_store_2d(")
    assert tile.count("tw_tma_store_2d(") == 4 and tile.count("tw_tma_store_commit();") == 1
    assert tile.rstrip().endswith("tw_tma_store_wait<0>();\n    tw_named_barrier_sync(1, 256);"
                                  "\n  }\n}")
    assert "tw_copy16(" not in compute and "C_ptr[" not in compute
