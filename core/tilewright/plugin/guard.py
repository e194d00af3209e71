"""Calls into plugin code with a time limit, so that no plugin can take the process down.

The manager makes every call into a plugin through :func:`call`: importing its entry point,
each hook, and the availability probes of its declarations (``BackendModule.device_available``,
``Executor.available``, ``Timer.available``, wrapped by :class:`Probe`). The call runs on a
daemon thread; the caller waits for it with a time limit.

- Any exception the call raises, ``SystemExit`` from ``sys.exit`` included, becomes a
  :class:`PluginFault`; only ``KeyboardInterrupt`` passes through unchanged.
- A call that has not returned when its limit passes is abandoned: the caller gets a
  :class:`PluginFault` (``timed_out`` set) and the manager never calls that import, hook or
  probe again.

What a thread can interrupt: nothing. An abandoned call keeps running in the background until
it returns or the process exits (a daemon thread does not keep the process alive). It keeps
the locks it holds: a module whose import hangs stays half-imported and importing it again
would block, which is why the manager never retries it. A call stuck in C code that holds the
GIL (a C extension looping without releasing it) stalls the waiting thread too, so its limit
cannot fire. And code that ends the process itself (``os._exit``, a segfault, ``abort()``)
ends it: only a separate process could contain that, and starting one for every hook would
cost each command a second interpreter. What it does guarantee: an exception, an exit request
or a hang in a plugin costs at most the limit and a message, never the command.

Limits, in seconds, read from the environment at each call (a positive number):

- ``TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT`` (default 120): importing a plugin's module and each
  hook call (hooks may import more of the plugin, TVM or a vendor toolkit);
- ``TILEWRIGHT_PLUGIN_PROBE_TIMEOUT`` (default 20): each availability probe.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping

from ..errors import ConfigError, PluginError, TargetError
from .types import Availability, BackendModule

ENV_IMPORT_TIMEOUT = "TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT"
ENV_PROBE_TIMEOUT = "TILEWRIGHT_PLUGIN_PROBE_TIMEOUT"
_DEFAULTS = {ENV_IMPORT_TIMEOUT: 120.0, ENV_PROBE_TIMEOUT: 20.0}


class PluginFault(Exception):
    """A call into a plugin raised, asked to exit, or did not return in time."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def limit(env: str) -> float:
    """The time limit, in seconds, that the environment variable ``env`` sets."""
    text = os.environ.get(env, "").strip()
    if not text:
        return _DEFAULTS[env]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{env}={text!r} is not a time limit; give a positive number of "
                          f"seconds (default {_DEFAULTS[env]:g})")
    return value


def describe(exc: BaseException) -> str:
    """``SystemExit: 3 (sys.exit)``, ``RuntimeError: boom``: an exception in one line."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SystemExit):
        text += " (sys.exit)"
    return text.splitlines()[0]


def call(fn, args=(), kwargs=None, *, env: str, what: str):
    """``fn(*args, **kwargs)`` on a daemon thread, waited for at most the limit ``env`` sets.

    :param what: the call in words, for messages (``"importing plugin 'cuda'"``).
    :raises PluginFault: the call raised (anything but ``KeyboardInterrupt``) or timed out.
    """
    seconds = limit(env)
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args, **(kwargs or {}))
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"tilewright: {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise PluginFault(f"{what} did not finish within {seconds:g} s (limit set by {env}); "
                          "abandoned", timed_out=True)
    error = box.get("error")
    if isinstance(error, KeyboardInterrupt):
        raise error
    if error is not None:
        raise PluginFault(f"{what} raised {describe(error)}") from error
    return box["value"]


class Probe:
    """An availability probe of a plugin's declaration, safe to call: it always returns an
    :class:`Availability`. A probe that raises is unavailable with the exception as the
    reason; one that times out is unavailable, and is not called again."""

    def __init__(self, fn, what: str, owner: str):
        self.fn, self.what, self.owner = fn, what, owner
        self.abandoned = ""

    def __call__(self) -> Availability:
        if self.abandoned:
            return Availability(False, self.abandoned)
        try:
            result = call(self.fn, env=ENV_PROBE_TIMEOUT, what=self.what)
        except PluginFault as fault:
            reason = f"{fault} ({self.owner})"
            if fault.timed_out:
                self.abandoned = reason
            return Availability(False, reason)
        if isinstance(result, Availability):
            return result
        if isinstance(result, bool):
            return Availability(result, "" if result else f"{self.what} returned False")
        return Availability(False, f"{self.what} returned {type(result).__name__}, not an "
                                   f"Availability ({self.owner})")


class TargetDefaults:
    """A backend's ``target_defaults`` behind the probe time limit (it asks the device what it
    is). A :class:`TargetError` or :class:`ConfigError` it raises is about the user's target or
    environment (an unknown architecture in ``$TILEWRIGHT_CUDA_ARCH``) and reaches the user
    unchanged; any other failure is a :class:`PluginError` naming the plugin, and so is a
    result other than a mapping."""

    def __init__(self, fn, backend: str, owner: str):
        self.fn, self.backend, self.owner = fn, backend, owner

    def __call__(self, kind: str) -> Mapping[str, str]:
        what = f"target_defaults of backend {self.backend!r}"
        try:
            result = call(self.fn, (kind,), env=ENV_PROBE_TIMEOUT, what=what)
        except PluginFault as fault:
            if isinstance(fault.__cause__, (TargetError, ConfigError)):
                raise fault.__cause__ from None
            raise PluginError(f"{fault} ({self.owner})") from None
        if not isinstance(result, Mapping):
            raise PluginError(f"{what} returned {type(result).__name__}, not a mapping of "
                              f"target options ({self.owner})")
        return result


def guard_backend(backend: BackendModule, owner: str) -> BackendModule:
    """``backend`` with its device probe, its executors' probes and its ``target_defaults``
    behind time limits; ``owner`` names the plugin in their messages."""
    name = backend.name
    executors = tuple(dataclasses.replace(e, available=Probe(
        e.available, f"availability probe of executor {e.name!r} of backend {name!r}", owner))
        for e in backend.executors)
    probe = Probe(backend.device_available, f"device probe of backend {name!r}", owner)
    defaults = backend.target_defaults
    if defaults is not None:
        defaults = TargetDefaults(defaults, name, owner)
    return dataclasses.replace(backend, executors=executors, device_available=probe,
                               target_defaults=defaults)
