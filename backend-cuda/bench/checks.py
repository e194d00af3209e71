"""The GPU correctness checks: every kernel the project can show running on the H200.

- ``conformance``: every case of the conformance catalogue (``tilewright_sdk.conformance``:
  every kernel, dtype and shape variant; a dynamic one at the suite's two sizes);
- ``example``: every kernel of ``examples/`` at the emulation tests' sizes
  (``tests/cuda_cases.py``), and the scaled fp8 GEMM in each scale layout and the W4A16 GEMM
  in their benchmark configurations against the float64 product of their dequantised
  operands;
- ``dialect``: the CUDA dialect kernels (``tests/dialect_cases.py``: TMA, mbarriers, roles,
  clusters) and the benchmark kernels at small sizes in each configuration the benchmark
  bundles (warp specialisation, TMA issued in order, multicast in clusters, persistent tiles,
  two blocks per SM, cp.async, compute warpgroups taking turns; FlashAttention written in the
  intra-warpgroup order too), and the 8-bit GEMMs (``kernels.gemm_low_precision``: int8
  into int32 against ``torch._int_mm``, float8_e4m3fn/e5m2 into float32 against the float64
  product of the float8 operands; int8 in the benchmark row's configuration too) and the 2:4
  sparse GEMM in both benchmark configurations (sparse wgmma, mma.sp) and two of its other
  rows' (128-deep k-tiles, 128 x 256 tiles).

Each :class:`Check` is built here into a bundle (``build_bundles.py``) that also holds its
inputs (drawn from the recorded seed) and torch's results in float64 (``check.pt``); the
harness runs it on the GPU with torch and cuda-python only and compares with the tolerance
model of ``tilewright.testing``. A case the CUDA backend declares it does not support, or
refuses at compile time with an :class:`~tilewright.UnsupportedOpError`, is recorded as
unsupported with the reason (``index.json``), not bundled.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # cuda_cases.py, dialect_cases.py
sys.path.insert(0, str(HERE.parents[1] / "examples"))  # the low-precision examples

import cuda_cases  # noqa: E402 - after the sys.path setup
import dialect_cases  # noqa: E402
import gemm_fp8_scaled as fp8  # noqa: E402
import gemm_w4a16 as w4  # noqa: E402
import kernels  # noqa: E402
import test_cuda_block_atomics as block_atomics  # noqa: E402 - kernels of the emulation tests
import test_cuda_emulate as emulate  # noqa: E402
import test_cuda_emulate_smem as emulate_smem  # noqa: E402
import test_cuda_gemv as gemv  # noqa: E402
import test_cuda_kernel_sequence as kernel_sequence  # noqa: E402
import test_cuda_named_barriers as named_barriers  # noqa: E402
import test_cuda_spread_fragments as spread  # noqa: E402
import test_cuda_sync as sync  # noqa: E402
import test_cuda_thread_atomics as thread_atomics  # noqa: E402
import test_cuda_tma_parts as tma_parts  # noqa: E402
import test_cuda_tma_pipeline as tma_pipeline  # noqa: E402
import test_cuda_tma_wide_box as wide_box  # noqa: E402
import test_cuda_use_swizzle as use_swizzle  # noqa: E402
import test_cuda_wgmma_slices as wgmma_slices  # noqa: E402
import test_cuda_ws_fragments as ws_fragments  # noqa: E402
import tilewright_cuda.language as T  # noqa: E402
import torch  # noqa: E402
from tilewright.jit.signature import output_indices  # noqa: E402
from tilewright.plugin import get_manager  # noqa: E402
from tilewright.utils.sparse import compress, randn_semi_sparse  # noqa: E402
from tilewright_sdk.conformance.catalogue import cases  # noqa: E402
from tilewright_sdk.conformance.runner import missing_capabilities  # noqa: E402

SEED = 0


@dataclass
class Run:
    """One call: every kernel argument (outputs poisoned with NaN, or the values an
    accumulating kernel adds to) and the expected value of each output. ``unordered``: the
    outputs whose values atomics hand out in an order the GPU picks (tickets, top-k indices),
    compared sorted (position -> "all": the whole tensor; "rows": along its last dimension)."""

    args: list
    outputs: list  # positions in ``args``
    expected: list
    unordered: dict = field(default_factory=dict)


@dataclass
class Check:
    """A kernel to run on the GPU and what it must produce."""

    name: str  # the bundle's folder name
    group: str  # conformance, example or dialect
    dtype: str
    make: Callable  # () -> PrimFunc
    runs: Callable  # () -> list[Run]
    reduction: int = 1  # the longest reduction behind an output element (tolerance model)
    pass_configs: dict = field(default_factory=dict)
    unsupported: Callable | None = None  # () -> reason when the backend declares no support
    # the dtype whose tolerance model judges every output (None: each output's own), for a
    # float32 output computed from values rounded to 16 bits on the way
    tolerance_dtype: str | None = None
    # the accumulation model of the reduction (tilewright.testing's ``accum_dtype``; None:
    # float32 for 16-bit outputs), e.g. ``fp8_tensor_core`` for fp8 wgmma
    accum_dtype: str | None = None


def conformance() -> list[Check]:
    backend = get_manager().backends()["cuda"]
    out = []
    for case in cases():
        kernel, dims = case.kernel, case.dims
        sizes = [dims] + ([{k: max(1, v * 3 // 4 + 1) for k, v in dims.items()}]
                          if case.variant == "dynamic" else [])  # the suite's second size

        def runs(case=case, sizes=sizes) -> list[Run]:
            return [_catalogue_run(case, size) for size in sizes]

        def unsupported(case=case) -> str | None:
            missing = missing_capabilities(case, backend)
            if not missing:
                missing = missing_capabilities(case, backend, case.kernel.make(
                    case.dtype, **case.dims))
            return f"does not declare {', '.join(missing)}" if missing else None

        out.append(Check(f"conformance-{case.id}", "conformance", case.dtype,
                         lambda case=case: case.kernel.make(case.dtype, **case.dims), runs,
                         max(kernel.reduction(**size) for size in sizes),
                         unsupported=unsupported))
    return out


def _catalogue_run(case, dims) -> Run:
    gen = torch.Generator().manual_seed(SEED)
    inputs = case.kernel.inputs(torch, gen, case.dtype, **dims)
    expected = case.reference(inputs, **dims)
    func = case.kernel.make(case.dtype, **case.dims)
    outs = output_indices(func, case.kernel.out_idx)  # an eager kernel's T.empty ones too
    given, args, positions = iter(inputs), [], []
    for i, param in enumerate(func.params):
        if i in outs:
            shape = _shape(param, args, func)
            args.append(_poisoned(shape, getattr(torch, str(param.dtype))))
            positions.append(i)
        else:
            args.append(next(given))
    positions += [_param_position(func, outs, k) for k in case.kernel.inplace]
    return Run(args, positions, list(expected))


def _poisoned(shape, dtype) -> torch.Tensor:
    """An output before the kernel writes it: NaN, or the integer type's largest value (bool:
    True), so that an element the kernel leaves alone fails the comparison."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    fill = True if dtype == torch.bool else torch.iinfo(dtype).max
    return torch.full(shape, fill, dtype=dtype)


def _param_position(func, outs: list, input_index: int) -> int:
    """The kernel parameter of the ``input_index``-th argument the suite passes."""
    inputs = [i for i in range(len(func.params)) if i not in outs]
    return inputs[input_index]


def _shape(param, args: list, func) -> list[int]:
    """An output's shape, its symbols read from the inputs already placed in ``args``."""
    symbols = {}
    for arg, p in zip(args, func.params):
        for dim, size in zip(p.shape, arg.shape):
            if not hasattr(dim, "value"):
                symbols[str(dim)] = int(size)
    return [int(d.value) if hasattr(d, "value") else symbols[str(d)] for d in param.shape]


def examples() -> list[Check]:
    out = []
    for name in cuda_cases.NAMES:
        case = cuda_cases.case(name)
        dtype = str(case.args[case.outputs[0]].dtype).removeprefix("torch.")
        out.append(Check(f"example-{name}", "example", dtype,
                         lambda name=name: cuda_cases.func(name),
                         lambda name=name: [_example_run(cuda_cases.case(name))],
                         case.reduction))
    return out


def _example_run(case) -> Run:
    return Run(list(case.args), list(case.outputs), [e.double() for e in case.expected])


BENCH_CONFIGS = (  # (suffix, tile changes, pass configs): the benchmark bundles' rows
    ("", {}, kernels.GEMM_PASS_CONFIGS),
    ("_ws", {}, {}),
    ("_cpasync", {}, {"cuda.disable_tma_lower": True}),
    ("_direct", {"num_stages": 4, "c_shared": False}, kernels.GEMM_PASS_CONFIGS),
    ("_multicast", {}, {"cuda.tma_multicast": True}),
    ("_128x128x2", {"block_N": 128, "c_shared": False},
     {"cuda.blocks_per_sm": 2, **kernels.GEMM_PASS_CONFIGS}),
    ("_persistent", {"num_stages": 4, "c_shared": False, "workers": 3}, {}),  # 4 tiles
    ("_mc", {}, {"cuda.tma_multicast": True, **kernels.GEMM_PASS_CONFIGS}),
    ("_mc_s4", {"num_stages": 4}, {"cuda.tma_multicast": True, **kernels.GEMM_PASS_CONFIGS}),
    ("_pts", {"workers": 3, "tma_store": True}, {}),  # 4 tiles, C through TMA stores
    # 4 tiles over 3 blocks, in-order loads: block 0's next tile's first load before its
    # first tile's epilogue
    ("_pio", {"workers": 3, "tma_store": True}, kernels.GEMM_PASS_CONFIGS),
    # 4 tiles over one cluster of two blocks walking them together, B multicast: the pair's
    # releases carry on into its second tile, whose first load goes before the first tile's
    # epilogue once both blocks released its version (the cross-block release under
    # racecheck and synccheck)
    ("_pio_mc", {"workers": 2, "tma_store": True},
     {"cuda.tma_multicast": True, **kernels.GEMM_PASS_CONFIGS}),
    # the 128-worker rows' form: 4 tiles over 2 blocks, 2 whole rounds, the tile loop without
    # its guard (warp-specialised, and in order)
    ("_pts128", {"workers": 2, "tma_store": True}, {}),
    ("_pio128", {"workers": 2, "tma_store": True}, kernels.GEMM_PASS_CONFIGS),
)
LEAN_PRODUCER = {"cuda.producer_registers": 24}  # compute warpgroups of 240 registers
ATTENTION_CONFIGS = (("_serial", {}, {}), ("_2stages", {"num_stages": 2}, {}),
                     ("_nows", {}, kernels.GEMM_PASS_CONFIGS),
                     ("_multicast", {}, {"cuda.tma_multicast": True}),
                     ("_cpasync", {}, {"cuda.disable_tma_lower": True}),
                     ("_pingpong", {}, {"cuda.wgmma_pingpong": True}),
                     ("_r240", {}, LEAN_PRODUCER))
# kernels.attention_overlap (suffix, pass configs): warp-specialised, TMA issued in order, the
# compute warpgroups taking turns
OVERLAP_CONFIGS = (("_overlap", {}), ("_overlap_nows", kernels.GEMM_PASS_CONFIGS),
                   ("_overlap_pingpong", {"cuda.wgmma_pingpong": True}))
# kernels.attention_overlap_one (suffix, arguments, pass configs): build_bundles' rows
OVERLAP_ONE_CONFIGS = (
    ("_overlap_one", {}, {}), ("_overlap_one_r240", {}, LEAN_PRODUCER),
    ("", {"both_in_flight": True}, kernels.FLASH_ATTENTION_PASS_CONFIGS),  # the bench's
    ("_overlap_one_pingpong", {}, {"cuda.wgmma_pingpong": True, **LEAN_PRODUCER}))


def dialect() -> list[Check]:
    out = []
    for name, func, case in dialect_cases.cases():
        dtype = str(case.args[0].dtype).removeprefix("torch.")
        out.append(Check(f"dialect-{name}", "dialect", dtype, lambda func=func: func,
                         lambda case=case: [_example_run(case)], case.reduction))
    # 2 x 2 blocks of 128 x 256 (pairs for multicast), 9 k-tiles: the pipeline wraps its 3 (4)
    # stages several times, so a stage refilled while a wgmma still reads it shows. (Every
    # lambda below binds the sizes it reads as defaults: m, n and k are rebound further down,
    # and a lambda reads a free name only when the check is built or run.)
    m, n, k = 256, 512, 576
    for suffix, change, configs in BENCH_CONFIGS:
        both = suffix in ("", "_ws", "_mc", "_pts", "_pio", "_pio_mc")
        for dtype in ("float16", "bfloat16") if both else ("float16",):
            config = {**kernels.GEMM, **change}
            builder = kernels.gemm_persistent if "workers" in change else kernels.gemm
            out.append(Check(
                f"dialect-bench_gemm_{dtype}{suffix}", "dialect", dtype,
                lambda builder=builder, dtype=dtype, config=config, m=m, n=n, k=k:
                    builder.fn(m, n, k, dtype, **config),
                lambda dtype=dtype, m=m, n=n, k=k: [_gemm_run(m, n, k, dtype)], k, configs))
    # stream-K (the _sk rows): 8 tiles on 3 blocks, 2 whole waves, then 2 tiles of 10 k-tiles
    # dealt out as runs of 6, 7, 7: block 1 ends tile 0 and starts tile 1, each tile added up
    # by the block that takes its second ticket (the fences and the ticket under racecheck
    # and synccheck); the counters expected back at 0
    m_sk, n_sk, k_sk, workers = 256, 1024, 640, 3
    for dtype in ("float16", "bfloat16"):
        out.append(Check(
            f"dialect-bench_gemm_{dtype}_sk", "dialect", dtype,
            lambda dtype=dtype: kernels.gemm_stream_k.fn(m_sk, n_sk, k_sk, dtype,
                                                         **kernels.GEMM, workers=workers),
            lambda dtype=dtype: [_stream_k_run(m_sk, n_sk, k_sk, workers, dtype)], k_sk,
            kernels.STREAM_K_PASS_CONFIGS))
    b, h, s, d = 1, 2, 256, 128  # query blocks in pairs (multicast), 2 steps of 128 keys
    for suffix, change, configs in ATTENTION_CONFIGS:
        out.append(Check(
            f"dialect-bench_attention_float16{suffix}", "dialect", "float16",
            lambda change=change: kernels.attention.fn(b, h, s, d, "float16",
                                                       **{**kernels.ATTENTION, **change}),
            lambda: [_attention_run(b, h, s, d)], s, configs))
    keys = 512  # the overlapped form: 4 steps, wrapping its 2 stages twice
    for suffix, configs in OVERLAP_CONFIGS:
        out.append(Check(
            f"dialect-bench_attention_float16{suffix}", "dialect", "float16",
            lambda: kernels.attention_overlap.fn(b, h, keys, d, "float16"),
            lambda: [_attention_run(b, h, keys, d)], keys, configs))
    for suffix, change, configs in OVERLAP_ONE_CONFIGS:  # K_0 and V_3 outside: 3 iterations
        out.append(Check(
            f"dialect-bench_attention_float16{suffix}", "dialect", "float16",
            lambda change=change: kernels.attention_overlap_one.fn(b, h, keys, d, "float16",
                                                                   **change),
            lambda: [_attention_run(b, h, keys, d)], keys, configs))
    out.append(Check("dialect-bench_add_float32", "dialect", "float32",
                     lambda: kernels.add.fn(16, 1024, "float32", **kernels.ADD),
                     lambda: [_add_run(16, 1024)]))
    m, n, k = 256, 384, 512  # 2 x 3 blocks of 128 x 128 (256 threads: no spills), 8 k-tiles
    for dtype in kernels.LOW_PRECISION_ACCUM:
        out.append(Check(
            f"dialect-gemm_low_precision_{dtype}", "dialect", dtype,
            lambda dtype=dtype, m=m, n=n, k=k: kernels.gemm_low_precision.fn(m, n, k, dtype,
                                                                              threads=256),
            lambda dtype=dtype, m=m, n=n, k=k: [_low_precision_run(m, n, k, dtype)], k,
            accum_dtype=None if dtype == "int8" else "fp8_tensor_core"))
    # the int8 row's 128 x 256 x 128 tiles: 2 x 2 blocks, 9 k-tiles (3 stages wrapped 3 times)
    m, n, k = 256, 512, 1152
    out.append(Check("dialect-bench_int8_gemm", "dialect", "int8",
                     lambda m=m, n=n, k=k: kernels.gemm_low_precision.fn(m, n, k, "int8",
                                                                         **kernels.INT8_GEMM),
                     lambda m=m, n=n, k=k: [_low_precision_run(m, n, k, "int8")], k))
    # the 2:4 rows' 128 x 128 x 64 tiles: 2 x 2 blocks, 9 k-tiles (3 stages wrapped 3 times;
    # with 3 k-tiles no stage was reused and the wgmma.sp metadata race of 8192^3 hid)
    m, n, k = 256, 256, 576
    for suffix, config in (("_k64", kernels.GEMM_SP_K64), ("_mmasp", kernels.GEMM_SP_MMA)):
        out.append(Check(
            f"dialect-bench_gemm_sp_float16{suffix}", "dialect", "float16",
            lambda config=config, m=m, n=n, k=k: kernels.gemm_sp_kernel.fn(
                m, n, k, "float16", "int16", **config),
            lambda m=m, n=n, k=k: [_gemm_sp_run(m, n, k)], k))
    # the default's 128 x 256 x 128 tiles (2 stages, 9 k-tiles) and two rows whose wgmma.sp
    # groups stay in flight on other tiles (GEMM_SP_ROWS): 128-deep k-tiles (four metadata
    # registers a set) and 128 x 256 (HGMMA.SP.64x256x32), 2 x 2 blocks and 9 k-tiles each
    # (3 and 4 stages wrapped)
    rows = {"": kernels.GEMM_SP, **kernels.GEMM_SP_ROWS}
    for suffix, (m, n, k) in (("", (256, 512, 1152)), ("_k128", (256, 256, 1152)),
                              ("_n256", (256, 512, 576))):
        out.append(Check(
            f"dialect-bench_gemm_sp_float16{suffix}", "dialect", "float16",
            lambda m=m, n=n, k=k, config=rows[suffix]:
                kernels.gemm_sp_kernel.fn(m, n, k, "float16", "int16", **config),
            lambda m=m, n=n, k=k: [_gemm_sp_run(m, n, k)], k))
    # six of the TMA-fed rows (kernels.GEMM_SP_TMA_ROWS: the metadata tile one unswizzled
    # box): a producer warpgroup with each group retired (_tma, 2 stages), and the group in
    # flight on held registers from a producer warpgroup (_m256_tma, four compute
    # warpgroups) and from one thread in order (_k128_tma_inorder); 2 x 2 blocks, 2 S + 1
    # k-tiles (the stages wrapped twice); the persistent rows (_m256_pws: the producer walks
    # the tiles, _m256_pio: in order, the next tile's first load before the epilogue) with 4
    # blocks walking 3 x 2 tiles, the last row of tiles half outside C, their versions and
    # phases carried on from tile to tile; _m256_tma_mc: two clusters of two blocks sharing
    # their B tiles (multicast)
    for suffix in ("_tma", "_m256_tma", "_k128_tma_inorder", "_m256_pws", "_m256_pio",
                   "_m256_tma_mc"):
        config, configs = kernels.GEMM_SP_TMA_ROWS[suffix]
        m, n = 2 * config["block_M"], 2 * config["block_N"]
        if "workers" in config:
            config, m = {**config, "workers": 4}, m + config["block_M"] // 2
        k = (2 * config["num_stages"] + 1) * config["block_K"]
        out.append(Check(
            f"dialect-bench_gemm_sp_float16{suffix}", "dialect", "float16",
            lambda m=m, n=n, k=k, config=config:
                kernels.gemm_sp_kernel.fn(m, n, k, "float16", "int16", **config),
            lambda m=m, n=n, k=k: [_gemm_sp_run(m, n, k)], k, pass_configs=dict(configs)))
    return out


def _gemm_sp_run(m: int, n: int, k: int) -> Run:
    """A random 2:4 sparse float16 A as its kept values and int16 metadata, B [K, N], C
    poisoned; expected: the float64 product of the dense A and B."""
    gen = torch.Generator().manual_seed(SEED)
    a = randn_semi_sparse(m, k, torch.float16, generator=gen)
    b = torch.randn(k, n, generator=gen).half()
    return Run([*compress(a, torch.int16), b, torch.full((m, n), float("nan"))], [3],
               [a.double() @ b.double()])


def dequantising() -> list[Check]:
    """The examples' scaled fp8 GEMM in each scale layout and W4A16 GEMM, in their benchmark
    configurations (``kernels.py``), at small sizes. (Each family in a function of its own:
    a lambda reads a free name when the check is built, so a later loop of the same function
    rebinding ``m`` silently resized the fp8 checks.)"""
    return [*_fp8_scaled_checks(), *_w4a16_checks()]


def _fp8_scaled_checks() -> list[Check]:
    out = []
    # a partial row tile, 2 x 2 blocks, 9 k-tiles and scale groups along K (the stages wrapped)
    # (_n256: the block layout's 256-column tiles, each half promoted with its own block of
    # B's scale; 384 columns: the second tile's second half wholly past N)
    m, n, k = 200, 256, 1152
    fp8_rows = [(layout, "", kernels.fp8_config(layout), n) for layout in kernels.FP8_TILES]
    fp8_rows.append(("block", "_n256", {**kernels.fp8_config("block"), "block_N": 256}, 384))
    # (_n192: 192-column tiles, the middle 64 columns' scale block by the parity of the
    # column tile; 640 columns: tiles at even and odd bx, the fourth partial)
    fp8_rows.append(("block", "_n192", {**kernels.fp8_config("block"), "block_N": 192}, 640))
    # (_pts, _n256pts: persistent, warp-specialised, C out by TMA stores; 2 or 3 blocks walk
    # 2 x 3 tiles of 128 or 2 x 2 of 256 columns, two or three each, as the rows' 128 blocks
    # take the same number each; the versions and phases count on over the tiles)
    persistent = {**kernels.fp8_config("block"), "tma_store": True}
    fp8_rows.append(("block", "_pts", {**persistent, "workers": 3}, 384))
    fp8_rows.append(("block", "_n256pts", {**persistent, "block_N": 256, "workers": 2}, 384))
    for layout, suffix, config, cols in fp8_rows:
        out.append(Check(
            f"example-gemm_fp8_scaled_{layout}{suffix}", "example", "float8_e4m3fn",
            lambda layout=layout, config=config, cols=cols: kernels.fp8_gemm_scaled.fn(
                m, cols, k, layout, **config),
            lambda layout=layout, cols=cols: [_fp8_scaled_run(m, cols, k, layout)], k))
    return out


def _w4a16_checks() -> list[Check]:
    out = []
    # decode rows, 5 column tiles, 48 groups a row: 6 k-tiles a split (8 splits), 3 times
    # the 2 stages (the one-slice form: 48 k-tiles, 12 times its 4 stages); the staged
    # scales of the _s4ss row (12 groups a slice), _swap's wgmma on C^T, and _swap8's and
    # _swap8ss's on 8-row activation tiles, the latter with staged scales (6 groups a slice)
    rows, cols, depth = 5, 320, 6144
    one_slice = {**kernels.W4A16, "splits": 1, "num_stages": 4}
    staged_s4 = {**kernels.W4A16, "stage_scales": True, "splits": 4, "num_stages": 4}
    swapped = {**kernels.W4A16, "swap": True, "threads": 256}
    swapped8 = {**swapped, "block_M": 8}
    # _reg: register_w (kernels.W4A16_REGISTER_W, codes in wgmma order) on 8-row activation
    # tiles and (_reg16) 16-row ones, one barrier a k-tile
    for suffix, config in (("", kernels.W4A16), ("_nosplit", one_slice), ("_s4ss", staged_s4),
                           ("_swap", swapped), ("_swap8", swapped8),
                           ("_swap8ss", {**swapped8, "stage_scales": True}),
                           ("_reg", kernels.W4A16_REGISTER_W),
                           ("_reg16", {**kernels.W4A16_REGISTER_W, "block_M": 16}),
                           # _reg_tk, _reg16_tk: the slices added by the last slice block of
                           # each tile (ticket_combine), one kernel; the counters must be
                           # back to 0 after the call. _reg16_s4_tk: 4 slices, 4 stages
                           ("_reg_tk", {**kernels.W4A16_REGISTER_W, "ticket_combine": True}),
                           ("_reg16_tk", {**kernels.W4A16_REGISTER_W, "block_M": 16,
                                          "ticket_combine": True}),
                           ("_reg16_s4_tk", {**kernels.W4A16_REGISTER_W, "block_M": 16,
                                             "splits": 4, "num_stages": 4,
                                             "ticket_combine": True}),
                           # _reg_ov, _reg16_ov, _reg16_ov_tk: the dequantisation of k-tile
                           # i + 1 beside the wgmma of k-tile i (overlap_dequant, two register
                           # fragments, the newest group in flight into the next step): 12
                           # 64-deep k-tiles a slice, 6 steps through 4 stages
                           ("_reg_ov", {**kernels.W4A16_REGISTER_W,
                                        **kernels.W4A16_OVERLAP_ROWS["_reg_ov"]}),
                           ("_reg16_ov", {**kernels.W4A16_REGISTER_W, "block_M": 16,
                                          **kernels.W4A16_OVERLAP_ROWS["_reg_ov"]}),
                           ("_reg16_ov_tk", {**kernels.W4A16_REGISTER_W, "block_M": 16,
                                             **kernels.W4A16_OVERLAP_ROWS["_reg_ov_tk"]})):
        out.append(Check(f"example-gemm_w4a16{suffix}", "example", "float16",
                         lambda config=config: kernels.w4a16_gemm.fn(rows, cols, depth, 128,
                                                                     **config),
                         lambda config=config: [_w4a16_run(
                             rows, cols, depth, 128, config.get("register_w", False),
                             w4.ticket_count(rows, cols, config["block_M"], config["block_N"])
                             if config.get("ticket_combine") else 0)],
                         depth))
    # the _ps rows (kernels.W4A16_PROLOGUE_ROWS, pass config cuda.prologue_copies): the
    # scales' cp.async in the pipeline's first group, 16 bytes a row (8 groups a slice: 8192
    # deep in 8 slices, 4096 in 4), 8 k-tiles (or 8 steps of two) a slice through 3 or 4
    # stages; 5 rows, 320 columns (the third column tile's rows past N zero-filled)
    for (m, suffix), change in kernels.W4A16_PROLOGUE_ROWS.items():
        config = {**kernels.W4A16_REGISTER_W, "block_M": m if m > 8 else 8, **change}
        deep = 1024 * config["splits"]
        out.append(Check(f"example-gemm_w4a16_reg{'16' if m > 8 else ''}{suffix[4:]}",
                         "example", "float16",
                         lambda config=config, deep=deep: kernels.w4a16_gemm.fn(
                             rows, cols, deep, 128, **config),
                         lambda config=config, deep=deep: [_w4a16_run(
                             rows, cols, deep, 128, True,
                             w4.ticket_count(rows, cols, config["block_M"], config["block_N"]))],
                         deep, pass_configs=kernels.W4A16_PROLOGUE_CONFIGS))
    return out


def _fp8_scaled_run(m: int, n: int, k: int, layout: str) -> Run:
    """Quantised A and B with the scales of ``layout`` (examples/gemm_fp8_scaled.py), C
    poisoned; expected: the float64 product of the dequantised operands."""
    gen = torch.Generator().manual_seed(SEED)
    a, sa = fp8.quantize(torch.randn(m, k, generator=gen), layout)
    w = torch.randn(n, k, generator=gen)
    b, sb = fp8.quantize_blocks(w) if layout == "block" else fp8.quantize(w, layout)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    return Run([a, b, sa, sb, c], [4], [fp8.reference(a, b, sa, sb, layout)])


def _w4a16_run(m: int, n: int, k: int, group: int, wgmma_order: bool = False,
               tickets: int = 0) -> Run:
    """``wgmma_order``: the codes passed in the order option register_w reads; ``tickets``:
    option ticket_combine's counters, zero before the call and expected zero after it."""
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    product = a.double() @ w4.dequantize(q, scales, zeros).double().T
    codes = w4.wgmma_order(q) if wgmma_order else q
    if not tickets:
        return Run([a, codes, scales, zeros, c], [4], [product])
    return Run([a, codes, scales, zeros, torch.zeros(tickets, dtype=torch.int32), c], [4, 5],
               [torch.zeros(tickets, dtype=torch.float64), product])


def _low_precision_run(m: int, n: int, k: int, dtype: str) -> Run:
    """A [M, K] and B [N, K] of 8-bit values, C poisoned (NaN; int32's most negative value);
    expected: ``torch._int_mm`` for int8, the product of the float8 operands in float64."""
    gen = torch.Generator().manual_seed(SEED)
    if dtype == "int8":
        a, b = (torch.randint(-128, 128, s, generator=gen, dtype=torch.int8)
                for s in ((m, k), (n, k)))
        c = torch.full((m, n), -2 ** 31, dtype=torch.int32)
        return Run([a, b, c], [2], [torch._int_mm(a, b.T.contiguous()).double()])
    a, b = (torch.randn(*s, generator=gen).to(getattr(torch, dtype)) for s in ((m, k), (n, k)))
    c = torch.full((m, n), float("nan"))
    return Run([a, b, c], [2], [a.double() @ b.double().T])


def _gemm_run(m: int, n: int, k: int, dtype: str) -> Run:
    gen = torch.Generator().manual_seed(SEED)
    a, b = (torch.randn(*s, generator=gen).to(getattr(torch, dtype)) for s in ((m, k), (k, n)))
    c = torch.full((m, n), float("nan"), dtype=a.dtype)
    return Run([a, b, c], [2], [a.double() @ b.double()])


def _stream_k_run(m: int, n: int, k: int, workers: int, dtype: str) -> Run:
    gemm = _gemm_run(m, n, k, dtype)
    tickets = kernels.stream_k_tickets(m, n, workers=workers)
    a, b, c = gemm.args
    return Run([a, b, torch.zeros(tickets, dtype=torch.int32), c], [2, 3],
               [torch.zeros(tickets, dtype=torch.float64), *gemm.expected])


def _attention_run(b: int, h: int, s: int, d: int) -> Run:
    gen = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(b, s, h, d, generator=gen).half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).double() for t in (q, k, v))).transpose(1, 2)
    return Run([q, k, v, torch.full_like(q, float("nan"))], [3], [ref])


def _add_run(m: int, n: int) -> Run:
    gen = torch.Generator().manual_seed(SEED)
    a, b = torch.randn(m, n, generator=gen), torch.randn(m, n, generator=gen)
    return Run([a, b, torch.full_like(a, float("nan"))], [2], [a.double() + b.double()])


def emulated() -> list[Check]:
    """The CUDA features whose kernels the host emulation runs in their own tests (not in
    dialect_cases.cases(): test_cuda_dialect_emulate.py would emulate them a second time),
    at those tests' sizes: TMA into column blocks of a swizzled tile feeding wgmma, wide TMA
    boxes (a folded view, loads and stores, parts of rows), named barriers with a run-time
    break, fragments spread over the threads (and in a warp-specialised kernel), fragments in
    the registers of ``if tx < 128`` roles feeding register-A wgmma, per-thread atomics
    (shared histogram, float32 sums, tickets; DeepSeek's radix top-k selector), a block's
    atomic with return_prev, T.use_swizzle in both orders; the barriers sync insertion places
    around register nests and shared rows, and leaves out between stores at tickets (a
    compaction); wgmma on K halves, N halves and stages of swizzled
    tiles and a run-time clear_accum; a pipelined loop inside another (barriers set up each
    round, or the producer's own outer loop) and a tile the threads write feeding a wgmma (the
    proxy fence); a GEMV of 2..15 rows on padded mma.sync; shared tiles whose bytes are reused
    across phases and across the iterations of two loops, an accumulator stored in row halves,
    a ``while`` loop, a grid and guards over a scalar argument, per-element atomics in a nest
    (the last three take scalar arguments); a split-KV GQA decode and its combine, two
    kernels sharing T.alloc_global workspaces; an accumulator starting as a bias copied into
    its registers; copies under a branch of a pipelined loop's body (one version); TileLang's
    MLA decode (a 64 x 512 float32 accumulator in registers on 8 warps, no spills)."""
    # (name, input dtype, kernel, run from a generator, reduction, tolerance dtype[, configs])
    table = [
        ("tma_column_blocks", "float16", lambda: tma_parts.column_blocks(256), _column_blocks,
         256, None),
        ("tma_wide_store", "float16", wide_box.wide_store, _wide_store, 1, None),
        ("tma_folded_part", "float16", lambda: wide_box.part_copy((40, 704), 8, 64, 32, 576),
         lambda g: _copy_of(g, (40, 704), 8, 64, 32, 576), 1, None),
        # the row length a symbol, so no fold fits: boxes of 256 + 256 + 64 columns a row,
        # from column 8 (16 bytes; column 4 raised an illegal instruction on the H200)
        ("tma_row_parts", "float16",
         lambda: wide_box.part_copy((8, T.symbolic("n")), 0, 8, 8, 576),
         lambda g: _copy_of(g, (8, 600), 0, 8, 8, 576), 1, None),
        ("named_barrier_break", "int32", named_barriers.suffix_sums_until, _suffix_sums, 1,
         None),
        ("spread_layernorm_bwd", "bfloat16", lambda: spread.layernorm_bwd(8, 512, 4, 128),
         _layernorm_bwd, 512, None),
        ("spread_mixed", "float32", spread.mixed_spread, _mixed_spread, 4, None),
        ("spread_row_reductions", "float32", spread.spread_row_reductions, _row_reductions,
         256, None),
        ("spread_ws_gemm_bias", "float16", spread.gemm_with_bias_vector, _bias_gemm, 128,
         None),
        # P and the scores are rounded to float16 inside: a flip there moves O by a float16 ulp
        ("ws_role_fragments", "float16", ws_fragments.two_roles, _two_roles, 64 * 64,
         "float16"),
        ("thread_histogram", "int32", thread_atomics.histogram_kernel, _histogram, 1, None),
        ("thread_float_sum_tickets", "float32", thread_atomics.float_sum_kernel, _float_sum,
         150, None),
        ("topk_selector", "float32", lambda: thread_atomics.topk_kernel(2, 2048, 64), _topk, 1,
         None),
        ("block_atomic_tickets", "int32", block_atomics.tickets, lambda g: _tickets(4, 3), 1,
         None),
        ("use_swizzle_row", "int32", lambda: use_swizzle.order_kernel(5, 7, 3, "row"),
         lambda g: _tickets(7, 5), 1, None),
        ("use_swizzle_col", "int32", lambda: use_swizzle.order_kernel(5, 7, 2, "col"),
         lambda g: _tickets(7, 5), 1, None),
        # S = A B^T rounded to float16 in a shared tile before the second gemm
        ("sync_scaled_difference", "float16", sync.scaled_difference, _scaled_difference, 64,
         "float16"),
        ("sync_reversed_rows", "float32", sync.reversed_rows, _reversed_rows, 1, None),
        ("sync_compaction_tickets", "float32", sync.compaction, _compaction, 1, None),
        ("sync_row_vector_per_step", "float16", sync.row_vector_per_step, _row_vector_per_step,
         128, "float16"),
        ("wgmma_k_halves", "float16", lambda: wgmma_slices.k_halves(dialect=True),
         lambda g: _slices_gemm(g, (64, 128), (64, 128), True), 128, None),
        ("gemm_k_halves_mn_major", "float16", lambda: wgmma_slices.k_halves(trans_b=False),
         lambda g: _slices_gemm(g, (64, 128), (128, 64), False), 128, None),
        ("wgmma_stage_n_half", "float16", wgmma_slices.staged, lambda g: _staged(g, False),
         64, None),
        ("wgmma_stage_k_halves", "float16", lambda: wgmma_slices.staged(trans_b=True),
         lambda g: _staged(g, True), 128, None),
        ("wgmma_clear_on_first_k", "float16", wgmma_slices.clear_on_first_k,
         lambda g: _slices_gemm(g, (64, 256), (64, 256), True), 256, None),
        ("tma_two_tiles_per_block", "float16", tma_pipeline.two_tiles_per_block,
         lambda g: _gemm_run(256, 256, 256, "float16"), 256, None),
        ("tma_two_tiles_per_block_in_order", "float16", tma_pipeline.two_tiles_per_block,
         lambda g: _gemm_run(256, 256, 256, "float16"), 256, None, tma_pipeline.IN_ORDER),
        # P = Q K^T rounded to float16 in the shared tile
        ("tma_scores_through_shared", "float16", tma_pipeline.scores_through_shared,
         _scores_through_shared, 256, "float16"),
        ("tma_scores_through_shared_in_order", "float16", tma_pipeline.scores_through_shared,
         _scores_through_shared, 256, "float16", tma_pipeline.IN_ORDER),
        ("gemv_2_rows", "float16", lambda: gemv.few_rows(2, 128, 64),
         lambda g: _few_rows(g, 2, False, False, torch.float16), 64, None),
        ("gemv_15_rows_a_transposed", "bfloat16",
         lambda: gemv.few_rows(15, 128, 64, trans_a=True, dtype="bfloat16"),
         lambda g: _few_rows(g, 15, True, False, torch.bfloat16), 64, None),
        ("gemv_5_rows_int8", "int8",
         lambda: gemv.few_rows(5, 128, 64, trans_b=True, dtype="int8"),
         lambda g: _few_rows(g, 5, False, True, torch.int8), 64, None),
        # P is rounded to float16 in S_shared before the second gemm
        ("mla_decode", "float16", emulate.mla_decode, _mla_decode, 512 + 64, "float16"),
        # (two_tiles_per_iteration is tiles_in_two_loops' first loop)
        ("smem_two_phases", "float32", emulate.two_phases, _two_phases, 1, None),
        ("smem_tiles_in_two_loops", "float32", emulate.tiles_in_two_loops, _two_loops, 1,
         None),
        ("split_store", "float16", emulate.split_store,
         lambda g: _slices_gemm(g, (32, 32), (32, 64), False), 32, None),
        ("while_rows", "float32", emulate.while_rows, _while_rows, 1, None),
        ("rows_by_scalar", "float32", emulate.rows_by_scalar, _rows_by_scalar, 1, None),
        ("atomic_rows", "float32", lambda: emulate.atomic_rows(False), _atomic_rows, 1, None),
        ("atomic_rows_in_branch", "float32", lambda: emulate.atomic_rows(True), _atomic_rows, 1,
         None),
        ("split_kv_decode", "float16",
         lambda: kernel_sequence.split_kv_decode(1, 2, 16, 128, 32, 2), _split_kv_decode, 128,
         None),
        ("gemm_bias_from_shared", "float16", lambda: emulate_smem.gemm_bias("shared"),
         _gemm_bias, 64, None),
        ("gemm_bias_from_global", "float16", lambda: emulate_smem.gemm_bias("global"),
         _gemm_bias, 64, None),
        ("pipelined_copies_in_a_branch", "float16", lambda: emulate_smem.branch_loads(False),
         _branch_loads, 128, None),
        ("pipelined_copies_in_a_branch_mixed", "float16",
         lambda: emulate_smem.branch_loads(True), _branch_loads, 128, None),
    ]
    return [Check(f"dialect-{name}", "dialect", dtype, make,
                  lambda run=run: [run(torch.Generator().manual_seed(SEED))], reduction,
                  configs[0] if configs else {}, tolerance_dtype=tol_dtype)
            for name, dtype, make, run, reduction, tol_dtype, *configs in table]


def _rand(g, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def _column_blocks(g) -> Run:
    a, b = _rand(g, 64, 256, dtype=torch.float16), _rand(g, 64, 256, dtype=torch.float16)
    return Run([a, b, _poisoned((64, 64), torch.float32)], [2], [a.double() @ b.double().T])


def _copy_of(g, shape, r0, c0, rows, cols) -> Run:
    q = _rand(g, *shape, dtype=torch.float16)
    return Run([q, _poisoned((rows, cols), torch.float16)], [1],
               [q[r0:r0 + rows, c0:c0 + cols].double()])


def _wide_store(g) -> Run:
    a = _rand(g, 32, 576, dtype=torch.float16)
    return Run([a, _poisoned((32, 576), torch.float16)], [1], [a.double() * 2])


def _suffix_sums(g) -> Run:
    x = torch.randint(0, 9, (2, 64), generator=g, dtype=torch.int32)
    limits = torch.tensor([64, 5], dtype=torch.int32)  # all six steps; stop after three
    return Run([x, limits, _poisoned((2, 64), torch.int32)], [2],
               [named_barriers.reference(x, limits).double()])


def _layernorm_bwd(g) -> Run:
    n, d = 8, 512
    x, dy = _rand(g, n, d, dtype=torch.bfloat16), _rand(g, n, d, dtype=torch.bfloat16)
    gamma = _rand(g, d, dtype=torch.bfloat16)
    mean = x.double().mean(dim=1).float()
    rstd = (1 / (x.double().var(dim=1, unbiased=False) + 1e-5).sqrt()).float()
    want = spread.layernorm_bwd_reference(*(t.double() for t in (dy, x, gamma, mean, rstd)))
    return Run([dy, x, gamma, mean, rstd, _poisoned((n, d), torch.bfloat16), torch.zeros(d),
                torch.zeros(d)], [5, 6, 7], list(want))


def _mixed_spread(g) -> Run:
    x = _rand(g, 256)
    xd = x.double()
    return Run([x, _poisoned((256,), torch.float32), _poisoned((1,), torch.float32)], [1, 2],
               [xd.flip(0) * 2 + xd, (xd.max() + (xd[:4] + 1).sum()).reshape(1)])


def _row_reductions(g) -> Run:
    x = _rand(g, 4, 256)
    xd = x.double()
    return Run([x, _poisoned((4, 256), torch.float32)], [1],
               [xd - xd.amax(dim=1, keepdim=True) + 1 + xd.sum(dim=1, keepdim=True)])


def _bias_gemm(g) -> Run:
    a, b = _rand(g, 128, 128, dtype=torch.float16), _rand(g, 128, 128, dtype=torch.float16)
    bias = _rand(g, 128)
    return Run([a, b, bias, _poisoned((128, 128), torch.float32),
                _poisoned((128,), torch.float32)], [3, 4],
               [a.double() @ b.double(), bias.double() * 2 + 1])


def _two_roles(g) -> Run:
    """test_cuda_ws_fragments.two_roles: role 0 the scores less their row max, their float16
    product with V[0], half of them, the row max; role 1 the float16 scores, their product with
    V[1], 2 + their row sums."""
    q = _rand(g, 64, 64, dtype=torch.float16)
    k, v = _rand(g, 2, 64, 64, dtype=torch.float16), _rand(g, 2, 64, 64, dtype=torch.float16)
    s = [q.double() @ k[r].double().T for r in (0, 1)]
    m = s[0].amax(dim=1)
    s[0] = s[0] - m[:, None]
    p = [x.half().double() for x in s]
    half = torch.float16
    return Run([q, k, v, _poisoned((2, 64, 64), torch.float32), _poisoned((64, 64), half),
                _poisoned((64, 64), half), _poisoned((64,), torch.float32),
                _poisoned((64,), torch.float32)], [3, 4, 5, 6, 7],
               [torch.stack([p[r] @ v[r].double() for r in (0, 1)]), p[1],
                (s[0] * 0.5).half().double(), m, 2 + s[1].sum(dim=1)])


def _histogram(g) -> Run:
    x = torch.randint(-4, 40, (2, 256), generator=g, dtype=torch.int32)
    kept = x[x >= 0].long() % 16
    return Run([x, torch.zeros(16, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)],
               [1, 2], [torch.bincount(kept, minlength=16).double(), torch.tensor([2.0])])


def _float_sum(g) -> Run:
    """Integer values (exact in any order of the atomics); the tickets are the counter's values
    from 5 on, one a thread, in the order the threads got there."""
    x = torch.randint(-8, 8, (3, 64), generator=g).float()
    return Run([x, torch.zeros(1), torch.tensor([5], dtype=torch.int32),
                _poisoned((3, 64), torch.int32)], [1, 2, 3],
               [x[:, :50].double().sum().reshape(1), torch.tensor([5.0 + 3 * 64]),
                torch.arange(5, 5 + 3 * 64).reshape(3, 64).double()], {3: "all"})


def _topk(g) -> Run:
    """Each row's 64 largest of 2048 (torch.topk's indices), in the order the atomics place
    them."""
    x = _rand(g, 2, 2048)
    want = torch.topk(x, 64, dim=-1).indices.sort(dim=-1).values
    return Run([x, _poisoned((2, 64), torch.int32), torch.zeros(2, dtype=torch.int32),
                torch.full((2,), 2048, dtype=torch.int32)], [1], [want.double()], {1: "rows"})


def _scaled_difference(g) -> Run:
    a, b, v = (_rand(g, 64, 64, dtype=torch.float16) for _ in range(3))
    delta = _rand(g, 64)
    qk = a.double() @ b.double().T
    s = (qk * (qk - delta.double()[None, :]) * 0.5).half().double()
    return Run([a, b, v, delta, _poisoned((64, 64), torch.float32)], [4], [s @ v.double()])


def _reversed_rows(g) -> Run:
    x = _rand(g, 4, 128)
    return Run([x, _poisoned((4, 128), torch.float32)], [1], [x.double().flip(1) * 2 + 1])


def _compaction(g) -> Run:
    """The values of 512 above 0.5, in the order the tickets place them, zeros after, and
    their count."""
    x = _rand(g, 512)
    kept = x[x > 0.5].double()
    want = torch.cat([kept, torch.zeros(512 - kept.numel(), dtype=torch.float64)])
    return Run([x, _poisoned((512,), torch.float32), _poisoned((1,), torch.int32)], [1, 2],
               [want, torch.tensor([float(kept.numel())])], {1: "all"})


def _row_vector_per_step(g) -> Run:
    a = _rand(g, 128, 64, dtype=torch.float16)
    b, v = _rand(g, 64, 64, dtype=torch.float16), _rand(g, 64, 64, dtype=torch.float16)
    delta = _rand(g, 2, 64)
    want = sum((a[k * 64:(k + 1) * 64].double() @ b.double().T - delta[k].double()[None, :])
               .half().double() @ v.double() for k in range(2))
    return Run([a, b, v, delta, _poisoned((64, 64), torch.float32)], [4], [want])


def _slices_gemm(g, a_shape, b_shape, trans_b: bool) -> Run:
    """C float32 = A @ B (B^T with ``trans_b``)."""
    a, b = _rand(g, *a_shape, dtype=torch.float16), _rand(g, *b_shape, dtype=torch.float16)
    want = a.double() @ (b.double().T if trans_b else b.double())
    return Run([a, b, _poisoned(tuple(want.shape), torch.float32)], [2], [want])


def _staged(g, trans_b: bool) -> Run:
    """test_cuda_wgmma_slices.staged: stage 1's N half times A's K half, or with ``trans_b``
    the K halves of stages 0 and 1 against A's."""
    a, b = _rand(g, 64, 128, dtype=torch.float16), _rand(g, 2, 64, 128, dtype=torch.float16)
    a, b = a.double(), b.double()
    want = (a[:, :64] @ b[0, :, :64].T + a[:, 64:] @ b[1, :, 64:].T if trans_b
            else a[:, 64:] @ b[1, :, 64:])
    return Run([a.half(), b.half(), _poisoned((64, 64), torch.float32)], [2], [want])


def _scores_through_shared(g) -> Run:
    q, k, v = (_rand(g, 256, 64, dtype=torch.float16) / 4 for _ in range(3))
    p = (q.double() @ k.double().T).half().double()
    return Run([q, k, v, _poisoned((256, 64), torch.float32)], [3], [p @ v.double()])


def _few_rows(g, m: int, trans_a: bool, trans_b: bool, dtype) -> Run:
    """test_cuda_gemv.few_rows at N = 128, K = 64: int8 operands (small values) into a zeroed
    int32 C, else random ones into a poisoned float32 C."""
    n, k = 128, 64
    a_shape, b_shape = (k, m) if trans_a else (m, k), (n, k) if trans_b else (k, n)
    if dtype == torch.int8:
        a, b = (torch.randint(-8, 8, s, generator=g).to(dtype) for s in (a_shape, b_shape))
        c = torch.zeros(m, n, dtype=torch.int32)
    else:
        a, b = _rand(g, *a_shape, dtype=dtype), _rand(g, *b_shape, dtype=dtype)
        c = _poisoned((m, n), torch.float32)
    want = (a.double().T if trans_a else a.double()) @ (b.double().T if trans_b else b.double())
    return Run([a, b, c], [2], [want])


def _mla_decode(g) -> Run:
    """test_cuda_emulate.mla_decode: 64 heads of one token over 128 keys, the scores from the
    512 latent and 64 rotary columns, against the float64 softmax product."""
    q, q_pe = _rand(g, 64, 512, dtype=torch.float16), _rand(g, 64, 64, dtype=torch.float16)
    kv, k_pe = _rand(g, 128, 512, dtype=torch.float16), _rand(g, 128, 64, dtype=torch.float16)
    scores = (q.double() @ kv.double().T + q_pe.double() @ k_pe.double().T) * (512 + 64) ** -0.5
    return Run([q, q_pe, kv, k_pe, _poisoned((64, 512), torch.float16)], [4],
               [torch.softmax(scores, -1) @ kv.double()])


def _two_phases(g) -> Run:
    """test_cuda_emulate.two_phases: Y = X with its rows reversed, doubled; W = Z with its
    columns reversed."""
    x, z = _rand(g, 128, 240), _rand(g, 128, 240)
    return Run([x, z, _poisoned((128, 240), torch.float32), _poisoned((128, 240), torch.float32)],
               [2, 3], [x.double().flip(0) * 2, z.double().flip(1)])


def _two_loops(g) -> Run:
    """test_cuda_emulate.tiles_in_two_loops: the first loop's steps flip rows (x2) and
    columns, the second's rows (x3) and both."""
    x, z = _rand(g, 4, 128, 240), _rand(g, 4, 128, 240)
    xd, zd = x.double(), z.double()
    y = torch.cat([xd[:2].flip(1) * 2, xd[2:].flip(1) * 3])
    w = torch.cat([zd[:2].flip(2), zd[2:].flip(1).flip(2)])
    shape = (4, 128, 240)
    return Run([x, z, _poisoned(shape, torch.float32), _poisoned(shape, torch.float32)], [2, 3],
               [y, w])


def _while_rows(g) -> Run:
    """192 of 256 rows: 6 tiles of 32 rows reversed and doubled; the rest stays poisoned."""
    x = _rand(g, 256, 64)
    want = torch.full((256, 64), float("nan"), dtype=torch.float64)
    want[:192] = (x[:192].double().reshape(6, 32, 64).flip(1) * 2).reshape(192, 64)
    return Run([x, _poisoned((256, 64), torch.float32), 192], [1], [want])


def _rows_by_scalar(g) -> Run:
    """A grid of ceil(100 / 32) blocks: rows 0..99 doubled, the rest stays poisoned."""
    x = _rand(g, 256, 64)
    want = torch.full((256, 64), float("nan"), dtype=torch.float64)
    want[:100] = x[:100].double() * 2
    return Run([x, _poisoned((256, 64), torch.float32), 100], [1], [want])


def _atomic_rows(g) -> Run:
    """Each element added once to ones (flag 1: the atomic branch)."""
    x = _rand(g, 64, 64)
    return Run([x, torch.ones(64, 64), 1], [1], [x.double() + 1])


def _split_kv_decode(g) -> Run:
    """test_cuda_kernel_sequence.split_kv_decode(1, 2, 16, 128, 32, 2): one query token of
    32 heads over 128 keys of 2 KV heads, against torch's SDPA with the KV heads repeated."""
    q = _rand(g, 1, 32, 32, dtype=torch.float16)
    k, v = _rand(g, 1, 128, 2, 32, dtype=torch.float16), _rand(g, 1, 128, 2, 32,
                                                               dtype=torch.float16)
    keys = k.double().repeat_interleave(16, dim=2).transpose(1, 2)  # B, H, S, D
    values = v.double().repeat_interleave(16, dim=2).transpose(1, 2)
    want = torch.nn.functional.scaled_dot_product_attention(q.double().unsqueeze(2), keys,
                                                            values).squeeze(2)
    return Run([q, k, v, _poisoned((1, 32, 32), torch.float16)], [3], [want])


def _gemm_bias(g) -> Run:
    """test_cuda_emulate_smem.gemm_bias: C = A B^T + Bias, float16 out."""
    a, b = _rand(g, 128, 64, dtype=torch.float16), _rand(g, 64, 64, dtype=torch.float16)
    bias = _rand(g, 128, 64, dtype=torch.float16)
    return Run([a, b, bias, _poisoned((128, 64), torch.float16)], [3],
               [a.double() @ b.double().T + bias.double()])


def _branch_loads(g) -> Run:
    """test_cuda_emulate_smem.branch_loads: A's 32-column blocks from A1 on even steps, A2 on
    odd ones; C = A B^T."""
    a1, a2, b = (_rand(g, 64, 128, dtype=torch.float16) for _ in range(3))
    even = (torch.arange(128) // 32 % 2 == 0)[None, :]
    a = torch.where(even, a1, a2)
    return Run([a1, a2, b, _poisoned((64, 64), torch.float32)], [3], [a.double() @ b.double().T])


def _tickets(rows: int, cols: int) -> Run:
    """A counter from 0 and a ticket (its previous value) for each of rows x cols blocks or
    rounds: every ticket once, in the order the GPU ran them."""
    return Run([torch.zeros(1, dtype=torch.int32), _poisoned((rows, cols), torch.int32)], [0, 1],
               [torch.tensor([float(rows * cols)]),
                torch.arange(rows * cols).reshape(rows, cols).double()], {1: "all"})


def every_check() -> list[Check]:
    return conformance() + examples() + dequantising() + dialect() + emulated()
