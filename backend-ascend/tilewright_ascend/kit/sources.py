"""The set of kernels whose generated Ascend C the checks compile, per target: every
conformance case the backend supports and builds (``tilewright_sdk.conformance``), the dialect
kernels of the target's tree (``backend-ascend/examples/ascend_kernels.py``, the seed's A2/A3
examples, for ``ascend``; ``backend-ascend/examples/mainline_kernels.py``, the Ascend 950
examples of the mainline dialect, for ``ascend-950``) and every example of ``examples/``
retargeted to the target at small sizes.

Each :class:`KernelSource` lowers its kernel on demand (:meth:`KernelSource.source`); the
repository root defaults to the checkout this package lies in.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tilewright
from tilewright.errors import TilewrightError
from tilewright_sdk.conformance.catalogue import cases
from tilewright_sdk.conformance.known_failures import known_failure
from tilewright_sdk.conformance.runner import missing_capabilities

from ..plugin import BACKEND

TARGET = "ascend"
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class KernelSource:
    """One kernel of the set: ``group`` is conformance, seed or examples; ``build`` returns a
    PrimFunc to lower, or a compiled kernel (eager examples) whose source is taken."""

    name: str
    group: str
    build: Callable
    target: str = TARGET

    def source(self) -> str:
        """The generated Ascend C."""
        built = self.build()
        if hasattr(built, "get_kernel_source"):  # an eager example, compiled by its call
            return built.get_kernel_source()
        return tilewright.lower(built, target=self.target).source.text


def generated(kernels) -> tuple[dict[str, str], list[str]]:
    """The Ascend C of ``kernels`` by file-safe name, and a line for each kernel the backend
    refuses at compile time (no source to check)."""
    sources, refused = {}, []
    for k in kernels:
        try:
            sources[k.name.replace("/", "__")] = k.source()
        except TilewrightError as exc:
            refused.append(f"{k.name}: {str(exc).splitlines()[0]}")
    return sources, refused


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def conformance(target: str = TARGET) -> list[KernelSource]:
    """Every conformance case whose ops, dtypes and features the backend declares, less the
    known build failures (``tilewright_sdk.conformance.known_failures``: no source to check)."""
    out = []
    for case in cases():
        case = case.narrowed(BACKEND.capabilities.dtypes)  # dtype-list dims, as the suite does
        if missing_capabilities(case, BACKEND) or \
                known_failure(BACKEND.name, case.id, executes=False):
            continue
        out.append(KernelSource(f"conformance/{case.id}", "conformance",
                                lambda c=case: c.kernel.make(c.dtype, **c.dims), target))
    return out


# backend-ascend/examples/ascend_kernels.py: kernel factory -> its arguments
SEED = {
    "vec_add": ((256, 512, 128, 256), {}),
    "vec_add_pipelined": ((256, 256, 128, 128, 32), {}),
    "gemm": ((128, 128, 256, 64, 64, 128), {}),
    "vec_add_conservative": ((512, 512, 512, 256, 32), {}),
    "gemm_pipelined": ((128, 128, 1024, 64, 64, 128), {"kL0Size": 64}),
    "vec_add_auto": ((128, 256, 128, 256, 32), {}),
    "gemm_auto": ((128, 128, 1024, 64, 64, 128), {"kL0Size": 64, "num_stages": 2}),
    "vec_add_pipelined_auto": ((512, 512, 512, 256, 32), {}),
    "dialect_tour": ((), {}),
    "mma_tile": ((), {}),
}


# backend-ascend/examples/mainline_kernels.py (target ascend-950): name -> (factory, arguments,
# keyword arguments)
MAINLINE = {
    "vector_add": ("vector_add", (16 * 1024,), {}),
    "vector_add_3_versions": ("vector_add", (12 * 1024,), {"versions": (3, "iteration")}),
    "vector_add_simt": ("vector_add", (8 * 1024,), {"body": "simt"}),
    "vector_add_simd": ("vector_add", (8 * 1024,), {"body": "simd"}),
    "softmax_simd": ("softmax", (8, 256), {}),
    "rmsnorm_simd": ("rmsnorm", (4, 256), {}),
    # rows of 200: the last register of a row under a mask of a count (Reg::UpdateMask)
    "softmax_simd_tail": ("softmax", (8, 200), {}),
    "rmsnorm_simd_tail": ("rmsnorm", (4, 200), {}),
    "gemm_l1": ("gemm", (128, 128, 256, 64, 64, 64), {}),
    "gemm_l0": ("gemm", (128, 128, 256, 64, 64, 64), {"l0": True}),
    "gemm_l0_transposed": ("gemm", (128, 128, 256, 64, 64, 64),
                           {"l0": True, "transpose_A": True, "transpose_B": True}),
    "gemm_relu_m_split": ("gemm_relu", (128, 128, 256, 64, 64, 64), {"split": "m"}),
    "gemm_relu_n_split": ("gemm_relu", (128, 128, 256, 64, 64, 64), {"split": "n"}),
    "gemm_relu_loop": ("gemm_relu_loop", (128, 256, 128, 64, 64), {}),
    "simt_transpose": ("simt_transpose", (64,), {}),
    "simt_transpose_2d": ("simt_transpose_2d", (64,), {}),
    "simt_through_gm": ("simt_through_gm", (32, 64), {}),
    "simt_softmax": ("simt_softmax", (32, 256), {}),
}


def _factories(repo: Path, stem: str, table: dict, target: str) -> list[KernelSource]:
    module = _module(repo / "backend-ascend" / "examples" / f"{stem}.py", f"tw_kit_{stem}")
    return [KernelSource(f"seed/{name}", "seed",
                         lambda m=module, n=fn, a=args, k=kwargs: getattr(m, n)(*a, **k), target)
            for name, (fn, args, kwargs) in table.items()]


def seed(repo: Path = REPO) -> list[KernelSource]:
    """The adapter tree's seed kernels (target ``ascend``)."""
    return _factories(repo, "ascend_kernels",
                      {name: (name, *spec) for name, spec in SEED.items()}, TARGET)


def mainline(repo: Path = REPO) -> list[KernelSource]:
    """The mainline dialect's seed kernels (target ``ascend-950``)."""
    return _factories(repo, "mainline_kernels", MAINLINE, "ascend-950")


# examples/<file>.py: (jit function, factory arguments, keyword arguments); an eager example
# (tensors as arguments) takes its T.const sizes as keywords and is compiled
EXAMPLES = {
    "quickstart": [("vector_add", (), {"M": 1003, "block_M": 256}),
                   ("matmul", (70, 40, 48), {"block_M": 32, "block_N": 32, "block_K": 16}),
                   ("softmax", (20, 64), {})],
    "gemm": [("matmul", (), {"M": 70, "N": 40, "K": 64, "block_M": 32, "block_N": 32,
                             "block_K": 32, "dtype": "float32"})],
    "gemm_splitk": [("matmul_splitk", (40, 48, 100, 3),
                     {"block_M": 32, "block_N": 32, "block_K": 16})],
    "flash_attention": [("flashattn", (1, 2, 40, 16, True), {"block_M": 16, "block_N": 16})],
    "rmsnorm": [("rmsnorm", (10, 96), {})],
    "softmax": [("softmax", (10, 80), {"dtype": "bfloat16"})],
    "row_reduce": [("row_sum", (20, 300), {})],
    "elementwise_add": [("add", (), {"M": 70, "N": 100})],
    "gemm_dynamic": [("matmul_dynamic", (), {"block_M": 32, "block_N": 32, "block_K": 16})],
    "gemm_persistent": [("matmul_persistent", (70, 40, 48, 3),
                         {"block_M": 32, "block_N": 32, "block_K": 16})],
    "gemm_fp8_scaled": [("fp8_gemm_scaled", (40, 64, 256, "block"),
                         {"block_M": 32, "block_N": 32, "threads": 128})],
    "gemm_w4a16": [("w4a16_gemm", (5, 64, 256, 64), {"block_M": 16, "block_N": 32,
                                                     "block_K": 64})],
    "gemm_sp": [("gemm_sp_kernel", (64, 64, 128), {"block_M": 32, "block_N": 32,
                                                   "block_K": 64})],
    "block_sparse_gemm": [("block_sparse_matmul", (128, 128, 128), {})],
}


def examples(repo: Path = REPO, target: str = TARGET) -> list[KernelSource]:
    out = []
    for stem, entries in EXAMPLES.items():
        module = _module(repo / "examples" / f"{stem}.py", f"tw_kit_example_{stem}")
        for fn, args, kwargs in entries:
            jitted = getattr(module, fn)
            retargeted = tilewright.jit(out_idx=jitted.out_idx, target=target)(jitted.fn)
            build = (lambda j=retargeted, a=args, k=kwargs: j.fn(*a, **k)) if jitted.factory \
                else (lambda j=retargeted, k=kwargs: j.compile(**k))
            out.append(KernelSource(f"examples/{stem}.{fn}", "examples", build, target))
    return out


def source_set(repo: Path = REPO, target: str = TARGET) -> list[KernelSource]:
    """Every kernel the checks compile for ``target``, conformance first."""
    dialect = mainline(repo) if target == "ascend-950" else seed(repo)
    return [*conformance(target), *dialect, *examples(repo, target)]
