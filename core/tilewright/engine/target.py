"""Target strings: ``"auto"``, ``"cpu"``, ``"cuda -arch=sm_90a"`` ... resolved to one backend."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from ..errors import TargetError
from ..plugin import BackendModule, PluginManager, get_manager

ENV_TARGET = "TILEWRIGHT_TARGET"


@dataclass(frozen=True)
class Target:
    """A parsed target: its kind, its ``-key=value`` options, and the backend that owns it."""

    kind: str
    options: tuple[tuple[str, str], ...] = ()
    backend: str = ""

    def option(self, name: str, default=None):
        return dict(self.options).get(name, default)

    def __str__(self) -> str:
        opts = " ".join(f"-{k}={v}" for k, v in self.options)
        return f"{self.kind} {opts}".strip()


def parse_target(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    if not isinstance(text, str) or not text.strip():
        raise TargetError(f"a target must be a non-empty string, got {text!r}")
    try:
        parts = shlex.split(text)
    except ValueError as exc:
        raise TargetError(f"target string {text!r} cannot be read: {exc}") from None
    kind, options = parts[0], []
    for part in parts[1:]:
        if not part.startswith("-") or "=" not in part:
            raise TargetError(f"target option {part!r} in {text!r} must look like -key=value")
        key, value = part.lstrip("-").split("=", 1)
        options.append((key, value))
    return kind, tuple(sorted(options))


def resolve_target(target, manager: PluginManager | None = None) -> tuple[Target, BackendModule]:
    """The :class:`Target` and its backend. ``auto`` means the target that the environment
    variable ``TILEWRIGHT_TARGET`` names when it is set; otherwise an accelerator backend whose
    device is present, else the CPU backend."""
    manager = manager or get_manager()
    if isinstance(target, Target):
        return target, manager.backends()[target.backend]
    if target in (None, "auto") and os.environ.get(ENV_TARGET):
        target = os.environ[ENV_TARGET]
    kind, options = parse_target(target or "auto")
    if kind == "auto":
        if options:
            raise TargetError("target 'auto' takes no options")
        for backend in sorted(manager.backends().values(), key=lambda b: b.name):
            if backend.accelerator and backend.device_available():
                return Target(backend.target_kinds[0], (), backend.name), backend
        kind = "cpu"
    backend = manager.backend_for(kind)
    known = set(backend.target_options)
    for key, _ in options:
        if key not in known:
            raise TargetError(f"target {target!r}: backend '{backend.name}' has no option "
                              f"-{key} (options: {', '.join(sorted(known)) or 'none'})")
    if backend.target_defaults is not None:
        given = dict(options)
        defaults = backend.target_defaults(kind)
        options = tuple(sorted({**{k: str(v) for k, v in defaults.items()}, **given}.items()))
    return Target(kind, options, backend.name), backend
