"""The entry point of tilewright-ascend: declares the ``ascend`` backend and its dialect."""

from __future__ import annotations

from tilewright.ir import INTEGER_REDUCE_KINDS
from tilewright.plugin import (
    API_VERSION,
    ArchModel,
    BackendModule,
    Capabilities,
    LanguageExtension,
    PassConfigKey,
    PassPipeline,
    Phase,
    hookimpl,
)
from tilewright.transform import narrow_float_arithmetic, saturating_float_to_int

from . import __version__
from .codegen import CODEGEN
from .executor import EXECUTORS
from .facts import ops
from .facts.arch import ARCHS, CLOCK_GHZ, CUBE_MNK, HBM_GBPS, MEMORIES, arch_of
from .facts.device import device_present, npu_available
from .facts.instructions import ATOMIC_DTYPES
from .profiler import TIMERS
from .rules import RULES
from .transforms import switches
from .transforms.memory import PORTABLE_SCOPES, plan_memory
from .transforms.multibuffer import multi_buffer
from .transforms.portable import lower_portable
from .transforms.sequence import check_sequence, split_sequence
from .transforms.sync import insert_sync
from .transforms.vector import (
    BITWISE_REDUCTION_DTYPES,
    PORTABLE_REDUCTIONS,
    PORTABLE_VECTOR_OPS,
    REDUCTION_DTYPES,
    lower_vector,
)
from .transforms.views import fold_views

DTYPES = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "uint8", "uint16",
          "uint32", "int64", "bool")

PIPELINE = PassPipeline((
    Phase("portable", lambda ctx: [check_sequence(), split_sequence(), fold_views(),
                                   *switches.before_portable(ctx),
                                   lower_portable(), *switches.after_portable(ctx)],
          "several 'with T.Kernel' blocks as one function each; views of tiles (T.reshape, "
          "T.view) as accesses of the tile; portable kernels: "
          "memories by use (GEMM operands L1, accumulators L0C, other tiles "
          "UB), the grid on the 1-D core grid, T.gemm as gemm_v0"),
    Phase("vector", lambda ctx: [narrow_float_arithmetic(("bfloat16",), "AscendNarrowBfloat16"),
                                 lower_vector(arch_of(ctx.target)),
                                 saturating_float_to_int("AscendSaturatingFloatToInt")],
          "portable vector work: T.Parallel nests, reductions, scans and converting copies "
          "become vector ops on UB tiles (scalar-unit loops where no instruction fits); "
          "bfloat16 arithmetic and math in float32, rounded after each operation; a float -> "
          "integer conversion saturates, NaN gives 0"),
    Phase("multi_buffer", lambda ctx: [multi_buffer()],
          "T.Pipelined(num_stages=S) loops: buffers produced and consumed inside get S "
          "versions (kernels without hand-written synchronisation)"),
    Phase("plan_memory", lambda ctx: [plan_memory(switches.plan_reuse(ctx),
                                                   arch_of(ctx.target).memories,
                                                   arch_of(ctx.target).select_scratch)],
          "check memory scopes; place every on-chip buffer (32-byte aligned, capacity "
          "checked)"),
    Phase("insert_sync", lambda ctx: [insert_sync()],
          "set/wait flags after producers and before consumers, for kernels without "
          "hand-written synchronisation"),
))

BACKEND = BackendModule(
    name="ascend",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=tuple(ARCHS),
    pipelines=dict.fromkeys(ARCHS, PIPELINE),
    codegens=dict.fromkeys(ARCHS, CODEGEN),
    executors=EXECUTORS,
    capabilities=Capabilities(
        # T.gemm and T.dual_copy: lowered by the portable phase
        tile_ops=frozenset({*RULES, "gemm", *ops.PORTABLE_PHASE_OPS, *PORTABLE_VECTOR_OPS}),
        dtypes=frozenset(DTYPES),
        # portable scopes: the portable phase maps them to Ascend memories by use
        memory_scopes=frozenset({"global", *MEMORIES, *PORTABLE_SCOPES}),
        # kernel_sequence: one launch per 'with T.Kernel' block, in order (transforms.sequence)
        features=frozenset({"manual_sync", "dialect:ascend", "partial_tiles",
                            "dynamic_shapes", "kernel_sequence"}),
        # the cube takes float16/bfloat16/float32 operands (float32 fractals are transposed
        # by LoadDataWithTranspose from an L1 stored as rows of fractals, see cube.py) and
        # int8 into an int32 L0C (A [M, K], B [N, K]: int8 fractals are not transposed)
        # reductions: what the WholeReduce family computes on, and bfloat16 (see
        # transforms.vector); the bitwise kinds: the integers the scalar unit reduces;
        # atomics: what SetAtomicAdd/Max/Min take (facts.instructions)
        op_dtypes={"gemm": frozenset({"float16", "bfloat16", "float32", "int8"}),
                   **dict.fromkeys(PORTABLE_REDUCTIONS, REDUCTION_DTYPES),
                   **{f"reduce_{k}": BITWISE_REDUCTION_DTYPES for k in INTEGER_REDUCE_KINDS},
                   **dict.fromkeys(("atomic_add", "atomic_max", "atomic_min"),
                                   ATOMIC_DTYPES)},
    ),
    accelerator=True,
    # tensors live where the first available executor runs: the NPU, else the CPU emulator
    device="npu" if npu_available() else "cpu",
    device_available=device_present,
    target_options=("soc",),
    description="Huawei Ascend A2/A3 (target ascend, dav-2201) and Ascend 950 (target "
                "ascend-950, dav-3510): Ascend C codegen; bisheng + torch_npu, or the CPU "
                "emulator of the generated Ascend C",
)

assert set(ops.DIALECT_OPS) <= set(RULES), "every dialect op needs a codegen rule"


@hookimpl
def tilewright_backends():
    return [BACKEND]


@hookimpl
def tilewright_language_extensions():
    return [LanguageExtension("ascend", "tilewright_ascend.language", ("ascend",))]


@hookimpl
def tilewright_pass_config_keys():
    return [
        PassConfigKey("ascend.exception_dump", bool, False,
                      "append the argument descriptor for AI-core exception dumps (changes "
                      "the kernel ABI)", owner="ascend", tilelang="TL_ASCEND_EXCEPTION_DUMP",
                      tilelang_value="tl.ascend_exception_dump"),
        PassConfigKey("ascend.emulator_races", str, "error",
                      "what the emulator does on a race or sync error: 'error' or 'warn'",
                      owner="ascend"),
        *switches.KEYS,
    ]


@hookimpl
def tilewright_timers():
    return list(TIMERS)


def _arch_model(name: str, soc, arch) -> ArchModel:
    """The roofline model of one SoC of ``arch``: cube peak from its AI cube cores, the cube's
    shape and the nominal clock; HBM bandwidth; per core the on-chip memories."""
    memories = arch.memories
    peak = {dtype: soc.aic * 2 * m * n * k * CLOCK_GHZ / 1e3
            for dtype, (m, n, k) in CUBE_MNK.items()}
    return ArchModel(
        name, peak, HBM_GBPS,
        f"Huawei Ascend {soc.name} ({arch.name}, {soc.aic} AIC + {soc.aiv} AIV), nominal "
        f"figures ({CLOCK_GHZ} GHz, {HBM_GBPS:.0f} GB/s HBM), not measured",
        compute_units=soc.aic, shared_memory_bytes=memories["ascend.l1"].capacity,
        register_budget=memories["ascend.l0c"].capacity // 4, mma_shape=CUBE_MNK["float16"],
        transaction_bytes=512, unit_partitions=1,
        details={"soc": soc.name, "aiv": soc.aiv, "ub_bytes": memories["ascend.ub"].capacity,
                 "arch": arch.name, "target": arch.kind, "vector_bits": arch.vector_bits,
                 "nominal": True})


# one model per SoC; ``ascend-910b`` and ``ascend-950`` are each architecture's default SoC
# (as its target without ``-soc``)
ARCH_MODELS = (*(_arch_model(f"ascend-{name.lower()}", soc, arch)
                 for arch in ARCHS.values() for name, soc in arch.socs.items()),
               _arch_model("ascend-910b", ARCHS["ascend"].socs[ARCHS["ascend"].default_soc],
                           ARCHS["ascend"]),
               _arch_model("ascend-950", ARCHS["ascend-950"].socs[
                   ARCHS["ascend-950"].default_soc], ARCHS["ascend-950"]))


@hookimpl
def tilewright_arch_models():
    return list(ARCH_MODELS)
