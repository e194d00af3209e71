"""The in-order TMA pipeline of a persistent kernel (``TmaPlan.in_order_tiles``): where the
``T.Pipelined`` loop sits in the serial loop over tiles that ``T.Persistent`` makes and the
loads are issued in order by thread 0 (``cuda.disable_warp_specialized``), the barriers are
set up once, versions and phases count on over the tiles, and the next tile's first loads
are issued right after the k-loop, before the tile's epilogue, so they land under it."""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from test_cuda_persistent_ws import tile_code_gemm
from test_cuda_pipeline import _emulate
from tilewright.testing import compare
from tilewright_cuda import arch, executor

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import checks  # noqa: E402 - after the sys.path setup
import kernels  # noqa: E402

TARGET = "cuda -arch=sm_90a"
IN_ORDER = kernels.GEMM_PASS_CONFIGS


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def _persistent(M, N, K, workers, dtype="float16", **kw):
    return kernels.gemm_persistent.fn(M, N, K, dtype, workers=workers,
                                      **{"num_stages": 3, "tma_store": True, **kw})


def test_the_next_tiles_first_loads_go_before_the_epilogue():
    kernel = _kernel(tilewright.lower(_persistent(512, 512, 576, 3), TARGET,
                                      IN_ORDER).source.text)
    top, tiles = kernel.split("for (int wave = 0; wave < 16; ++wave)")
    # the barriers set up once; the block's first tile's first load (one: 3 stages with a
    # wgmma group in flight run one k-tile ahead) before the tile loop
    assert top.count("tw_mbar_init(") == 3 and "tw_mbar_init(" not in tiles
    assert top.count("tw_tma_load_2d(") == 5 and "int bm_first = " in top
    assert "__syncthreads();" not in tiles.split("for (int ko = 0;")[0]
    # in each tile: the k-loop, then -- if the block has a next tile -- its first load into
    # the version after the tile's last (count + 9), then the drain and the epilogue
    k_loop, rest = tiles.split("tw_wgmma_wait<1>();", 1)
    assert "int ko_count_base = ko_count_ptr[0];" in k_loop
    assert k_loop.count("tw_tma_load_2d(") == 5  # the refill
    following = rest[:rest.index("tw_wgmma_wait<0>();")]
    assert "if ((wave < 15) && (((wave * 3) + ((int)blockIdx.x)) < 5))" in following
    assert "int bm_next = " in following and following.count("tw_tma_load_2d(") == 5
    assert "__syncthreads" not in following
    epilogue = rest[rest.index("tw_wgmma_wait<0>();"):]
    assert epilogue.index("ko_count_ptr[0] = (ko_count_base + 9);") < \
        epilogue.index("tw_tma_store_wait<0>();") < epilogue.index("tw::store_pair(")
    assert "tw_tma_load_2d(" not in epilogue


def test_four_stages_start_two_loads_of_the_next_tile():
    # 4 stages (C stored from the accumulators: 4 x 48 KB) run two k-tiles ahead
    kernel = _kernel(tilewright.lower(_persistent(512, 512, 576, 3, num_stages=4,
                                                  tma_store=False), TARGET,
                                      IN_ORDER).source.text)
    rest = kernel.split("tw_wgmma_wait<1>();", 1)[1]
    assert rest[:rest.index("tw_wgmma_wait<0>();")].count("tw_tma_load_2d(") == 10
    assert "((ko_count_base + 1) & 3)" in rest  # the second one's version


@pytest.mark.emulator
@pytest.mark.parametrize("M, N, K, workers, dtype, kw", [
    # 8 tiles over 3 blocks (3, 3, 2), 9 k-tiles: the 3 versions wrap within a tile and
    # carry on across tiles (9 = 0 mod 3, so 10 k-tiles below too)
    (512, 512, 576, 3, "float16", {}),
    (512, 512, 640, 3, "bfloat16", {}),
    # partial row block (64 rows), partial column block and partial k-tile: TMA clips the
    # stores and zero-fills the loads
    (448, 640, 520, 3, "float16", {}),
    # one k-tile per tile: the next tile's load is issued with none of this tile's pending
    (384, 512, 64, 2, "bfloat16", {}),
    # 4 stages two ahead, C stored from the accumulators; 5 k-tiles (not a multiple of 4)
    (512, 768, 320, 4, "float16", {"num_stages": 4, "tma_store": False}),
    # 2 stages (no wgmma group in flight: one ahead), C through the swizzled shared tile
    (384, 512, 192, 2, "float16", {"num_stages": 2, "tma_store": False, "c_shared": True}),
    # more blocks than tiles: some blocks run none (no first load)
    (256, 256, 256, 5, "float16", {}),
    # the _pio128 rows' form: 8 tiles over 2 blocks, 4 whole rounds (no guard) of 9 k-tiles
    (512, 512, 576, 2, "bfloat16", {}),
])
def test_persistent_in_order_gemm_matches_torch(M, N, K, workers, dtype, kw, tmp_path):
    text = _emulate(_persistent(M, N, K, workers, dtype, **kw), "sm_90a", tmp_path, M, N, K,
                    dtype, configs=IN_ORDER)
    kernel = _kernel(text)
    tiles = -(-M // 128) * -(-N // 256)
    assert ("_next = " in kernel) == (tiles > workers) and "tw_setmaxnreg" not in kernel
    if tiles % workers == 0:  # whole rounds: the tile loop without its guard
        assert f"for (int wave = 0; wave < {tiles // workers}; ++wave)" in kernel
        assert f"+ ((int)blockIdx.x)) < {tiles})" not in kernel


@pytest.mark.parametrize("configs", [{}, IN_ORDER, {**IN_ORDER, "cuda.tma_multicast": True}],
                         ids=["pts", "pio", "pio_mc"])
def test_the_4096_rows_tile_loop_has_a_guard_at_132_workers_only(configs):
    # 512 tiles: on 128 workers 4 whole rounds, the guard always true and dropped (in the
    # producer's tile loop too); on 132 the last round partial, its rounds rounded up to the
    # panel's 16 and the guard kept
    for workers, rounds, guarded in ((128, 4, False), (132, 16, True)):
        kernel = _kernel(tilewright.lower(_persistent(4096, 4096, 4096, workers), TARGET,
                                          configs).source.text)
        assert f"for (int wave = 0; wave < {rounds}; ++wave)" in kernel
        assert ("+ ((int)blockIdx.x)) < 512)" in kernel) == guarded
        assert ("wave_load" in kernel) == (configs == {})


@pytest.mark.emulator
def test_a_tile_whose_b_copy_reads_shared_memory_starts_only_its_a_loads(tmp_path):
    # B's column comes from col[0], which the tile code writes: B's copy is the tile's own
    # (element-wise, in the k-loop), A's box is the only TMA load, and the next tile's first
    # two (2 ahead: no wgmma group can stay in flight on B_s) go before the epilogue
    text = _emulate(tile_code_gemm(512, 512, 256, "shared_column"), "sm_90a", tmp_path, 512,
                    512, 256, configs=IN_ORDER)
    tiles = _kernel(text).split("for (int wave = 0;")[1]
    assert "tw_mbar_init(" not in tiles and "int i_next = " in tiles
    following = tiles[tiles.index("int i_next = "):]
    assert following.count("tw_tma_load_2d(") == 2 and "col" not in following.split("C_ptr")[0]


def _epilogue_touching_a_loaded_tensor(M, N, K, epilogue, workers, bn, bm=128, bk=64):
    """A persistent GEMM whose tile epilogue touches a tensor its loads read: ``"store_b"``
    stores the tile into B (C unused); ``"add_a"`` computes C = A @ B + A[:, :N] (K >= N),
    reading A."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(workers, threads=256) as w:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            for i, j in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], workers, w):
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                    T.copy(A[i * bm, k * bk], A_s)
                    T.copy(B[k * bk, j * bn], B_s)
                    T.gemm(A_s, B_s, C_l)
                if epilogue == "store_b":
                    T.copy(C_l, B[i * bm, j * bn])
                else:
                    for r, c in T.Parallel(bm, bn):
                        C_l[r, c] += A[i * bm + r, j * bn + c]
                    T.copy(C_l, C[i * bm, j * bn])

    return main


def test_an_epilogue_that_writes_a_loaded_tensor_keeps_the_loads_per_tile():
    # the next tile's loads, issued before this epilogue, could read B before it is stored
    func = _epilogue_touching_a_loaded_tensor(512, 512, 512, "store_b", workers=2, bn=256)
    kernel = _kernel(tilewright.lower(func, TARGET, IN_ORDER).source.text)
    tiles = kernel.split("for (int wave = 0;")[1]
    assert "_next = " not in kernel and "tw_mbar_init(" in tiles


@pytest.mark.emulator
def test_an_epilogue_reading_a_loaded_tensor_sets_the_barriers_up_each_tile(tmp_path):
    # the fallback: each tile sets its barriers up again (after a barrier: no thread still
    # polls the last tile's) and loads its own first stages
    M, N, K = 512, 256, 576  # 8 tiles of 128 x 128 over 3 blocks, 9 k-tiles
    func = _epilogue_touching_a_loaded_tensor(M, N, K, "add_a", workers=3, bn=128)
    lowered = tilewright.lower(func, TARGET, IN_ORDER)
    tiles = _kernel(lowered.source.text).split("for (int wave = 0;")[1]
    assert "_next = " not in tiles
    assert tiles.index("__syncthreads();") < tiles.index("tw_mbar_init(")
    g = torch.Generator().manual_seed(1)
    a = torch.randn((M, K), generator=g).half()
    b = torch.randn((K, N), generator=g).half()
    c = torch.full((M, N), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    ref = a.double() @ b.double() + a.double()[:, :N]
    torch.testing.assert_close(c.double(), ref.half().double(), rtol=1e-2, atol=8e-2)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_persistent_in_order_bench_gemm_builds_without_spills():
    text = tilewright.lower(_persistent(4096, 4096, 4096, 132), TARGET, IN_ORDER).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "0 bytes spill stores" in log and code.count("UTMASTG.2D") == 4
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= 255
    # after the k-loop (its last instruction the wait that keeps one wgmma group in flight):
    # the next tile's five loads (A's box, B's four), then the drain, the wait for the last
    # tile's TMA store and the pair stores into the shared tile
    after = code[code.rindex("WARPGROUP.DEPBAR.LE gsb0, 0x1"):]
    drain = after.index("WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert after[:drain].count("UTMALDG.2D") == 5
    assert drain < after.index("DEPBAR.LE SB0, 0x0") < after.index("STS ")
    assert "UTMALDG" not in after[drain:] and not re.search(r"\b(LDS|STG)\b", after)


@pytest.mark.emulator
@pytest.mark.parametrize("suffix", ["_pts128", "_pio128"])
def test_the_guard_free_device_checks_pass_in_emulation(suffix, tmp_path):
    # dialect-bench_gemm_float16_{pts128,pio128} as the check runner judges them on the GPU
    # (C against its float64 reference with the tolerance model): 4 tiles over 2 blocks, whole
    # rounds, so their tile loops have no guard -- the form of the _pts128 / _pio128 rows
    check = next(c for c in checks.dialect() if c.name == f"dialect-bench_gemm_float16{suffix}")
    lowered = tilewright.lower(check.make(), TARGET, check.pass_configs)
    assert "+ ((int)blockIdx.x)) < 4)" not in lowered.source.text
    assert "for (int wave = 0; wave < 2; ++wave)" in lowered.source.text
    (run,) = check.runs()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *run.args)
    for position, want in zip(run.outputs, run.expected):
        got = run.args[position]
        assert compare(got, want, dtype=str(got.dtype), reduction_length=check.reduction).ok
