"""The entry point of tilewright-cpu: declares the ``cpu`` backend."""

from __future__ import annotations

from tilewright.language.reducer import OPS as REDUCER_OPS
from tilewright.plugin import (
    API_VERSION,
    BackendModule,
    Capabilities,
    PassConfigKey,
    PassPipeline,
    Phase,
    get_manager,
    hookimpl,
)
from tilewright.transform import (
    lower_intrinsics,
    lower_tile_ops,
    min_max_ignoring_nan,
    saturating_float_to_int,
)
from tilewright.transform.sequential import SEQUENTIAL_OPS, sequential_phases
from tvm import tirx

from . import (
    __version__,
    fastmath,
    gemm_loops,
    grid,
    integers,
    libm,
    loops,
    lowering_bfloat16,
    lowering_extra,
    lowering_float8,
)
from .archmodel import host_model
from .codegen import CODEGEN
from .executor import EXECUTORS
from .lowering import RULES

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
          "float8_e8m0fnu", "float4_e2m1fn")


def _rules(ctx) -> dict:
    extra = dict(get_manager().collect("tilewright_lowering_rules", backend="cpu"))
    return {**RULES, **extra}


PIPELINE = PassPipeline((
    *sequential_phases("CPU"),
    Phase("lower_tile_ops", lambda ctx: [min_max_ignoring_nan("CPUFloatMinMax",
                                                              native=libm.llvm_min_max),
                                         gemm_loops.fuse_gemm_k(),
                                         gemm_loops.hoist_gemm_conversions(),
                                         lower_tile_ops(_rules(ctx), "cpu"),
                                         lower_intrinsics(lowering_extra.INTRINSIC_RULES,
                                                          "CPULowerIntrinsics"),
                                         lowering_extra.spill_atomic_results()],
          "T.max / T.min of floats ignore a NaN operand (IEEE maxNum); GEMM K loops merged "
          "into deeper GEMMs; narrow GEMM operands that a loop does not "
          "write converted once before it; each tile op becomes loops (rules in "
          "tilewright_cpu.lowering)"),
    Phase("lower_loops", lambda ctx: [
        saturating_float_to_int("CPUSaturatingFloatToInt"),
        lowering_bfloat16.bfloat16_bits_of_values(),
        lowering_bfloat16.hold_narrow_bindings(),
        *fastmath.passes(ctx.pass_configs),
        lowering_bfloat16.round_bfloat16_arithmetic(),
        lowering_bfloat16.float16_math_in_float32(),
        fastmath.lower_tanh(),
        libm.lower_libm(),
        lowering_bfloat16.bfloat16_conversions_around_lets(),
        lowering_float8.lower_float8(),
        loops.lower_loops(not ctx.pass_configs.get("tw.disable_vectorize", False)),
        tirx.transform.ConvertSSA()],
          "float -> integer conversions saturating (NaN gives 0); the bits of a bfloat16 "
          "value not read from a tensor taken from its float32; named bfloat16 and "
          "float8 values held in float32 local arrays; the kernel's "
          "float32 exp/exp2 vectorisable (within 2 ulp, or the fast polynomial with "
          "TL_ENABLE_FAST_MATH); bfloat16 and float8 arithmetic and math functions, and "
          "float16 math functions, rounded per operation (their math in libm's float32 "
          "functions); float32 tanh vectorisable (within 2 ulp); sinh, cosh, fmod, atanh and exp10 "
          "as libm's calls; bfloat16 conversions in "
          "stores with bindings in integer code; float8 conversions as integer code; "
          "T.Parallel loops vectorised where their extent allows (a binding in a loop body "
          "the lowering copies renamed in each copy: ConvertSSA)"),
    Phase("lower_memory", lambda ctx: [grid.lower_scopes(),
                                       lowering_bfloat16.round_bfloat16_tiles()],
          "shared and fragment tiles become per-block host arrays; values stored into "
          "bfloat16 tiles rounded to bfloat16"),
    Phase("lower_blocks", lambda ctx: [grid.lower_blocks(),
                                       lowering_extra.check_device_asserts(),
                                       integers.fold_unsigned_sign_tests(),
                                       integers.reinterpret_integers_unfolded(),
                                       integers.wrap_integers(),
                                       integers.uint64_arithmetic_without_nuw(),
                                       integers.lower_floor_division(),
                                       integers.float16_of_integers_in_range(),
                                       integers.clz_defined_at_zero()],
          "the block grid becomes one parallel loop over CPU workers; the integer operand of a "
          "reinterpret kept from folding into a constant; unsigned and 8/16-bit integer "
          "arithmetic made in int64 and wrapped into its type; uint64 addition, subtraction and "
          "multiplication from 32-bit halves (no flagged operation wraps), signed values "
          "converted to uint64 unfolded; floor division by a "
          "divisor that is not a positive constant written with truncating division, without the "
          "bindings TVM's lowering would give it; a conversion of an integer to float16 made of "
          "its value clamped into float16's range; T.clz of 0 its operand's width"),
))

BACKEND = BackendModule(
    name="cpu",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=("cpu",),
    pipelines={"cpu": PIPELINE},
    codegens={"cpu": CODEGEN},
    executors=EXECUTORS,
    capabilities=Capabilities(
        tile_ops=frozenset({*RULES, *SEQUENTIAL_OPS, "atomic_load"}),
        dtypes=frozenset(DTYPES),
        memory_scopes=frozenset({"global", "shared.dyn", "local.fragment", "local", "local.var",
                                 *(f"local.reducer.{op}" for op in REDUCER_OPS)}),
        features=frozenset({"vector_dtypes", "wide_vectors", "dynamic_shapes", "partial_tiles",
                            "kernel_sequence",
                            "while_loops", "atomic_return_prev", "extended_math",
                            "nan_reductions", "nan_min_max", "pointer_params",
                            "strided_tensors"}),
    ),
    description="reference backend: host CPU through TVM's LLVM codegen",
)


@hookimpl
def tilewright_backends():
    return [BACKEND]



@hookimpl
def tilewright_pass_config_keys():
    return [PassConfigKey("cpu.precise_math", bool, False,
                          "libm's exp/exp2 (below 1 ulp, one call a lane) instead of the vector "
                          "exp (within 2 ulp, CUDA's expf bound); refused beside "
                          "TL_ENABLE_FAST_MATH=True", owner="cpu")]


@hookimpl
def tilewright_arch_models():
    return [host_model()]
