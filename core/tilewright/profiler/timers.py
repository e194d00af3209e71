"""Timers for ``do_bench``: the core's ``wall`` timer plus whatever plugins register."""

from __future__ import annotations

import inspect
import time

from ..errors import ConfigError
from ..plugin import Availability, Timer, get_manager


def _wall(fn, n_warmup: int, n_repeat: int, flush=None) -> list[float]:
    for _ in range(n_warmup):
        fn()
    samples = []
    for _ in range(n_repeat):
        if flush is not None:
            flush()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


WALL = Timer("wall", lambda: Availability(True), _wall,
             "host wall clock around each call (synchronous backends such as the CPU)")


def timers() -> dict[str, Timer]:
    """Every known timer by name: ``wall`` and those plugins register (first one wins)."""
    found = {WALL.name: WALL}
    for timer in get_manager().collect("tilewright_timers"):
        if isinstance(timer, Timer):
            found.setdefault(timer.name, timer)
    return found


def availability(timer: Timer) -> Availability:
    """``timer.available()``; a probe that raises is unavailable with the exception as reason."""
    try:
        result = timer.available()
    except Exception as exc:  # noqa: BLE001 - a broken probe is a reason, not a crash
        return Availability(False, f"{type(exc).__name__}: {exc}")
    return result if isinstance(result, Availability) else Availability(bool(result))


def supports_flush(timer: Timer) -> bool:
    """Whether the timer's ``measure`` accepts the cache-flush callback."""
    try:
        params = inspect.signature(timer.measure).parameters
    except (TypeError, ValueError):
        return False
    return "flush" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def describe(known: dict[str, Timer] | None = None) -> str:
    """``available: a, b; unavailable: c (why), d (why)`` for error messages and the CLI."""
    known = timers() if known is None else known
    ok, missing = [], []
    for name, timer in known.items():
        state = availability(timer)
        if state:
            ok.append(name)
        else:
            missing.append(f"{name} ({state.reason or 'no reason given'})")
    text = f"available: {', '.join(ok) or 'none'}"
    return text + (f"; unavailable: {', '.join(missing)}" if missing else "")


def get_timer(name: str) -> Timer:
    """The timer called ``name``; an unknown or unavailable one is an error naming the
    available timers and why the others cannot run here."""
    known = timers()
    timer = known.get(name)
    if timer is None:
        raise ConfigError(f"unknown timer {name!r}; {describe(known)}")
    state = availability(timer)
    if not state:
        raise ConfigError(f"timer {name!r} is not available here: "
                          f"{state.reason or 'no reason given'}; {describe(known)}")
    return timer
