"""Loading plugins: entry points, validation, error isolation, target claims.

Loading is idempotent. Every call into a plugin goes through :mod:`.guard`, with a time limit:
a plugin whose import raises (``SystemExit`` included), hangs, implements an unknown hook or
returns an invalid declaration is recorded with its error, named by its distribution and
version, and skipped; the others keep working. A hook that fails later (raises, hangs, returns
the wrong type) loses that hook's contribution only, with a note on the plugin's record; the
availability probes of the declarations handed out are wrapped the same way.

Names are claimed once: two backends with one name are both refused, and a target kind that
several backends claim is refused, each with an error naming every distribution involved; a
timer, architecture model, pass-config key, language extension, command-line tool or lowering
rule that an earlier plugin already provides is refused from the later one, with a note.

A distribution may declare the target kinds its plugin's backends claim in the entry-point
group ``tilewright.targets`` (``cpu = "tilewright_cpu.plugin"``: a kind, then the plugin's
module). When every selected plugin declares its kinds and one declares the kind a target
names, :meth:`PluginManager.backend_for` imports that plugin only (a CPU user does not pay for
importing the CUDA and Ascend backends); a plugin whose backends claim other kinds than it
declares is named in a warning and everything is loaded. An accelerator's distribution also
declares a probe of its device in ``tilewright.devices`` (``cuda =
"tilewright_cuda.arch:device_present"``: the plugin's name, then a function importing nothing
heavy): ``target="auto"`` (:meth:`PluginManager.accelerator_with_device`) then imports only the
plugins whose probe finds a device. A distribution also declares the hooks its plugin
implements in ``tilewright.hooks`` (``tilewright_timers = "tilewright_cuda.plugin"``: a hook,
``tilewright_backends`` included, then the plugin's module). When every selected plugin
declares its hooks, :meth:`PluginManager.collect` imports only the plugins declaring the hook it
gathers (compiling for CUDA asks every plugin for lowering rules; none declares them, so none
other is imported); a plugin implementing other hooks than it declares is named in a warning
when it loads, and from then on each collect loads every plugin. What needs every plugin (the
backend list) loads the rest.

``TILEWRIGHT_PLUGINS`` selects plugins: unset loads all, ``none`` loads none, ``a,b`` loads
only ``a`` and ``b``, ``-a`` loads all but ``a``; a name that is not installed is an error
listing the installed ones.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from importlib import metadata

import pluggy

from ..errors import PluginError, TargetError
from ..log import get_logger
from . import guard, hookspecs, validate
from .guard import ENV_IMPORT_TIMEOUT, ENV_PROBE_TIMEOUT, PluginFault
from .types import BackendModule, Timer
from .validate import ENV_SELECT

ENTRY_POINT_GROUP = "tilewright.plugins"
# target kind -> the module of the plugin whose backends claim it (optional; lets a target load
# only its own plugin)
TARGETS_GROUP = "tilewright.targets"
# plugin name -> a cheap probe of its accelerator's device (optional; lets target "auto" skip
# importing the plugins of absent devices)
DEVICES_GROUP = "tilewright.devices"
# hook -> the module of a plugin implementing it (optional; lets collecting a hook load only the
# plugins implementing it)
HOOKS_GROUP = "tilewright.hooks"
# what a user with no backend at all is told to do
INSTALL_HINT = ("install a backend, for example `pip install tilewright-cpu` (from a checkout: "
                "`pip install -e plugins/cpu`), and check with `tilewright backends`")
hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT)
_SPEC_NAMES = frozenset(n for n in dir(hookspecs) if n.startswith("tilewright_"))
_log = get_logger("plugin")


@dataclass
class PluginRecord:
    """One plugin as the manager saw it; ``error`` holds every problem found, ``; ``-joined."""

    name: str
    version: str = ""
    distribution: str = ""
    status: str = "ok"  # ok | failed | disabled
    error: str = ""
    module: object = None
    backends: list[BackendModule] = field(default_factory=list)
    failed_hooks: set[str] = field(default_factory=set)

    @property
    def label(self) -> str:
        """``plugin 'cuda' (tilewright-cuda 0.1.0)``: how messages name the plugin."""
        dist = " ".join(x for x in (self.distribution, self.version) if x)
        return f"plugin {self.name!r}" + (f" ({dist})" if dist else "")


class PluginManager:
    """Loads and validates plugins; answers which backend owns a target."""

    def __init__(self, entry_points=None, declarations=None, devices=None, hooks=None):
        """``entry_points`` / ``declarations`` / ``devices`` / ``hooks``: the
        ``tilewright.plugins``, ``tilewright.targets``, ``tilewright.devices`` and
        ``tilewright.hooks`` entry points to use instead of the installed ones (tests)."""
        self._explicit = entry_points
        self._explicit_declarations = declarations
        self._explicit_devices = devices
        self._explicit_hooks = hooks
        self._hooks_trusted = True  # False once a plugin implements other hooks than declared
        self._scanned = None  # importlib.metadata's entry points, once read
        self._versions: dict[str, str] = {}  # plugin -> version, of plugins not loaded yet
        self._lock = threading.Lock()
        self._loaded = False
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self._probes: dict[tuple, guard.Probe] = {}

    # -- loading ----------------------------------------------------------------------
    def _installed(self, group: str) -> list:
        """The installed entry points of ``group``, read once (one scan of every
        distribution's metadata serves both groups)."""
        if self._scanned is None:
            self._scanned = metadata.entry_points()
        return list(self._scanned.select(group=group))

    def _entry_points(self):
        if self._explicit is not None:
            return list(self._explicit)
        return self._installed(ENTRY_POINT_GROUP)

    def _declared_group(self, group: str, given) -> list:
        """The entry points of a declaration group: those given to the constructor; none
        where only the plugins were given (a test's world); else the installed ones."""
        if given is not None:
            return list(given)
        return [] if self._explicit is not None else self._installed(group)

    def _declarations(self) -> dict[str, set[str]]:
        """Plugin module -> the target kinds its distribution declares."""
        out: dict[str, set[str]] = {}
        for ep in self._declared_group(TARGETS_GROUP, self._explicit_declarations):
            out.setdefault(ep.value, set()).add(ep.name)
        return out

    def _hook_declarations(self) -> dict[str, set[str]]:
        """Plugin module -> the hooks its distribution declares."""
        out: dict[str, set[str]] = {}
        for ep in self._declared_group(HOOKS_GROUP, self._explicit_hooks):
            out.setdefault(ep.value, set()).add(ep.name)
        return out

    def _devices(self) -> dict:
        """Plugin name -> the entry point of its device probe."""
        return {ep.name: ep for ep in self._declared_group(DEVICES_GROUP,
                                                            self._explicit_devices)}

    def _selected(self) -> list:
        """The entry points ``TILEWRIGHT_PLUGINS`` selects; the others are recorded disabled."""
        entry_points = self._entry_points()
        only, excluded = validate.selection(os.environ.get(ENV_SELECT),
                                            [ep.name for ep in entry_points])
        selected = []
        for ep in entry_points:
            if (only is not None and ep.name not in only) or ep.name in excluded:
                if ep.name not in self.records:
                    record = self.records[ep.name] = _record_of(ep)
                    record.status, record.error = "disabled", f"disabled by {ENV_SELECT}"
            else:
                selected.append(ep)
        return selected

    def _load_entry(self, ep) -> PluginRecord:
        record = self.records[ep.name] = _record_of(ep)
        try:
            module = guard.call(ep.load, env=ENV_IMPORT_TIMEOUT,
                                what=f"importing {getattr(ep, 'value', ep.name)}")
        except PluginFault as fault:
            self._fail(record, str(fault))
            return record
        self._register(record, module)
        if record.status == "ok":
            self._check_hooks(record, getattr(ep, "value", None))
        return record

    def _check_hooks(self, record: PluginRecord, value: str | None) -> None:
        """Where the distribution of a plugin just loaded declares hooks, they are the hooks its
        module implements; otherwise warn, and collecting a hook loads every plugin from now
        on."""
        declared = self._hook_declarations().get(value)
        implemented = implemented_hooks(record.module)
        if declared is None or declared == implemented:
            return
        self._hooks_trusted = False
        _log.warning("%s declares the hooks %s (entry-point group %s) but implements %s; "
                     "collecting a hook loads every plugin", record.label,
                     ", ".join(sorted(declared)), HOOKS_GROUP,
                     ", ".join(sorted(implemented)) or "none")

    def load(self) -> PluginManager:
        """Load every selected plugin (those already loaded stay as they are)."""
        if self._loaded:
            return self
        with self._lock:
            if self._loaded:
                return self
            for ep in self._selected():
                if ep.name not in self.records:
                    self._load_entry(ep)
            self._loaded = True
        for message in self.conflicts():
            _log.warning("%s", message)
        return self

    def _load_declaring(self, kind: str) -> BackendModule | None:
        """The backend claiming ``kind``, importing only the plugin that declares it; None
        where the declarations cannot tell (a selected plugin declares nothing, none or several
        declare ``kind``, the plugin failed or claims other kinds than it declares)."""
        with self._lock:
            if self._loaded:
                return None
            selected, declared = self._selected(), self._declarations()
            if not selected or any(getattr(ep, "value", None) not in declared
                                   for ep in selected):
                return None
            owners = [ep for ep in selected if kind in declared[ep.value]]
            if len(owners) != 1:
                return None
            ep = owners[0]
            record = self.records.get(ep.name) or self._load_entry(ep)
        if record.status != "ok":
            return None
        claimed = {k for backend in record.backends for k in backend.target_kinds}
        if claimed != declared[ep.value]:
            _log.warning("%s declares the targets %s (entry-point group %s) but its backends "
                         "claim %s; loading every plugin", record.label,
                         ", ".join(sorted(declared[ep.value])), TARGETS_GROUP,
                         ", ".join(sorted(claimed)) or "none")
            return None
        return next(b for b in record.backends if kind in b.target_kinds)

    def _load_implementing(self, hook: str) -> bool:
        """Import the selected plugins whose distributions declare ``hook``; False where the
        declarations cannot tell (a selected plugin declares no hooks, or one loaded implements
        other hooks than it declares), and everything is to be loaded."""
        with self._lock:
            if self._loaded:
                return True
            selected, declared = self._selected(), self._hook_declarations()
            if not self._hooks_trusted or any(getattr(ep, "value", None) not in declared
                                              for ep in selected):
                return False
            for ep in selected:
                if hook in declared[ep.value] and ep.name not in self.records:
                    self._load_entry(ep)
            return self._hooks_trusted

    def accelerator_with_device(self) -> BackendModule | None:
        """The first accelerator backend (by name) whose device is present, else None. Where
        every selected plugin declares its targets, only the plugins whose declared device
        probe finds a device are imported (a plugin that declares targets and no probe has no
        accelerator); otherwise every plugin is loaded and each accelerator probed."""
        candidates = self._probed()
        if candidates is None:
            backends = list(self.backends().values())
        else:
            with self._lock:
                records = [self.records.get(ep.name) or self._load_entry(ep)
                           for ep in candidates]
            backends = [b for r in records if r.status == "ok" for b in r.backends]
        for backend in sorted(backends, key=lambda b: b.name):
            if backend.accelerator and backend.device_available():
                return backend
        return None

    def _probed(self) -> list | None:
        """The selected plugins whose declared device probe finds a device; None where the
        declarations cannot tell (everything loaded already, or a plugin declares nothing)."""
        if self._loaded:
            return None
        selected, declared, devices = self._selected(), self._declarations(), self._devices()
        if any(getattr(ep, "value", None) not in declared for ep in selected):
            return None
        found = []
        for ep in selected:
            probe = devices.get(ep.name)
            if probe is None:
                continue
            try:
                present = guard.call(lambda p=probe: p.load()(), env=ENV_PROBE_TIMEOUT,
                                     what=f"device probe {probe.value}")
            except PluginFault as fault:
                _log.warning("%s: %s; the plugin is loaded to probe its backends", ep.name,
                             fault)
                present = True
            if present:
                found.append(ep)
        return found

    def declared_hooks(self, plugin: str) -> set[str] | None:
        """The hooks the distribution of plugin ``plugin`` declares in ``tilewright.hooks``
        (empty where it declares none); None for a plugin registered without an entry point."""
        ep = next((ep for ep in self._entry_points() if ep.name == plugin), None)
        return None if ep is None else \
            self._hook_declarations().get(getattr(ep, "value", None), set())

    def device_probe(self, plugin: str):
        """The device probe plugin ``plugin``'s distribution declares (a callable), or None."""
        ep = self._devices().get(plugin)
        return None if ep is None else ep.load()

    def declared_targets(self, plugin: str) -> set[str] | None:
        """The target kinds the distribution of plugin ``plugin`` declares in
        ``tilewright.targets`` (empty where it declares none); None for a plugin registered
        without an entry point."""
        ep = next((ep for ep in self._entry_points() if ep.name == plugin), None)
        return None if ep is None else \
            self._declarations().get(getattr(ep, "value", None), set())

    def sources(self) -> list[tuple[str, str, str]]:
        """``(name, version, top-level package)`` of every plugin that is loaded or selected
        and not yet loaded (registered ones included, failed ones not): what may change a
        compiled binary."""
        out = {name: (name, record.version, record.module.__name__.split(".")[0])
               for name, record in self.records.items()
               if record.status == "ok" and record.module is not None}
        for ep in self._selected():
            record = self.records.get(ep.name)
            if record is None or record.status == "ok":  # the entry point names the package
                package = getattr(ep, "value", ep.name).split(":")[0].split(".")[0]
                version = record.version if record is not None else self._version(ep)
                out[ep.name] = (ep.name, version, package)
        return [out[name] for name in sorted(out)]

    def _version(self, ep) -> str:
        """The version of a plugin not loaded yet, its distribution's metadata read once (the
        cache key of every compile asks)."""
        if ep.name not in self._versions:
            self._versions[ep.name] = _record_of(ep).version
        return self._versions[ep.name]

    def register(self, module, name: str, version: str = "") -> PluginRecord:
        """Register an already-imported plugin module (used by tests and embedders)."""
        record = PluginRecord(name, version)
        self.records[name] = record
        self._register(record, module)
        return record

    def _fail(self, record: PluginRecord, error: str) -> None:
        record.status, record.error, record.module, record.backends = "failed", error, None, []
        _log.warning("%s skipped: %s", record.label, error)

    def _register(self, record: PluginRecord, module) -> None:
        unknown = sorted(n for n in dir(module) if n.startswith("tilewright_")
                         and callable(getattr(module, n)) and n not in _SPEC_NAMES)
        if unknown:
            known = ", ".join(sorted(_SPEC_NAMES))
            self._fail(record, f"plugin {record.name!r} implements unknown hook(s) "
                               f"{', '.join(unknown)}; known hooks: {known}")
            return
        try:
            self.pm.register(module, name=record.name)
        except pluggy.PluginValidationError as exc:
            self._fail(record, f"invalid hook implementation: {exc}")
            return
        try:
            backends = self._call(module, "tilewright_backends", {})
            backends = validate.backends(backends)
        except (PluginFault, PluginError) as exc:
            self.pm.unregister(module)
            self._fail(record, str(exc))
            return
        record.module = module
        record.backends = [guard.guard_backend(b, record.label) for b in backends]

    @staticmethod
    def _call(module, hook: str, kwargs: dict):
        impl = getattr(module, hook, None)
        if impl is None:
            return None
        return guard.call(impl, kwargs=kwargs, env=ENV_IMPORT_TIMEOUT, what=hook)

    # -- queries ----------------------------------------------------------------------
    def collect(self, hook: str, **kwargs) -> list:
        """Concatenate what ``hook`` returns from every working plugin: list items, or the
        ``(key, value)`` pairs of a mapping. A plugin whose hook raises, times out or returns
        the wrong type is noted and skipped; so is an item whose name an earlier plugin gave.
        Where every selected plugin declares its hooks, only those declaring ``hook`` are
        imported (and those loaded already answer); otherwise every plugin is."""
        if not self._load_implementing(hook):
            self.load()
        out, owners = [], {}
        for record in list(self.records.values()):
            if record.status != "ok" or record.module is None or hook in record.failed_hooks:
                continue
            try:
                items = validate.items(hook, self._call(record.module, hook, kwargs))
            except (PluginFault, PluginError) as exc:
                record.failed_hooks.add(hook)
                self._note(record, str(exc))
                continue
            for item in items:
                name = item[0] if isinstance(item, tuple) else item.name
                first = owners.setdefault(name, record)
                if first is not record:
                    self._note(record, f"{hook}: {name!r} is also provided by {first.label}, "
                                       "which is used; refused from this plugin")
                    continue
                if isinstance(item, Timer):
                    item = self._guard_timer(record, item)
                out.append(item)
        return out

    def _guard_timer(self, record: PluginRecord, timer: Timer) -> Timer:
        # one probe per timer and plugin, so that a probe that timed out stays abandoned
        probe = self._probes.get((record.name, timer.name))
        if probe is None or (probe.fn is not timer.available and not probe.abandoned):
            probe = self._probes[(record.name, timer.name)] = guard.Probe(
                timer.available, f"availability probe of timer {timer.name!r}", record.label)
        return dataclasses.replace(timer, available=probe)

    def _note(self, record: PluginRecord, text: str) -> None:
        if text not in record.error:
            record.error = f"{record.error}; {text}" if record.error else text
            _log.warning("%s: %s", record.label, text)

    def _declared(self) -> dict[str, list[tuple[PluginRecord, BackendModule]]]:
        """Backend name -> the (plugin, backend) pairs declaring it."""
        self.load()
        out: dict[str, list] = {}
        for record in self.records.values():
            if record.status == "ok":
                for backend in record.backends:
                    out.setdefault(backend.name, []).append((record, backend))
        return out

    def backends(self) -> dict[str, BackendModule]:
        """Every usable backend by name: a name two plugins declare is in :meth:`conflicts`."""
        return {name: owners[0][1] for name, owners in self._declared().items()
                if len(owners) == 1}

    def claims(self) -> dict[str, list[str]]:
        """Target kind -> names of the usable backends claiming it."""
        claims: dict[str, list[str]] = {}
        for backend in self.backends().values():
            for kind in backend.target_kinds:
                claims.setdefault(kind, []).append(backend.name)
        return claims

    def _kind_owners(self, kind: str) -> list[tuple[PluginRecord, BackendModule]]:
        return [(record, backend) for owners in self._declared().values()
                for record, backend in owners if kind in backend.target_kinds]

    def conflicts(self) -> list[str]:
        """One message per backend name declared twice and per target kind claimed twice."""
        messages = [_name_conflict(name, owners)
                    for name, owners in sorted(self._declared().items()) if len(owners) > 1]
        kinds = sorted({k for owners in self._declared().values() for _, b in owners
                        for k in b.target_kinds})
        messages += [_kind_conflict(kind, owners) for kind in kinds
                     if len(owners := self._kind_owners(kind)) > 1]
        return messages

    def no_backend_hint(self) -> str:
        """What a user without a loaded backend is told: to enable the installed plugins that
        ``TILEWRIGHT_PLUGINS`` disables, else to install one."""
        disabled = sorted(r.name for r in self.records.values() if r.status == "disabled")
        if disabled:
            return (f"{ENV_SELECT}={os.environ.get(ENV_SELECT, '')!r} disables the installed "
                    f"plugin(s) {', '.join(disabled)}: name one there or unset it")
        return INSTALL_HINT

    def backend_for(self, kind: str) -> BackendModule:
        if not self._loaded and (backend := self._load_declaring(kind)) is not None:
            return backend
        owners = self._kind_owners(kind)
        if len(owners) > 1:
            raise TargetError(_kind_conflict(kind, owners))
        if not owners:
            failed = [f"{r.label} ({r.error})" for r in self.records.values()
                      if r.status != "ok"]
            known = ", ".join(sorted(self.claims())) or "none"
            extra = f"; plugins not loaded: {'; '.join(failed)}" if failed else ""
            if known == "none":
                extra += f"; {self.no_backend_hint()}"
            raise TargetError(f"no installed backend claims target {kind!r} (known targets: "
                              f"{known}){extra}")
        name = owners[0][1].name
        declared = self._declared()[name]
        if len(declared) > 1:
            raise TargetError(_name_conflict(name, declared))
        return owners[0][1]


def implemented_hooks(module) -> set[str]:
    """The hooks a plugin module implements (``tilewright_backends`` included): what its
    distribution declares in ``tilewright.hooks``."""
    return {name for name in _SPEC_NAMES if callable(getattr(module, name, None))}


def _record_of(ep) -> PluginRecord:
    dist = getattr(ep, "dist", None)
    return PluginRecord(ep.name, getattr(dist, "version", "") or "",
                        getattr(dist, "name", "") or "")


def _fix(owners) -> str:
    names = [record.name for record, _ in owners]
    return (f"uninstall one or select plugins with {ENV_SELECT} (for example "
            f"{ENV_SELECT}=-{names[-1]})")


def _name_conflict(name: str, owners) -> str:
    return (f"backend name {name!r} is declared by {' and '.join(r.label for r, _ in owners)}; "
            f"neither is used: {_fix(owners)}")


def _kind_conflict(kind: str, owners) -> str:
    who = ", ".join(f"backend {b.name!r} of {r.label}" for r, b in owners)
    return f"target {kind!r} is claimed by several backends: {who}; {_fix(owners)}"


_MANAGER: PluginManager | None = None


def get_manager() -> PluginManager:
    """The process-wide plugin manager. Its queries load what they need: a target's backend
    only its plugin where the plugins declare their targets, a hook's :meth:`~PluginManager.
    collect` only the plugins implementing it where the plugins declare their hooks, the
    others everything."""
    global _MANAGER
    if _MANAGER is None:
        _MANAGER = PluginManager()
    return _MANAGER


def set_manager(manager: PluginManager | None) -> PluginManager | None:
    """Replace the process-wide manager (tests); returns the previous one."""
    global _MANAGER
    previous, _MANAGER = _MANAGER, manager
    return previous
