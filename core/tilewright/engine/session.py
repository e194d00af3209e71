"""One compilation: check the kernel against the backend, run its phases under one
instrumentation point, generate source, and build it with the first available executor."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import KernelError, TilewrightError, UnsupportedOpError, span_location
from ..ir import (
    SOURCE_KERNELS,
    Region,
    apply_fallbacks,
    intrinsic_features,
    intrinsics_in,
    tile_ops_in,
    vector_values,
)
from ..log import get_logger
from ..plugin import BackendModule, Executor, GeneratedSource, get_manager, passconfig
from ..plugin.types import VECTOR_BITS
from ..transform import (
    check_bounds,
    instrument_bounds,
    legalize_negative_indices,
    legalize_safe_memory,
    reraise_pass_error,
    without_safe_value_scopes,
)
from ..transform.safe_memory import DISABLE_KEY as SAFE_MEMORY_DISABLE_KEY
from ..transform.sequence import kernel_blocks
from . import events, listeners
from .target import Target, resolve_target

_log = get_logger("engine")


@dataclass
class CompileContext:
    """What the phases, codegen and executors of a compilation can read."""

    target: Target
    backend: BackendModule
    pass_configs: dict
    session: int
    func_name: str
    timings: dict = field(default_factory=dict)
    detach: Any = None  # detaches the debug tools pass_configs switched on; None once finished


@dataclass
class Lowered:
    """The result of :func:`lower`: final IR and generated source."""

    ctx: CompileContext
    tile_func: tirx.PrimFunc
    module: tvm.IRModule
    source: GeneratedSource


class _Instrument:
    """Reports every TVM pass of a phase as engine events."""

    def __init__(self, session: int, phase: list):
        self.session, self.phase = session, phase

    def enter_pass_ctx(self):
        pass

    def exit_pass_ctx(self):
        pass

    def should_run(self, mod, info):
        return True

    def run_before_pass(self, mod, info):
        events.emit("pass_start", self.session, phase=self.phase[0], name=info.name, mod=mod)

    def run_after_pass(self, mod, info):
        events.emit("pass_end", self.session, phase=self.phase[0], name=info.name, mod=mod)


def _instrument(session: int, phase: list):
    cls = tvm.ir.instrument.pass_instrument(_Instrument)
    return cls(session, phase)


def check_support(func: tirx.PrimFunc, backend: BackendModule) -> None:
    """Every tile op and dtype the kernel uses must be one the backend declares, a ``while``
    loop with a run-time condition needs the ``while_loops`` feature, and a
    ``T.StridedTensor`` parameter the ``strided_tensors`` feature."""
    caps = backend.capabilities
    for call in tile_ops_in(func):
        if call.name not in caps.tile_ops and call.schema.dialect:
            raise UnsupportedOpError(
                f"T.{call.name} is an op of the '{call.schema.dialect}' dialect, lowered only by "
                f"backend(s) {', '.join(call.schema.backends)}; backend '{backend.name}' cannot "
                "lower it: compile for one of those targets or use portable ops",
                span_location(call.span))
        if call.name not in caps.tile_ops:
            raise UnsupportedOpError(
                f"T.{call.name} is not supported by backend '{backend.name}' (it supports "
                f"{', '.join(sorted(caps.tile_ops))}); choose another target or rewrite the "
                "kernel without it", span_location(call.span))
        if call.name in caps.op_dtypes:
            # read operands: regions, and a value that may be a region or an expression
            # (the value an atomic adds)
            inputs = [call.operands[op.name] for op in call.schema.operands
                      if op.kind in ("region", "any") and op.access == "read"]
            for operand in inputs:
                region = isinstance(operand, Region)
                dtype = str(operand.buffer.dtype if region else operand.ty)
                if not caps.supports(call.name, dtype):
                    what = operand.buffer.name if region else "a value"
                    raise UnsupportedOpError(
                        f"T.{call.name} on {dtype} operands ({what}) is not "
                        f"supported by backend '{backend.name}' (it takes "
                        f"{', '.join(sorted(caps.op_dtypes[call.name]))})",
                        span_location(call.span))
    if "warps" in caps.features:
        _check_warps(func, backend)
    if "while_loops" not in caps.features:
        loops = []
        tvm_ffi.structural_walk(func.body, (tirx.While, loops.append))
        if loops:
            raise UnsupportedOpError(
                f"backend '{backend.name}' cannot run a 'while' loop with a run-time condition; "
                "use a T.serial loop over an upper bound with an 'if' inside",
                span_location(loops[0].span))
    launches = _kernel_launches(func)
    if len(launches) > 1 and "kernel_sequence" not in caps.features:
        having = sorted(name for name, b in get_manager().backends().items()
                        if "kernel_sequence" in b.capabilities.features)
        raise UnsupportedOpError(
            f"this kernel has {len(launches)} 'with T.Kernel' blocks run one after another; "
            f"backend '{backend.name}' runs one block per function: split it into one kernel "
            "per block, or compile for a backend with the 'kernel_sequence' feature ("
            f"{', '.join(having) or 'none is loaded'})", span_location(launches[1].span))
    if "strided_tensors" not in caps.features:
        _refuse_strided(func, backend)
    for name in sorted(set(intrinsics_in(func)) - caps.tile_ops):
        raise UnsupportedOpError(f"T.{name} is not supported by backend '{backend.name}'; "
                                 "choose another target or rewrite the kernel without it",
                                 _intrinsic_location(func, name))
    for feature, what in sorted(intrinsic_features(func).items()):
        if feature not in caps.features:
            raise UnsupportedOpError(f"{what} is not supported by backend '{backend.name}' (it "
                                     f"does not declare the feature {feature!r})",
                                     _feature_location(func, feature))
    _check_dtypes(func, backend)


def _refuse_strided(func: tirx.PrimFunc, backend: BackendModule) -> None:
    """Refuses a ``T.StridedTensor`` parameter on ``backend`` (which lacks the
    ``strided_tensors`` feature) at the first line using it, else the first kernel's."""
    for param in func.params:
        if not tirx.buffer.is_buffer_var(param) or not len(param.strides):
            continue
        having = ", ".join(sorted(name for name, b in get_manager().backends().items()
                                  if "strided_tensors" in b.capabilities.features))
        location = _first_line(func, lambda stmt, b=param: _touches(stmt, b))
        if location is None and _kernel_launches(func):
            location = span_location(_kernel_launches(func)[0].span)
        raise UnsupportedOpError(
            f"parameter {param.name!r} is a T.StridedTensor, which backend '{backend.name}' "
            "does not take (it addresses its tensors contiguously): declare it with T.Tensor "
            "(a non-contiguous argument is then passed as a contiguous copy), or compile for a "
            f"backend with the 'strided_tensors' feature ({having or 'none is loaded'})",
            location)


def _check_dtypes(func: tirx.PrimFunc, backend: BackendModule) -> None:
    """Every dtype of the kernel's tensors, allocations and conversions is one the backend
    declares it computes (``Capabilities.dtypes``); the first that is not is refused at the
    first line using it, naming the backend and the dtypes it offers."""
    caps = backend.capabilities

    def refuse(dtype: str, what: str, location):
        vectors = ""
        if tvm.runtime.DataType(dtype).lanes > 1:  # which vectors the backend computes
            vectors = "; vectors of none" if "vector_dtypes" not in caps.features else \
                "; vectors of them of any width" if "wide_vectors" in caps.features else \
                f"; vectors of them of up to {VECTOR_BITS} bits"
        return UnsupportedOpError(
            f"{what} is {dtype}, which backend '{backend.name}' does not compute (it offers "
            f"{', '.join(sorted(caps.dtypes))}{vectors}); choose another target or another "
            "dtype", location)

    for param in func.params:
        buf = func.buffer_map.get(param, param) if hasattr(func, "buffer_map") else param
        dtype = str(getattr(buf, "dtype", ""))
        if dtype and not caps.computes(dtype) and dtype != "handle":
            raise refuse(dtype, f"parameter {buf.name!r}",
                         _first_line(func, lambda stmt, b=buf: _touches(stmt, b)))
    found = []

    def allocated(stmt):
        if not found and not caps.computes(str(stmt.buffer.dtype)):
            found.append(stmt)

    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, allocated))
    if found:
        buf = found[0].buffer
        raise refuse(str(buf.dtype), f"buffer {buf.name!r}", span_location(found[0].span))
    casts = []
    tvm_ffi.structural_walk(func.body, (tirx.Cast, lambda c: casts.append(str(c.ty))))
    for dtype in casts:
        if not caps.computes(dtype):
            raise refuse(dtype, "a conversion's result", _first_line(
                func, lambda stmt, d=dtype: _converts_to(stmt, d)))
    for dtype in vector_values(func.body):
        if not caps.computes(dtype):
            raise refuse(dtype, "a value", _first_line(
                func, lambda stmt, d=dtype: d in vector_values(stmt)))


def _touches(stmt, buffer) -> bool:
    """Whether ``stmt`` loads or stores ``buffer`` (a tile op's regions included)."""
    hit = []

    def visit(node):
        source = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if source.same_as(buffer):
            hit.append(node)

    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
    return bool(hit)


def _converts_to(stmt, dtype: str) -> bool:
    """Whether ``stmt`` converts a value to ``dtype``."""
    hit = []
    tvm_ffi.structural_walk(stmt, (tirx.Cast, lambda c: hit.append(str(c.ty) == dtype)))
    return any(hit)


def _kernel_launches(func: tirx.PrimFunc) -> list[tirx.For]:
    """The 'with T.Kernel' blocks at the top of ``func``, in order."""
    return kernel_blocks(func)


def _first_line(func: tirx.PrimFunc, uses):
    """The source line of the first statement ``uses`` says is it."""
    found = []

    def visit(stmt):
        if not found and stmt.span is not None and uses(stmt):
            found.append(span_location(stmt.span))

    tvm_ffi.structural_walk(func.body, [(t, visit) for t in (
        tirx.BufferStore, tirx.Evaluate, tirx.AssertStmt, tirx.Bind)])
    return found[0] if found else None


def _intrinsic_location(func: tirx.PrimFunc, name: str):
    """The source line of the first statement that uses expression intrinsic ``name``."""
    return _first_line(func, lambda stmt: name in intrinsics_in(stmt))


def _feature_location(func: tirx.PrimFunc, feature: str):
    """The source line of the first statement whose intrinsics need backend ``feature``."""
    return _first_line(func, lambda stmt: feature in intrinsic_features(stmt))


def _check_warps(func: tirx.PrimFunc, backend: BackendModule) -> None:
    """A backend that schedules warps needs a block size that is a multiple of 32 (but for a
    ``T.CUDASourceCodeKernel``'s, whose threads the user's code schedules)."""
    loop = func.body
    if isinstance(loop, tirx.For) and "tw.threads" in loop.annotations and \
            SOURCE_KERNELS not in intrinsic_features(loop):
        threads = [int(t) for t in loop.annotations["tw.threads"]]
        total = threads[0] * threads[1] * threads[2]
        if total % 32:
            raise KernelError(
                f"T.Kernel threads={threads[0] if total == threads[0] else threads} gives "
                f"{total} threads per block, but backend '{backend.name}' runs whole warps: "
                "use a multiple of 32", span_location(loop.span))


def lower(func: tirx.PrimFunc, target="auto", pass_configs=None) -> Lowered:
    """Run the backend's pipeline and codegen on ``func``."""
    target_obj, backend = resolve_target(target)
    configs = passconfig.validate(pass_configs)
    passconfig.note_ignored(configs, backend.name)
    session = events.new_session()
    name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
        else "main"
    ctx = CompileContext(target_obj, backend, configs, session, name)
    # intrinsics the backend does not declare and the core can decompose (a fast-math call
    # into the precise function, T.__ldg into a load) are decomposed, not refused
    func = apply_fallbacks(func, backend.capabilities.tile_ops)
    check_support(func, backend)
    func = legalize_negative_indices(func)
    check_bounds(func)
    if configs.get("tw.bounds_check"):
        func = instrument_bounds(func)
    func = without_safe_value_scopes(func) if configs.get(SAFE_MEMORY_DISABLE_KEY) else \
        legalize_safe_memory(func)
    _log.debug("session %d: lowering %s for %s (backend %s)", session, name, target_obj,
               backend.name)
    detach = _attach_config_tools(session, configs)
    events.emit("session_start", session, target=str(target_obj), backend=backend.name,
                func=func, name=name, pass_configs=configs)
    phase = [""]
    instruments = [_instrument(session, phase)] if events.active() else []
    mod = tvm.IRModule({name: func})
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=instruments):
            for step in backend.pipelines[target_obj.kind].phases:
                phase[0] = step.name
                start = time.perf_counter()
                for p in step.passes(ctx):
                    mod = p(mod)
                ctx.timings[step.name] = time.perf_counter() - start
            phase[0] = "codegen"
            start = time.perf_counter()
            source = backend.codegens[target_obj.kind].generate(mod, ctx)
            ctx.timings["codegen"] = time.perf_counter() - start
    except Exception as exc:
        events.emit("session_end", session, ok=False, error=exc, phase=phase[0])
        detach()
        reraise_pass_error(exc)
        raise
    event = events.emit("codegen", session, language=source.language, text=source.text,
                        file_ext=source.file_ext, mod=mod)
    if event is not None and event.data.get("patched_text") is not None:
        # a debug tool (the lower trace's edit-and-recompile workflow) supplies edited source;
        # executors that compile source text use it, the others keep building the payload
        source = dataclasses.replace(source, text=event.data["patched_text"])
    ctx.detach = detach
    return Lowered(ctx, func, mod, source)


def _no_tools() -> None:
    pass


def _attach_config_tools(session: int, configs: dict):
    """Debug tools switched on by ``pass_configs`` (IR dumps, layout views, pass timing)
    listen to this session only; returns the callable that detaches them."""
    if not passconfig.debug_requested(configs):
        return _no_tools
    return listeners.attach(session, configs)


def pick_executor(backend: BackendModule, name: str | None = None) -> Executor:
    """The named executor, or the first available one; errors explain each refusal."""
    reasons = []
    for executor in backend.executors:
        if name is not None and executor.name != name:
            continue
        availability = executor.available()
        if availability:
            return executor
        reasons.append(f"{executor.name}: {availability.reason}")
    if name is not None and not reasons:
        names = ", ".join(e.name for e in backend.executors)
        raise TilewrightError(f"backend '{backend.name}' has no executor {name!r} ({names})")
    raise TilewrightError(f"no executor of backend '{backend.name}' is available here: "
                          + "; ".join(reasons))


def build(lowered: Lowered, workdir, executor: str | None = None) -> tuple[Any, Executor]:
    """Build ``lowered`` with an executor, writing its artifacts into ``workdir``."""
    chosen = pick_executor(lowered.ctx.backend, executor)
    start = time.perf_counter()
    kernel = chosen.build(lowered.source, lowered.ctx, workdir)
    lowered.ctx.timings["build"] = time.perf_counter() - start
    _log.debug("session %d: built with executor %s; timings %s", lowered.ctx.session,
               chosen.name, {k: round(v, 4) for k, v in lowered.ctx.timings.items()})
    events.emit("build", lowered.ctx.session, executor=chosen.name, workdir=str(workdir),
                from_source=chosen.from_source,
                source_executors=[e.name for e in lowered.ctx.backend.executors
                                  if e.from_source])
    finish(lowered)
    return kernel, chosen


def finish(lowered: Lowered) -> None:
    """End the compile session of ``lowered`` (``build`` does; callers that only lower, such as
    compile-only, call it themselves so that debug tools finish their reports)."""
    if lowered.ctx.detach is None:
        return
    events.emit("session_end", lowered.ctx.session, ok=True, timings=dict(lowered.ctx.timings))
    lowered.ctx.detach()
    lowered.ctx.detach = None
