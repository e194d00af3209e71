"""Running one catalogue case on one backend in one mode.

- ``codegen``: the backend's pipeline and codegen produce source text;
- ``compile``: that source is built into the backend's final artifact by an available executor;
- ``execute``: the kernel is compiled through ``tilewright.compile``, called on random inputs,
  and its outputs compared with the float64 torch reference (:mod:`tilewright.testing`).

A backend that can run kernels here (an available executor and device) is always executed,
whatever the mode: generating or compiling wrong code is not a pass. It can run when one of
its executors is available and its tensors live on the host (``device="cpu"``) or its device
is there. In ``codegen`` and
``compile`` modes a backend that cannot run here reports its cases as not verified (the
summary starts with :data:`NOT_VERIFIED`); in ``execute`` mode such a case is
:class:`Unavailable`.

A case needing an op, dtype or feature the backend does not declare raises
:class:`Unsupported`; a case the backend claims and gets wrong raises an error (a failure).
"""

from __future__ import annotations

import tempfile

import tvm_ffi
from tilewright.ir import registered_ops, tile_ops_in
from tilewright.plugin import BackendModule
from tvm import tirx

from .catalogue import Case
from .outcomes import NOT_VERIFIED

MODES = ("codegen", "compile", "execute")
# a case feature: blocks of one thread (T.Kernel(..., threads=1)), which every backend has
# except one that schedules whole warps (feature "warps": the core refuses other sizes)
SINGLE_THREAD_BLOCKS = "single_thread_blocks"


class Unsupported(Exception):
    """The backend declares it does not support what the case needs."""


class Unavailable(Exception):
    """The backend supports the case but cannot run it on this machine (no executor)."""


def memory_scopes(func) -> set[str]:
    """The memory scopes of the buffers a kernel allocates."""
    found = set()
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda s: found.add(s.buffer.scope())))
    return found


def dtypes_used(func) -> set[str]:
    """The dtypes of a kernel's tensor parameters, allocations and casts."""
    found = {str(p.dtype) for p in func.params if tirx.buffer.is_buffer_var(p)}
    tvm_ffi.structural_walk(func.body, [
        (tirx.AllocBuffer, lambda s: found.add(str(s.buffer.dtype))),
        (tirx.Cast, lambda c: found.add(str(c.ty)))])
    return found


def missing_capabilities(case: Case, backend: BackendModule, func=None) -> list[str]:
    """What ``case`` needs that ``backend``'s :class:`Capabilities` do not declare. The dtypes
    and memory scopes ``func`` (the kernel) uses are checked when it is given."""
    caps = backend.capabilities
    known = registered_ops()
    missing = [f"op {op}" for op in case.kernel.ops if op in known and op not in caps.tile_ops]
    missing += [f"op {op} on {case.dtype}" for op in case.kernel.ops
                if op in caps.tile_ops and case.dtype in caps.dtypes
                and not caps.supports(op, case.dtype)]
    dtypes = {case.dtype, "float32"} | (dtypes_used(func) if func is not None else set())
    missing += [f"dtype {d}" for d in sorted(dtypes) if not caps.computes(d)]
    # a backend has blocks of one thread unless it schedules whole warps
    features = caps.features | ({SINGLE_THREAD_BLOCKS} if "warps" not in caps.features else set())
    missing += [f"feature {f}" for f in case.features if f not in features]
    if func is not None and caps.memory_scopes:
        missing += [f"memory scope {s}" for s in sorted(memory_scopes(func) -
                                                         caps.memory_scopes)]
    return missing


def missing_tile_ops(func, backend: BackendModule) -> list[str]:
    """The tile ops ``func`` uses that ``backend`` does not declare."""
    return sorted({call.name for call in tile_ops_in(func)} - backend.capabilities.tile_ops)


def _available_executor(backend: BackendModule):
    reasons = []
    for executor in backend.executors:
        availability = executor.available()
        if availability:
            return executor
        reasons.append(f"{executor.name}: {availability.reason or 'no reason given'}")
    raise Unavailable(f"no executor of backend '{backend.name}' is available here ("
                      + "; ".join(reasons) + ")")


def cannot_execute(backend: BackendModule) -> str:
    """Why ``backend`` cannot run kernels here ('' when it can)."""
    try:
        _available_executor(backend)
    except Unavailable as exc:
        return str(exc)
    if backend.device == "cpu":  # host tensors: an available executor runs them
        return ""
    device = backend.device_available()
    return "" if device else (f"backend '{backend.name}' has no {backend.device} device "
                              f"here: {device.reason or 'no reason given'}")


def run_case(case: Case, backend: BackendModule, mode: str, target: str | None = None,
             seed: int = 0) -> str:
    """Run ``case``; returns a one-line summary on success."""
    if mode not in MODES:
        raise ValueError(f"unknown conformance mode {mode!r}; choose one of {', '.join(MODES)}")
    case = case.narrowed(backend.capabilities.dtypes)
    missing = missing_capabilities(case, backend)
    func = None
    if not missing:
        func = case.kernel.make(case.dtype, **case.dims)
        missing = missing_capabilities(case, backend, func)
    if missing:
        raise Unsupported(f"backend '{backend.name}' does not declare {', '.join(missing)}")
    target = target or backend.target_kinds[0]
    why_not = cannot_execute(backend)
    if not why_not:
        return execute(case, func, target, seed)
    if mode == "execute":
        raise Unavailable(why_not)
    from tilewright.engine import build, lower

    lowered = lower(func, target)
    text = lowered.source.text
    if not isinstance(text, str) or not text.strip():
        raise AssertionError(f"codegen of backend '{backend.name}' produced no source text")
    done = f"{len(text)} characters of {lowered.source.language}"
    if mode == "compile":
        executor = _available_executor(backend)
        with tempfile.TemporaryDirectory(prefix="tw-conformance-") as workdir:
            fn, chosen = build(lowered, workdir, executor.name)
        if not callable(fn):
            raise AssertionError(f"executor {chosen.name!r} returned a non-callable {fn!r}")
        done = f"built by {chosen.name}"
    return f"{NOT_VERIFIED}{done}; {why_not}"


def execute(case: Case, func, target: str, seed: int = 0) -> str:
    """Compile ``func`` (the case's kernel) for ``target``, run it and compare every output
    with the case's reference; dynamic-shape cases run at a second size too."""
    import tilewright
    import torch
    from tilewright.testing import assert_close, tolerance

    kernel = tilewright.compile(func, out_idx=list(case.kernel.out_idx), target=target)
    shapes = [case.dims]
    if case.variant == "dynamic":  # one compiled kernel must serve other sizes too
        shapes.append({k: max(1, v * 3 // 4 + 1) for k, v in case.dims.items()})
    accum = case.dtype if case.kernel.accumulate_in_dtype else None
    worst = 0.0
    for dims in shapes:
        gen = torch.Generator().manual_seed(seed)
        inputs = case.kernel.inputs(torch, gen, case.dtype, **dims)
        expected = case.reference(inputs, **dims)
        args = [copy_argument(torch, t) for t in inputs]
        result = kernel(*args)
        actual = [] if result is None else list(result) if isinstance(result, (list, tuple)) \
            else [result]
        actual += [args[i] for i in case.kernel.inplace]
        if len(actual) != len(expected):
            raise AssertionError(f"kernel produced {len(actual)} output(s), the reference "
                                 f"{len(expected)}")
        for n, (got, want) in enumerate(zip(actual, expected)):
            exact = {"rtol": 0.0, "atol": 0.0, "max_mismatch_ratio": 0.0} \
                if case.kernel.exact else {}
            if case.kernel.approximate and not case.kernel.exact:
                loose = max(case.kernel.approximate, tolerance(
                    str(got.dtype), reduction_length=case.kernel.reduction(**dims),
                    accum_dtype=accum).rtol)
                exact = {"rtol": loose, "atol": loose}
            result = assert_close(got, want, dtype=str(got.dtype), accum_dtype=accum,
                                  reduction_length=case.kernel.reduction(**dims),
                                  name=f"output {n} at {dims}", **exact)
            worst = max(worst, result.max_rel_error)
    return f"max relative error {worst:.3g}"


def copy_argument(torch, tensor):
    """A copy of the input ``tensor`` with its strides (``clone`` makes a view that is not
    dense, every other column of a matrix, contiguous; a case of strided tensors passes
    such views); a scalar input as it is."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype,
                               device=tensor.device)
    return copy.copy_(tensor)
