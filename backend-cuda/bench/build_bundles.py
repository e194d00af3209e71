"""Build the GPU benchmark kernels here (no GPU needed) and export them as bundles.

Run: python backend-cuda/bench/build_bundles.py [--out backend-cuda/bench/bundles] [--quick]
        [--checks all|none|only] [--only PREFIX,...]

The issue's sizes go to OUT, the small sizes of a smoke run (``harness.py --quick``) to
OUT/quick; ``--quick`` builds only the latter, ``--only`` the bundles and checks whose names
start with one of its prefixes (``--only fp8_gemm --checks none``: the fp8 GEMM rows). The
correctness checks (checks.py: the whole conformance catalogue, the examples, the dialect and
benchmark kernels at small sizes) go to OUT/checks, each bundle with its inputs and torch's
results (``check.pt``).

Each bundle folder holds the cubin (sm_90a, CUDA 13.0 toolchain), its launch description, the
signature, ``build.log`` (ptxas registers and spills) and ``case.json`` telling the harness what
the kernel computes, at which sizes, with which tile configuration (``kernels.py``). The build
fails when a kernel spills registers or its SASS lacks the instructions its configuration is
chosen for (HGMMA for the GEMMs and attention, QGMMA and no HMMA for the fp8 GEMMs,
LDG.E.128/STG.E.128 for the add, 16-byte stores of the dequantised weights and no
integer-to-float conversion for W4A16), when cuobjdump is here to read it.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # sass.py, the cuobjdump wrapper

import checks  # noqa: E402 - after the sys.path setup
import kernels  # noqa: E402
import sass  # noqa: E402
import torch  # noqa: E402
from tilewright.errors import UnsupportedOpError  # noqa: E402
from tilewright.jit import compile as tw_compile  # noqa: E402
from tilewright.runtime.call import unpack  # noqa: E402
from tilewright.runtime.cuda import kernels_of  # noqa: E402

ATTENTION_SIZES = {"full": (4, 32, 4096, 128), "quick": (1, 4, 512, 128)}
GEMM_SIZES = {"full": (4096, 8192), "quick": (1024,)}
ADD_SIZES = {"full": (16384, 16384), "quick": (1024, 1024)}  # float32: 1 GiB per tensor
W4A16_SIZES = {"full": ((1, 8192), (16, 8192)), "quick": ((16, 1024),)}  # (M, N = K)
GEMM_SP_SIZES = {"full": (8192,), "quick": (1024,)}


H200_SMS = 132  # persistent kernels: one block per SM
IN_ORDER = kernels.GEMM_PASS_CONFIGS  # TMA issued in order by one compute thread
CPASYNC = {"cuda.disable_tma_lower": True}  # the tiles through cp.async instead of TMA
MULTICAST = {"cuda.tma_multicast": True}  # pairs of blocks load their shared B tile once
IN_ORDER_MULTICAST = {**IN_ORDER, **MULTICAST}  # ... with the TMA loads issued in order
TWO_PER_SM = {"cuda.blocks_per_sm": 2, **IN_ORDER}  # one block's epilogue under another's gemms
PINGPONG = {"cuda.wgmma_pingpong": True}  # the compute warpgroups take turns at their gemms
LEAN_PRODUCER = {"cuda.producer_registers": 24}  # the compute warpgroups get 240 registers


ONLY_AT_4096 = {"_mc_s4", "_pts", "_pts128", "_pio128", "_pio_mc128"}  # issue 18's 4096^3
# the GEMM _128 rows: 128 blocks, so that 4096^3's 512 tiles are 4 whole rounds (see there)
WHOLE_ROUNDS = 128
FLOAT16_ONLY_AT_8192 = {"_pio_mc"}  # ... and at 8192^3 (met there) float16 only
# the fp8 _pts rows (see there): 128 blocks, each the same number of tiles
FP8_PERSISTENT = {"workers": 128, "tma_store": True}


def cases(quick: bool):
    """(bundle name, case description, prim_func, SASS instructions the build must show,
    pass configs)."""
    size = "quick" if quick else "full"
    for dtype in ("float16", "bfloat16"):
        for n in GEMM_SIZES[size]:
            config = dict(kernels.GEMM)
            yield (f"gemm_{dtype}_{n}",
                   {"kind": "gemm", "M": n, "N": n, "K": n, "dtype": dtype, "config": config,
                    "pass_configs": kernels.GEMM_PASS_CONFIGS},
                   kernels.gemm.fn(n, n, n, dtype, **config),
                   ["HGMMA.64x256x16.F32" + (".BF16" if dtype == "bfloat16" else ""),
                    "WARPGROUP.DEPBAR.LE gsb0, 0x1",  # one wgmma group kept in flight
                    "UTMALDG.2D",  # the tiles arrive through TMA
                    "STG.E.128"],  # C leaves its shared tile in 16-byte stores
                   kernels.GEMM_PASS_CONFIGS)
    # diagnostic rows, not targets: what each choice of the default buys, to pick defaults
    # from. ws: the warp-specialised schedule (a producer warpgroup issues the TMA loads, the
    # compiler's default on sm_90a); cpasync: the tiles copied by every thread with cp.async
    # instead of TMA; direct: the accumulators stored straight to global memory (4-byte
    # pairs) with the fourth stage the shared C tile's 64 KB would take; multicast: ws in
    # clusters of two blocks that load their shared B tile once (cuda.tma_multicast);
    # 128x128x2: 128x128 tiles, two blocks per SM (C direct: two blocks' shared C tiles would
    # not fit), so one block's prologue and epilogue run under the other's gemms; persistent:
    # ws with one block per SM walking the tiles (kernels.gemm_persistent), its producer
    # warpgroup loading the next tile while the compute warpgroups store the last one; s4:
    # the default with a fourth stage, the shared C tile sharing bytes with the pipeline's
    # buffers (the epilogue starts after the last k-tile's wait: 196736 bytes instead of 256 K).
    # mc: the default (TMA in order) in clusters of two blocks (2c, 2c + 1: two row blocks of one
    # column) that load their shared B tile once, each block two of its four boxes into both
    # (UTMALDG.2D.MULTICAST); after each k-tile's barrier thread 0 releases the version read two
    # k-tiles ago in both blocks (2 remote arrivals) and, before a refill, waits for the pair's
    # release (one more try-wait): the loop 123 -> 173 SASS instructions, all of them on thread 0's
    # path. Model (RESULTS.md, 2026-12-04: 682 TFLOP/s = 0.81 us a k-tile a block at 4096^3): L2 ->
    # SM traffic 48 -> 32 KB a k-tile a block, 7.8 -> 5.2 TB/s over 132 SMs; the price: with 3
    # stages the refill at k-tile i needs the other block past its barrier of k-tile i (a late one
    # holds warpgroup 0's wgmma), and one cluster barrier a tile. Multicast on the ws schedule gave
    # +0-3% over ws (0.92 -> 0.95, 0.97 -> 0.97 at 4096^3, +3% at 8192^3): expected 0.96-1.02 at
    # 4096^3. mc_s4: mc with a fourth stage (the shared C tile sharing bytes with them, as s4), the
    # loads still one k-tile ahead: the fourth stage lets the other block be one k-tile behind (the
    # refill at i waits for releases made at i - 1; 4096^3 only).
    # pts: persistent (ws, 3 stages, 132 blocks walking the tiles, its producer loading the next
    # tile during the epilogue) with C through the shared tile and one TMA store a tile (4
    # UTMASTG.2D by thread 0; no LDS/STG), waited for (DEPBAR.LE SB0) only before the next tile's
    # pair stores. Model: a tile is 64 k-tiles x 0.81 us = 52 us of wgmma at 4096^3; between two
    # tiles the default exposes the drain, the epilogue (64 STS, barrier, 16 LDS.128 + 16 STG.128 a
    # thread), the block's exit and the next block's start, barrier init and first TMA round trip
    # (an estimated 2-3 us, 4-6%); pts the drain, 64 STS, two barriers and thread 0's four store
    # issues (< 0.5 us). _persistent (C stored from the accumulators, 4 stages) measured level
    # with _direct, its grid form (0.87-0.92 at 4096^3), so walking the tiles cost nothing there;
    # on the ws loop, 2-5% behind in-order (the _ws rows): expected level with the default or
    # above (4096^3 only).
    # pio: persistent with the default's in-order loads (thread 0 issues the TMA loads, one
    # barrier a k-tile: the loop the default's, GEMM_PASS_CONFIGS) and _pts's TMA-store
    # epilogue; the barriers set up once, and the next tile's first load (one k-tile ahead,
    # as in the loop) issued right after the k-loop, before the drain and the epilogue
    # (TmaPlan.in_order_tiles), so it lands under them. Model (per tile of 64 k-tiles x 0.81 us
    # = 52 us at 4096^3): the default exposes the drain, the epilogue (64 STS, barrier, 16
    # LDS.128 + 16 STG.128 a thread), the block's exit, the next block's start, barrier init
    # and first TMA round trip (about 2-3 us); pio the drain, the TMA-store wait, 64 STS, two
    # barriers and 4 store issues (< 0.5 us), the first load's round trip under them; where
    # _pts runs the warp-specialised loop (2-5% behind in-order, RESULTS.md), pio keeps the
    # in-order one: expected 1-4% over the default at 4096^3 (0.96-1.02), level at 8192^3.
    # pio_mc: pio in clusters of two (mc's B multicast; TmaPlan.in_order_tiles with
    # cuda.tma_multicast). Blocks 2c and 2c + 1 walk their tiles together: T.Persistent hands
    # them tiles 2k and 2k + 1 of the walk in every round, two row blocks of one column (the
    # 16-row panels keep pairs in a column), and with 512 (2048) tiles on 132 blocks both have
    # 4 or both 3 (16 or 15) rounds (116 (68) is even); a walk where a pair's rounds differ is
    # refused. The loads one k-tile ahead as in mc; the empty barriers' handshake counts on
    # over the tiles (a tile's last two fills released at the next tile's first two barriers),
    # and the next tile's first load still goes before the drain and the epilogue, after a
    # wait for the pair's release of the version it overwrites (made at both blocks' last
    # barrier of the tile). SASS (4096^3): loop 164 instructions (pio 122, mc 173): 1
    # UTMALDG.2D + 4 UTMALDG.2D.MULTICAST (2 issued a rank), 2 remote arrivals, the empty and
    # full try-waits, 4 HGMMA, 1 BAR.SYNC; after it the next tile's empty try-wait and the same
    # 5 loads, then the drain, the store wait, 64 STS, 4 UTMASTG.2D; one cluster barrier at the
    # start and one after the tile loop (mc: two a tile); 154 registers, 0 spills. Model (52 us
    # of wgmma a tile at 4096^3): against pio, L2 -> SM traffic 48 -> 32 KB a k-tile a block
    # (7.8 -> 5.2 TB/s over 132 SMs), for 42 more loop instructions on thread 0's path (one
    # compare on the others') and the pair's coupling (a refill waits for the other block's
    # barrier of the same k-tile; the next tile's first load for its last one); against mc,
    # pio's saving a tile (the block's exit, the next one's start, barrier set-up, two cluster
    # barriers and first TMA round trip, the exposed epilogue: about 2-3 us, where pio_mc
    # keeps the drain, the store wait, 64 STS and two barriers, < 0.5 us). Expected: pio's
    # gain plus multicast's (+0-3% on the ws schedule): 1-4% over pio at 4096^3, level with
    # pio and mc at 8192^3 (float16 only there).
    # pts128, pio128, pio_mc128: _pts, _pio and _pio_mc on 128 blocks, not 132 (4096^3 only).
    # 512 tiles on 128 blocks are 4 whole rounds: T.Persistent walks exactly 4 (132 blocks:
    # 16, the 4 rounds rounded up to the panel's 16 rows, 12 of them empty) and its guard
    # (wave * workers + block < 512) always holds, so the compiler drops it, in the
    # producer's tile loop too. Makespan: 132 blocks take 4 rounds as well (3 whole, the 4th
    # on 116 blocks), so the 4 idle SMs cost nothing at 4096^3. SASS (4096^3, float16 =
    # bfloat16; hot loop with the same HGMMA as the 132-block row, registers the same, 0
    # spills): pts128 loop 122 instructions for two k-tiles (8 HGMMA) where _pts has 152
    # (_ws 116), R2UR 32 -> 6: with the guard ptxas keeps the k-loop's stage arithmetic (the
    # wgmma descriptors and barrier addresses) in vector registers and moves it to uniform
    # ones before each wgmma and wait (4 R2UR a HGMMA); without it, it stays on the uniform
    # datapath -- the guard costs 15 instructions a k-tile on every compute warp, 13 of them
    # R2UR on the path from the stage's barrier wait to the wgmma issue. 168 registers. pio128
    # and pio_mc128 (154 registers): their k-loop was on the uniform datapath with the guard
    # (1 R2UR); the compute warps' path 64 instructions (pio 63), 69 (pio_mc 68), thread 0's
    # refill branch +10 (pio: 133 vs 122 in all) and +22 (pio_mc: 187 vs 164): with the
    # block index below 128 the tile's coordinates simplify to shifts and masks of it (tile
    # / 256 = wave / 2), and ptxas recomputes them from SR_CTAID.X in the branch (S2UR, USHF,
    # ULOP3) instead of holding them in uniform registers -- one warp's uniform instructions
    # in an 0.81 us (about 1600-cycle) k-tile. Expected: pts128 0-2% over _pts (its loop
    # toward _ws's); pio128 and pio_mc128 level with _pio and _pio_mc (the guard was never
    # in their k-loop): the control for the idle SMs' cost (none) and the refill's extra
    # instructions.
    direct = {"num_stages": 4, "c_shared": False}
    both = ("float16", "bfloat16")
    for n in GEMM_SIZES[size]:
        for suffix, change, configs, copies, dtypes in (
                ("_ws", {}, {}, "UTMALDG.2D", both),
                ("_s4", {"num_stages": 4}, IN_ORDER, "UTMALDG.2D", both),
                ("_cpasync", {}, CPASYNC, "LDGSTS.E.BYPASS.128", both[:1]),
                ("_direct", direct, IN_ORDER, "UTMALDG.2D", both[:1]),
                ("_multicast", {}, MULTICAST, "UTMALDG.2D.MULTICAST", both[:1]),
                ("_128x128x2", {"block_N": 128, "c_shared": False}, TWO_PER_SM, "UTMALDG.2D",
                 both[:1]),
                ("_persistent", {**direct, "workers": H200_SMS}, {}, "UTMALDG.2D", both[:1]),
                ("_mc", {}, IN_ORDER_MULTICAST, "UTMALDG.2D.MULTICAST", both),
                ("_mc_s4", {"num_stages": 4}, IN_ORDER_MULTICAST, "UTMALDG.2D.MULTICAST",
                 both),
                ("_pts", {"workers": H200_SMS, "tma_store": True}, {}, "UTMASTG.2D", both),
                ("_pio", {"workers": H200_SMS, "tma_store": True}, IN_ORDER, "UTMASTG.2D",
                 both),
                ("_pio_mc", {"workers": H200_SMS, "tma_store": True}, IN_ORDER_MULTICAST,
                 "UTMALDG.2D.MULTICAST", both),
                ("_pts128", {"workers": WHOLE_ROUNDS, "tma_store": True}, {}, "UTMASTG.2D",
                 both),
                ("_pio128", {"workers": WHOLE_ROUNDS, "tma_store": True}, IN_ORDER,
                 "UTMASTG.2D", both),
                ("_pio_mc128", {"workers": WHOLE_ROUNDS, "tma_store": True},
                 IN_ORDER_MULTICAST, "UTMALDG.2D.MULTICAST", both)):
            # the smoke run checks the code paths, not the tile choices
            if quick and change or suffix in ONLY_AT_4096 and n != 4096:
                continue
            if suffix in FLOAT16_ONLY_AT_8192 and n != 4096:
                dtypes = dtypes[:1]
            config = {**kernels.GEMM, **change}
            builder = kernels.gemm_persistent if "workers" in change else kernels.gemm
            for dtype in dtypes[:1] if quick else dtypes:
                yield (f"gemm_{dtype}_{n}{suffix}",
                       {"kind": "gemm", "M": n, "N": n, "K": n, "dtype": dtype,
                        "config": config, **({"pass_configs": configs} if configs else {})},
                       builder.fn(n, n, n, dtype, **config),
                       [f"HGMMA.64x{config['block_N']}x16.F32" +
                        (".BF16" if dtype == "bfloat16" else ""), copies], configs)
    # sk: stream-K for the last, partial wave (kernels.gemm_stream_k, 4096^3 only). 512 tiles
    # on 132 blocks: the 3 whole waves (396 tiles) as pio (persistent, TMA in order, the next
    # tile's first loads before the epilogue, C by TMA store), then the last wave's 116 tiles x
    # 64 k-tiles = 7424 k-tiles dealt out as 56-57 a block (a run over the tail of one tile and
    # the head of the next; 2-3 runs a tile), each run's float32 sums (128 KB) stored to a
    # workspace, a ticket (ATOMG between two MEMBAR.SC.GPU), and the block taking a tile's last
    # ticket adds its runs in block order (same bits whichever block is last) and stores C.
    # SASS (4096^3, fp16): the whole tiles' k-loop 120 instructions (pio 122), the runs' 171
    # (the same 5 UTMALDG + 4 HGMMA; the k offset a per-run value: 28 IMAD, 5 R2UR more);
    # 253 registers (pio 154; the fix-up's sums beside the accumulators), 0 spills; the fix-up a
    # block: 64 STG.E.64 of its run, then 128 LDG.E + 128 FADD a run of the tile, 64 pair STG.
    # Model (0.81 us a k-tile a block at 4096^3, RESULTS.md 2026-12-04): pio runs 4 rounds on
    # 116 blocks (256 k-tiles, ~208 us) while 16 idle for the last; sk 3 x 64 + 56.24 = 248.2
    # k-tiles on every block (~201.6 us: -6.3 us), but the runs' loop starts cold twice (barrier
    # set-up and first TMA round trip, ~1 us each: the next-tile loads of pio do not reach
    # into it) and the last run's fix-up sits on the critical path: its 128 KB stored and fenced
    # (~1 us), 2-3 x 128 KB read from L2 at ~64 B/clk an SM (~2.5 us), 64 KB of C (~0.5 us).
    # Expected: level with pio (-1% to +2%); the row is the correct, deterministic base for
    # cutting the fix-up (the last run's own sums from registers, 8-byte loads).
    if not quick and 4096 in GEMM_SIZES[size]:
        config = {**kernels.GEMM, "workers": H200_SMS}
        tickets = kernels.stream_k_tickets(4096, 4096, config["block_M"], config["block_N"],
                                           H200_SMS)
        for dtype in ("float16", "bfloat16"):
            yield (f"gemm_{dtype}_4096_sk",
                   {"kind": "gemm", "M": 4096, "N": 4096, "K": 4096, "dtype": dtype,
                    "config": config, "tickets": tickets,
                    "pass_configs": kernels.STREAM_K_PASS_CONFIGS},
                   kernels.gemm_stream_k.fn(4096, 4096, 4096, dtype, **config),
                   ["HGMMA.64x256x16.F32" + (".BF16" if dtype == "bfloat16" else ""),
                    "UTMASTG.2D", "ATOMG.E.ADD.STRONG.GPU", "MEMBAR.SC.GPU", "CCTL.IVALL"],
                   kernels.STREAM_K_PASS_CONFIGS)
    b, h, s, d = ATTENTION_SIZES[size]
    config = dict(kernels.ATTENTION)
    shallower = {**config, "num_stages": 2}  # K and V two stages deep: 160 KB of shared memory
    # The row without a suffix is the benchmark's FlashAttention (kernels.FLASH_ATTENTION:
    # attention_overlap_one in FlashAttention-3's order, P V issued right behind Q K^T, 2
    # stages, compute warpgroups of 240 registers). The others are diagnostics. _serial:
    # kernels.attention, each step Q K^T, wait, softmax, P V, wait (the default until
    # 2026-12-04); _2stages, _nows, _multicast, _cpasync, _pingpong, _precise and _r240 are
    # _serial with one change each: K and V two stages deep (160 KB); TMA issued in order;
    # K and V multicast to query blocks 2c and 2c + 1; cp.async; the two compute warpgroups
    # taking turns at each step's Q K^T; exp2f's precise form; the producer warpgroup at
    # FlashAttention-3's 24 registers (the compute ones at 240 instead of 232). _overlap:
    # kernels.attention_overlap (the intra-warpgroup order with two score fragments, 2
    # stages; precise math: with fast math ptxas spilled them, 140 bytes); _overlap_pingpong
    # with turns. _overlap_one (kernels.attention_overlap_one): one score fragment and no
    # masked last step, with fast math (0 spills), the softmax under P V in flight;
    # _overlap_one_r240 the same at 240 registers; _overlap_one_pingpong with turns (240
    # registers: with 232 ptxas spilled 48 bytes)
    precise = {"tw.enable_fast_math": False}
    for suffix, builder, cfg, configs, copies in (
            ("", kernels.attention_overlap_one, kernels.FLASH_ATTENTION,
             kernels.FLASH_ATTENTION_PASS_CONFIGS, "UTMALDG.4D"),
            ("_serial", kernels.attention, config, {}, "UTMALDG.4D"),
            ("_2stages", kernels.attention, shallower, {}, "UTMALDG.4D"),
            ("_nows", kernels.attention, config, IN_ORDER, "UTMALDG.4D"),
            ("_multicast", kernels.attention, config, MULTICAST, "UTMALDG.4D.MULTICAST"),
            ("_cpasync", kernels.attention, config, CPASYNC, "LDGSTS.E.BYPASS.128"),
            ("_overlap", kernels.attention_overlap, shallower, precise, "UTMALDG.4D"),
            ("_pingpong", kernels.attention, config, PINGPONG, "UTMALDG.4D"),
            ("_overlap_pingpong", kernels.attention_overlap, shallower,
             {**PINGPONG, **precise}, "UTMALDG.4D"),
            ("_precise", kernels.attention, config, precise, "UTMALDG.4D"),
            ("_r240", kernels.attention, config, LEAN_PRODUCER, "UTMALDG.4D"),
            ("_overlap_one", kernels.attention_overlap_one, shallower, {}, "UTMALDG.4D"),
            ("_overlap_one_r240", kernels.attention_overlap_one, shallower, LEAN_PRODUCER,
             "UTMALDG.4D"),
            ("_overlap_one_pingpong", kernels.attention_overlap_one, shallower,
             {**PINGPONG, **LEAN_PRODUCER}, "UTMALDG.4D")):
        if quick and suffix == "_precise":
            continue
        configs = {**kernels.ATTENTION_PASS_CONFIGS, **configs}
        fast = configs["tw.enable_fast_math"]
        yield (f"flash_attention_float16{suffix}",
               {"kind": "attention", "batch": b, "heads": h, "seq": s, "dim": d,
                "causal": False, "dtype": "float16", "config": cfg, "pass_configs": configs},
               builder.fn(b, h, s, d, "float16", **cfg),
               ["HGMMA.64x128x16.F32", copies, "MUFU.EX2", "!FSETP" if fast else "FSETP"],
               configs)
    # fp8 on sm_90a: wgmma on the 8-bit tiles TMA loads (QGMMA), never unpacked to fp16 for
    # HMMA (what ptxas makes of fp8 mma.sync on Hopper); diagnostic rows (not in the smoke
    # run): tensor scales on 128x128 tiles, and the TMA loads issued in order; block scales
    # (the per-k-tile promotion, examples/gemm_fp8_scaled.py; the default: one FFMA an
    # element, a_scale * b_scale first, four stages, C through a swizzled shared tile in
    # 16-byte row stores -- 0.79x / 0.72x at 4096 / 8192 where C stored from the accumulators
    # in 4-byte pairs gave 0.75 / 0.68 and the FMUL + FFMA form 0.54-0.65x, RESULTS.md):
    # _unfused the FMUL + FFMA form, _s3 three stages, _overlap k-tile ko's wgmma in flight
    # while ko - 1's product is promoted, _nows TMA in order; _pingpong (cuda.wgmma_pingpong)
    # the two consumer warpgroups take turns issuing each k-tile's wgmma (BAR.SYNC before the
    # 4 QGMMA, BAR.ARV after), so one warpgroup's 64 FFMA run while the tensor cores work on
    # the other's product; _p16 blocks in panels of 16 block rows (T.use_swizzle, as the GEMM
    # rows: in launch order a wave of 132 blocks spans all 64 column blocks of B at 8192);
    # _direct C stored from the accumulators (the default until 2026-12-04).
    # _n256 (examples/gemm_fp8_scaled.py block_N=256): 128 x 256 tiles, each k-tile's two
    # 128-column halves in turn through one 64x128 product fragment a warpgroup (QGMMA
    # .64x128x32, 4 a half), each promoted with its block of B's scale into its own
    # accumulator: 192 registers of C a thread, no local memory at 232 (ptxas -v), the loop
    # 300 instructions (128 FFMA, 64 FMNMX zeros, 8 QGMMA) for two tiles' worth of the
    # default's 132. The model (shared memory at 128 B/clk feeding the tensor cores'
    # 8192 fp8 flop/clk; a 64xNx32 wgmma reads 2 KB of A and N x 32 B of B, TMA writes each
    # k-tile once): 128 x 128 tiles need 160 B/clk at the tensor rate (A and B each read by
    # both warpgroups), these 144 B/clk (A read twice a warpgroup, B once), so 0.80 -> 0.89 of
    # the tensor rate; waves 7.8 -> 8 and 3.9 -> 4 at 4096 (1024 / 512 tiles on 132 SMs), 31.0
    # -> 32 and 15.5 -> 16 at 8192: +11% at both sizes, 0.79 / 0.72 -> about 0.88 / 0.80 of
    # _scaled_mm if shared memory bounds the default. Four stages (4 x 48 KB) and C through
    # one 32 KB shared tile, a half at a time (224 KB); _n256s3 three stages (176 KB);
    # _n256p16 _n256 in panels of 16 block rows, as the GEMM rows' 128 x 256 tiles: at 8192 a
    # wave of 132 blocks then reads about 16 MB of A and 16 MB of B, which L2 holds, where
    # in launch order (4 block rows x all 32 column tiles) it reads 4 MB of A and all 64 MB
    # of B (the _p16 rows of 128 x 128 tiles measured no gain: 0.79 / 0.70).
    # _n192 (block_N=192): 128 x 192 tiles, one 64x192 product fragment a warpgroup (QGMMA
    # .64x192x32, 4 a k-tile), each column promoted with its own block of B's scale (tiles
    # start on a block boundary at even bx, 64 columns past one at odd bx: three scale loads
    # a k-tile, the middle 64 columns' row by the parity of bx); 192 registers of C as
    # _n256, no FMNMX zeros: the loop 180 instructions (96 FFMA, 6 FMUL, 5 LDG) for 1.5
    # tiles' worth of the default's 133 (_n256: 299 for 2). The model above: TMA writes
    # 40 KB a k-tile, the two warpgroups read 2 x (8 + 24) KB, 104 KB in 768 clk at the
    # tensor rate = 135 B/clk, 0.95 of it (_n256 0.89, the default 0.80); waves: at 4096,
    # 22 x 32 = 704 tiles, 5.3 -> 6 waves (0.86 of them useful with the partial last column
    # tile; the default 0.97), at 8192 43 x 64 = 2752 tiles, 20.8 -> 21 (0.985): about
    # 0.82 / 0.94 of the tensor rate where _n256 gives 0.86 / 0.86 -- the 8192 row is the
    # one to watch (4096 loses its gain to the waves). Four stages (4 x 40 KB) and C
    # through a 48 KB shared tile (208 KB); _n192p16 in panels of 16 block rows
    # _pts (workers=128, tma_store): persistent, warp-specialised (the default's loop), 128
    # blocks walk the tiles in launch order, C leaves its shared tile by two TMA stores
    # (UTMASTG.2D) waited for only before the next tile's pair stores; the producer loads the
    # next tile's four stages while the consumers store the last. 128 blocks, not 132: 1024 /
    # 4096 tiles give each the same 8 / 32 (the rounds 132 blocks take too: 7.8 -> 8, 31.0
    # -> 32), so the tile loop has no guard -- with one, ptxas kept the k-loop's stage
    # arithmetic off the uniform datapath (hot loop 161 instead of 147) and, with the
    # product fragment zeroed by code, serialised every wgmma (C7520; rules.gemm now clears
    # it by scale-d in a tile loop). Hot loop 147 instructions (64 FFMA, 4 QGMMA, one wait)
    # where the default's is 132 (the stage counters carried over the tiles: IMAD/LOP3/R2UR
    # +15), 0 spills at 224 registers. Model (measured default 0.156 / 1.27 ms = 19.5 / 39.7
    # us a tile): the grid form exposes per tile the drain, the epilogue (32 STS, barrier,
    # 16 LDS.128 + 16 STG.128 a thread), the block's exit, the next block's start, barrier
    # init and first TMA round trip -- about 2-3 us (the GEMM rows' estimate), 10-15% of a
    # 4096 tile, 5-7% of an 8192 one; _pts exposes the drain, 32 STS, three barriers and
    # two store issues (< 0.5 us), and pays ~1-2% for the longer loop: 0.79 / 0.72 -> about
    # 0.85 / 0.75. _n256pts: the same on _n256's 128 x 256 tiles (512 / 2048 tiles: 4 /
    # 16 a block; C's halves through one shared tile, the second half's STS after the
    # first half's stores have read it); hot loop 317 where _n256's is 300: about +3% /
    # +1.5% over _n256 (tiles twice as long), if _n256 reaches its model 0.88 / 0.80.
    for n in GEMM_SIZES[size]:
        for layout, suffix, change, configs in (
                ("tensor", "", {}, {}), ("token", "", {}, {}), ("block", "", {}, {}),
                ("tensor", "_128x128", {"block_N": 128}, {}),
                ("tensor", "_nows", {}, IN_ORDER),
                ("block", "_unfused", {"fused_scale": False}, {}),
                ("block", "_s3", {"num_stages": 3}, {}),
                ("block", "_overlap", {"overlap": True, "num_stages": 3}, {}),
                ("block", "_nows", {}, IN_ORDER),
                ("block", "_pingpong", {}, PINGPONG),
                ("block", "_p16", {"panel": kernels.SWIZZLE_PANEL}, {}),
                ("block", "_direct", {"c_shared": False}, {}),
                ("block", "_n256", {"block_N": 256}, {}),
                ("block", "_n256s3", {"block_N": 256, "num_stages": 3}, {}),
                ("block", "_n256p16", {"block_N": 256, "panel": kernels.SWIZZLE_PANEL}, {}),
                ("block", "_n192", {"block_N": 192}, {}),
                ("block", "_n192p16", {"block_N": 192, "panel": kernels.SWIZZLE_PANEL}, {}),
                ("block", "_pts", FP8_PERSISTENT, {}),
                ("block", "_n256pts", {**FP8_PERSISTENT, "block_N": 256}, {})):
            if quick and suffix:
                continue
            config = {**kernels.fp8_config(layout), **change}
            # block scales: one wgmma a column tile, block_N 256 two of 128 columns
            wgmma_n = 128 if layout == "block" and config["block_N"] == 256 else \
                config["block_N"]
            yield (f"fp8_gemm_{layout}_{n}{suffix}",
                   {"kind": "fp8_gemm", "M": n, "N": n, "K": n, "layout": layout,
                    "dtype": "float8_e4m3fn", "out_dtype": "bfloat16", "config": config,
                    **({"pass_configs": configs} if configs else {})},
                   kernels.fp8_gemm_scaled.fn(n, n, n, layout, **config),
                   [f"QGMMA.64x{wgmma_n}x32.F32.E4M3.E4M3", "UTMALDG.2D", "!HMMA",
                    "!F2FP.F16.E4M3", *(["BAR.ARV"] if configs is PINGPONG else []),
                    *(["UTMASTG.2D"] if config.get("tma_store") else
                      ["STG.E.128"] if config.get("c_shared") else [])], configs)
    # W4A16 in slices of K (kernels.w4a16_config: two kernels, the partial sums then their
    # sum; 8 slices two stages deep, 56 KB: all 512 blocks resident, 4 an SM, 8 k-tiles each
    # -- 1.25x at M = 16 on the H200, ahead of the 4-slice form's 1.17x; at M = 1 the same
    # swapped onto wgmma with staged scales, kernels.W4A16_NARROW: 1.76x). The diagnostic
    # rows (not in the smoke run) change kernels.W4A16, the HMMA form: _s8 (M = 1 only) is
    # that form itself (1.53x); _nosplit, the one-slice kernel; _n64, 64
    # columns a block (4 warps of 16: each warp's ldmatrix reads of the activations serve
    # half the columns, 7.5 instead of 6.25 bytes of shared-memory traffic per weight);
    # _s4, 4 slices four stages deep (80 KB, 2 an SM: the default until 2026-12-04); _t256,
    # 256 threads (half the dequantisation a thread, 32 warps an SM); _overlap, option
    # overlap (two float16 tiles, k-tile e + 1 dequantised while e's gemm runs, one barrier a
    # k-tile instead of two; two k-tiles a pipeline stage) on 4 slices two stages deep, built
    # for 2 blocks an SM (cuda.blocks_per_sm: the tail's activation tile shares bytes with a
    # pipeline version, 112 KB instead of 116: all 256 blocks resident); _s4ss: option
    # stage_scales (a slice's scales and zero points staged in shared memory before its
    # k-tiles, one wait on 32 two-byte loads a thread; each k-tile's dequantisation then
    # reads them by LDS: its hot loop has no LDG, where _s4's waits on 32 LDG.E.U16 issued
    # after each k-tile's barrier) on _s4's 4 slices four stages deep (88 KB, two an SM as
    # _s4; on the default's tiles the 4 KB would cost the fourth block an SM); _swap: option
    # swap (C^T = W A^T on wgmma m64n16k16, both tiles read from shared memory by the tensor
    # cores: no ldmatrix, the activations read once a warpgroup rather than once a warp; two
    # warpgroups of 64 weight rows, 56 KB, four blocks an SM as the default); _swap8 (M = 1
    # only): swap on 8-row activation tiles (m64n8k16, 52 KB; with staged scales, whose 4 KB
    # the halved activation stages pay for, 56 KB and four an SM, it is M = 1's default)
    for m, n in W4A16_SIZES[size]:
        for suffix, change, configs in (
                ("", {}, {}), ("_nosplit", {"splits": 1, "num_stages": 4}, {}),
                ("_n64", {"block_N": 64}, {}),
                ("_s4", {"splits": 4, "num_stages": 4}, {}),
                ("_t256", {"threads": 256}, {}),
                ("_overlap", {"overlap": True, "splits": 4}, {"cuda.blocks_per_sm": 2}),
                ("_s4ss", {"stage_scales": True, "splits": 4, "num_stages": 4}, {}),
                ("_swap", {"swap": True, "threads": 256}, {}),
                ("_swap8", {"swap": True, "threads": 256, "block_M": 8}, {}),
                ("_s8", {}, {})):
            if quick and suffix or suffix in ("_swap8", "_s8") and m > 8:
                continue
            config = {**(kernels.w4a16_config(m) if suffix == "" else kernels.W4A16), **change}
            yield (f"w4a16_m{m}_{n}{suffix}",
                   {"kind": "w4a16", "M": m, "N": n, "K": n, "group": 128,
                    "dtype": "float16", "config": config,
                    **({"pass_configs": configs} if configs else {})},
                   kernels.w4a16_gemm.fn(m, n, n, 128, **config),
                   # dequantised eight codes a call into 16-byte stores (include/tw_dequant.h),
                   # not a code a thread through an integer-to-float conversion; staged
                   # scales read back by LDS.U16 (32 a thread a k-tile; the default has none)
                   ["LDGSTS.E.BYPASS.128", "STS.128", "!I2F.F16",
                    *([f"HGMMA.64x{config['block_M']}x16.F32", "!HMMA"] if config.get("swap") else
                      ["HMMA.16816.F32"]),
                    *(["LDS.U16"] if config.get("stage_scales") else [])], configs)
    # W4A16 with the dequantised weights in registers as wgmma's register A operand
    # (kernels.W4A16_REGISTER_W: W4A16_NARROW's swapped kernel with option register_w; 16
    # activation rows at M = 16, m64n16k16): each thread dequantises the elements its A
    # registers hold, eight codes (one 32-bit LDS of codes in wgmma order) a call, no STS of
    # the weights and no barrier between their dequantisation and the HGMMA, whose A operand
    # is registers (HGMMA.64xNx16.F32 R.., R.., gdesc..); _reg_s3 and _reg_s4 deeper
    # pipelines; _reg_tk, _reg_s3_tk, _reg_s4_tk the same with the slices added in the one
    # kernel by the last slice block of each tile (option ticket_combine) instead of a second
    # kernel (kernels.W4A16_REGISTER_W_ROWS); _reg_ov, _reg_ov_tk the dequantisation of k-tile
    # i + 1 run while the wgmma of k-tile i is in flight (option overlap_dequant; two register
    # fragments, kernels.W4A16_OVERLAP_ROWS): the warpgroup's waits leave one group in flight
    # (WARPGROUP.DEPBAR.LE gsb0, 0x1; the other rows' are all 0x0 in the hot loop)
    # _reg_s3_tk_ps, _reg_ov_tk_ps (kernels.W4A16_PROLOGUE_ROWS): the scales' cp.async
    # (LDGSTS) issued with the first stage's, before any wait, and 4 blocks an SM
    rows = {**kernels.W4A16_REGISTER_W_ROWS, **kernels.W4A16_OVERLAP_ROWS}
    prologue = [((m, n), suffix, change, kernels.W4A16_PROLOGUE_CONFIGS)
                for (m, suffix), change in kernels.W4A16_PROLOGUE_ROWS.items()
                for m_, n in W4A16_SIZES[size] if m_ == m and not quick]
    for (m, n), suffix, change, configs in [
            *(((m, n), suffix, change, {}) for (m, n), (suffix, change) in itertools.product(
                () if quick else W4A16_SIZES[size], rows.items())), *prologue]:
        config = {**kernels.W4A16_REGISTER_W, "block_M": 8 if m <= 8 else 16, **change}
        yield (f"w4a16_m{m}_{n}{suffix}",
               {"kind": "w4a16", "M": m, "N": n, "K": n, "group": 128, "dtype": "float16",
                "config": config, **({"pass_configs": configs} if configs else {})},
               kernels.w4a16_gemm.fn(m, n, n, 128, **config),
               # no STS of the weights: at most the staged scales' and zero points' one
               # 16-byte vector each a thread (where a slice's fill whole vectors)
               ["LDGSTS.E.BYPASS.128", "!I2F.F16", "STS.128<=2", "!HMMA",
                f"HGMMA.64x{config['block_M']}x16.F32",
                *(["WARPGROUP.DEPBAR.LE gsb0, 0x1"] if config.get("overlap_dequant") else []),
                # _tk: the fences (MEMBAR.SC.GPU, then CCTL.IVALL: L1 dropped) around the
                # ticket (ATOMG.E.ADD.STRONG.GPU); PRMT only in the last block's sum (its
                # float16 pairs), the hot loop has none (test_cuda_low_precision_examples)
                *(["ATOMG.E.ADD.STRONG.GPU", "MEMBAR.SC.GPU", "CCTL.IVALL"]
                  if config.get("ticket_combine") else ["!PRMT"]),
                # _ps: no 2-byte loads of scales (they come by LDGSTS)
                *(["!LDG.E.U16"] if config.get("copy_scales") else [])], configs)
    # 2:4 sparse A against the dense cuBLAS GEMM: the sparse wgmma (HGMMA.SP, no dense
    # tensor-core instruction), kernels.GEMM_SP (128x256x128, 2 stages: 0.91x where the
    # 128x128x64 three-stage form, the _k64 row, gave 0.73-0.74x); diagnostic rows (not in
    # the smoke run): mma.sp over warp tiles, and _k64 with 2 stages (each group retired in
    # its k-tile) and 4 (the copies 2 k-tiles ahead of the wgmma.sp, one group in flight on
    # the held metadata registers, as _k64's 3 stages)
    # The kernels.GEMM_SP_ROWS rows: larger tiles (128-deep k-tiles: the metadata rows 16
    # bytes, copied by cp.async where 64-deep ones took a 2-byte LDG and STS a thread; 256
    # columns: HGMMA.SP.64x256x32) and float16 C through a shared tile (16-byte stores).
    sp_wgmma = ["HGMMA.SP.64x128x32.F32", "!HMMA", "!HGMMA.64"]
    sp_rows = [("_mmasp", kernels.GEMM_SP_MMA, ["HMMA.SP.16832.F32", "LDSM.16.M88.4"]),
               ("_2stages", {**kernels.GEMM_SP_K64, "num_stages": 2}, sp_wgmma),
               ("_4stages", {**kernels.GEMM_SP_K64, "num_stages": 4}, sp_wgmma)]
    for suffix, config in {"": kernels.GEMM_SP, **kernels.GEMM_SP_ROWS}.items():
        expect = [f"HGMMA.SP.64x{config['block_N']}x32.F32", "!HMMA", "!HGMMA.64"]
        expect += ["!LDG.E.U16"] if config["block_K"] == 128 else []
        expect += ["STG.E.128"] if config.get("c_shared") else []
        sp_rows.append((suffix, config, expect))
    # The kernels.GEMM_SP_TMA_ROWS rows: every operand a TMA load (UTMALDG, no LDGSTS: the
    # consumers issue no copies and no address math for them), and at 3 stages or more the
    # wgmma.sp group left in flight (WARPGROUP.DEPBAR.LE gsb0, 0x1). The persistent ones
    # (kernels.py has their model): _m256_pws / _m256_pws_f16, _m256_tma's loop (4 UTMALDG a
    # k-tile on the producer) walked by 132 blocks, hot loop 151 SASS instructions where
    # _m256_tma's has 116 (32 R2UR: the descriptors' base through vector registers, as in the
    # dense _persistent row's 153; ~600 issue slots a k-tile an SM sub-partition against ~2400
    # clocks at the target), 96 registers, 0 spills; _m256_pio in order (TmaPlan.in_order_tiles
    # with the held metadata registers), 170 (thread 0's loads in it, as _k128_tma_inorder's
    # 169), 98 registers, 0 spills. _m256_tma_mc: _m256_tma in clusters of two sharing B (2
    # UTMALDG.2D.MULTICAST, one of B's two boxes a block, and 2 UTMALDG.2D a k-tile on the
    # producer), hot loop 121, 96 registers, 0 spills. Model: if L2 -> SM bandwidth bounds the
    # loop (kernels.py), 68 -> 52 KB of L2 reads a k-tile, 51 GB/s an SM at 1.3x needing 39 of
    # them; the dense GEMM's ws multicast gave +0-3% (RESULTS.md): expected level to +10%
    sp_rows = [(suffix, config, expect, {}) for suffix, config, expect in sp_rows]
    for suffix, (config, configs) in kernels.GEMM_SP_TMA_ROWS.items():
        expect = [f"HGMMA.SP.64x{config['block_N']}x32.F32", "!HMMA", "!HGMMA.64",
                  "UTMALDG.2D", "!LDGSTS", "!LDG.E.U16"]
        expect += ["STG.E.128"] if config.get("c_shared") else []
        expect += ["UTMALDG.2D.MULTICAST"] if configs.get("cuda.tma_multicast") else []
        sp_rows.append((suffix, config, expect, configs))
    for n in GEMM_SP_SIZES[size]:
        for suffix, config, expect, configs in sp_rows:
            if quick and suffix:
                continue
            yield (f"gemm_sp_float16_{n}{suffix}",
                   {"kind": "gemm_sp", "M": n, "N": n, "K": n, "dtype": "float16",
                    "e_dtype": "int16", "config": dict(config),
                    **({"pass_configs": dict(configs)} if configs else {})},
                   kernels.gemm_sp_kernel.fn(n, n, n, "float16", "int16", **config), expect,
                   configs)
    for n in GEMM_SIZES[size]:  # int8 into int32 against torch._int_mm, on wgmma only
        config = dict(kernels.INT8_GEMM)
        yield (f"int8_gemm_{n}",
               {"kind": "int8_gemm", "M": n, "N": n, "K": n, "dtype": "int8",
                "config": config},
               kernels.gemm_low_precision.fn(n, n, n, "int8", **config),
               ["IGMMA.64x256x32.S8.S8", "UTMALDG.2D", "!IMMA", "!HMMA"], {})
    rows, cols = ADD_SIZES[size]
    config = dict(kernels.ADD)
    for dtype in ("float32", "float16", "bfloat16"):  # 16-byte vectors of 4 or 8 elements
        yield (f"elementwise_add_{dtype}",
               {"kind": "add", "M": rows, "N": cols, "dtype": dtype, "config": config},
               kernels.add.fn(rows, cols, dtype, **config), ["LDG.E.128", "STG.E.128"], {})
    for dtype in ("float16", "bfloat16"):  # converted to float32: staged through registers
        yield (f"silu_{dtype}",
               {"kind": "silu", "M": rows, "N": cols, "dtype": dtype, "config": config},
               kernels.silu.fn(rows, cols, dtype, **config),
               ["LDG.E.128", "STG.E.128", "!LDG.E.U16", "!LDL"], {})


def build_info(log: str) -> dict:
    """Registers and spilled bytes from ptxas's report in a build log: the most registers and
    all spills of its kernels (a kernel sequence has several)."""
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"registers": max(regs) if regs else None,
            "spill_bytes": sum(int(st) + int(ld) for st, ld in spills) if spills else None}


def check_build(name: str, log: str, cubin: bytes, expect: list[str]) -> dict:
    """Registers, spills and the expected SASS instructions (``expect``; an entry ``!X``: X
    must be absent; ``X<=n``: at most n of X); raises when the build is bad."""
    info = build_info(log)
    if info["spill_bytes"]:
        raise SystemExit(f"{name}: the kernel spills registers:\n{log}")
    if re.search(r"wgmma.*serializ", log, re.IGNORECASE):
        raise SystemExit(f"{name}: ptxas serialises the wgmma instructions:\n{log}")
    if sass.available() is None:
        code = sass.dump(cubin)
        bounded = [m.groups() for i in expect if (m := re.fullmatch(r"(.+)<=(\d+)", i))]
        present = [i for i in expect if not i.startswith("!") and "<=" not in i]
        missing = [i for i in present if i not in code]
        if missing:
            raise SystemExit(f"{name}: the SASS has no {', '.join(missing)}")
        unwanted = [i[1:] for i in expect if i.startswith("!") and i[1:] in code]
        unwanted += [f"{code.count(i)} {i} (at most {n})" for i, n in bounded
                     if code.count(i) > int(n)]
        if unwanted:
            raise SystemExit(f"{name}: the SASS has {', '.join(unwanted)}")
        info["sass"] = {i: code.count(i) for i in present}
    else:
        info["sass"] = f"not checked: {sass.available()}"
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "bundles")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--executor", default="nvrtc", choices=["nvrtc", "nvcc"])
    parser.add_argument("--quick", action="store_true",
                        help="only the small sizes (OUT/quick), not the issue's sizes too")
    parser.add_argument("--checks", choices=["all", "none", "only"], default="all",
                        help="the correctness checks (checks.py, OUT/checks): with the "
                             "benchmark bundles, not at all, or alone")
    parser.add_argument("--only", default="",
                        help="comma-separated prefixes: build only the benchmark bundles and "
                             "checks whose names start with one (the others' bundles are "
                             "kept)")
    args = parser.parse_args()
    total = time.perf_counter()
    if args.checks != "only":
        for quick in (True,) if args.quick else (False, True):
            build_set(args.out / "quick" if quick else args.out, quick, args)
    failed = 0
    if args.checks != "none":
        failed = build_checks(args.out / "checks", args)
    print(f"built in {time.perf_counter() - total:.1f} s")
    return 1 if failed else 0


def build_checks(out: Path, args) -> int:
    """Build the correctness checks of checks.py into ``out``, one bundle each with its
    inputs and expected outputs (``check.pt``), and ``index.json`` saying what became of every
    check (bundled, unsupported and why, or a build failure); returns the failures. With
    ``--only``, the chosen checks are rebuilt and the others' bundles and rows kept."""
    prefixes = tuple(p for p in args.only.split(",") if p) or ("",)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_dir() and (old / "manifest.json").exists() and old.name.startswith(prefixes):
            shutil.rmtree(old)
    index_path, names = out / "index.json", {c.name for c in checks.every_check()}
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index = {name: entry for name, entry in index.items()  # the rows of checks not rebuilt
             if name in names and not name.startswith(prefixes)
             and (entry.get("status") != "bundled" or (out / name).is_dir())}
    failed = 0
    for check in checks.every_check():
        if not check.name.startswith(prefixes):
            continue
        entry = {"group": check.group, "dtype": check.dtype}
        index[check.name] = entry
        reason = check.unsupported() if check.unsupported is not None else None
        if reason is not None:
            entry.update(status="unsupported", reason=reason)
            continue
        start = time.perf_counter()
        try:
            kernel = tw_compile(check.make(), target=f"cuda -arch={args.arch}",
                                execution_backend=args.executor,
                                pass_configs=check.pass_configs)
        except UnsupportedOpError as exc:
            entry.update(status="unsupported", reason=str(exc).splitlines()[0])
            continue
        except Exception as exc:  # noqa: BLE001 - every check gets its row; the build fails
            failed += 1
            entry.update(status="build failed", reason=f"{type(exc).__name__}: {exc}"[:300])
            print(f"{check.name}: BUILD FAILED: {entry['reason']}")
            continue
        log_path = Path(kernel.artifact_dir) / "build.log" if kernel.artifact_dir else None
        log = log_path.read_text() if log_path and log_path.exists() else ""
        runs = check.runs()
        data = io.BytesIO()
        torch.save({"seed": checks.SEED, "runs": [
            {"args": _held(r.args, kernel.signature.params, check.name), "outputs": r.outputs,
             "expected": [_stored(e, r.args[i]) for i, e in zip(r.outputs, r.expected)],
             **({"unordered": r.unordered} if r.unordered else {})} for r in runs]},
            data)
        launch = kernel.executable.launch
        case = {"kind": "check", "group": check.group, "dtype": check.dtype,
                "reduction": check.reduction, "runs": len(runs),
                **({"tolerance_dtype": check.tolerance_dtype} if check.tolerance_dtype else {}),
                **({"accum_dtype": check.accum_dtype} if check.accum_dtype else {}),
                "pass_configs": check.pass_configs,
                # racecheck and synccheck look at shared memory and the barriers guarding it
                "shared_memory": any(k["dynamic_smem_bytes"] for k in kernels_of(launch)),
                "barriers": any(b in kernel.get_kernel_source() for b in BARRIERS),
                "build": build_info(log)}
        kernel.export(out / check.name, extra={
            "log": ("build.log", log.encode()), "check": ("check.pt", data.getvalue()),
            "case": ("case.json", json.dumps(case, indent=1).encode())})
        entry.update(status="bundled")
        print(f"{check.name}: {time.perf_counter() - start:.1f} s, "
              f"{case['build']['registers']} registers")
    (out / "index.json").write_text(json.dumps(index, indent=1))
    counts = {}
    for entry in index.values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    print(f"checks: {json.dumps(counts)}")
    return failed


def _held(args: list, params, name: str) -> list:
    """The arguments as the compiled kernel takes them (the harness calls it without the
    runtime's argument handling): a packed 4-bit tensor (float4_e2m1fn_x2, two codes a byte)
    one value a byte."""
    return [unpack(a, p, f"{name}: argument {p.name}") if p.kind == "tensor" and p.packed_bits
            else a for a, p in zip(args, params)]


def _stored(expected, output):
    """The expected value as stored: float32 for a 16-bit output (float32's rounding is far
    below a 16-bit output's tolerance; half the bytes a bundle carries) and where float32
    holds a float64 value exactly (copies, integers, NaN), float64 otherwise; a tensor of its
    own (a reference may give views of one storage as different dtypes, which torch.save
    refuses: the word_access case's int32 words of its int16 input)."""
    if output.dtype in (torch.float16, torch.bfloat16):
        return expected.float()
    if expected.dtype == torch.float64:
        single = expected.float()
        back = single.double()
        if bool(((back == expected) | (back.isnan() & expected.isnan())).all()):
            return single
    return expected.clone()


BARRIERS = ("__syncthreads", "tw_mbar_", "tw_named_barrier", "tw_cluster_sync", "__syncwarp")


def build_set(out: Path, quick: bool, args) -> None:
    """Build one size set into ``out``, removing bundles of earlier builds first (with
    ``--only``, the chosen bundles only)."""
    prefixes = tuple(p for p in args.only.split(",") if p) or ("",)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if (old / "manifest.json").exists() and old.name.startswith(prefixes):
            shutil.rmtree(old)
    for name, case, func, expect, configs in cases(quick):
        if not name.startswith(prefixes):
            continue
        start = time.perf_counter()
        kernel = tw_compile(func, out_idx=[len(func.params) - 1],  # the last is the output
                            target=f"cuda -arch={args.arch}", execution_backend=args.executor,
                            pass_configs=configs)
        log_path = Path(kernel.artifact_dir) / "build.log" if kernel.artifact_dir else None
        log = log_path.read_text() if log_path and log_path.exists() else ""
        launch = kernel.executable.launch
        case["build"] = check_build(name, log, kernel.executable.cubin, expect)
        # per kernel: a kernel sequence (split-K's two kernels) launches each its own way
        launches = kernels_of(launch)
        case["build"]["smem_bytes"] = max(int(k["dynamic_smem_bytes"]) for k in launches)
        case["build"]["grid"] = [k["grid"] for k in launches]
        case["build"]["block"] = [k["block"] for k in launches]
        path = kernel.export(out / name, extra={
            "log": ("build.log", log.encode()),
            "case": ("case.json", json.dumps(case, indent=1).encode())})
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{name}: {time.perf_counter() - start:.1f} s, {size / 1024:.0f} KiB, "
              f"{case['build']['registers']} registers, {case['build']['spill_bytes']} spill "
              f"bytes, {case['build']['smem_bytes']} B shared, SASS {case['build']['sass']}")


if __name__ == "__main__":
    sys.exit(main())
