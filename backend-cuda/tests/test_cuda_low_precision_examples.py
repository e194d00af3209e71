"""The low-precision examples on CUDA (examples/gemm_fp8_scaled.py, examples/gemm_w4a16.py).

The scaled fp8 GEMM in each scale layout compiles to the fp8 tensor-core instruction on sm_89
(``QMMA.16832.F32.E4M3.E4M3``, no HMMA) and on sm_90a (wgmma, ``QGMMA.64x128x32.F32.E4M3.E4M3``
on tiles loaded by TMA, no HMMA and no unpacking to fp16), without spills; the block layout's
per-k-block scaling matches torch in host emulation on both, its running sum of scaled partial
products in registers beside the gemm's accumulator. The W4A16 GEMM's dequantised
float16 tile feeds ``HMMA.16816.F32`` on sm_80 and sm_90a through ldmatrix, matches torch
in host emulation, and is dequantised while the next stages' copies are in flight (the
refill of stage k + S - 1 is issued before stage k's codes are dequantised), eight codes a
call of ``tw_dequant_u4x8_f16``; in slices of K (split-K), a second kernel adds the slices'
partial sums. Its options keep those results: staged scales (a slice's zero points and scales
in shared memory, no global load in the loop) bit-identical to the default, swapped operands
(C^T = W A^T on wgmma m64n16k16 / m64n8k16 on sm_90a, mma.sync on sm_80) within float32
summation order. The GPU
harness's own reference for the scaled GEMM (it runs without TVM) agrees with the
example's."""

import re
import sys
from pathlib import Path

import cuda_source
import hostemu
import pytest
import sass
import tilewright
import torch
from tilewright_cuda import arch, executor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gemm_fp8_scaled as fp8  # noqa: E402 - after the sys.path setup
import gemm_w4a16 as w4  # noqa: E402
import harness  # noqa: E402
import kernels  # noqa: E402

FP8_TILE = {"num_stages": 2}  # sm_89: 101 KB of shared memory a block


def _sass(func, arch_name, tmp_path, pass_configs=None):
    source = tilewright.lower(func, f"cuda -arch={arch_name}",
                              pass_configs=pass_configs).source.text
    cubin, log = executor.nvcc_compile(source, arch.get(arch_name), tmp_path)
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log
    return sass.dump(cubin)


def _w4a16_operands(m, n, k, group, seed):
    """Random float16 activations [m, k] and weights [n, k] quantised in groups of ``group``
    (examples/gemm_w4a16.py): a, codes, scales, zero points."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).half()
    return (a, *w4.quantize(torch.randn(n, k, generator=gen).half(), group))


def _assert_w4a16_matches(c, a, q, scales, zeros):
    """C against the float64 product of the activations and the dequantised weights."""
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(c.double(), want, rtol=1e-2, atol=1e-2 * want.abs().mean())


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("layout", fp8.LAYOUTS)
def test_scaled_fp8_gemm_runs_on_qmma_on_sm_89(tmp_path, layout):
    code = _sass(fp8.fp8_gemm_scaled.fn(1024, 1024, 1024, layout, **FP8_TILE), "sm_89",
                 tmp_path)
    assert "QMMA.16832.F32.E4M3.E4M3" in code
    assert "HMMA" not in code and "F2FP.F16.E4M3" not in code


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("layout", fp8.LAYOUTS)
def test_scaled_fp8_gemm_runs_on_qgmma_on_sm_90a(tmp_path, layout):
    code = _sass(fp8.fp8_gemm_scaled.fn(4096, 4096, 4096, layout), "sm_90a", tmp_path)
    # two warpgroups of 64 x 128 each, one wgmma per 32-deep k step; the operands arrive by
    # TMA and are read through descriptors: no ldmatrix, no fp8 -> fp16 unpacking, no HMMA
    assert "QGMMA.64x128x32.F32.E4M3.E4M3" in code and "UTMALDG.2D" in code
    assert "HMMA" not in code and "HGMMA" not in code and "LDSM" not in code
    assert "F2FP.F16.E4M3" not in code and "F2FP.BF16.F32.PACK_AB" in code  # bf16 C only


def _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale):
    """The lowered block-scale kernel run in host emulation, C poisoned with NaN, against the
    float64 reference (bfloat16 C: rtol 8e-3)."""
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=torch.bfloat16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, a_scale, b_scale,
                c)
    want = fp8.reference(a, b, a_scale, b_scale, "block")
    torch.testing.assert_close(c.double(), want, rtol=8e-3, atol=1e-3 * want.abs().mean())


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ["sm_89", "sm_90a"])
def test_block_scaled_fp8_gemm_matches_torch_in_emulation(tmp_path, arch_name):
    m, n, k = 80, 256, 384  # a partial row tile, 2 column tiles, 3 scale groups along K
    gen = torch.Generator().manual_seed(5)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    b, b_scale = fp8.quantize_blocks(torch.randn(n, k, generator=gen))
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **FP8_TILE),
                               f"cuda -arch={arch_name}")
    # the running sum follows the gemm's accumulator into registers: shared memory holds
    # only the two stages of 128 x 128 fp8 tiles of A and B (and on sm_90a the full and
    # empty mbarriers of the warp-specialised TMA loop, in one 128-byte slot)
    smem = lowered.source.payload["dynamic_smem_bytes"]
    assert smem == 2 * 2 * 128 * 128 + (128 if arch_name == "sm_90a" else 0)
    assert ("tw_gemm_wgmma<128, 128, 128, TW_WGMMA_E4M3," in lowered.source.text) == \
        (arch_name == "sm_90a")
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.emulator
@pytest.mark.parametrize("options", [{"overlap": True}, {"fused_scale": True},
                                     {"overlap": True, "fused_scale": True}])
def test_block_scaled_fp8_gemm_options_match_torch_in_emulation(tmp_path, options):
    # the diagnostic rows' kernels (build_bundles: fp8_gemm_block_*_overlap/_fused): with
    # overlap, k-tile ko's wgmma is issued before k-tile ko - 1's promotion and waited for
    # after it (the emulation retires a group at its wait)
    m, n, k = 80, 256, 512  # a partial row tile, 2 column tiles, 4 scale groups (2 steps)
    gen = torch.Generator().manual_seed(7)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    b, b_scale = fp8.quantize_blocks(torch.randn(n, k, generator=gen))
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **options),
                               "cuda -arch=sm_90a")
    text = lowered.source.text
    if options.get("overlap"):
        loop = text[text.index("for (int kp = 0;"):]
        first, second = loop.split("tw_gemm_wgmma<", 3)[1:3]
        assert "C_l_ptr[0] = " in first[:first.index("tw_wgmma_wait<0>();")]  # in flight
        assert "C_l_ptr[0] = " in second[:second.index("tw_wgmma_wait<0>();")]
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "panel", "c_shared"), [(80, 0, False), (336, 2, False),
                                                      (336, 2, True)])
def test_block_scaled_fp8_pingpong_takes_turns_and_matches_torch_in_emulation(tmp_path, m,
                                                                              panel, c_shared):
    # the bench's fp8_gemm_block_*_pingpong rows (kernels.fp8_config("block"): 4 stages;
    # cuda.wgmma_pingpong): the two consumer warpgroups take turns issuing each k-tile's
    # wgmma, so one promotes its product while the tensor cores run the other's; 11 k-tiles
    # wrap the stages twice and both turn barriers go through several phases. With panels
    # (the _p16 rows' T.use_swizzle; here 2 block rows a panel, so that 3 block rows make a
    # second, narrower panel walked backwards) the blocks run other blocks' tiles; with
    # c_shared (the _cs rows) C leaves through a shared tile, the partial row tile's rows
    # past M left out of its 16-byte stores.
    n, k = 256, 11 * 128  # partial row tiles, 2 column tiles
    gen = torch.Generator().manual_seed(11)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    b, b_scale = fp8.quantize_blocks(torch.randn(n, k, generator=gen))
    config = {**kernels.fp8_config("block"), "panel": panel, "c_shared": c_shared}
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **config),
                               "cuda -arch=sm_90a", {"cuda.wgmma_pingpong": True})
    text = lowered.source.text
    loop = text[text.index("for (int ko = 0; ko < 11; ++ko) {"):]
    turn = loop.index("tw_named_barrier_sync(((((int)threadIdx.x) >> 7) + 9), 256);")
    gemm = loop.index("tw_gemm_wgmma<128, 128, 128, TW_WGMMA_E4M3,")
    other = loop.index("tw_named_barrier_arrive((10 - (((int)threadIdx.x) >> 7)), 256);")
    # the turn passes on once the gemm is issued, before this warpgroup waits for it
    assert turn < gemm < other < loop.index("tw_wgmma_wait<0>();") < loop.index("C_l_ptr[0] =")
    # panel index = (launch x + 2 launch y) / (2 columns x 2 rows a panel)
    assert ("(((int)blockIdx.y) >> 1)" in text) == bool(panel)
    assert ("tw_copy16((&(C_ptr[" in text) == c_shared
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "stages", "c_shared", "panel", "configs"),
                         [(80, 4, True, 0, {}), (80, 3, True, 0, {}),
                          (80, 4, False, 0, {"cuda.producer_registers": 24}),
                          (336, 4, True, 2, {})])
def test_block_scaled_fp8_wide_column_tiles_match_torch_in_emulation(tmp_path, m, stages,
                                                                     c_shared, panel, configs):
    # the bench's fp8_gemm_block_*_n256 rows: 128 x 256 tiles, each k-tile's two 128-column
    # halves multiplied into one product fragment in turn, each promoted with its own block
    # of B's scale; the second column tile's second half lies wholly past N (its TMA box
    # reads zeros, its scale row is clamped, its C stores are left out; with c_shared both
    # halves leave through one shared tile, a barrier between), 80 or 336 rows a partial
    # row tile, 11 k-tiles wrap the stages; with panels (the _n256p16 rows; here 2
    # block rows a panel, so that 3 block rows make a second, narrower panel) the blocks run
    # other blocks' tiles
    n, k = 384, 11 * 128
    gen = torch.Generator().manual_seed(13)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    b, b_scale = fp8.quantize_blocks(torch.randn(n, k, generator=gen))
    config = {**kernels.fp8_config("block"), "block_N": 256, "num_stages": stages,
              "c_shared": c_shared, "panel": panel}
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **config),
                               "cuda -arch=sm_90a", configs)
    text = lowered.source.text
    loop = text[text.index("for (int ko = 0; ko < 11; ++ko) {"):]
    first, second = loop.split("tw_gemm_wgmma<128, 128, 128, TW_WGMMA_E4M3,")[1:3]
    # the second half's product starts from zeros computed from the first half's promoted
    # sums (ptxas then keeps the two gemms apart: one product fragment)
    assert "C_l_ptr[63] = (C_l_ptr[63] + (C_k_ptr[63] *" in first
    assert "C_k_ptr[63] = min(fabsf(C_l_ptr[63]), zero_ptr[0]);" in first
    assert "C_h_ptr[0] = (C_h_ptr[0] + (C_k_ptr[0] *" in second
    assert ("(((int)blockIdx.y) >> 1)" in text) == bool(panel)
    if c_shared:  # the second half's pair stores wait until the first half's rows are out
        tail = text[text.index("tw_copy16((&(C_ptr["):]
        assert tail.index("tw_named_barrier_sync(1, 256);") < tail.index("tw::store_pair(")
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.nvcc
@pytest.mark.sass
def test_block_scaled_fp8_wide_column_tiles_promote_without_spills(tmp_path):
    # the _n256 rows at 4096^3: eight QGMMA.64x128x32 a k-tile (two halves of four), 128
    # FFMA promotions and 64 FMNMX zeros, no local memory at 232 registers
    config = {**kernels.fp8_config("block"), "block_N": 256}
    code = _sass(fp8.fp8_gemm_scaled.fn(4096, 4096, 4096, "block", **config), "sm_90a",
                 tmp_path)
    loop = sass.hot_loop(code)
    assert "QGMMA.64x128x32.F32.E4M3.E4M3" in code and "QGMMA.64x256" not in code
    assert sum(op.startswith("QGMMA") for op in loop) == 8
    assert sum(op.startswith("FFMA") for op in loop) == 128
    assert sum(op.startswith("FMNMX") for op in loop) == 64
    assert not any(op.startswith(("STL", "LDL")) for op in loop)


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "n", "c_shared", "panel"),
                         [(80, 640, True, 0), (200, 256, False, 0), (336, 640, True, 2)])
def test_block_scaled_fp8_192_column_tiles_match_torch_in_emulation(tmp_path, m, n, c_shared,
                                                                    panel):
    # the bench's fp8_gemm_block_*_n192 rows: 128 x 192 tiles, one product fragment, each
    # column promoted with its own block of B's scale: the tile at even bx starts on a block
    # boundary (128 + 64 columns), at odd bx 64 columns past one (64 + 128); 640 columns:
    # tiles 0-2 whole (both parities), tile 3 partial (64 columns in block 4, the rest past
    # N, its next block row clamped); 256 columns: tile 1 odd and partial (64 columns of
    # block 1). A partial row tile, 11 k-tiles wrap the four stages; with panels (the
    # _n192p16 rows; here 2 block rows a panel) bx's parity is the remapped tile's
    k = 11 * 128
    gen = torch.Generator().manual_seed(17)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    # block scales far apart (1x-1000x), so a column promoted with its neighbour block's
    # scale is off by far more than the tolerance
    w = torch.randn(n, k, generator=gen) * (10.0 ** torch.arange(n // 128).repeat_interleave(
        128))[:, None]
    b, b_scale = fp8.quantize_blocks(w)
    config = {**kernels.fp8_config("block"), "block_N": 192, "c_shared": c_shared,
              "panel": panel}
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **config),
                               "cuda -arch=sm_90a")
    text = lowered.source.text
    assert "tw_gemm_wgmma<192, 128, 192, TW_WGMMA_E4M3," in text
    # three of B's scales a k-tile: the first 64 columns', the last 64's and the middle
    # 64's (its row by the parity of bx)
    assert len(set(re.findall(r"SB_ptr\[[^\]]*\]", text))) == 3
    assert ("(((int)blockIdx.y) >> 1)" in text) == bool(panel)
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.nvcc
@pytest.mark.sass
def test_block_scaled_fp8_192_column_tiles_promote_without_spills(tmp_path):
    # the _n192 rows at 4096^3: four QGMMA.64x192x32 a k-tile, 96 FFMA promotions (one a
    # product register), 6 FMUL (a_scale times each of the three scales, two rows a thread),
    # 5 scale loads (two rows of A, three rows of B), no local memory
    config = {**kernels.fp8_config("block"), "block_N": 192}
    code = _sass(fp8.fp8_gemm_scaled.fn(4096, 4096, 4096, "block", **config), "sm_90a",
                 tmp_path)
    loop = sass.hot_loop(code)
    assert sum(op.startswith("QGMMA.64x192x32.F32.E4M3.E4M3") for op in loop) == 4
    assert sum(op.startswith("FFMA") for op in loop) == 96
    assert sum(op.startswith("FMUL") for op in loop) == 6
    assert sum(op.startswith("LDG") for op in loop) == 5
    assert not any(op.startswith(("STL", "LDL", "FSEL", "SEL")) for op in code)


@pytest.mark.emulator
@pytest.mark.parametrize(("block_N", "workers", "panel", "configs"),
                         [(128, 3, 0, {}), (256, 3, 0, {}), (128, 2, 2, {}),
                          (128, 2, 0, kernels.GEMM_PASS_CONFIGS),
                          (256, 2, 2, kernels.GEMM_PASS_CONFIGS)])
def test_block_scaled_fp8_persistent_matches_torch_in_emulation(tmp_path, block_N, workers,
                                                                panel, configs):
    # the bench's fp8_gemm_block_*_pts rows (workers, tma_store): blocks walk the tiles (3
    # row tiles, the last partial; 3 column tiles of 128, or 2 of 256 whose last half lies
    # past N: 9 or 6 tiles), 11 k-tiles a tile wrap the four stages and the versions and
    # phases count on across the tiles; C leaves each tile (or half) by TMA stores from one
    # shared tile. 3 blocks take 3 or 2 tiles each, as the rows' 128 blocks take 8 / 32 / 4
    # / 16 (no guard on the tile loop); 2 blocks take 5 and 4, or with panels of 2 block
    # rows walk other tiles (a guard). Warp-specialised, the producer walks the tiles by
    # itself; in order (thread 0 issues the loads: TmaPlan.in_order_tiles) the next tile's
    # first loads go before the tile's TMA stores. The product fragment is cleared by
    # wgmma's scale-d (rules.gemm), not by zeroing code. Block scales far apart
    # (1x-100x), so a tile promoted with another tile's scales is far off
    m, n, k = 336, 384, 11 * 128
    gen = torch.Generator().manual_seed(19)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    w = torch.randn(n, k, generator=gen) * (10.0 ** torch.arange(n // 128).repeat_interleave(
        128))[:, None]
    b, b_scale = fp8.quantize_blocks(w)
    config = {**kernels.fp8_config("block"), "block_N": block_N, "panel": panel,
              "workers": workers, "tma_store": True}
    lowered = tilewright.lower(fp8.fp8_gemm_scaled.fn(m, n, k, "block", **config),
                               "cuda -arch=sm_90a", configs)
    text = lowered.source.text
    kernel = text[text.index('extern "C" __global__'):]
    assert ("int ko_count_base = ko_count_ptr[0];" in kernel) == bool(configs)
    assert ("int ko_consumed_base = ko_consumed_ptr[0];" in kernel) == (not configs)
    if not configs:  # the tile loop's guard (the producer's and the consumers')
        guard = re.findall(r"if \(\(\(wave(?:_load)? \* \d+\) \+ \(\(int\)blockIdx.x\)\) < \d+\)",
                           kernel)
        assert len(guard) == (0 if workers == 3 else 2)
    assert "C_k_ptr[0] = 0x0p+0f" not in kernel and "(((int)threadIdx.x) >> 7), 0);" in kernel
    assert kernel.count("tw_tma_store_2d(") == 2 * block_N // 128  # two boxes a half
    if configs:  # the next tile's first loads (4 stages: 3 ahead) before the TMA stores
        after = kernel[kernel.index("for (int ko = 0; ko < 11; ++ko)"):]
        following = after[after.index("int bx_next = "):after.index("tw_tma_store_wait<0>();")]
        assert following.count("tw_tma_load_2d(") == 3 * (1 + block_N // 128)
    _block_scaled_matches_torch(tmp_path, lowered, a, b, a_scale, b_scale)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize(("block_N", "loop_ffma"), [(128, 64), (256, 128)])
def test_block_scaled_fp8_persistent_wgmma_are_not_serialised(tmp_path, block_N, loop_ffma):
    # the _pts rows at 8192^3: each warpgroup's four QGMMA of a 128-column gemm issued
    # together and waited for once (ptxas C7520 -- every wgmma waited for alone -- where
    # the product fragment was zeroed by code in a guarded tile loop); no local memory
    config = {**kernels.fp8_config("block"), "block_N": block_N, "workers": 128,
              "tma_store": True}
    source = tilewright.lower(fp8.fp8_gemm_scaled.fn(8192, 8192, 8192, "block", **config),
                              "cuda -arch=sm_90a").source.text
    cubin, log = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    assert "C7520" not in log and " 0 bytes spill stores" in log, log
    code = sass.dump(cubin)
    loop = sass.hot_loop(code)
    assert sum(op.startswith("QGMMA.64x128x32.F32.E4M3.E4M3") for op in loop) == block_N // 32
    assert sum(op.startswith("WARPGROUP.DEPBAR") for op in loop) == block_N // 128
    assert sum(op.startswith("FFMA") for op in loop) == loop_ffma
    assert "UTMASTG.2D" in code and not any(op.startswith(("STL", "LDL")) for op in loop)


def test_block_scaled_fp8_overlap_takes_k_tiles_two_at_a_time():
    with pytest.raises(ValueError, match="even number"):
        fp8.fp8_gemm_scaled.fn(256, 256, 384, "block", overlap=True)
    with pytest.raises(ValueError, match="one scale block"):
        fp8.fp8_gemm_scaled.fn(256, 256, 512, "block", block_N=256, overlap=True)
    with pytest.raises(ValueError, match="one scale block"):
        fp8.fp8_gemm_scaled.fn(256, 384, 512, "block", block_N=192, overlap=True)
    with pytest.raises(ValueError, match="divide it or be 192 or 256"):
        fp8.fp8_gemm_scaled.fn(256, 384, 512, "block", block_N=320)
    with pytest.raises(ValueError, match="it takes no workers"):
        fp8.fp8_gemm_scaled.fn(256, 256, 512, "block", overlap=True, workers=2)


def test_block_scaled_fp8_tma_store_needs_the_shared_c_tile():
    with pytest.raises(ValueError, match="it needs c_shared"):
        fp8.fp8_gemm_scaled.fn(256, 256, 512, "block", workers=2, tma_store=True)


def test_block_scaled_fp8_grid_kernel_still_zeroes_its_product_fragment_in_code():
    # rules.gemm clears a wgmma accumulator by scale-d only in a persistent kernel's tile
    # loop; the measured grid kernels keep their zeroing code (ptxas folds it there)
    text = tilewright.lower(fp8.fp8_gemm_scaled.fn(256, 256, 512, "block",
                                                   **kernels.fp8_config("block")),
                            "cuda -arch=sm_90a").source.text
    assert "C_k_ptr[0] = 0x0p+0f" in text and "(((int)threadIdx.x) >> 7), 0);" not in text


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("splits", [1, 4])
def test_w4a16_dequantised_tile_feeds_hmma(tmp_path, arch_name, splits):
    code = _sass(w4.w4a16_gemm.fn(16, 8192, 8192, splits=splits), arch_name, tmp_path)
    assert "HMMA.16816.F32" in code  # the tensor cores on the dequantised float16 tile
    assert "LDSM.16.M88.4" in code and "LDGSTS.E.BYPASS.128" in code  # cp.async stages
    # the codes dequantised eight a call (include/tw_dequant.h), stored 16 bytes at a time
    assert "STS.128" in code and "I2F.F16" not in code
    assert code.count("Function : ") == (2 if splits > 1 else 1)


@pytest.mark.parametrize(("stages", "arch_name"), [(2, "sm_80"), (3, "sm_90a"), (4, "sm_90a")])
def test_w4a16_dequantises_while_the_next_stages_load(stages, arch_name):
    # the order in the generated k loop: the wait for stage k (S - 2 younger groups may stay
    # in flight: stages k + 1 .. k + S - 2), the barrier, the refill of stage k + S - 1 (codes
    # and activations as cp.async) and its commit, then the dequantisation of stage k's codes
    # into the float16 tile, a barrier, the gemm; so while a tile is dequantised the S - 1
    # next stages' copies are in flight, the one issued this iteration included
    tile = {**kernels.W4A16, "num_stages": stages, "splits": 1}
    source = tilewright.lower(w4.w4a16_gemm.fn(16, 1024, 1024, 128, **tile),
                              f"cuda -arch={arch_name}").source.text
    body = source[source.index("for (int ko = 0;"):].splitlines()
    body = body[:next(i for i, line in enumerate(body) if "tw_gemm_mma_rf<" in line) + 1]

    def first(pattern):
        return next(i for i, line in enumerate(body) if re.search(pattern, line))

    wait, refill = first(rf"tw_cp_async_wait<{stages - 2}>\(\);"), first(r"tw_cp_async16\(")
    commit, dequant = first(r"tw_cp_async_commit\(\);"), first(r"Scales_ptr\[")
    assert wait < first(r"__syncthreads\(\);") < refill < commit < dequant < len(body) - 1
    assert f"if (ko < {1024 // tile['block_K'] - stages + 1})" in "\n".join(body[wait:refill])
    assert "Q_ptr[" in "\n".join(body[refill:commit])  # the codes of stage k + S - 1
    # its version: (ko + S - 1) masked for a power of two S, else a loop-carried counter
    # (transforms/pipeline/counters.py)
    version = f"(ko + {stages - 1})" if stages & (stages - 1) == 0 else "_stage_ptr[0]"
    assert version in "\n".join(body[refill:commit])
    assert "__syncthreads();" in "\n".join(body[dequant:])  # the tile is whole before the gemm
    assert not any("tw_cp_async" in line for line in body[commit + 1:])


@pytest.mark.emulator
@pytest.mark.parametrize("splits", [1, 2])
def test_w4a16_matches_torch_in_emulation(tmp_path, splits):
    # decode rows, a partial column tile, 4 groups a row; in two slices of K: the partial
    # sums of each slice's blocks in the workspace, added by the second kernel
    m, n, k, group = 5, 200, 256, 64
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 6)
    lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, splits=splits),
                               "cuda -arch=sm_80")
    launch = lowered.source.payload
    assert "tw_dequant_u4x8_f16(" in lowered.source.text  # eight codes a call
    if splits > 1:
        assert [g["grid"] for g in launch["kernels"]] == [["2", "1", str(splits)],
                                                         ["1", str(m), "1"]]
        assert launch["workspaces"] == [{"name": "partial", "dtype": "float32",
                                         "bytes": str(splits * m * n * 4)}]
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(lowered.source.text, launch, tmp_path, a, q, scales, zeros, c)
    _assert_w4a16_matches(c, a, q, scales, zeros)


@pytest.mark.emulator
@pytest.mark.parametrize("tile", [
    {"splits": 8, "num_stages": 2},                  # the bench's default W4A16 rows
    {"splits": 8, "num_stages": 2, "threads": 256},  # _t256
    {"splits": 4, "num_stages": 4},                  # _s4
    {"splits": 4, "num_stages": 2, "block_K": 256},  # 256-deep k-tiles
])
def test_w4a16_bench_tiles_match_torch_in_emulation(tmp_path, tile):
    # the tile configurations of the W4A16 bundles (bench/build_bundles.py) on
    # sm_90a: decode rows, a partial column tile, 8 groups a row, 1 or 2 k-tiles a slice
    m, n, k, group = 5, 200, 1024, 128
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 7)
    lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, **tile), "cuda -arch=sm_90a")
    assert "tw_dequant_u4x8_f16(" in lowered.source.text
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, q, scales, zeros, c)
    _assert_w4a16_matches(c, a, q, scales, zeros)


@pytest.mark.emulator
def test_w4a16_on_wgmma_dequantises_in_the_consumer_warpgroup(tmp_path):
    # 64-row tiles on sm_90a: the gemm is wgmma, the loads a producer warpgroup's; the
    # consumer warpgroup's 128 threads dequantise eight codes a call into the swizzled tile
    m, n, k, group = 70, 256, 512, 64
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 7)
    tile = {"block_M": 64, "block_N": 128, "block_K": 64, "threads": 128, "num_stages": 2}
    lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, **tile), "cuda -arch=sm_90a")
    text = lowered.source.text
    assert "tw_gemm_wgmma<" in text and "tw_mbar_wait" in text
    assert "tw_dequant_u4x8_f16(" in text
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(text, lowered.source.payload, tmp_path, a, q, scales, zeros, c)
    _assert_w4a16_matches(c, a, q, scales, zeros)


@pytest.mark.emulator
@pytest.mark.parametrize(("tile", "configs"), [
    ({"splits": 1, "num_stages": 2}, {}),                 # 16 k-tiles, 8 steps
    ({"splits": 2, "num_stages": 3}, {}),                 # 8 k-tiles a slice
    ({"splits": 4, "num_stages": 2}, {"cuda.blocks_per_sm": 2}),  # the bench's _overlap
    ({"splits": 4, "num_stages": 2, "block_K": 64}, {}),  # 64-deep k-tiles
])
def test_w4a16_overlap_is_bit_identical_to_the_default_in_emulation(tmp_path, tile, configs):
    # overlap's two float16 tiles: k-tile e + 1 dequantised while e's gemm runs, one barrier
    # a k-tile; the same dequantisation and k order as the default, so the same bits (decode
    # rows, a partial column tile, 16 groups a row; at 2 blocks an SM the tail's activations
    # share bytes with a pipeline version)
    m, n, k, group = 5, 200, 2048, 128
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 8)
    out = {}
    for overlap in (False, True):
        lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, overlap=overlap, **tile),
                                   "cuda -arch=sm_90a", pass_configs=configs)
        text = lowered.source.text
        if overlap:
            loop = text[text.index("for (int kp = 0;"):]
            loop = loop[:loop.index("\n  }\n")]
            assert loop.count("__syncthreads();") == 2  # two k-tiles a step
            assert loop.count("tw_gemm_mma_rf<") == 2 and loop.count("tw_dequant_u4x8_f16(") == 2
            # no barrier between a gemm and the dequantisation that follows it
            for part in loop.split("__syncthreads();")[1:]:
                assert part.index("tw_gemm_mma_rf<") < part.index("tw_dequant_u4x8_f16(")
        out[overlap] = torch.full((m, n), float("nan"), dtype=torch.float16)
        hostemu.run(text, lowered.source.payload, tmp_path / str(overlap), a, q, scales, zeros,
                    out[overlap])
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)


@pytest.mark.emulator
@pytest.mark.parametrize(("k", "group", "tile"), [
    (8192, 128, {"splits": 8, "num_stages": 2}),  # the bench's _ss: 8 k-tiles, 4 wraps
    (8192, 128, {"splits": 8, "num_stages": 3}),  # 8 k-tiles over 3 stages
    (4096, 64, {"splits": 4, "num_stages": 4}),   # two groups a k-tile, 16 a slice
    (4096, 256, {"splits": 2, "num_stages": 2}),  # a group over two k-tiles
    (4096, 2048, {"splits": 4, "num_stages": 2}),  # a group over two slices
])
def test_w4a16_staged_scales_are_bit_identical_to_the_default_in_emulation(tmp_path, k, group,
                                                                            tile):
    # stage_scales: a slice's scales and zero points copied to shared memory before its
    # k-tiles, the same arithmetic on the same values, so the same bits (decode rows, a
    # partial column tile whose rows past N stage row N - 1)
    m, n = 5, 200
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 9)
    out = {}
    for staged in (False, True):
        lowered = tilewright.lower(
            w4.w4a16_gemm.fn(m, n, k, group, stage_scales=staged, **tile), "cuda -arch=sm_90a")
        text = lowered.source.text
        kernel = text[text.index("main_0_kernel(half* __restrict__ A_ptr"):]
        kernel = kernel[kernel.index("{"):kernel.index("\n}\n")]
        loop = kernel[kernel.index("for (int ko = 0;"):]
        # staged: global scales only before the loop, the dequantisation unrolled, eight
        # codes a call: 128 x 128 / 8 / 128 threads = 16 (the default's global zero point of
        # a group over two slices, Zeros[n, bz // 2], keeps the scalar path)
        assert ("Scales_ptr[" in loop) != staged and ("Zeros_ptr[" in loop) != staged
        assert loop.count("tw_dequant_u4x8_f16(") == 16 or not staged
        out[staged] = torch.full((m, n), float("nan"), dtype=torch.float16)
        hostemu.run(text, lowered.source.payload, tmp_path / str(staged), a, q, scales, zeros,
                    out[staged])
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("tile", [{"splits": 8, "num_stages": 2},
                                  {"splits": 4, "num_stages": 4}])
def test_w4a16_staged_scales_leave_no_global_load_in_the_loop(tmp_path, tile):
    # the bench's _ss and _s4ss: the hot loop reads its 32 zero points and scales a thread a
    # k-tile from shared memory (LDS) instead of global memory (LDG, as the default does),
    # dequantised eight codes a call
    counts = {}
    for staged in (False, True):
        code = _sass(w4.w4a16_gemm.fn(16, 8192, 8192, stage_scales=staged, **tile), "sm_90a",
                     tmp_path)
        loop = [op.split(".")[0] for op in sass.hot_loop(code)]
        assert loop.count("HMMA") == 32 and loop.count("STS") == 16  # 16 calls, STS.128
        assert "I2F.F16" not in code
        counts[staged] = loop.count("LDG"), loop.count("LDS")
    assert counts[False][0] == 32 and counts[True] == (0, counts[False][1] + 32)


@pytest.mark.emulator
@pytest.mark.parametrize("tile", [
    {"splits": 8, "num_stages": 2, "threads": 256},  # the bench's _swap: 8 k-tiles, 4 wraps
    {"splits": 8, "num_stages": 2, "block_N": 64},   # one warpgroup of 64 weight rows
    {"splits": 1, "num_stages": 3, "threads": 256},  # one slice: C^T stored into C
    {"splits": 4, "num_stages": 2, "threads": 256, "stage_scales": True},
    {"splits": 8, "num_stages": 2, "threads": 256, "block_M": 8},  # _swap8
    {"splits": 8, "num_stages": 2, "threads": 256, "block_M": 8,  # W4A16_NARROW (M = 1)
     "stage_scales": True},
])
def test_w4a16_swapped_operands_match_torch_in_emulation(tmp_path, tile):
    # swap: C^T = W A^T, the dequantised tile the wgmma's 64-row A operand and the activations
    # its 16-column B (m64n16k16); decode rows (a partial column of C^T), a partial column
    # tile (rows of C^T past N), 8192 deep
    m, n, k, group = 5, 200, 8192, 128
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 10)
    lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, swap=True, **tile),
                               "cuda -arch=sm_90a")
    text = lowered.source.text
    rows = tile.get("block_M", 16)
    assert f"tw_gemm_wgmma<{rows}, 128, {rows}," in text and "tw_dequant_u4x8_f16(" in text
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(text, lowered.source.payload, tmp_path, a, q, scales, zeros, c)
    _assert_w4a16_matches(c, a, q, scales, zeros)


@pytest.mark.emulator
def test_w4a16_swapped_operands_on_mma_sync_match_torch_in_emulation(tmp_path):
    # sm_80 has no wgmma: C^T's 128 x 16 tile on mma.sync over four warps of 32 weight rows
    m, n, k, group = 5, 200, 2048, 128
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 11)
    lowered = tilewright.lower(w4.w4a16_gemm.fn(m, n, k, group, splits=2, num_stages=2,
                                                swap=True), "cuda -arch=sm_80")
    text = lowered.source.text
    assert "tw_gemm_mma_rf<128, 16, 128," in text and "tw_dequant_u4x8_f16(" in text
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(text, lowered.source.payload, tmp_path, a, q, scales, zeros, c)
    _assert_w4a16_matches(c, a, q, scales, zeros)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("tile", [{"threads": 256}, {"block_N": 64}])
def test_w4a16_swapped_operands_run_on_wgmma_without_ldmatrix(tmp_path, tile):
    # the bench's _swap (two warpgroups) and one warpgroup of 64 weight rows: the tensor
    # cores read both tiles from shared memory (HGMMA.64x16x16), no ldmatrix and no HMMA in
    # the loop
    code = _sass(w4.w4a16_gemm.fn(16, 8192, 8192, splits=8, num_stages=2, swap=True, **tile),
                 "sm_90a", tmp_path)
    loop = [op.split(".")[0] for op in sass.hot_loop(code)]
    assert loop.count("HGMMA") == 8 and "LDSM" not in loop and "HMMA" not in loop
    assert loop.count("STS") == 8 and "I2F.F16" not in code


def _register_w_tile(m: int, suffix: str = "_reg") -> dict:
    """The bench's ``w4a16_m*_8192{suffix}`` row's configuration for ``m`` activation
    rows (kernels.W4A16_REGISTER_W_ROWS)."""
    return {**kernels.W4A16_REGISTER_W, "block_M": 8 if m <= 8 else 16,
            **kernels.W4A16_REGISTER_W_ROWS[suffix]}


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "k", "tile"), [
    # the bench's rows at 8192 deep (M = 1 and 16 as benched; 5: a partial column of C^T):
    # _reg 8 k-tiles a slice through 2 stages (4 wraps), _reg_s3 through 3, _reg_s4 16 k-tiles
    # through 4
    *((m, 8192, {"row": suffix}) for suffix in kernels.W4A16_REGISTER_W_ROWS
      if not suffix.endswith("_tk") for m in (1, 5, 16)),
    (16, 2048, {"block_N": 64, "threads": 128, "splits": 2}),  # one warpgroup
    (5, 4096, {"block_K": 64, "group": 64}),  # 64-deep k-tiles: two k32 steps a row
    (5, 2048, {"splits": 2, "dtype": "bfloat16"}),  # bfloat16: a register at a time
])
def test_w4a16_register_w_is_bit_identical_to_swap_in_emulation(tmp_path, m, k, tile):
    # register_w: each thread dequantises the weights its wgmma A registers hold from codes
    # in wgmma order, the same arithmetic on the same values as swap's shared tile, which the
    # emulated wgmma sums in the same order: the same bits (a partial column tile: rows of
    # C^T past N)
    n = 200
    tile = {**_register_w_tile(m, tile.pop("row", "_reg")), **tile}
    group = tile.pop("group", 128)
    dtype = tile.pop("dtype", "float16")
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 12)
    a, scales, zeros = (x.to(getattr(torch, dtype)) for x in (a, scales, zeros))
    out = {}
    for register_w in (False, True):
        lowered = tilewright.lower(
            w4.w4a16_gemm.fn(m, n, k, group, dtype, **{**tile, "register_w": register_w}),
            "cuda -arch=sm_90a")
        text = lowered.source.text
        loop = cuda_source.loop_body(text, "ko")
        # a thread's block_N * block_K / threads weights, eight a call; the gemm's A in
        # registers
        calls = tile["block_N"] * tile["block_K"] // tile["threads"] // 8
        if register_w and dtype == "bfloat16":
            assert "tw_dequant_u4x8_f16" not in loop and "tw_gemm_wgmma_rs<" in loop
        elif register_w:
            assert loop.count("tw_dequant_u4x8_f16_a(") == calls and \
                "tw_dequant_u4x8_f16(" not in loop and "tw_gemm_wgmma_rs<" in loop
        else:
            assert "tw_dequant_u4x8_f16_a(" not in loop and "tw_gemm_wgmma_rs<" not in loop
        out[register_w] = torch.full((m, n), float("nan"), dtype=getattr(torch, dtype))
        codes = w4.wgmma_order(q) if register_w else q
        hostemu.run(text, lowered.source.payload, tmp_path / str(register_w), a, codes, scales,
                    zeros, out[register_w])
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "k", "tile"), [
    # the bench's _tk rows at 8192 deep (M = 1 and 16 as benched, 5: a partial column of
    # C^T), their pipelines wrapping as the _reg rows'; two row tiles of 8 (by > 0: another
    # tile's counter); 3 slices of 64-deep k-tiles
    *((m, 8192, {"row": suffix}) for suffix in kernels.W4A16_REGISTER_W_ROWS
      if suffix.endswith("_tk") for m in (1, 5, 16)),
    (16, 2048, {"row": "_reg_tk", "block_M": 8, "splits": 4}),
    (5, 3072, {"row": "_reg_tk", "block_K": 64, "group": 64, "splits": 3}),
])
def test_w4a16_ticket_combine_is_bit_identical_to_the_combine_kernel_in_emulation(
        tmp_path, m, k, tile):
    # ticket_combine: the last slice block of a column tile to take its ticket adds the
    # tile's partial sums in slice order, as the second kernel does: the same bits (the
    # emulation runs the blocks one after another, slice 0 first: the last slice adds). The
    # counters are back to 0 after a call, so a second call with them gives the same bits
    n = 200
    tile = {**_register_w_tile(m, tile.pop("row")), **tile}
    group = tile.pop("group", 128)
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 14)
    codes = w4.wgmma_order(q)
    out = {}
    for ticket in (False, True):
        lowered = tilewright.lower(
            w4.w4a16_gemm.fn(m, n, k, group, **{**tile, "ticket_combine": ticket}),
            "cuda -arch=sm_90a")
        text, launch = lowered.source.text, lowered.source.payload
        if ticket:  # one kernel: fence, barrier, ticket; the sum behind the last ticket
            assert "kernels" not in launch or len(launch["kernels"]) == 1
            kernel = text[text.index("tw_fence_gpu();"):]
            assert re.match(r"tw_fence_gpu\(\);\s*__syncthreads\(\);(\s*int cse_v\d+ = [^;]*;)*"
                            r"\s*if \(\(\(int\)threadIdx.x\) == 0\) \{\s*[^\n]*tw_atomic_add\(",
                            kernel)
            assert kernel.count("tw_fence_gpu();") == 2
        else:
            assert len(launch["kernels"]) == 2
        out[ticket] = torch.full((m, n), float("nan"), dtype=torch.float16)
        counters = torch.zeros(w4.ticket_count(m, n, tile["block_M"], tile["block_N"]),
                               dtype=torch.int32)
        hostemu.run(text, launch, tmp_path / str(ticket), a, codes, scales, zeros,
                    *([counters] if ticket else []), out[ticket])
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)
    assert not counters.any()
    again = torch.full((m, n), float("nan"), dtype=torch.float16)
    hostemu.run(text, launch, tmp_path / "again", a, codes, scales, zeros, counters, again)
    assert torch.equal(again, out[True]) and not counters.any()


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("suffix", ["_reg_tk", "_reg_s4_tk"])
def test_w4a16_ticket_combine_at_one_row_reads_one_row(tmp_path, suffix):
    # M = 1 on 8-row tiles: the last block's sum reads the partial sums of row 0 only, one
    # float32 load a slice per thread (ptxas drops the sums of rows 1-7, which are never
    # stored; their reads, clamped to row 0, are of what the slices wrote, never of rows
    # nobody wrote: the emulation's workspaces are 0xFF, NaN, and the results match)
    tile = _register_w_tile(1, suffix)
    code = _sass(w4.w4a16_gemm.fn(1, 8192, 8192, **tile), "sm_90a", tmp_path)
    ops = [op for _, op, _ in sass.instructions(code)]
    tail = ops[ops.index("ATOMG.E.ADD.STRONG.GPU"):]
    assert tail.count("LDG.E") == tile["splits"] and tail.count("STG.E.U16") == 1


def test_w4a16_ticket_combine_refuses_one_slice():
    with pytest.raises(ValueError, match="ticket_combine adds the slices"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=1, ticket_combine=True)


def test_w4a16_wgmma_order_puts_a_threads_codes_in_one_word(monkeypatch):
    # column 8 s + 2 t + h of a k32 step: nibble s + 4 h of word t; plain_order undoes it, and
    # the GPU harness's reference (it runs without the example) reads the same weights
    monkeypatch.setattr(harness, "torch", torch)
    a, q, scales, zeros = _w4a16_operands(1, 8, 256, 128, 13)
    ordered = w4.wgmma_order(q)
    codes = torch.stack([q & 15, q >> 4], dim=-1).flatten(1)
    nibbles = torch.stack([ordered & 15, ordered >> 4], dim=-1).flatten(1)
    for column in (0, 1, 2, 9, 31, 32 + 8 * 3 + 2 * 1 + 1):
        step, s, t, h = column // 32, column % 32 // 8, column % 8 // 2, column % 2
        assert torch.equal(nibbles[:, 32 * step + 8 * t + s + 4 * h], codes[:, column])
    assert torch.equal(w4.plain_order(ordered), q)
    assert torch.equal(harness.w4a16_weights(ordered, scales, zeros, True),
                       w4.dequantize(q, scales, zeros))
    assert torch.equal(harness.w4a16_weights(q, scales, zeros, False),
                       w4.dequantize(q, scales, zeros))


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("suffix", list(kernels.W4A16_REGISTER_W_ROWS))
def test_w4a16_register_w_feeds_hgmma_from_registers(tmp_path, m, suffix):
    # the bench's _reg rows: per thread and k-tile, 64 weights from eight 32-bit LDS of codes
    # (the 7 predicated-off "@!PT LDS RZ" are ptxas padding) and four LDS.U16 of zero points
    # and scales, each word's four pairs by one SHF and four LOP3 (no PRMT); no STS (the
    # default's 8 STS.128 of its 64 weights) and the HGMMA's A operand a register
    # (HGMMA.64x8x16.F32 R24, R56, gdesc[UR4], R24)
    code = _sass(w4.w4a16_gemm.fn(m, 8192, 8192, **_register_w_tile(m, suffix)), "sm_90a",
                 tmp_path)
    loop = sass.hot_loop(code)
    rows = 8 if m == 1 else 16
    assert len([op for op in loop if op.startswith("HGMMA")]) == 8
    assert re.search(rf"HGMMA\.64x{rows}x16\.F32 R\d+, R\d+, gdesc", code)
    assert not [op for op in loop if op.startswith("STS")] and "I2F.F16" not in code
    real_lds = [line for line in code.splitlines() if re.search(r"\bLDS R\d+, \[", line)]
    # (the _tk rows: a ninth after the loop, each thread's read of the block's ticket)
    assert loop.count("LDS.U16") == 4 and len(real_lds) == 8 + suffix.endswith("_tk")
    assert not [op for op in loop if op.startswith("PRMT")]
    # one barrier a k-tile: the activations' async-proxy fence before the pipeline's
    assert len([op for op in loop if op.startswith("BAR.SYNC")]) == 1


def test_w4a16_register_w_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="register_w takes swap and stage_scales"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=2, stage_scales=True, register_w=True)
    with pytest.raises(ValueError, match="64 rows per warpgroup"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=2, swap=True, stage_scales=True,
                         register_w=True, threads=128)


def _overlap_tile(m: int, suffix: str = "_reg_ov") -> dict:
    """The bench's ``w4a16_m*_8192{suffix}`` row's configuration for ``m`` activation rows
    (kernels.W4A16_OVERLAP_ROWS)."""
    return {**kernels.W4A16_REGISTER_W, "block_M": 8 if m <= 8 else 16,
            **kernels.W4A16_OVERLAP_ROWS[suffix]}


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "k", "tile"), [
    # the bench's rows at 8192 deep (M = 1 and 16 as benched; 5: a partial column of C^T):
    # 8 steps of two 64-deep k-tiles a slice through 4 stages; _reg_ov_tk the slices added
    # in the kernel
    *((m, 8192, {"row": suffix}) for suffix in kernels.W4A16_OVERLAP_ROWS for m in (1, 5, 16)),
    (5, 8192, {"splits": 4}),  # 16 steps through 4 stages: the pipeline wraps four times
    (16, 8192, {"block_K": 128, "num_stages": 3}),  # 128-deep k-tiles through 3 stages
    (16, 2048, {"block_N": 64, "threads": 128, "splits": 2}),  # one warpgroup
    (5, 4096, {"group": 64, "splits": 2}),  # a group a k-tile
])
def test_w4a16_overlap_dequant_is_bit_identical_to_register_w_in_emulation(tmp_path, m, k,
                                                                           tile):
    # overlap_dequant: the same dequantisation into two fragments by k-tile parity, each
    # wgmma retired only before its fragment is rewritten (the emulation retires a group at
    # its wait: a wait placed too late reads the next k-tile's weights), the k-tiles summed
    # in the same order: the same bits as register_w's one fragment waited for each k-tile
    n = 200
    tile = {**_overlap_tile(m, tile.pop("row", "_reg_ov")), **tile}
    group = tile.pop("group", 128)
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 15)
    codes = w4.wgmma_order(q)
    tickets = w4.ticket_count(m, n, tile["block_M"], tile["block_N"]) \
        if tile.get("ticket_combine") else 0
    out = {}
    for overlap in (False, True):
        lowered = tilewright.lower(
            w4.w4a16_gemm.fn(m, n, k, group, **{**tile, "overlap_dequant": overlap}),
            "cuda -arch=sm_90a")
        text = lowered.source.text
        if overlap:  # two waits a step, each leaving the newest group in flight; the prologue
            # one step ahead of the loop, which waits for all its copies
            loop = cuda_source.loop_body(text, "kp")
            assert loop.count("tw_wgmma_wait<1>();") == 2 and "tw_wgmma_wait<0>" not in loop
            assert loop.count("tw_gemm_wgmma_rs<") == 2 and "tw_cp_async_wait<" + \
                f"{tile['num_stages'] - 3}>();" in loop
        out[overlap] = torch.full((m, n), float("nan"), dtype=torch.float16)
        counters = [torch.zeros(tickets, dtype=torch.int32)] if tickets else []
        hostemu.run(text, lowered.source.payload, tmp_path / str(overlap), a, codes, scales,
                    zeros, *counters, out[overlap])
        assert not counters or not counters[0].any()
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("suffix", list(kernels.W4A16_OVERLAP_ROWS))
def test_w4a16_overlap_dequant_runs_beside_the_hgmma(tmp_path, m, suffix):
    # the bench's _reg_ov rows: each step's two 64-deep k-tiles, 4 HGMMA each; each
    # warpgroup wait leaves one group in flight (the _reg rows': WARPGROUP.DEPBAR.LE gsb0, 0x0
    # after every k-tile's eighth HGMMA), and the next k-tile's dequantisation (32 weights a
    # thread: 32 HADD2, 16 LOP3) lies between an HGMMA group's last HGMMA and the wait that
    # retires it; no STS, no spills (_sass), one barrier a step
    tile = _overlap_tile(m, suffix)
    code = _sass(w4.w4a16_gemm.fn(m, 8192, 8192, **tile), "sm_90a", tmp_path)
    loop = sass.hot_loop(code)
    weights = tile["block_N"] * tile["block_K"] // tile["threads"]  # a thread's, a k-tile
    assert len([op for op in loop if op.startswith("HGMMA")]) == 2 * tile["block_K"] // 16
    assert not [op for op in loop if op.startswith("STS")] and "I2F.F16" not in code
    assert len([op for op in loop if op.startswith("BAR.SYNC")]) == 1
    # the same loop with operands: the last instructions up to its backward branch
    body = [f"{op} {operands}" for _, op, operands in sass.instructions(code)]
    branch = max(k for k, line in enumerate(body) if line.startswith("HGMMA")) + 1
    while not body[branch].startswith("BRA"):
        branch += 1
    ring = body[branch - len(loop) + 1:branch + 1]
    assert [line.split()[0] for line in ring] == loop
    waits = [k for k, line in enumerate(ring) if line.startswith("WARPGROUP.DEPBAR")]
    assert len(waits) == 2 and all("gsb0, 0x1" in ring[k] for k in waits), waits
    ring = ring + ring  # read as a ring: the step's second group is retired in the next step
    issued = [k for k, line in enumerate(ring[:len(loop)])
              if line.startswith("HGMMA") and "gsb0" in line.split(";")[0].split(",")[-1]]
    assert len(issued) == 2
    for k in issued:  # between a group's last HGMMA and its wait: a k-tile's dequantisation
        wait = next(j for j in range(k + 1, len(ring)) if
                    ring[j].startswith("WARPGROUP.DEPBAR"))
        wait = next(j for j in range(wait + 1, len(ring)) if
                    ring[j].startswith("WARPGROUP.DEPBAR"))  # the first leaves it in flight
        between = [line.split()[0] for line in ring[k + 1:wait]]
        assert between.count("HADD2") == weights and \
            between.count("LOP3.LUT") >= weights // 2, between


def test_w4a16_overlap_dequant_refuses_what_it_cannot_do():
    tile = {**kernels.W4A16_REGISTER_W, "overlap_dequant": True}
    with pytest.raises(ValueError, match=r"num_stages >= 3 \(got 2\)"):
        w4.w4a16_gemm.fn(1, 8192, 8192, **tile)
    with pytest.raises(ValueError, match="an even number of k-tiles"):
        w4.w4a16_gemm.fn(1, 3072, 3072, **{**tile, "num_stages": 3, "splits": 8})
    with pytest.raises(ValueError, match="overlap_dequant takes register_w"):
        w4.w4a16_gemm.fn(1, 8192, 8192, splits=8, num_stages=3, overlap_dequant=True)


def _prologue_tile(m: int, row: tuple) -> dict:
    """The bench's W4A16_PROLOGUE_ROWS row ``row`` (its M, its suffix) for ``m`` activation
    rows."""
    return {**kernels.W4A16_REGISTER_W, "block_M": 8 if m <= 8 else 16,
            **kernels.W4A16_PROLOGUE_ROWS[row]}


@pytest.mark.emulator
@pytest.mark.parametrize(("m", "row"), [(m, row) for row in kernels.W4A16_PROLOGUE_ROWS
                                        for m in (row[0], 5)])
def test_w4a16_prologue_scales_are_bit_identical_in_emulation(tmp_path, m, row):
    # the bench's _ps rows at 8192 deep (their M, and 5: a partial column of C^T), their
    # pipelines wrapping (8 k-tiles through 3 stages, 16 through 4; 8 and 16 steps of the
    # overlapped loop through 4), 200 columns (a partial column tile: the cp.async of its
    # scales zero-fills the rows past N). copy_scales with cuda.prologue_copies stages the
    # same scales by cp.async in the pipeline's first group: the same bits as the loads and
    # stores of stage_scales
    n, k, group = 200, 8192, 128
    tile = _prologue_tile(m, row)
    a, q, scales, zeros = _w4a16_operands(m, n, k, group, 16)
    codes = w4.wgmma_order(q)
    tickets = w4.ticket_count(m, n, tile["block_M"], tile["block_N"])
    out = {}
    for copy in (False, True):
        lowered = tilewright.lower(
            w4.w4a16_gemm.fn(m, n, k, group, **{**tile, "copy_scales": copy}),
            "cuda -arch=sm_90a", pass_configs=kernels.W4A16_PROLOGUE_CONFIGS)
        text = lowered.source.text
        loop = "kp" if tile.get("overlap_dequant") else "ko"
        kernel = text[text.index("main_0_kernel(half*"):]
        before = kernel[:kernel.index(f"for (int {loop} = 0;")]
        if copy:  # the scales' cp.async, then the first stage's, one commit, no wait
            assert "tw_cp_async_wait<" not in before and "Scales_ptr[" not in \
                before[before.index("tw_cp_async_commit();"):]
            assert before.index("tw_cp_async16((&(((half*)tw_smem_ptr)") < \
                before.index("Q_ptr[")
        else:  # loaded by the threads (16-byte vectors of scales)
            assert re.search(r"= (Scales_ptr\[|\*\(uint4\*\)\(Scales_ptr \+ )", before)
        out[copy] = torch.full((m, n), float("nan"), dtype=torch.float16)
        counters = torch.zeros(tickets, dtype=torch.int32)
        hostemu.run(text, lowered.source.payload, tmp_path / str(copy), a, codes, scales,
                    zeros, counters, out[copy])
        assert not counters.any()
    assert torch.equal(out[True], out[False])
    _assert_w4a16_matches(out[True], a, q, scales, zeros)


def test_w4a16_prologue_copies_keep_their_wait_without_the_pass_config():
    # without cuda.prologue_copies the copies of copy_scales wait on their own before the
    # pipeline's first loads (the T.copy rule's commit and wait_group 0)
    tile = _prologue_tile(1, (1, "_reg_s3_tk_ps"))
    text = tilewright.lower(w4.w4a16_gemm.fn(1, 1024, 8192, **tile),
                            "cuda -arch=sm_90a").source.text
    kernel = text[text.index("main_0_kernel(half*"):]
    before = kernel[:kernel.index("for (int ko = 0;")]
    assert before.count("tw_cp_async_wait<0>();") == 2 and \
        before.index("tw_cp_async_wait<0>();") < before.index("Q_ptr[")


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("row", list(kernels.W4A16_PROLOGUE_ROWS))
def test_w4a16_prologue_scales_issue_before_any_wait(tmp_path, row):
    # the bench's _ps rows: no 2-byte loads of scales (the other rows' 8-16 LDG.E.U16, whose
    # STS the first LDGSTS of codes waits behind); every LDGSTS of the prologue (the scales'
    # and the first stages') issued before the first wait (DEPBAR), the hot loop as the
    # rows without _ps (8 HGMMA a k-tile or step, no STS), no spills (_sass)
    m = row[0]
    tile = _prologue_tile(m, row)
    code = _sass(w4.w4a16_gemm.fn(m, 8192, 8192, **tile), "sm_90a", tmp_path,
                 kernels.W4A16_PROLOGUE_CONFIGS)
    assert "LDG.E.U16" not in code
    ops = [op for _, op, _ in sass.instructions(code)]
    first_wait = ops.index("DEPBAR.LE")
    stages = tile["num_stages"] - (2 if tile.get("overlap_dequant") else 1)
    # a thread's cp.async a stage: its codes (2 16-byte chunks a k-tile, 4 a step) and its
    # activations (up to one); the scales' two (or four at 16 groups a slice)
    assert ops[:first_wait].count("LDGSTS.E.BYPASS.128") >= 2 * stages + 2
    assert ops[:first_wait].count("LDGDEPBAR") == stages
    loop = sass.hot_loop(code)
    assert len([op for op in loop if op.startswith("HGMMA")]) == 8
    assert not [op for op in loop if op.startswith("STS")]


def test_w4a16_staged_scales_and_swap_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="whole groups or whole slices"):
        w4.w4a16_gemm.fn(1, 1024, 1024, 384, splits=2, stage_scales=True)
    with pytest.raises(ValueError, match="copy_scales is how stage_scales"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=2, copy_scales=True)
    for option in ("stage_scales", "swap"):
        with pytest.raises(ValueError, match="not of overlap"):
            w4.w4a16_gemm.fn(1, 1024, 1024, splits=2, overlap=True, **{option: True})


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("tile", [{"splits": 4, "num_stages": 2},
                                  {"splits": 4, "num_stages": 2, "block_K": 64}])
def test_w4a16_overlap_feeds_hmma_without_spills(tmp_path, tile):
    code = _sass(w4.w4a16_gemm.fn(16, 8192, 8192, overlap=True, **tile), "sm_90a", tmp_path)
    assert "HMMA.16816.F32" in code and "LDGSTS.E.BYPASS.128" in code
    assert "STS.128" in code and "I2F.F16" not in code


def test_w4a16_overlap_takes_k_tiles_two_at_a_time():
    with pytest.raises(ValueError, match="even number"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=8, overlap=True)


def test_w4a16_slices_must_divide_k():
    with pytest.raises(ValueError, match=r"K=1024 must be a multiple of block_K \* splits "
                                         r"= 128 \* 3"):
        w4.w4a16_gemm.fn(1, 1024, 1024, splits=3)


@pytest.mark.parametrize("layout", fp8.LAYOUTS)
def test_the_gpu_harness_checks_scaled_fp8_against_the_examples_reference(layout, monkeypatch):
    # harness.py runs without TVM on the GPU machine: its own scale expansion must agree
    # with the example's float64 reference (here on the CPU)
    monkeypatch.setattr(harness, "torch", torch)
    m, n, k = 70, 256, 320  # partial scale groups along K, partial row blocks of B
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn)
    shapes = fp8.scale_shapes(layout, m, n, k)
    sa, sb = (torch.rand(s) + 0.5 for s in shapes)
    got = (a.double() * harness.fp8_expand(sa.double(), m, k, layout, False)) @ \
        (b.double() * harness.fp8_expand(sb.double(), n, k, layout, True)).T
    torch.testing.assert_close(got, fp8.reference(a, b, sa, sb, layout))
    params = harness.expected_params({"kind": "fp8_gemm", "M": m, "N": n, "K": k,
                                      "layout": layout, "dtype": "float8_e4m3fn",
                                      "out_dtype": "bfloat16"})
    assert [p[1] for p in params[2:4]] == [list(s) for s in shapes]
