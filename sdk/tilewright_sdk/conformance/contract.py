"""Contract checks for any backend. Each raises ``AssertionError`` with a sentence saying
what is wrong; the conformance suite's ``test_contract`` runs them, and a backend's own tests
may call them directly."""

from __future__ import annotations

import dataclasses

from tilewright.errors import PluginError, UnsupportedOpError
from tilewright.ir import PORTABLE_OPS, registered_capabilities
from tilewright.plugin import (
    ArchModel,
    Availability,
    BackendModule,
    PassPipeline,
    Timer,
    get_manager,
    implemented_hooks,
)

KNOWN_DTYPES = frozenset({
    "bool", "int4", "uint4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn", "float16",
    "bfloat16", "tfloat32", "float32", "float64"})


def check_declarations(backend: BackendModule) -> None:
    """The declaration validates again when rebuilt (the checks of its ``__post_init__``)."""
    try:
        dataclasses.replace(backend)
    except PluginError as exc:
        raise AssertionError(f"backend '{backend.name}' does not validate: {exc}") from None
    assert isinstance(backend.version, str) and backend.version, \
        f"backend '{backend.name}' declares no version"
    for kind in backend.target_kinds:
        pipeline = backend.pipelines[kind]
        assert isinstance(pipeline, PassPipeline), f"target {kind!r} has no PassPipeline"


def check_capabilities(backend: BackendModule) -> None:
    """Capabilities name registered tile ops (or expression intrinsics) and known dtypes
    only."""
    caps = backend.capabilities
    unknown_ops = sorted(set(caps.tile_ops) - registered_capabilities())
    assert not unknown_ops, (f"backend '{backend.name}' declares tile ops that are not "
                             f"registered: {', '.join(unknown_ops)}")
    unknown = sorted(set(caps.dtypes) - KNOWN_DTYPES)
    assert not unknown, f"backend '{backend.name}' declares unknown dtypes: {', '.join(unknown)}"


def check_target_claims(backend: BackendModule, manager=None) -> None:
    """Each target kind the backend claims is claimed by it alone."""
    claims = (manager or get_manager()).claims()
    for kind in backend.target_kinds:
        owners = claims.get(kind, [])
        assert owners == [backend.name], (f"target {kind!r} of backend '{backend.name}' is "
                                          f"claimed by {', '.join(owners) or 'nobody'}")


def check_target_declarations(backend: BackendModule, manager=None) -> None:
    """The plugin's distribution declares, in the entry-point group ``tilewright.targets``,
    exactly the target kinds its backends claim (so that a target imports only its plugin),
    and, for an accelerator, a probe of its device in ``tilewright.devices`` that agrees with
    the backend's own (so that target ``"auto"`` imports it only where the device is)."""
    manager, record = _installed_record(backend, manager)
    if record is None:
        return  # registered in memory, not installed: no distribution to declare
    declared = manager.declared_targets(record.name)
    claimed = {kind for b in record.backends for kind in b.target_kinds}
    assert declared == claimed, (
        f"{record.label} declares the targets {sorted(declared)} in the entry-point "
        f"group tilewright.targets but its backends claim {sorted(claimed)}: list each "
        f"kind there as `KIND = \"{record.module.__name__}\"`")
    if backend.accelerator:
        probe = manager.device_probe(record.name)
        assert probe is not None, (
            f"{record.label} has the accelerator backend '{backend.name}' but declares no "
            f"probe of its device in the entry-point group tilewright.devices "
            f"(`{record.name} = \"MODULE:FUNCTION\"`, a function importing nothing heavy)")
        assert bool(probe()) == bool(backend.device_available()), (
            f"{record.label}: the device probe it declares says {bool(probe())}, backend "
            f"'{backend.name}' says {bool(backend.device_available())}")


def _installed_record(backend: BackendModule, manager):
    """The loaded manager and the record of the plugin whose backends include ``backend``;
    None for one registered in memory (no distribution declares anything for it)."""
    manager = (manager or get_manager()).load()
    for record in manager.records.values():
        if backend in record.backends:
            return manager, (record if manager.declared_targets(record.name) is not None
                             else None)
    return manager, None


def check_hook_declarations(backend: BackendModule, manager=None) -> None:
    """The plugin's distribution declares, in the entry-point group ``tilewright.hooks``,
    exactly the hooks its module implements (``tilewright_backends`` included), so that
    collecting a hook imports only the plugins implementing it."""
    manager, record = _installed_record(backend, manager)
    if record is None:
        return  # registered in memory, not installed: no distribution to declare
    declared = manager.declared_hooks(record.name)
    implemented = implemented_hooks(record.module)
    assert declared == implemented, (
        f"{record.label} declares the hooks {sorted(declared)} in the entry-point group "
        f"tilewright.hooks but its module {record.module.__name__} implements "
        f"{sorted(implemented)}: list each hook there as "
        f"`tilewright_HOOK = \"{record.module.__name__}\"` (and reinstall the "
        f"distribution, which is where entry points are read from)")


def check_executors(backend: BackendModule) -> None:
    """Executor names are unique; each says whether it is available, and why not."""
    names = [e.name for e in backend.executors]
    assert len(set(names)) == len(names), f"executor names repeat: {names}"
    for executor in backend.executors:
        availability = executor.available()
        assert isinstance(availability, Availability), (
            f"executor {executor.name!r} of backend '{backend.name}': available() returned "
            f"{type(availability).__name__}, not an Availability")
        if not availability.ok:
            assert isinstance(availability.reason, str) and availability.reason.strip(), (
                f"executor {executor.name!r} of backend '{backend.name}' is unavailable and "
                "gives no reason; return Availability(False, 'what is missing and how to get it')")


def check_phases_visible(backend: BackendModule) -> None:
    """Every phase with passes shows up in the engine's instrumentation, under its name, and
    the codegen step is reported."""
    from tilewright.engine import events, lower

    from .catalogue import probe_kernel

    seen, codegen = [], []

    def listen(event):
        if event.kind == "pass_start":
            seen.append(event.data["phase"])
        elif event.kind == "codegen":
            codegen.append(event.data)

    for kind in backend.target_kinds:
        seen.clear()
        codegen.clear()
        dtype = "float32" if "float32" in backend.capabilities.dtypes else \
            min(backend.capabilities.dtypes)
        events.subscribe(listen)
        try:
            lowered = lower(probe_kernel(dtype), kind)
        finally:
            events.unsubscribe(listen)
        for phase in backend.pipelines[kind].phases:
            if phase.passes(lowered.ctx):
                assert phase.name in seen, (
                    f"phase {phase.name!r} of backend '{backend.name}' ran no pass the engine "
                    "saw; return TVM passes from Phase.passes instead of running them yourself")
        assert codegen, f"backend '{backend.name}': the codegen step emitted no event"
        assert isinstance(lowered.source.text, str), "codegen must return source text"


def check_unsupported_message(backend: BackendModule) -> None:
    """A kernel using an op the backend does not declare fails at compile time with a sentence
    naming the op and the backend. Passes vacuously when the backend declares every op."""
    from tilewright.engine import lower

    from .catalogue import CATALOGUE

    missing = [op for op in PORTABLE_OPS if op not in backend.capabilities.tile_ops]
    kernel = next((k for k in CATALOGUE if set(k.ops) & set(missing)), None)
    if kernel is None:
        return
    dims = next(iter(kernel.shapes.values()))
    func = kernel.make("float32", **dims)
    try:
        lower(func, backend.target_kinds[0])
    except UnsupportedOpError as exc:
        text = str(exc)
        assert f"'{backend.name}'" in text and any(f"T.{op}" in text for op in missing), (
            f"the unsupported-op error of backend '{backend.name}' must name the op and the "
            f"backend; got: {text}")
        return
    raise AssertionError(f"backend '{backend.name}' compiled kernel {kernel.name!r} although it "
                         f"does not declare {sorted(set(kernel.ops) & set(missing))}")


def _plugin_results(backend: BackendModule, hook: str) -> list:
    manager = get_manager().load()
    for record in manager.records.values():
        if backend in record.backends and record.module is not None:
            impl = getattr(record.module, hook, None)
            return list(impl() or []) if impl is not None else []
    return []


def check_timers(backend: BackendModule) -> None:
    """The timers the backend's plugin declares are Timers that say if they are available,
    and the core lists them."""
    timers = _plugin_results(backend, "tilewright_timers")
    listed = {t.name for t in get_manager().collect("tilewright_timers")}
    for timer in timers:
        assert isinstance(timer, Timer), f"tilewright_timers returned {type(timer).__name__}"
        assert callable(timer.measure), f"timer {timer.name!r}: measure is not callable"
        availability = timer.available()
        assert isinstance(availability, Availability), \
            f"timer {timer.name!r}: available() must return an Availability"
        assert availability.ok or availability.reason, \
            f"timer {timer.name!r} is unavailable and gives no reason"
        assert timer.name in listed, f"timer {timer.name!r} is not listed by the core"


def check_arch_models(backend: BackendModule) -> None:
    """The architecture models the backend's plugin declares have positive peaks."""
    for model in _plugin_results(backend, "tilewright_arch_models"):
        assert isinstance(model, ArchModel), \
            f"tilewright_arch_models returned {type(model).__name__}"
        assert model.bandwidth_gbps > 0, f"arch model {model.name!r}: bandwidth must be > 0"
        assert model.peak_tflops and all(v > 0 for v in model.peak_tflops.values()), \
            f"arch model {model.name!r}: peak_tflops must map dtypes to positive numbers"


def check_unsupported_dtype_message(backend: BackendModule) -> None:
    """A kernel on a dtype of the language the backend does not declare (``Capabilities.dtypes``)
    fails at compile time at the first line using it, naming the backend, the dtype and the
    dtypes the backend offers. Passes vacuously when the backend declares every dtype."""
    from tilewright.engine import lower
    from tilewright.language.dtypes import DTYPES, storage_dtype

    from .catalogue import probe_kernel

    dtypes = backend.capabilities.dtypes
    # a dtype the language holds in another (int4 in int8) is the backend's as that one is;
    # vector dtypes (float32x2) are no tensor's (the language refuses them for every backend)
    missing = sorted(d for d in {storage_dtype(str(d)) for d in DTYPES.values()
                                 if d.lanes == 1}
                     if not backend.capabilities.computes(d))
    if not missing:
        return
    try:
        lower(probe_kernel(missing[0]), backend.target_kinds[0])
    except UnsupportedOpError as exc:
        text = str(exc)
        assert f"backend '{backend.name}'" in text and missing[0] in text and \
            ", ".join(sorted(dtypes)) in text and "B[i] = A[i]" in text, (
                f"the unsupported-dtype error of backend '{backend.name}' must name the "
                f"backend, the dtype, the dtypes it offers and the kernel's line; got: {text}")
        return
    raise AssertionError(f"backend '{backend.name}' compiled a {missing[0]} kernel although it "
                         f"does not declare {missing[0]}")
