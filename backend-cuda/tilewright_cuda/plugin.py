"""The entry point of tilewright-cuda: declares the ``cuda`` backend, its ``event`` timer and
architecture models."""

from __future__ import annotations

from tilewright.plugin import (
    API_VERSION,
    ArchModel,
    Availability,
    BackendModule,
    Capabilities,
    PassPipeline,
    Phase,
    Timer,
    hookimpl,
)
from tilewright.transform import lower_intrinsics, lower_tile_ops

from . import __version__, arch, lowering_extra, passes
from .codegen import CODEGEN
from .executor import EXECUTORS
from .lowering import RULES

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")


def _rules(ctx) -> dict:
    from tilewright.plugin import get_manager

    extra = dict(get_manager().collect("tilewright_lowering_rules", backend="cuda"))
    return {**RULES, **extra}


def _arch(ctx):
    return arch.resolve(ctx.target.option("arch"))


PIPELINE = PassPipeline((
    Phase("bind_threads", lambda ctx: [_arch(ctx) and passes.bind_threads()],
          "the block's program is wrapped in a threadIdx.x loop of T.Kernel's threads"),
    Phase("infer_layout", lambda ctx: [passes.infer_layout(_arch(ctx))],
          "fragments used only as mma accumulators become registers in the mma layout"),
    Phase("lower_tile_ops", lambda ctx: [lower_tile_ops(_rules(ctx), "cuda", _arch(ctx)),
                                         lower_intrinsics(lowering_extra.INTRINSIC_RULES,
                                                          "CUDALowerIntrinsics")],
          "each tile op becomes parallel nests or thread code (tilewright_cuda.lowering)"),
    Phase("distribute", lambda ctx: [passes.distribute()],
          "T.Parallel iterations are spread over the block's threads"),
    Phase("insert_sync", lambda ctx: [passes.insert_sync()],
          "__syncthreads() where shared-memory dependencies cross threads"),
    Phase("place_memory", lambda ctx: [passes.place_memory(_arch(ctx)),
                                       passes.strip_annotations()],
          "shared tiles and fragments become views of one dynamic shared-memory pool"),
))


def device_available() -> Availability:
    return Availability(arch.visible_gpu_arch() is not None, arch.describe_default())


BACKEND = BackendModule(
    name="cuda",
    version=__version__,
    api_version=API_VERSION,
    target_kinds=("cuda",),
    pipelines={"cuda": PIPELINE},
    codegens={"cuda": CODEGEN},
    executors=EXECUTORS,
    capabilities=Capabilities(
        tile_ops=frozenset(RULES),
        dtypes=frozenset(DTYPES),
        memory_scopes=frozenset({"global", "shared.dyn", "local.fragment", "local"}),
        features=frozenset({"warps", "dynamic_shapes", "partial_tiles"}),
    ),
    accelerator=True,
    device="cuda",
    device_available=device_available,
    target_options=("arch",),
    description="NVIDIA GPUs: CUDA C++ through TVM's CUDA codegen, NVRTC or nvcc, launched "
                "with the driver API",
)


@hookimpl
def tilewright_backends():
    return [BACKEND]


def _event_timer(fn, n_warmup: int, n_repeat: int, flush=None) -> list[float]:
    import torch

    for _ in range(n_warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(n_repeat):
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def _event_available() -> Availability:
    try:
        import torch
    except ImportError:
        return Availability(False, "torch is not installed")
    if not torch.cuda.is_available():
        return Availability(False, "torch sees no CUDA device")
    return Availability(True)


@hookimpl
def tilewright_timers():
    return [Timer("event", _event_available, _event_timer,
                  "CUDA events around each call on torch's current stream")]


@hookimpl
def tilewright_arch_models():
    return [
        ArchModel("A100", {"float16": 312.0, "bfloat16": 312.0, "float32": 19.5}, 2039.0,
                  "NVIDIA A100 SXM 80 GB"),
        ArchModel("H100", {"float16": 989.0, "bfloat16": 989.0, "float32": 67.0}, 3350.0,
                  "NVIDIA H100 SXM"),
        ArchModel("H200", {"float16": 989.0, "bfloat16": 989.0, "float32": 67.0}, 4800.0,
                  "NVIDIA H200 SXM"),
        ArchModel("RTX4090", {"float16": 165.0, "bfloat16": 165.0, "float32": 82.6}, 1008.0,
                  "NVIDIA GeForce RTX 4090"),
    ]
