"""The benchmark kernels, written with the portable language, and their tile configurations.

``build_bundles.py`` builds them for sm_90a at the issue's sizes; the tests
(``backend-cuda/tests/test_cuda_bench_kernels.py``) run the very same configurations in host
emulation at small problem sizes. Only the problem size differs between the two.

Configurations (sm_90a, chosen for H100/H200):

- GEMM: 128x256x64 block tiles, 256 threads = two warpgroups of 64x256 each (the wgmma
  variant, ``HGMMA.64x256x16``), 3 stages (3 x 48 KB = 144 KB of shared memory) filled by TMA,
  fp32 accumulation, fp16/bf16 output through a 64 KB shared tile (``c_shared``: swizzled, so
  the accumulators' pair stores are free of bank conflicts, then whole rows of 16-byte
  stores; 208 KB of the 227 KB in all). Built with ``GEMM_PASS_CONFIGS``: the TMA loads issued
  in order by one of the kernel's threads, one barrier per k-tile, instead of the producer
  warpgroup the compiler adds by default on sm_90a. Blocks are rasterised in panels of 16
  block rows: of the 132 blocks in flight, about 16 rows x 8 columns of tiles, the split that
  needs the fewest distinct A and B bytes per step for 128x256 tiles (16 x 128 rows of A ~
  8 x 256 columns of B). Measured on the H200 (RESULTS.md, 2026-11-30): the shared epilogue
  lifted 4096^3 from 0.87 to 0.90-0.95x of cuBLAS; in-order loads then gave 0.93-1.01x at
  4096^3 and 0.99-1.02x at 8192^3, ahead of the warp-specialised schedule (the ``_ws`` rows)
  or level with it in each of the four runs that had both; a fourth stage with the
  accumulators stored straight to global memory (the ``_direct`` rows) bought nothing.
- Persistent GEMM (``gemm_persistent``, a diagnostic): the same tiles, 132 blocks walking
  them with ``T.Persistent``; the producer warpgroup loads a block's next tile during the
  last one's epilogue. Measured no faster than the plain grid. With ``tma_store`` (the
  ``_pts`` rows) C leaves its shared tile in one TMA store a tile, waited for before the next
  tile's accumulators overwrite it, so only the pair stores into the shared tile stay between
  two tiles' gemms. Built with ``GEMM_PASS_CONFIGS`` (the ``_pio`` rows, not measured yet)
  the loads stay in order on thread 0, the barriers are set up once, and the next tile's
  first load is issued right after the k-loop, before the drain and the epilogue, so it lands
  under them (``TmaPlan.in_order_tiles``); with ``cuda.tma_multicast`` too (the ``_pio_mc``
  rows) blocks 2c and 2c + 1 form a cluster and walk their tiles together (tiles 2k and
  2k + 1: two row blocks of one column, for an even worker count and an even number of
  tiles), each loading half of B's boxes into both. On 128 blocks (the ``_pts128``,
  ``_pio128`` and ``_pio_mc128`` rows, 4096^3, not measured yet) the 512 tiles are 4 whole
  rounds, so the tile loop has no guard (the SASS and the model in build_bundles.py).
- Stream-K GEMM (``gemm_stream_k``, the ``_sk`` rows, 4096^3, not measured yet): the whole
  waves of tiles as the ``_pio`` rows, then the k-tiles of the last, partial wave (116 tiles
  at 4096^3) dealt out evenly to all 132 blocks, each tile's runs added in the kernel by the
  block that takes its last ticket (in block order: deterministic). The model (in
  build_bundles.py) expects it level with ``_pio``: the balanced tail saves ~6 us of ~208,
  the fix-up on the critical path and the runs' cold pipeline starts cost about as much.
- FlashAttention forward (``FLASH_ATTENTION``): ``attention_overlap_one``, 128 query rows per
  block, 128 keys per step, 256 compute threads (two warpgroups of 64 rows: both gemms are
  wgmma) at 240 registers beside a producer warpgroup at 24, K and V two stages deep through
  TMA, each step's P V issued right behind its Q K^T (FlashAttention-3's order) with one
  score fragment: 0.98-1.01x cuDNN on the H200. ``attention`` (the ``_serial`` row, three
  stages; Q K^T, wait, softmax, P V, wait) gave 0.88-0.90x, ``attention_overlap`` (two score
  fragments, precise math) 0.85x (RESULTS.md).
- Elementwise add: 4096-element blocks of 256 threads, each thread moving 16-byte vectors.
- Scaled fp8 GEMM (``examples/gemm_fp8_scaled.py``, ``fp8_config``): 128-row tiles, 256
  threads = two warpgroups of 64 rows each on the fp8 wgmma, 3 stages of 128-deep k-tiles
  filled by TMA (the warp-specialised loop, the compiler's default), bfloat16 out. Tensor and
  token scales: 128x256 tiles (``QGMMA.64x256x32``, 3 x 48 KB of shared memory, the GEMM
  rows' tile); block scales: 128x128 (``QGMMA.64x128x32``; a k-tile is one scale group and
  a column tile lies in one 128-row block of B), four stages, each k-tile's product promoted
  with one FFMA an element (``fused_scale``), C through a swizzled shared tile
  (``c_shared``): 0.79x / 0.72x rowwise ``_scaled_mm`` at 4096^3 / 8192^3 on the H200, where
  the FMUL + FFMA form stored from registers measured 0.54-0.65x (RESULTS.md, 2026-12-04).
  (Before wgmma took 8-bit operands, ptxas ran the fp8 ``mma.sync`` as fp16 HMMA after
  unpacking, and 128-deep k-tiles spilled outside the block layout.)
- W4A16 (``examples/gemm_w4a16.py``, ``w4a16_config``), decode shapes; up to 8 rows
  (``W4A16_NARROW``) the operands swapped (C^T = W A^T on wgmma m64n8k16) with staged
  scales, 1.76x at M = 1; otherwise (``W4A16``): 16-row, 128-column tiles, 128-deep
  k-tiles, 2 stages of codes and activations in flight, K in 8 slices (split-K: 64 x 8 = 512
  blocks for N = 8192, all resident, four per SM at 56 KB of shared memory each); the slices'
  float32 partial sums (8 x M x N) added by a second kernel. Measured on the H200
  (2026-12-04, RESULTS.md): 1.53x / 1.24x the float16 matmul at M = 1 / 16, where 4 slices
  four stages deep (two blocks an SM, the ``_s4`` rows) gave 1.41x / 1.17x and one slice
  (64 blocks: too few loads in flight) far less. 128 columns rather than 64 because shared
  memory, not DRAM, bounds this kernel in the model of RESULTS.md: each warp's reads of the
  activation tile serve 32 columns instead of 16 (6.25 instead of 7.5 bytes of shared-memory
  traffic a weight). ``build_bundles.py`` lists the diagnostic rows.
- 2:4 sparse float16 GEMM (``examples/gemm_sp.py``, ``GEMM_SP``): 128x256x128 tiles, 256
  threads = two warpgroups of 64 rows on the sparse wgmma (``wgmma.mma_async.sp``
  m64n256k32, ``HGMMA.SP.64x256x32.F32``: four a warpgroup a k-tile), 2 stages of kept
  values, int16 metadata (16-byte rows: cp.async) and B (2 x 82 KB), each k-tile's group
  retired in it (``wait_group 0``), float32 C. 0.91x dense cuBLAS on the H200 (2026-12-04
  run 4), where the 128x128x64 three-stage form (``GEMM_SP_K64``, the ``_k64`` row: one
  wgmma.sp group in flight into the next k-tile, its metadata in one of two register sets
  the loop holds by the k-tile's parity, ``tw_gemm_wgmma_sp_kept``) gave 0.73-0.74x; the
  other ``GEMM_SP_ROWS`` 0.71-0.90x (``build_bundles.py`` and RESULTS.md say which). The
  diagnostic ``_mmasp`` row (``GEMM_SP_MMA``: 128 threads, four warps of 64x64 on
  ``mma.sp`` m16n8k32, ``HMMA.SP.16832.F32``) is the configuration before the sparse wgmma
  (0.64-0.66x). The ``GEMM_SP_TMA_ROWS`` (not measured yet) feed all three operands by TMA
  (pass config ``cuda.tma_unswizzled``: the metadata tile one unswizzled box, which needs
  128-deep k-tiles for 16-byte rows) from a producer warpgroup, so the consumers' hot loop
  has no LDGSTS, address math or block barrier (81 SASS instructions a 128x256x128 k-tile
  where ``GEMM_SP``'s has 179 with 21 LDGSTS), and at 3 stages or more keep one wgmma.sp
  group in flight on the held metadata registers. Model behind the persistent ``_m256_pws``,
  ``_m256_pws_f16`` and ``_m256_pio`` rows (not measured yet): 1.3x cuBLAS (1.69-1.81 ms at
  8192^3, RESULTS.md 2026-12-04 run 4) is <= 1.32 ms, 1.33 us a 128-deep k-tile of 8.4
  MFLOP an SM, where its sparse wgmma work is ~1024 clocks (~0.57 us): the tensor cores
  more than half idle, the kernel bound by feeding them. The run-4 rows moved 41-50 GB/s an
  SM into shared memory (``_k128``, ``_n256``, ``_n256k128``, ``_k128s2``), the dense GEMM
  55 GB/s; read as a bandwidth bound (the rate barely moved from 50 to 100 KB in flight) or
  as a latency bound (``_n256k128``: one 82 KB stage ahead, 1.9 us a k-tile), both say: at
  1.32 ms 128x256x128 tiles (82 KB a k-tile) need 62 GB/s an SM, ~118 KB in flight, more
  than two 82 KB stages give; 256x128x128 tiles (68 KB) 51 GB/s, ~97 KB: the one tile in
  reach (``_m256_tma``: three stages fed by a producer warpgroup, two k-tiles, 136 KB,
  ahead).
  Between two tiles a block exposes the drain, the 128 KB float32 epilogue, its exit, the
  next block's start and its first load's round trip (~3-4 us of a tile's ~85 us);
  persistent, the producer fills the next tile's three stages under them (expected 2-4%
  over ``_m256_tma``; ``_f16`` halves the epilogue's bytes). ``_m256_pio`` tells the two
  readings of run 4 apart: in order, with a group in flight, it keeps one k-tile (68 KB)
  ahead -- level with ``_m256_pws`` if bandwidth bounds the loop, ~0.85x if latency does.
- int8 GEMM (``gemm_low_precision``, ``INT8_GEMM``): 128x256x128 tiles (128-byte k-tiles, as
  the fp8 rows), 256 threads = two warpgroups on ``wgmma.mma_async`` m64n256k32 .s32.s8.s8
  (``IGMMA.64x256x32.S8.S8``), 3 stages filled by TMA, int32 C against ``torch._int_mm``:
  1.05x / 1.36x at 4096^3 / 8192^3 on the H200 (2026-12-04 run 1).
"""

import sys
from pathlib import Path

import tilewright
import tilewright.language as T
from tilewright_cuda.language import fence_gpu, tma_copy, tma_store_wait, wait_wgmma, wgmma_gemm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from gemm_fp8_scaled import fp8_gemm_scaled  # noqa: E402, F401 - after the sys.path setup
from gemm_sp import gemm_sp_kernel  # noqa: E402, F401
from gemm_w4a16 import w4a16_gemm  # noqa: E402, F401

GEMM = {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 256, "num_stages": 3,
        "c_shared": True}
GEMM_PASS_CONFIGS = {"cuda.disable_warp_specialized": True}  # TMA issued in order, see above
# gemm_stream_k's fix-up reads the runs' sums at slots its arithmetic keeps inside the
# workspace (owner(), the slot of a run), which the compiler cannot prove: TileLang's
# safe-memory guard would make each of its 128 loads a thread conditional (253 registers ->
# 255 and a spill); as a TileLang author would, the kernel switches the guard off
STREAM_K_PASS_CONFIGS = {**GEMM_PASS_CONFIGS, "tw.disable_safe_memory": True}
ATTENTION = {"block_M": 128, "block_N": 128, "threads": 256, "num_stages": 3}
# as TileLang's FlashAttention example sets it: exp2 as one MUFU.EX2 (ex2.approx.ftz), not
# with the compare and two multiplies of the precise exp2f (66 FSETP + 132 FMUL a step on
# sm_90a: the compute loop 761 -> 565 SASS instructions)
ATTENTION_PASS_CONFIGS = {"tw.enable_fast_math": True}
# the benchmark's FlashAttention (the flash_attention_float16 row): attention_overlap_one in
# FlashAttention-3's order, 2 stages, the compute warpgroups at 240 registers (the producer
# warpgroup at 24); 0.98-1.01x cuDNN on the H200 where attention (the _serial row) gave
# 0.90 in the same runs (RESULTS.md, 2026-12-04 runs 4 and 5)
FLASH_ATTENTION = {"block_M": 128, "block_N": 128, "threads": 256, "num_stages": 2,
                   "both_in_flight": True}
FLASH_ATTENTION_PASS_CONFIGS = {"cuda.producer_registers": 24}
ADD = {"block_M": 8, "block_N": 512, "threads": 256}
SWIZZLE_PANEL = 16  # block rows per raster panel (T.use_swizzle), see above
FP8_GEMM = {"block_M": 128, "block_K": 128, "threads": 256, "num_stages": 3}
FP8_TILES = {"tensor": {"block_N": 256}, "token": {"block_N": 256},  # per scale layout,
             "block": {"block_N": 128, "num_stages": 4,              # see above
                       "fused_scale": True, "c_shared": True}}
W4A16 = {"block_M": 16, "block_N": 128, "block_K": 128, "threads": 128, "num_stages": 2,
         "splits": 8}
# up to 8 rows (M = 1: one token): the operands swapped onto wgmma m64n8k16 (C^T = W A^T,
# two warpgroups of 64 weight rows), the slice's scales and zero points staged in shared
# memory; 1.76x where W4A16 gave 1.53-1.54x (RESULTS.md, 2026-12-04 run 4)
W4A16_NARROW = {**W4A16, "block_M": 8, "threads": 256, "swap": True, "stage_scales": True}
# W4A16_NARROW with the dequantised tile in registers as wgmma's register A operand (option
# register_w: no shared store of the weights, no barrier between their dequantisation and
# the gemm; codes in wgmma order). Not measured yet: build_bundles.py's _reg rows, by row
# suffix: 24 KB of shared memory a block at M = 1 (56 KB with the shared tile), so deeper
# pipelines fit four blocks an SM: _reg_s3 three stages (34 KB), _reg_s4 four slices four
# stages deep (16 k-tiles a block, 256 blocks; the combine adds 4 partial sums, not 8)
W4A16_REGISTER_W = {**W4A16_NARROW, "register_w": True}
# _tk: the slices added in the one kernel (option ticket_combine: the last slice block of
# a column tile to take its ticket adds the tile's partial sums, in slice order), no second
# kernel and its launch; counters zero before the first call (harness.w4a16_row). Not
# measured yet
W4A16_REGISTER_W_ROWS = {"_reg": {}, "_reg_s3": {"num_stages": 3},
                         "_reg_s4": {"splits": 4, "num_stages": 4},
                         "_reg_tk": {"ticket_combine": True},
                         "_reg_s3_tk": {"num_stages": 3, "ticket_combine": True},
                         "_reg_s4_tk": {"splits": 4, "num_stages": 4, "ticket_combine": True}}
# _reg_ov: the dequantisation of k-tile i + 1 beside the wgmma of k-tile i (option
# overlap_dequant: two register fragments, even and odd k-tiles, each wgmma issued without a
# wait and retired, wait_group 1, only before its fragment is rewritten; the _reg rows wait
# for each k-tile's wgmma before the next dequantisation). 64-deep k-tiles, two a step: the
# two fragments hold what _reg's one does (62-66 registers, as _reg's, where 128-deep ones
# took 94-108: two blocks an SM instead of four) and a step's tiles are _reg's k-tile's
# (10 KB at M = 1); four stages, the refill two steps (256 of K) ahead as _reg_s3's, since
# the newest group stays in flight into the next step. _reg_ov_tk with ticket_combine. Not
# measured yet
W4A16_OVERLAP = {"overlap_dequant": True, "block_K": 64, "num_stages": 4}
W4A16_OVERLAP_ROWS = {"_reg_ov": W4A16_OVERLAP,
                      "_reg_ov_tk": {**W4A16_OVERLAP, "ticket_combine": True}}
# _ps: the slice's scales and zero points staged by cp.async with the pipeline's first stage
# (option copy_scales, pass config cuda.prologue_copies) where the other rows load them,
# store them and only then issue the first codes: one DRAM latency (~1 us) before any code
# byte is requested, in a one-wave kernel whose blocks live 8-16 k-tiles. By (M, suffix):
# at M = 1 8 slices (512 blocks, 4 an SM at 62-63 registers); at M = 16 4 slices, since the
# register-A kernels take 66 registers there (3 blocks an SM: 8 slices' 512 blocks would be
# 1.3 waves; capped at 64 they spill and ptxas serialises the wgmma), so 256 blocks, one
# wave. The bytes each keeps in flight: RESULTS.md, "Bytes in flight". Not measured yet
W4A16_PROLOGUE_CONFIGS = {"cuda.prologue_copies": True}
_PS = {"ticket_combine": True, "copy_scales": True}
W4A16_PROLOGUE_ROWS = {
    (1, "_reg_s3_tk_ps"): {"num_stages": 3, **_PS},
    (16, "_reg_s4_tk_ps"): {"splits": 4, "num_stages": 4, **_PS},
    (1, "_reg_ov_tk_ps"): {**W4A16_OVERLAP, **_PS},
    (16, "_reg_ov_s4_tk_ps"): {**W4A16_OVERLAP, "splits": 4, **_PS}}
# 2:4 sparse: 128x256x128 tiles two stages deep (2 x 82 KB), each k-tile's wgmma.sp group
# retired in it; GEMM_SP_K64 the 128x128x64 three-stage form, the default until 2026-12-04
GEMM_SP = {"block_M": 128, "block_N": 256, "block_K": 128, "threads": 256, "num_stages": 2}
GEMM_SP_K64 = {"block_M": 128, "block_N": 128, "block_K": 64, "threads": 256, "num_stages": 3}
GEMM_SP_MMA = {**GEMM_SP_K64, "threads": 128}  # mma.sp: the _mmasp diagnostic row
# the sparse-wgmma rows beside GEMM_SP, by row suffix (see above; shared memory a stage: kept
# values bm x bk / 2, metadata bm x bk / 8 bytes, B bk x bn, all 2-byte)
_SP_F16 = {"out_dtype": "float16", "c_shared": True}  # C as the dense GEMM writes it
GEMM_SP_ROWS = {
    "_k64": GEMM_SP_K64,                                               # 3 x 24 KB
    "_k128": {**GEMM_SP_K64, "block_K": 128},                          # 3 x 50 KB
    "_k128s2": {**GEMM_SP_K64, "block_K": 128, "num_stages": 2},       # 2 x 50 KB: 2 an SM
    "_k128s4": {**GEMM_SP_K64, "block_K": 128, "num_stages": 4},       # 4 x 50 KB
    "_n256": {**GEMM_SP_K64, "block_N": 256, "num_stages": 4},         # 4 x 41 KB
    "_k128_f16": {**GEMM_SP_K64, "block_K": 128, **_SP_F16},           # + 32 KB of C
    # float16 C straight from the accumulators (half pairs): still two blocks an SM
    "_k128s2_f16": {**GEMM_SP_K64, "block_K": 128, "num_stages": 2, "out_dtype": "float16"},
    "_k128_f16p16": {**GEMM_SP_K64, "block_K": 128, **_SP_F16, "panel": SWIZZLE_PANEL},
    "_n256_f16": {**GEMM_SP_K64, "block_N": 256, **_SP_F16},           # 3 x 41 + 64 KB
}
# the same kernels fed by TMA (pass config cuda.tma_unswizzled: the metadata tile, 128 rows of
# 16 bytes at 128-deep k-tiles, one unswizzled box), so all three operands load from one
# producer warpgroup (the dense fp8 kernels' default form) or, with
# cuda.disable_warp_specialized, from one thread in order (the dense GEMM's); at 3 stages
# or more one wgmma.sp group stays in flight on the held metadata registers. By row suffix:
# (config, pass configs); shared memory a stage as above
GEMM_SP_TMA = {"cuda.tma_unswizzled": True}
GEMM_SP_M256 = {**GEMM_SP, "block_M": 256, "block_N": 128, "threads": 512, "num_stages": 3}
GEMM_SP_M256_PERSISTENT = {**GEMM_SP_M256, "workers": 132}  # H100/H200 SXM: 132 SMs
GEMM_SP_TMA_ROWS = {
    "_tma": (GEMM_SP, GEMM_SP_TMA),                                    # 2 x 82 KB
    "_k128_tma": (GEMM_SP_ROWS["_k128"], GEMM_SP_TMA),                 # 3 x 50 KB, wait 1
    "_k128s4_tma": (GEMM_SP_ROWS["_k128s4"], GEMM_SP_TMA),             # 4 x 50 KB, wait 1
    "_k128_tma_inorder": (GEMM_SP_ROWS["_k128"], {**GEMM_SP_TMA, **GEMM_PASS_CONFIGS}),
    # 256 x 128 tiles on four compute warpgroups (64 rows each): 68 KB a stage for the
    # 128 x 256 tile's flops where 128 x 256 takes 82 KB; 3 x 68 KB, wait 1
    "_m256_tma": (GEMM_SP_M256, GEMM_SP_TMA),
    # ... with float16 C (half pairs from the accumulators; no room for a shared C tile), the
    # bytes the dense peer writes
    "_m256_tma_f16": ({**GEMM_SP_M256, "out_dtype": "float16"}, GEMM_SP_TMA),
    # _m256_tma persistent (option workers: 132 blocks, one an SM, walk the tiles in panels
    # of 8 block rows): the producer warpgroup walks them too and fills the next tile's three
    # stages while the compute warpgroups drain and store the last one (float32 / float16 C)
    "_m256_pws": (GEMM_SP_M256_PERSISTENT, GEMM_SP_TMA),
    "_m256_pws_f16": ({**GEMM_SP_M256_PERSISTENT, "out_dtype": "float16"}, GEMM_SP_TMA),
    # ... in order (thread 0 issues, TmaPlan.in_order_tiles): the next tile's first load before
    # the drain and the epilogue, the wgmma.sp group in flight on the held registers
    "_m256_pio": (GEMM_SP_M256_PERSISTENT, {**GEMM_SP_TMA, **GEMM_PASS_CONFIGS}),
    # _m256_tma in clusters of two blocks (blockIdx.x 2c, 2c + 1: two row blocks of one column
    # in panels of 8 block rows) that load their shared B tile once (cuda.tma_multicast: each
    # block one of its two boxes into both), L2 -> SM reads 68 -> 52 KB a k-tile a block
    "_m256_tma_mc": ({**GEMM_SP_M256, "panel": 8},
                     {**GEMM_SP_TMA, "cuda.tma_multicast": True}),
}
INT8_GEMM = {"block_M": 128, "block_N": 256, "block_K": 128, "threads": 256, "num_stages": 3}


def w4a16_config(m: int) -> dict:
    """The W4A16 tile configuration for ``m`` rows of activations (see above)."""
    return W4A16_NARROW if m <= W4A16_NARROW["block_M"] else W4A16


def fp8_config(layout: str) -> dict:
    """The scaled fp8 GEMM's tile configuration for a scale layout (see above)."""
    return {**FP8_GEMM, **FP8_TILES[layout]}


@T.macro
def output_tile(A, B, C, A_s, B_s, C_l, C_s, bm, bn, num_stages, tma_store=False):
    """C's tile (bm, bn) of A @ B, the tile shape that of ``C_l``: the k-loop pipelined
    through ``A_s`` and ``B_s``, then C stored from the accumulators, through the shared tile
    ``C_s`` when there is one; with ``tma_store`` by a TMA store from ``C_s``, the previous
    tile's store waited for (it must have read ``C_s``) before the accumulators overwrite it."""
    (block_M, block_K), block_N = A_s.shape, B_s.shape[1]
    T.clear(C_l)
    for ko in T.Pipelined(T.ceildiv(A.shape[1], block_K), num_stages=num_stages):
        T.copy(A[bm * block_M, ko * block_K], A_s)
        T.copy(B[ko * block_K, bn * block_N], B_s)
        T.gemm(A_s, B_s, C_l)
    if tma_store:
        tma_store_wait()
        T.copy(C_l, C_s)
        tma_copy(C_s, C[bm * block_M:(bm + 1) * block_M, bn * block_N:(bn + 1) * block_N])
    elif C_s is not None:
        T.copy(C_l, C_s)
        T.copy(C_s, C[bm * block_M, bn * block_N])
    else:
        T.copy(C_l, C[bm * block_M, bn * block_N])


@tilewright.jit(out_idx=[2])
def gemm(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64, threads=256,
         num_stages=3, panel=SWIZZLE_PANEL, c_shared=True):
    """C = A @ B, A [M, K], B [K, N] row-major, fp32 accumulation, C in ``dtype`` (through a
    shared tile with ``c_shared``: whole rows of 16-byte stores instead of the accumulators'
    4-byte pairs)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            C_s = T.alloc_shared((block_M, block_N), dtype) if c_shared else None
            if panel:
                T.use_swizzle(panel_size=panel)
            output_tile(A, B, C, A_s, B_s, C_l, C_s, by, bx, num_stages)

    return main


# the accumulator dtype of each 8-bit operand dtype T.gemm takes on tensor cores
LOW_PRECISION_ACCUM = {"int8": "int32", "float8_e4m3fn": "float32", "float8_e5m2": "float32"}


@tilewright.jit(out_idx=[2])
def gemm_low_precision(M, N, K, dtype="int8", block_M=128, block_N=128, block_K=64,
                       threads=128, num_stages=3, trans_b=True):
    """C = A @ B^T (``trans_b``: B stored [N, K], the layout 8-bit GEMMs take; else [K, N])
    with 8-bit A and B (int8, float8_e4m3fn, float8_e5m2) and C in the accumulator dtype
    (``LOW_PRECISION_ACCUM``: int32 for int8, float32 for float8): torch's ``_int_mm`` and
    the float32 product of the float8 operands. Tensor cores: ``mma.sync m16n8k32``, and on
    sm_90a wgmma ``m64nNk32`` (int8 and float8) with B [N, K] and 64 rows per warpgroup."""
    accum = LOW_PRECISION_ACCUM[dtype]

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K) if trans_b else (K, N), dtype),
             C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K) if trans_b else (block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), accum)
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_s)
                if trans_b:
                    T.copy(B[bx * block_N, ko * block_K], B_s)
                else:
                    T.copy(B[ko * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=trans_b)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


@tilewright.jit(out_idx=[2])
def gemm_persistent(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64,
                    threads=256, num_stages=4, workers=132, panel=SWIZZLE_PANEL,
                    c_shared=False, tma_store=False):
    """The GEMM above as a persistent kernel: ``workers`` blocks (one per SM: 132 on an
    H100/H200 SXM) walk the output tiles (``T.Persistent``, in panels of ``panel`` block rows),
    so a block's loads for its next tile run while it stores the last one. ``tma_store``: C
    leaves its shared tile through one TMA store a tile (``T.tma_copy``), waited for only
    before the next tile's accumulators overwrite the shared tile, so the store to global
    memory runs under the next tile's gemms. With ``GEMM_PASS_CONFIGS`` thread 0 issues the
    loads in order, the next tile's first ones before this tile's epilogue."""
    m_blocks, n_blocks = T.ceildiv(M, block_M), T.ceildiv(N, block_N)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(workers, threads=threads) as worker:
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            C_s = T.alloc_shared((block_M, block_N), dtype) if c_shared or tma_store else None
            for bm, bn in T.Persistent([m_blocks, n_blocks], workers, worker, group_size=panel):
                output_tile(A, B, C, A_s, B_s, C_l, C_s, bm, bn, num_stages, tma_store)
            if tma_store:
                tma_store_wait()  # the last tile's store has read the shared tile

    return main


def stream_k_tickets(M, N, block_M=128, block_N=256, workers=132) -> int:
    """The counters ``gemm_stream_k`` takes: one per tile of its last, partial wave."""
    return -(-M // block_M) * -(-N // block_N) % workers


@tilewright.jit(out_idx=[3])
def gemm_stream_k(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64,
                  threads=256, num_stages=3, workers=132, panel=SWIZZLE_PANEL,
                  c_shared=True):
    """``gemm_persistent`` (with ``tma_store``) for the whole waves of tiles, then the k-tiles
    of the last, partial wave's tiles dealt out evenly to all ``workers`` blocks (stream-K):
    block w takes the k-tiles ``[w S / workers, (w + 1) S / workers)`` of the S = (tiles of
    the last wave) x (k-tiles a tile) in order, a contiguous run over one tile or a few. Each
    run's float32 sums go to a workspace slot of the block's own; then (``fence_gpu``) the
    block takes a ticket of the tile's counter, and the block that takes the tile's last one
    adds the tile's runs in block order (the same bits whichever block comes last), stores
    C's tile and puts the counter back to 0. The counters are an argument before C
    (``stream_k_tickets`` of them, int32), zero before the first call and zero after each.
    C always leaves the whole tiles through the shared tile (``c_shared`` must be True: it is
    taken to accept ``GEMM``)."""
    if not c_shared:
        raise ValueError("gemm_stream_k stores the whole tiles through a shared C tile")
    m_blocks, n_blocks = T.ceildiv(M, block_M), T.ceildiv(N, block_N)
    tiles, k_tiles = m_blocks * n_blocks, T.ceildiv(K, block_K)
    whole = tiles // workers * workers  # the tiles of the whole waves
    rest = tiles - whole
    work = rest * k_tiles  # the k-tiles dealt out
    if not rest:
        raise ValueError(f"gemm_stream_k: {tiles} tiles fill {tiles // workers} waves of "
                         f"{workers} blocks; no partial wave to deal out (use gemm_persistent)")
    run = -(-work // workers)  # the longest run, and the most tiles it can touch
    runs = (run + k_tiles - 2) // k_tiles + 1

    def place(tile):
        """Tile ``tile``'s (row block, column block): T.Persistent's walk, in panels of
        ``panel`` block rows."""
        first = tile // (panel * n_blocks) * panel
        rows = T.min(m_blocks - first, panel)
        within = tile % (panel * n_blocks)
        return first + within % rows, within // rows

    def owner(i):
        """The block whose run holds dealt k-tile ``i``."""
        return ((i + 1) * workers - 1) // work

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             Tickets: T.Tensor((rest,), "int32"), C: T.Tensor((M, N), dtype)):
        partial = T.alloc_global((workers, runs, block_M, block_N), "float32")
        with T.Kernel(workers, threads=threads) as worker:
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            C_s = T.alloc_shared((block_M, block_N), dtype)
            # the dealt runs' own tiles: a pipelined loop's tiles must be its alone
            A_r = T.alloc_shared((block_M, block_K), dtype)
            B_r = T.alloc_shared((block_K, block_N), dtype)
            ticket = T.alloc_var("int32")
            for t in T.Persistent([whole], workers, worker, group_size=1):
                bm, bn = place(t)
                output_tile(A, B, C, A_s, B_s, C_l, C_s, bm, bn, num_stages, True)
            tma_store_wait()  # the last whole tile's store has read the shared tile
            start, end = worker * work // workers, (worker + 1) * work // workers
            for r in T.serial(runs):
                s = start // k_tiles + r  # the run's tile among the last wave's
                lo = T.max(start, s * k_tiles) - s * k_tiles
                hi = T.min(end, (s + 1) * k_tiles) - s * k_tiles
                if lo < hi:
                    bm, bn = place(whole + s)
                    T.clear(C_l)
                    for ko in T.Pipelined(hi - lo, num_stages=num_stages):
                        T.copy(A[bm * block_M, (lo + ko) * block_K], A_r)
                        T.copy(B[(lo + ko) * block_K, bn * block_N], B_r)
                        T.gemm(A_r, B_r, C_l)
                    T.copy(C_l, partial[worker, r, 0, 0])
                    # release: the block's sums visible GPU-wide before its ticket
                    fence_gpu()
                    first, last = owner(s * k_tiles), owner((s + 1) * k_tiles - 1)
                    ticket = T.atomic_add(Tickets[s], 1, return_prev=True)
                    if ticket == last - first:  # every run of the tile has stored its sums
                        fence_gpu()  # acquire: their sums, not what L1 may hold
                        # the sum in the accumulators' registers (their sums are stored),
                        # a run at a time: its slot's index worked out once, not per element
                        T.clear(C_l)
                        for w in T.serial(last - first + 1):
                            slot = s - (first + w) * work // workers // k_tiles
                            for j, i in T.Parallel(block_M, block_N):
                                C_l[j, i] += partial[first + w, slot, j, i]
                        T.copy(C_l, C[bm * block_M, bn * block_N])
                        Tickets[s] = 0  # for the next call: no other block counts on it now

    return main


@tilewright.jit(out_idx=[3], pass_configs=ATTENTION_PASS_CONFIGS)
def attention(batch, heads, seq_len, dim, dtype="float16", block_M=128, block_N=128,
              threads=256, num_stages=3):
    """FlashAttention forward, not causal, [batch, seq, heads, dim] tensors; ``seq_len`` a
    multiple of ``block_N`` (no key mask)."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # exponents in base 2
    shape = [batch, seq_len, heads, dim]
    acc = "float32"
    if seq_len % block_N:
        raise ValueError(f"attention: seq_len {seq_len} must be a multiple of block_N "
                         f"{block_N} (this kernel has no key mask)")

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared([block_M, dim], dtype)
            K_s = T.alloc_shared([block_N, dim], dtype)
            V_s = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], acc)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], acc)
            m = T.alloc_fragment([block_M], acc)
            m_prev = T.alloc_fragment([block_M], acc)
            rescale = T.alloc_fragment([block_M], acc)
            row_sum = T.alloc_fragment([block_M], acc)
            logsum = T.alloc_fragment([block_M], acc)
            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_s)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(acc))
            for k in T.Pipelined(T.ceildiv(seq_len, block_N), num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_s)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_s)
                T.gemm(Q_s, K_s, acc_s, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                T.gemm(acc_s_cast, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


@T.macro
def exponentiate(scores, m, m_prev, rescale, scale):
    """The running row maxima ``m`` updated from ``scores`` (rows of Q K^T), which become the
    block's unnormalised probabilities in place; ``rescale`` the factor that takes sums to
    the new maxima (exponents in base 2)."""
    block_M, block_N = scores.shape
    T.copy(m, m_prev)
    T.reduce_max(scores, m, dim=1, clear=False)
    for i in T.Parallel(block_M):
        rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
    for i, j in T.Parallel(block_M, block_N):
        scores[i, j] = T.exp2(scores[i, j] * scale - m[i] * scale)


@T.macro
def online_softmax(scores, m, m_prev, rescale, row_sum, logsum, scale):
    """One key block of the online softmax: :func:`exponentiate`, then the running row sums
    ``logsum`` rescaled and the block's row sums (``row_sum``) added."""
    exponentiate(scores, m, m_prev, rescale, scale)
    T.reduce_sum(scores, row_sum, dim=1)
    for i in T.Parallel(scores.shape[0]):
        logsum[i] = logsum[i] * rescale[i] + row_sum[i]


@T.macro
def online_softmax_lean(scores, m, m_prev, rescale, logsum, scale):
    """:func:`online_softmax` with the block's row sums added into the rescaled ``logsum``
    by the reduction itself: no row-sum fragment (two registers a thread fewer)."""
    exponentiate(scores, m, m_prev, rescale, scale)
    for i in T.Parallel(scores.shape[0]):
        logsum[i] *= rescale[i]
    T.reduce_sum(scores, logsum, dim=1, clear=False)


@tilewright.jit(out_idx=[3], pass_configs=ATTENTION_PASS_CONFIGS)
def attention_overlap(batch, heads, seq_len, dim, dtype="float16", block_M=128, block_N=128,
                      threads=256, num_stages=2):
    """:func:`attention` written the intra-warpgroup way (FlashAttention-3's overlap of the
    softmax with the tensor cores), two score fragments. Step k issues the next scores
    ``S = Q K_{k+1}^T``, rounds this step's probabilities (the previous step's softmax)
    into ``P`` meanwhile, issues ``P V_k``, and runs the softmax of the next scores while
    that gemm is in flight; the output is rescaled after it. The compiler's deferred wgmma
    wait (transforms/wgmma_wait) puts each gemm's wait where its registers are next needed:
    the scores' before ``P V_k`` is issued, ``P V_k``'s after the softmax.

    K_0's scores come before the loop, from one more shared tile (Q's, K_0's and two stages
    of K and V: 192 KB, so two stages; three would need 256 KB). The last step's next scores
    read K_{n-1} again and are masked out (one gemm of 2n per block): the last V after the
    loop would keep its addresses live across the loop, where ptxas spilled them."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # exponents in base 2
    shape = [batch, seq_len, heads, dim]
    acc = "float32"
    if seq_len % block_N:
        raise ValueError(f"attention_overlap: seq_len {seq_len} must be a multiple of block_N "
                         f"{block_N} (this kernel has no key mask)")
    steps = seq_len // block_N

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared([block_M, dim], dtype)
            K_first = T.alloc_shared([block_N, dim], dtype)
            K_s = T.alloc_shared([block_N, dim], dtype)
            V_s = T.alloc_shared([block_N, dim], dtype)
            scores = T.alloc_fragment([block_M, block_N], acc)
            scores_next = T.alloc_fragment([block_M, block_N], acc)
            probs = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], acc)
            m = T.alloc_fragment([block_M], acc)
            m_prev = T.alloc_fragment([block_M], acc)
            rescale = T.alloc_fragment([block_M], acc)
            row_sum = T.alloc_fragment([block_M], acc)
            logsum = T.alloc_fragment([block_M], acc)
            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_s)
            T.copy(K[bz, 0:block_N, by, :], K_first)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(acc))
            T.gemm(Q_s, K_first, scores, transpose_B=True, clear_accum=True,
                   policy=T.GemmWarpPolicy.FullRow)
            online_softmax(scores, m, m_prev, rescale, row_sum, logsum, scale)
            for k in T.Pipelined(steps, num_stages=num_stages):
                T.copy(K[bz, T.min(k + 1, steps - 1) * block_N:
                         (T.min(k + 1, steps - 1) + 1) * block_N, by, :], K_s)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_s)
                T.gemm(Q_s, K_s, scores_next, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(scores, probs)
                T.gemm(probs, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
                if k == steps - 1:  # K_{n-1} again: no next block
                    T.fill(scores_next, -T.infinity(acc))
                online_softmax(scores_next, m, m_prev, rescale, row_sum, logsum, scale)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                for i, j in T.Parallel(block_M, block_N):  # element-wise: both in registers
                    scores[i, j] = scores_next[i, j]
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


@tilewright.jit(out_idx=[3], pass_configs=ATTENTION_PASS_CONFIGS)
def attention_overlap_one(batch, heads, seq_len, dim, dtype="float16", block_M=128,
                          block_N=128, threads=256, num_stages=2, both_in_flight=False):
    """:func:`attention_overlap` with one score fragment. Step k rounds the probabilities
    of the last step's softmax into ``P`` first, then issues ``S = Q K_{k+1}^T`` into the
    same fragment, waits for it, issues ``O += P_k V_k``, runs the scores' softmax while
    that gemm is in flight, waits for it and rescales O. :func:`attention_overlap` rounds
    P_k after issuing the next scores, so it keeps both steps' scores (2 x 64 float32
    registers a thread; fast math spilled them); here P (32) is the only copy beside them.
    (Rounding P at the end of the step instead lets ptxas move the rounding, and with it the
    wait for ``P_k V_k`` whose register operand P is, up into the softmax.)

    K_0's scores and softmax come before the loop, from one more shared tile, and the last
    step's ``P V`` after it, from another (V_{n-1}'s, loaded with Q and K_0): the loop runs
    n - 1 steps and computes no scores it does not need, so it masks none
    (:func:`attention_overlap`'s last step reads K_{n-1} again and masks those scores: 64
    FSEL a step). Q, K_0, V_{n-1} and two stages of K and V: 224 KB, so two stages.

    ``both_in_flight``: FlashAttention-3's order instead, ``P_k V_k`` issued right behind
    the scores' gemm and only the scores waited for (``wait_wgmma(1)``) before the softmax.
    ptxas (CUDA 13.0) puts that form's wait for ``P_k V_k`` after the first row maximum
    (about 70 instructions into the softmax), so the softmax runs after both gemms.

    Both want the compute warpgroups' 240 registers (``cuda.producer_registers`` 24: with
    232 ptxas spilled)."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # exponents in base 2
    shape = [batch, seq_len, heads, dim]
    acc = "float32"
    if seq_len % block_N:
        raise ValueError(f"attention_overlap_one: seq_len {seq_len} must be a multiple of "
                         f"block_N {block_N} (this kernel has no key mask)")
    steps = seq_len // block_N

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared([block_M, dim], dtype)
            K_first = T.alloc_shared([block_N, dim], dtype)
            V_last = T.alloc_shared([block_N, dim], dtype)
            K_s = T.alloc_shared([block_N, dim], dtype)
            V_s = T.alloc_shared([block_N, dim], dtype)
            scores = T.alloc_fragment([block_M, block_N], acc)
            probs = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], acc)
            m = T.alloc_fragment([block_M], acc)
            m_prev = T.alloc_fragment([block_M], acc)
            rescale = T.alloc_fragment([block_M], acc)
            logsum = T.alloc_fragment([block_M], acc)
            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_s)
            T.copy(K[bz, 0:block_N, by, :], K_first)
            T.copy(V[bz, seq_len - block_N:seq_len, by, :], V_last)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(acc))
            T.gemm(Q_s, K_first, scores, transpose_B=True, clear_accum=True,
                   policy=T.GemmWarpPolicy.FullRow)
            online_softmax_lean(scores, m, m_prev, rescale, logsum, scale)
            for k in T.Pipelined(steps - 1, num_stages=num_stages):
                T.copy(K[bz, (k + 1) * block_N:(k + 2) * block_N, by, :], K_s)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_s)
                T.copy(scores, probs)
                wgmma_gemm(Q_s, K_s, scores, transpose_B=True, clear_accum=True,
                           policy=T.GemmWarpPolicy.FullRow)
                if not both_in_flight:
                    wait_wgmma(0)
                wgmma_gemm(probs, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
                if both_in_flight:
                    wait_wgmma(1)  # the scores; P_k V_k stays in flight
                online_softmax_lean(scores, m, m_prev, rescale, logsum, scale)
                wait_wgmma(0)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
            T.copy(scores, probs)
            T.gemm(probs, V_last, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


@tilewright.jit(out_idx=[1])
def silu(M, N, dtype="float16", block_M=8, block_N=512, threads=256):
    """Y = X * sigmoid(X), each element converted to float32 and back, over [M, N] tensors
    whose sizes are multiples of the block: the conversions and the call keep the nest off
    TVM's vector arithmetic, so each thread's 16 bytes go through registers (distribute's
    staged vectors: one 128-bit load and one store a run of 8 16-bit elements)."""
    if M % block_M or N % block_N:
        raise ValueError(f"silu: [{M}, {N}] must be a multiple of the block "
                         f"[{block_M}, {block_N}]")

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(N // block_N, M // block_M, threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                x = T.Cast("float32", X[by * block_M + i, bx * block_N + j])
                Y[by * block_M + i, bx * block_N + j] = T.Cast(dtype, x / (1.0 + T.exp(-x)))

    return main


@tilewright.jit(out_idx=[2])
def add(M, N, dtype="float32", block_M=8, block_N=512, threads=256):
    """C = A + B over [M, N] tensors whose sizes are multiples of the block (no tails), so
    each thread's run of 16 bytes is one 128-bit load per input and one store."""
    if M % block_M or N % block_N:
        raise ValueError(f"add: [{M}, {N}] must be a multiple of the block "
                         f"[{block_M}, {block_N}]")

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(N // block_N, M // block_M, threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = \
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]

    return main
