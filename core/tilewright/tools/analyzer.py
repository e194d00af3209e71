"""The static roofline analyser: ``Analyzer.analysis(func, arch)``.

It walks a tile program once and counts, multiplied by the extents of every enclosing loop
(grid dimensions included):

- FLOPs of tile ops from a table keyed by op (``gemm``: 2*M*N*K, reductions and ``cumsum``: one
  per source element, atomics: one per element), and of elementwise work: every float
  arithmetic node and math call in a stored value (``T.Parallel`` bodies and plain stores);
- global-memory bytes of every tile op's region operands that live in global memory, read
  and written as the op's schema declares (a read-write region counts twice), and of direct
  loads from and stores to global buffers.

The estimate is ``max(compute time, memory time)``; whichever is larger names the bound. Like
any static model it assumes perfect reuse inside a tile and none across tiles, and it counts
both branches of an ``if`` as the more expensive one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import ConfigError, TilewrightError
from ..ir import REDUCE_OPS, SCAN_OPS, decode
from ..plugin import ArchModel
from ..profiler.arch import get_arch

__all__ = ["FLOP_RULES", "AnalysisResult", "Analyzer", "plot_roofline"]

# -- FLOPs of tile ops, one rule per op ----------------------------------------------------------
FLOP_RULES: dict = {}


def _flop_rule(*names):
    def register(fn):
        for name in names:
            FLOP_RULES[name] = fn
        return fn

    return register


@_flop_rule("gemm")
def _gemm_flops(call, size):
    a, c = call.operands["A"], call.operands["C"]
    k = size(a.extents[-2] if call.attrs["transpose_A"] else a.extents[-1])
    return 2 * math.prod(size(e) for e in c.extents) * k, a.buffer.dtype


@_flop_rule(*sorted(REDUCE_OPS), *sorted(SCAN_OPS))
def _per_source_element(call, size):
    src = call.operands["src"]
    return math.prod(size(e) for e in src.extents), src.buffer.dtype


@_flop_rule("atomic_add", "atomic_max", "atomic_min")
def _atomic_flops(call, size):
    dst = call.operands["dst"]
    return math.prod(size(e) for e in dst.extents), dst.buffer.dtype


# -- elementwise FLOPs -------------------------------------------------------------------------
_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
_NOT_FLOPS = {"tirx.reinterpret", "tirx.if_then_else", "tirx.likely", "tirx.ret"}


def _is_float(expr) -> bool:
    text = str(expr.ty)
    return "float" in text


def _expr_counts(expr) -> tuple[int, list]:
    """(float operations, global buffers loaded) in one evaluation of ``expr``."""
    flops = 0
    loads = []

    def arith(node):
        nonlocal flops
        if _is_float(node):
            flops += 1

    def call(node):
        nonlocal flops
        op = node.op
        if isinstance(op, tvm.ir.Op) and op.name.startswith("tirx.") and \
                op.name not in _NOT_FLOPS and _is_float(node):
            flops += 1

    def load(node):
        if node.source.scope() == "global":
            loads.append(node.source)

    tvm_ffi.structural_walk(expr, [(_ARITH, arith), (tvm.ir.Call, call),
                                   (tvm.ir.TensorLoad, load)])
    return flops, loads


# -- the counting walk -------------------------------------------------------------------------
@dataclass
class _Counts:
    flops: dict = field(default_factory=dict)  # dtype -> flops
    by_op: dict = field(default_factory=dict)  # op name (or "elementwise") -> flops
    bytes: dict = field(default_factory=dict)  # "copy", "load", "store", op name -> bytes

    def add(self, other: _Counts, scale: int = 1) -> None:
        for mine, theirs in ((self.flops, other.flops), (self.by_op, other.by_op),
                             (self.bytes, other.bytes)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value * scale

    def total(self) -> int:
        return sum(self.flops.values()) + sum(self.bytes.values())


def _dtype_bytes(dtype) -> int:
    return max(1, tvm.DataType(str(dtype)).bits * tvm.DataType(str(dtype)).lanes // 8)


class _Walker:
    def __init__(self, symbols: dict[str, int]):
        self.symbols = dict(symbols)
        self.analyzer = tvm.sym.Analyzer()
        self.grid: dict[str, int] = {}
        self.loops: list[tuple[str, int, str]] = []
        self.uncounted: set[str] = set()
        self.notes: list[str] = []

    def size(self, expr, what: str = "an extent") -> int:
        if isinstance(expr, int):
            return expr
        free = []
        tvm_ffi.structural_walk(expr, (tirx.Var, free.append))
        for var in free:
            if var.name in self.symbols:
                self.analyzer.bind(var, tirx.IntImm(str(var.ty), int(self.symbols[var.name])))
        value = self.analyzer.simplify(expr)
        if isinstance(value, tirx.IntImm):
            return int(value.value)
        names = sorted({v.name for v in free} - set(self.symbols))
        raise ConfigError(f"{what} is symbolic ({expr}); pass its value with "
                          f"symbols={{{', '.join(repr(n) + ': ...' for n in names)}}}")

    def visit(self, stmt) -> _Counts:
        method = getattr(self, f"visit_{type(stmt).__name__}", None)
        if method is not None:
            return method(stmt)
        counts = _Counts()
        body = getattr(stmt, "body", None)
        if isinstance(body, tirx.Stmt):
            counts.add(self.visit(body))
        return counts

    def visit_SeqStmt(self, stmt):
        counts = _Counts()
        for child in stmt.seq:
            counts.add(self.visit(child))
        return counts

    def visit_For(self, stmt):
        name = stmt.loop_var.name
        extent = self.size(stmt.extent, f"the extent of loop {name!r}")
        binding = stmt.thread_binding
        tag = str(binding.thread_tag) if binding is not None else ""
        if tag.startswith("blockIdx."):
            self.grid[tag[-1]] = self.grid.get(tag[-1], 1) * extent
        kind = tag or str(stmt.annotations.get("tw.loop", "")) or \
            str(stmt.kind).split(".")[-1].lower()
        self.loops.append((name, extent, kind))
        counts = _Counts()
        counts.add(self.visit(stmt.body), extent)
        return counts

    def visit_IfThenElse(self, stmt):
        then = self.visit(stmt.then_case)
        other = self.visit(stmt.else_case) if stmt.else_case is not None else _Counts()
        return then if then.total() >= other.total() else other

    def visit_While(self, stmt):
        self.notes.append("a while loop's body is counted once (its trip count is unknown)")
        return self.visit(stmt.body)

    def visit_BufferStore(self, stmt):
        counts = _Counts()
        flops, loads = _expr_counts(stmt.value)
        for index in stmt.indices:
            loads += _expr_counts(index)[1]
        dtype = str(stmt.buffer.dtype)
        if flops:
            counts.flops[dtype] = flops
            counts.by_op["elementwise"] = flops
        if loads:
            counts.bytes["load"] = sum(_dtype_bytes(b.dtype) for b in loads)
        if stmt.buffer.scope() == "global":
            counts.bytes["store"] = _dtype_bytes(dtype)
        return counts

    def visit_Bind(self, stmt):
        counts = _Counts()
        value = getattr(stmt, "value", None)
        if value is not None:
            flops, loads = _expr_counts(value)
            if flops:
                counts.flops[str(value.ty)] = flops
                counts.by_op["elementwise"] = flops
            if loads:
                counts.bytes["load"] = sum(_dtype_bytes(b.dtype) for b in loads)
        return counts

    def visit_Evaluate(self, stmt):
        call = decode(stmt)
        counts = _Counts()
        if call is None:
            return counts
        for operand in call.schema.operands:
            region = call.operands.get(operand.name)
            if operand.kind == "expr" or not hasattr(region, "buffer"):
                continue
            if region.buffer.scope() != "global":
                continue
            elements = math.prod(self.size(e, f"a region extent of {call.name}")
                                 for e in region.extents)
            times = 2 if operand.access == "readwrite" else 1
            key = "copy" if call.name == "copy" else call.name
            counts.bytes[key] = counts.bytes.get(key, 0) + \
                times * elements * _dtype_bytes(region.buffer.dtype)
        rule = FLOP_RULES.get(call.name)
        if rule is None:
            if call.name not in ("copy", "fill", "print_tile", "print_value", "device_assert"):
                self.uncounted.add(call.name)
            return counts
        flops, dtype = rule(call, lambda e: self.size(e, f"a region extent of {call.name}"))
        if flops:
            counts.flops[str(dtype)] = flops
            counts.by_op[call.name] = flops
        return counts


# -- results ---------------------------------------------------------------------------------
def _peak(arch: ArchModel, dtype: str) -> float:
    peaks = arch.peak_tflops
    return peaks.get(dtype) or peaks.get("float32") or min(peaks.values())


@dataclass
class AnalysisResult:
    """What :meth:`Analyzer.analysis` found. Times are in seconds, rates per second."""

    name: str
    arch: ArchModel
    total_flops: int
    total_global_bytes: int
    estimated_time: float
    expected_tflops: float
    expected_bandwidth_GBps: float
    bound: str  # "compute" or "memory"
    compute_time: float
    memory_time: float
    flops_by_dtype: dict
    flops_by_op: dict
    bytes_by_kind: dict
    grid: tuple
    loops: list
    uncounted_ops: list
    notes: list

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per global byte."""
        return self.total_flops / self.total_global_bytes if self.total_global_bytes else \
            float("inf")

    def summary(self) -> str:
        ops = ", ".join(f"{k} {v:.3g}" for k, v in self.flops_by_op.items()) or "none"
        kinds = ", ".join(f"{k} {v:.3g}" for k, v in self.bytes_by_kind.items()) or "none"
        lines = [
            f"kernel {self.name} on {self.arch.name}: {self.bound}-bound",
            f"  total FLOPs         {self.total_flops:.4g}  ({ops})",
            f"  global bytes        {self.total_global_bytes:.4g}  ({kinds})",
            f"  intensity           {self.arithmetic_intensity:.3g} FLOP/B",
            f"  grid                {' x '.join(str(g) for g in self.grid) or '1'}",
            (f"  compute / memory    {self.compute_time * 1e3:.4g} ms / "
             f"{self.memory_time * 1e3:.4g} ms"),
            f"  estimated time      {self.estimated_time * 1e3:.4g} ms",
            (f"  expected            {self.expected_tflops:.4g} TFLOP/s, "
             f"{self.expected_bandwidth_GBps:.4g} GB/s"),
        ]
        if self.uncounted_ops:
            lines.append(f"  not counted         {', '.join(self.uncounted_ops)} (no FLOP rule)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def plot(self, path, measured_ms: float | None = None):
        """Draw this kernel on the roofline of its architecture (``.png`` or ``.svg``)."""
        return plot_roofline([self], path, measured_ms=[measured_ms])


def _function(func):
    if hasattr(func, "get_tir"):  # a compiled kernel
        func = func.get_tir()
    if isinstance(func, tvm.IRModule):
        items = list(func.functions.items())
        prims = [(gv, f) for gv, f in items if isinstance(f, tirx.PrimFunc)]
        if len(prims) != 1:
            raise ConfigError(f"the IRModule holds {len(prims)} PrimFuncs; pass one of them")
        gv, func = prims[0]
        return func, gv.name_hint
    if not isinstance(func, tirx.PrimFunc):
        raise ConfigError(f"Analyzer.analysis takes a PrimFunc, an IRModule or a compiled "
                          f"kernel, got {type(func).__name__}")
    name = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs \
        else "main"
    return func, str(name)


class Analyzer:
    """Static roofline analysis of a tile program (see the module docstring)."""

    @staticmethod
    def analysis(func, arch, symbols: dict[str, int] | None = None) -> AnalysisResult:
        """Analyse ``func`` (a tile-level PrimFunc, an IRModule holding one, or a compiled
        kernel) on ``arch`` (an :class:`~tilewright.plugin.ArchModel` or a registered model's
        name). ``symbols`` gives values to dynamic dimensions by name."""
        func, name = _function(func)
        model = get_arch(arch)
        walker = _Walker(symbols or {})
        counts = walker.visit(func.body)
        flops = sum(counts.flops.values())
        nbytes = sum(counts.bytes.values())
        compute = sum(v / (_peak(model, d) * 1e12) for d, v in counts.flops.items())
        memory = nbytes / (model.bandwidth_gbps * 1e9)
        estimated = max(compute, memory)
        if estimated <= 0:
            raise TilewrightError(f"kernel {name} does no counted work (no FLOPs and no global "
                                  "bytes); nothing to analyse")
        grid = tuple(walker.grid.get(axis, 1) for axis in "xyz" if axis in walker.grid)
        return AnalysisResult(
            name=name, arch=model, total_flops=flops, total_global_bytes=nbytes,
            estimated_time=estimated, expected_tflops=flops / estimated / 1e12,
            expected_bandwidth_GBps=nbytes / estimated / 1e9,
            bound="compute" if compute >= memory else "memory",
            compute_time=compute, memory_time=memory, flops_by_dtype=dict(counts.flops),
            flops_by_op=dict(counts.by_op), bytes_by_kind=dict(counts.bytes), grid=grid,
            loops=walker.loops, uncounted_ops=sorted(walker.uncounted), notes=walker.notes)


# -- the chart -------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise TilewrightError("drawing a roofline chart needs matplotlib: pip install "
                              "'tilewright[viz]'") from None
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_roofline(results, path, measured_ms=None):
    """Draw ``results`` (analysis results of one architecture) on its roofline into ``path``
    (``.png`` or ``.svg``). ``measured_ms`` optionally gives each kernel's measured time,
    drawn as a hollow marker. Returns the path."""
    from pathlib import Path

    results = list(results)
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ConfigError(f"a roofline chart is written as .png or .svg, not {path.name!r}")
    if not results:
        raise ConfigError("plot_roofline needs at least one analysis result")
    arch = results[0].arch
    if any(r.arch.name != arch.name for r in results):
        raise ConfigError("every result on one roofline chart must use the same architecture")
    measured = list(measured_ms or [None] * len(results))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finite = [r.arithmetic_intensity for r in results if math.isfinite(r.arithmetic_intensity)]
    low = min([0.1, *finite]) / 2
    high = max([1e3, *finite]) * 2
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    for dtype, peak in sorted(arch.peak_tflops.items(), key=lambda kv: -kv[1]):
        ys = [min(peak, x * arch.bandwidth_gbps / 1e3) for x in xs]
        ax.plot(xs, ys, label=f"{dtype} peak {peak:.3g} TFLOP/s")
    for result, ms in zip(results, measured):
        x = result.arithmetic_intensity if math.isfinite(result.arithmetic_intensity) else high
        ax.plot([x], [result.expected_tflops], "o", label=f"{result.name} (expected)")
        if ms:
            achieved = result.total_flops / (ms * 1e-3) / 1e12
            ax.plot([x], [achieved], "o", mfc="none", label=f"{result.name} (measured)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / global byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"roofline: {arch.name} ({arch.bandwidth_gbps:.4g} GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
