"""Targets resolved to one backend: strings (``"auto"``, ``"cpu"``, ``"cuda -arch=sm_90a"``),
TVM's configuration dicts (``{"kind": "cuda", "arch": "sm_90a"}``, the only form TVM 0.27's
``tvm.target.Target`` reads) and ``tvm.target.Target`` objects."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from tvm.target import Target as TVMTarget

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


def _option_text(target, key: str, value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
        return ",".join(str(v) for v in value)
    raise TargetError(f"target {target!r}: option {key!r} must be a string, a number or a list "
                      f"of them, got {type(value).__name__}")


def _parse_config(config: Mapping) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A TVM configuration dict: ``kind``, then the options; TVM's bookkeeping entries ``tag``
    and ``keys`` (its schedule-dispatch names) mean nothing to a backend and are dropped."""
    kind = config.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise TargetError(f"target {dict(config)!r} names no kind (a target dict needs "
                          "\"kind\": \"cpu\", \"cuda\" ...)")
    options = [(str(k), _option_text(dict(config), str(k), v)) for k, v in config.items()
               if k not in ("kind", "tag", "keys")]
    return kind.strip(), tuple(sorted(options))


def parse_target(text) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The kind and the sorted ``(key, value)`` options of a target string or dict."""
    if isinstance(text, Mapping):
        return _parse_config(text)
    if not isinstance(text, str) or not text.strip():
        raise TargetError(f"a target must be a non-empty string or a dict such as "
                          f"{{'kind': 'cuda', 'arch': 'sm_90a'}}, got {text!r}")
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
        return target, manager.backend_for(target.kind)
    if isinstance(target, TVMTarget):
        target = _from_tvm(target, manager)
    if target in (None, "auto") and os.environ.get(ENV_TARGET):
        target = os.environ[ENV_TARGET]
    kind, options = parse_target("auto" if target is None or target == "" else target)
    if kind == "auto":
        if options:
            raise TargetError("target 'auto' takes no options")
        backend = manager.accelerator_with_device()
        if backend is not None:
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


def _from_tvm(target: TVMTarget, manager: PluginManager) -> dict:
    """A ``tvm.target.Target`` as a configuration dict: its kind and the attributes its backend
    has options for (TVM fills in the rest itself, ``max_num_threads`` and the like)."""
    kind = target.kind.name
    known = set(manager.backend_for(kind).target_options)
    return {"kind": kind, **{k: v for k, v in target.export().items() if k in known}}
