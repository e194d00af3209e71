"""The entry point of tilewright-cuda: declares the ``cuda`` backend, its timers (``event``,
``cudagraph``, ``cupti``; see timers.py) and architecture models."""

from __future__ import annotations

from tilewright.ir import FAST_MATH, LDG, SOURCE_KERNELS
from tilewright.language.reducer import OPS as REDUCER_OPS
from tilewright.plugin import (
    API_VERSION,
    ArchModel,
    BackendModule,
    Capabilities,
    LanguageExtension,
    PassConfigKey,
    PassPipeline,
    Phase,
    get_manager,
    hookimpl,
)
from tilewright.transform import lower_intrinsics, lower_tile_ops, min_max_ignoring_nan
from tilewright.transform.shape_symbols import substitute_solved_symbols

from . import __version__, arch, keys, ops, options
from .codegen import CODEGEN
from .executor import EXECUTORS
from .rules import INTRINSIC_RULES, RULES
from .timers import TIMERS
from .transforms import (
    block_code,
    coded_floats,
    cp_async_wait,
    dialect,
    distribute,
    finish,
    kernels,
    layout,
    memory,
    sync,
    threads,
    wgmma_wait,
)
from .transforms.pipeline import pipeline
from .transforms.pipeline.counters import carry_stages

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
          "float8_e8m0fnu", "float4_e2m1fn")

# the float types whose Max / Min TVM's CUDA prelude leaves to the operands' order when one is
# NaN (``max(half, half)`` is ``__hgt(a, b) ? a : b``); float32's and float64's are CUDA's
# ``fmaxf`` / ``fmax`` (math_functions.hpp), which follow the language's NaN rule already
HALF_MIN_MAX = frozenset({"float16", "bfloat16"})


def _rules() -> dict:
    """The backend's rules and those other plugins register for it."""
    extra = dict(get_manager().collect("tilewright_lowering_rules", backend="cuda"))
    return {**RULES, **extra}


def _bind_threads(ctx) -> list:
    chosen = options.of(ctx)  # an unknown architecture or a bad pass config fails here, first
    return [substitute_solved_symbols("CUDASubstituteSolvedSymbols"),
            kernels.pointer_tensors_into_blocks(), kernels.check_sequence(),
            kernels.split_kernels(), threads.thread_atomics(chosen),
            threads.thread_ranges_as_roles(), threads.refuse_thread_conditioned_tile_ops(),
            dialect.issue_wgmma_groups(),
            threads.bind_threads(),
            threads.bind_roles()]


def _infer_layout(ctx) -> list:
    chosen = options.of(ctx)
    return [layout.infer_layout(chosen), layout.mark_wgmma_accumulators(chosen),
            layout.keep_a_in_registers(chosen)]


def _lower_tile_ops(ctx) -> list:
    return [min_max_ignoring_nan("CUDAHalfMinMax", HALF_MIN_MAX),
            block_code.run_once(), lower_tile_ops(_rules(), "cuda", options.of(ctx)),
            lower_intrinsics(INTRINSIC_RULES, "CUDALowerIntrinsics"),
            coded_floats.hold_coded_floats_in_bytes()]


PIPELINE = PassPipeline((
    Phase("bind_threads", _bind_threads,
          "each 'with T.Kernel' block becomes a function of its own (T.alloc_global "
          "workspaces its parameters); the block's program is wrapped in a threadIdx.x loop "
          "of T.Kernel's threads"),
    Phase("infer_layout", _infer_layout,
          "fragments used only as mma accumulators become registers in the mma layout"),
    Phase("lower_tile_ops", _lower_tile_ops,
          "T.max / T.min of float16 and bfloat16 ignore a NaN operand (IEEE maxNum, as "
          "float32's fmaxf); each tile op becomes parallel nests or thread code "
          "(tilewright_cuda.rules); "
          "float4_e2m1fn and float8_e8m0fnu buffers hold a code a byte, their conversions "
          "call tw_fp4.h / tw_e8m0.h (transforms.coded_floats)"),
    Phase("pipeline", lambda ctx: [pipeline(options.of(ctx))],
          "T.Pipelined loops: multi-versioned shared tiles filled by cp.async groups or TMA "
          "on mbarriers (sm_90a: by a producer warpgroup the block gains)"),
    Phase("distribute", lambda ctx: [distribute.distribute_roles(), distribute.distribute()],
          "T.Parallel iterations are spread over the block's threads"),
    Phase("insert_sync", lambda ctx: [sync.drop_redundant_fences(), sync.insert_sync(),
                                      cp_async_wait.defer_cp_async_waits(),
                                      wgmma_wait.defer_wgmma_waits()],
          "__syncthreads() where shared-memory dependencies cross threads; each copy's "
          "cp.async wait and each wgmma's wait_group moved down to the first statement that "
          "needs its data"),
    Phase("place_memory", lambda ctx: [memory.role_registers(),
                                       memory.place_memory(options.of(ctx)), finish.finish(),
                                       carry_stages(), memory.strip_annotations()],
          "shared tiles and fragments become views of one dynamic shared-memory pool; "
          "pipelined loops carry their versions and barrier phases as counters"),
))


BACKEND = BackendModule(
    name="cuda",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=("cuda",),
    pipelines={"cuda": PIPELINE},
    codegens={"cuda": CODEGEN},
    executors=EXECUTORS,
    capabilities=Capabilities(
        # the portable expression intrinsics CUDA lowers itself (rules.expressions)
        tile_ops=frozenset(RULES) | frozenset(dialect.REWRITTEN) | frozenset(ops.EXPRESSION_OPS)
        | {FAST_MATH, LDG, "atomic_load"},
        dtypes=frozenset(DTYPES),
        memory_scopes=frozenset({"global", "shared.dyn", "local.fragment", "local", "local.var",
                                 *(f"local.reducer.{op}" for op in REDUCER_OPS)}),
        features=frozenset({"vector_dtypes", "dynamic_shapes", "partial_tiles",
                            "atomic_return_prev",
                            "extended_math", "while_loops", "kernel_sequence",
                            "nan_reductions", "nan_min_max", "pointer_params",
                            "strided_tensors", SOURCE_KERNELS}),
    ),
    accelerator=True,
    device="cuda",
    device_available=arch.device_present,
    target_options=("arch",),
    target_defaults=lambda kind: {"arch": arch.resolve(None).name},
    description="NVIDIA GPUs: CUDA C++ through TVM's CUDA codegen, NVRTC or nvcc, launched "
                "with the driver API",
)


@hookimpl
def tilewright_backends():
    return [BACKEND]


@hookimpl
def tilewright_language_extensions():
    return [LanguageExtension("cuda", "tilewright_cuda.language", ("cuda",))]


@hookimpl
def tilewright_pass_config_keys():
    return [
        PassConfigKey(keys.DEVICE_COMPILE_FLAGS, object, None,
                      "extra NVRTC / nvcc flags (a string or a list), after ours and after "
                      "--use_fast_math when TL_ENABLE_FAST_MATH is set; an architecture flag "
                      "is refused (the target gives it)", owner="cuda",
                      tilelang="TL_DEVICE_COMPILE_FLAGS",
                      tilelang_value="tl.device_compile_flags"),
        PassConfigKey(keys.DISABLE_TMA, bool, False,
                      "lower T.copy into shared memory inside T.Pipelined loops with cp.async "
                      "instead of TMA (sm_90+)", owner="cuda",
                      tilelang="TL_DISABLE_TMA_LOWER", tilelang_value="tl.disable_tma_lower"),
        PassConfigKey(keys.DISABLE_WARP_SPECIALIZED, bool, False,
                      "do not split T.Pipelined loops into producer and consumer warpgroups "
                      "(sm_90a)", owner="cuda", tilelang="TL_DISABLE_WARP_SPECIALIZED",
                      tilelang_value="tl.disable_warp_specialized"),
        PassConfigKey(keys.TMA_MULTICAST, bool, False,
                      "in a warp-specialised T.Pipelined loop (sm_90a), load the tiles that "
                      "blocks 2c and 2c + 1 share once per pair of blocks (clusters of two, "
                      "TMA multicast)", owner="cuda"),
        PassConfigKey(keys.TMA_UNSWIZZLED, bool, False,
                      "in T.Pipelined loops (sm_90+), a T.copy into a whole unswizzled shared "
                      "tile whose rows are a multiple of 16 bytes may be a TMA load too (one "
                      "row-major box), so a loop with such a tile (T.gemm_sp's metadata) can "
                      "be fed by TMA", owner="cuda"),
        PassConfigKey(keys.BLOCKS_PER_SM, int, 1,
                      "blocks each SM should hold at once: registers (__launch_bounds__, the "
                      "setmaxnreg budgets) and shared memory are budgeted for that many",
                      owner="cuda"),
        PassConfigKey(keys.PROLOGUE_COPIES, bool, False,
                      "a T.copy into shared memory by cp.async right before a T.Pipelined "
                      "loop of cp.async copies that runs at least once is issued with the "
                      "loop's first stage and waited for by the loop's first wait, instead of "
                      "on its own before the loop's first loads are issued", owner="cuda"),
        PassConfigKey(keys.WGMMA_PINGPONG, bool, False,
                      "in a warp-specialised T.Pipelined loop with two compute warpgroups "
                      "(sm_90a), the warpgroups take turns issuing each iteration's first "
                      "wgmma gemm (two named barriers), so one's gemms run while the other "
                      "computes between its gemms", owner="cuda"),
        PassConfigKey(keys.PRODUCER_REGISTERS, int, 0,
                      "the setmaxnreg budget of a warp-specialised loop's producer warpgroup "
                      "(24-256, a multiple of 8; 0: the compiler's, 40 or 56 in a persistent "
                      "kernel); the compute warpgroups get the rest of the block's registers, "
                      "at most 240 each", owner="cuda"),
    ]


@hookimpl
def tilewright_timers():
    return list(TIMERS)


# (name, description, peak TFLOP/s fp16/bf16 and fp32, HBM GB/s, SMs, shared memory per SM and
# per block, L2 bytes, compute capability, max threads per SM, mma shapes). Per SM on every one:
# 65536 32-bit registers, 4 sub-partitions, warps of 32, at most 1024 threads per block.
_GPUS = (
    ("A100", "NVIDIA A100 SXM 80 GB", 312.0, 19.5, 2039.0, 108, 167936, 166912, 40 << 20,
     "8.0", 2048, ((16, 8, 16), (16, 8, 8))),
    ("H100", "NVIDIA H100 SXM", 989.0, 67.0, 3350.0, 132, 233472, 232448, 50 << 20, "9.0",
     2048, ((16, 8, 16), (64, 256, 16))),
    ("H200", "NVIDIA H200 SXM", 989.0, 67.0, 4800.0, 132, 233472, 232448, 50 << 20, "9.0",
     2048, ((16, 8, 16), (64, 256, 16))),
    ("RTX4090", "NVIDIA GeForce RTX 4090", 165.0, 82.6, 1008.0, 128, 102400, 101376, 72 << 20,
     "8.9", 1536, ((16, 8, 16), (16, 8, 8))),
)


def _arch_model(name, description, half, single, bandwidth, sms, smem_sm, smem_block, l2, cc,
                threads_sm, mma_shapes) -> ArchModel:
    return ArchModel(
        name, {"float16": half, "bfloat16": half, "float32": single}, bandwidth, description,
        compute_units=sms, shared_memory_bytes=smem_sm, register_budget=65536,
        mma_shape=mma_shapes[0], transaction_bytes=128, unit_partitions=4,
        block_shared_memory_bytes=smem_block,
        details={"compute_capability": cc, "warp_size": 32, "max_threads_per_block": 1024,
                 "max_threads_per_unit": threads_sm, "registers_per_unit": 65536,
                 "l2_bytes": l2, "mma_shapes": mma_shapes})


ARCH_MODELS = tuple(_arch_model(*row) for row in _GPUS)


@hookimpl
def tilewright_arch_models():
    return list(ARCH_MODELS)
