"""Loading plugins: entry points, validation, error isolation, target claims.

Loading is idempotent. A plugin that fails to import, implements an unknown hook, or returns
an invalid declaration is recorded with its error and skipped; the others keep working.
``TILEWRIGHT_PLUGINS`` selects plugins: unset loads all, ``none`` loads none, ``a,b`` loads only
``a`` and ``b``, ``-a`` loads all but ``a``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from importlib import metadata

import pluggy

from ..errors import PluginError, TargetError
from . import hookspecs
from .types import BackendModule

ENTRY_POINT_GROUP = "tilewright.plugins"
ENV_SELECT = "TILEWRIGHT_PLUGINS"
hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT)
_SPEC_NAMES = frozenset(n for n in dir(hookspecs) if n.startswith("tilewright_"))


@dataclass
class PluginRecord:
    """One plugin as the manager saw it."""

    name: str
    version: str = ""
    distribution: str = ""
    status: str = "ok"  # ok | failed | disabled
    error: str = ""
    module: object = None
    backends: list[BackendModule] = field(default_factory=list)


def _selection(value: str | None):
    """(only, excluded) sets from ``TILEWRIGHT_PLUGINS``; ``only`` None means all."""
    if value is None or not value.strip():
        return None, set()
    items = [v.strip() for v in value.split(",") if v.strip()]
    if [i.lower() for i in items] in (["none"], ["0"]):
        return set(), set()
    only = {i for i in items if not i.startswith("-")} or None
    return only, {i[1:] for i in items if i.startswith("-")}


class PluginManager:
    """Loads and validates plugins; answers which backend owns a target."""

    def __init__(self, entry_points=None):
        self._explicit = entry_points
        self._lock = threading.Lock()
        self._loaded = False
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}

    # -- loading ----------------------------------------------------------------------
    def _entry_points(self):
        if self._explicit is not None:
            return list(self._explicit)
        return list(metadata.entry_points(group=ENTRY_POINT_GROUP))

    def load(self) -> PluginManager:
        with self._lock:
            if self._loaded:
                return self
            only, excluded = _selection(os.environ.get(ENV_SELECT))
            for ep in self._entry_points():
                name = ep.name
                dist = getattr(ep, "dist", None)
                record = PluginRecord(name, getattr(dist, "version", "") or "",
                                      getattr(dist, "name", "") or "")
                self.records[name] = record
                if (only is not None and name not in only) or name in excluded:
                    record.status, record.error = "disabled", f"disabled by {ENV_SELECT}"
                    continue
                try:
                    module = ep.load()
                except Exception as exc:  # noqa: BLE001 - any import failure is reported
                    record.status, record.error = "failed", f"import failed: {exc!r}"
                    continue
                self._register(record, module)
            self._loaded = True
            return self

    def register(self, module, name: str, version: str = "") -> PluginRecord:
        """Register an already-imported plugin module (used by tests and embedders)."""
        record = PluginRecord(name, version)
        self.records[name] = record
        self._register(record, module)
        return record

    def _register(self, record: PluginRecord, module) -> None:
        unknown = sorted(n for n in dir(module) if n.startswith("tilewright_")
                         and callable(getattr(module, n)) and n not in _SPEC_NAMES)
        if unknown:
            record.status = "failed"
            record.error = (f"plugin {record.name!r} implements unknown hook(s) "
                            f"{', '.join(unknown)}; known hooks: {', '.join(sorted(_SPEC_NAMES))}")
            return
        try:
            self.pm.register(module, name=record.name)
        except pluggy.PluginValidationError as exc:
            record.status, record.error = "failed", f"invalid hook implementation: {exc}"
            return
        record.module = module
        try:
            backends = self._call_one(module, "tilewright_backends") or []
            for backend in backends:
                if not isinstance(backend, BackendModule):
                    raise PluginError(f"tilewright_backends returned {type(backend).__name__}, "
                                      "not a BackendModule")
            record.backends = list(backends)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
            self.pm.unregister(module)
            record.module = None
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"

    def _call_one(self, module, hook: str, **kwargs):
        impl = getattr(module, hook, None)
        return impl(**kwargs) if impl is not None else None

    # -- queries ----------------------------------------------------------------------
    def collect(self, hook: str, **kwargs) -> list:
        """Concatenate the lists ``hook`` returns from every working plugin; a plugin whose
        hook raises is marked failed and skipped."""
        self.load()
        out = []
        for record in list(self.records.values()):
            if record.status != "ok" or record.module is None:
                continue
            try:
                result = self._call_one(record.module, hook, **kwargs)
            except Exception as exc:  # noqa: BLE001
                record.error = f"{hook} raised {type(exc).__name__}: {exc}"
                continue
            if result:
                out.extend(result.items() if isinstance(result, dict) else result)
        return out

    def backends(self) -> dict[str, BackendModule]:
        self.load()
        out = {}
        for record in self.records.values():
            if record.status == "ok":
                for backend in record.backends:
                    out[backend.name] = backend
        return out

    def claims(self) -> dict[str, list[str]]:
        """Target kind -> names of the backends claiming it."""
        claims: dict[str, list[str]] = {}
        for backend in self.backends().values():
            for kind in backend.target_kinds:
                claims.setdefault(kind, []).append(backend.name)
        return claims

    def backend_for(self, kind: str) -> BackendModule:
        claims = self.claims()
        owners = claims.get(kind, [])
        if len(owners) > 1:
            raise TargetError(f"target {kind!r} is claimed by several backends: "
                              f"{', '.join(sorted(owners))}; uninstall one or select plugins "
                              f"with {ENV_SELECT}")
        if not owners:
            failed = [f"{r.name} ({r.error})" for r in self.records.values()
                      if r.status != "ok"]
            known = ", ".join(sorted(claims)) or "none"
            extra = f"; plugins not loaded: {'; '.join(failed)}" if failed else ""
            raise TargetError(f"no installed backend claims target {kind!r} (known targets: "
                              f"{known}){extra}")
        return self.backends()[owners[0]]


_MANAGER: PluginManager | None = None


def get_manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _MANAGER
    if _MANAGER is None:
        _MANAGER = PluginManager()
    return _MANAGER.load()


def set_manager(manager: PluginManager | None) -> PluginManager | None:
    """Replace the process-wide manager (tests); returns the previous one."""
    global _MANAGER
    previous, _MANAGER = _MANAGER, manager
    return previous
