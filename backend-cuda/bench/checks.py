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
  sparse GEMM in both benchmark configurations (sparse wgmma, mma.sp).

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
    accumulating kernel adds to) and the expected value of each output."""

    args: list
    outputs: list  # positions in ``args``
    expected: list


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
)
ATTENTION_CONFIGS = (("", {}, {}), ("_2stages", {"num_stages": 2}, {}),
                     ("_nows", {}, kernels.GEMM_PASS_CONFIGS),
                     ("_multicast", {}, {"cuda.tma_multicast": True}),
                     ("_cpasync", {}, {"cuda.disable_tma_lower": True}),
                     ("_pingpong", {}, {"cuda.wgmma_pingpong": True}))
# kernels.attention_overlap (suffix, pass configs): warp-specialised, TMA issued in order, the
# compute warpgroups taking turns
OVERLAP_CONFIGS = (("_overlap", {}), ("_overlap_nows", kernels.GEMM_PASS_CONFIGS),
                   ("_overlap_pingpong", {"cuda.wgmma_pingpong": True}))


def dialect() -> list[Check]:
    out = []
    for name, func, case in dialect_cases.cases():
        dtype = str(case.args[0].dtype).removeprefix("torch.")
        out.append(Check(f"dialect-{name}", "dialect", dtype, lambda func=func: func,
                         lambda case=case: [_example_run(case)], case.reduction))
    m, n, k = 256, 512, 256  # 2 x 2 blocks of 128 x 256 (pairs for multicast), 4 k-tiles
    for suffix, change, configs in BENCH_CONFIGS:
        for dtype in ("float16", "bfloat16") if suffix in ("", "_ws") else ("float16",):
            config = {**kernels.GEMM, **change}
            builder = kernels.gemm_persistent if "workers" in change else kernels.gemm
            out.append(Check(
                f"dialect-bench_gemm_{dtype}{suffix}", "dialect", dtype,
                lambda builder=builder, dtype=dtype, config=config: builder.fn(
                    m, n, k, dtype, **config),
                lambda dtype=dtype: [_gemm_run(m, n, k, dtype)], k, configs))
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
    out.append(Check("dialect-bench_add_float32", "dialect", "float32",
                     lambda: kernels.add.fn(16, 1024, "float32", **kernels.ADD),
                     lambda: [_add_run(16, 1024)]))
    m, n, k = 256, 384, 512  # 2 x 3 blocks of 128 x 128 (256 threads: no spills), 8 k-tiles
    for dtype in kernels.LOW_PRECISION_ACCUM:
        out.append(Check(
            f"dialect-gemm_low_precision_{dtype}", "dialect", dtype,
            lambda dtype=dtype: kernels.gemm_low_precision.fn(m, n, k, dtype, threads=256),
            lambda dtype=dtype: [_low_precision_run(m, n, k, dtype)], k))
    m, n, k = 256, 512, 384  # the int8 row's 128 x 256 x 128 tiles: 2 x 2 blocks, 3 k-tiles
    out.append(Check("dialect-bench_int8_gemm", "dialect", "int8",
                     lambda: kernels.gemm_low_precision.fn(m, n, k, "int8", **kernels.INT8_GEMM),
                     lambda: [_low_precision_run(m, n, k, "int8")], k))
    m, n, k = 256, 256, 192  # the 2:4 rows' 128 x 128 x 64 tiles: 2 x 2 blocks, 3 k-tiles
    for suffix, config in (("", kernels.GEMM_SP), ("_mmasp", kernels.GEMM_SP_MMA)):
        out.append(Check(
            f"dialect-bench_gemm_sp_float16{suffix}", "dialect", "float16",
            lambda config=config: kernels.gemm_sp_kernel.fn(m, n, k, "float16", "int16",
                                                            **config),
            lambda: [_gemm_sp_run(m, n, k)], k))
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
    configurations (``kernels.py``), at small sizes."""
    out = []
    m, n, k = 200, 256, 384  # a partial row tile, 2 x 2 blocks, 3 scale groups along K
    for layout in kernels.FP8_TILES:
        config = kernels.fp8_config(layout)
        out.append(Check(
            f"example-gemm_fp8_scaled_{layout}", "example", "float8_e4m3fn",
            lambda layout=layout, config=config: kernels.fp8_gemm_scaled.fn(
                m, n, k, layout, **config),
            lambda layout=layout: [_fp8_scaled_run(m, n, k, layout)], k))
    rows, cols, depth = 5, 320, 512  # decode rows, 5 column tiles, 4 groups a row
    out.append(Check("example-gemm_w4a16", "example", "float16",
                     lambda: kernels.w4a16_gemm.fn(rows, cols, depth, 128, **kernels.W4A16),
                     lambda: [_w4a16_run(rows, cols, depth, 128)], depth))
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


def _w4a16_run(m: int, n: int, k: int, group: int) -> Run:
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    return Run([a, q, scales, zeros, c], [4],
               [a.double() @ w4.dequantize(q, scales, zeros).double().T])


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


def every_check() -> list[Check]:
    return conformance() + examples() + dequantising() + dialect()
