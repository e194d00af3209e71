"""Timers for ``do_bench``: the core's ``wall`` timer plus whatever plugins register."""

from __future__ import annotations

import time

from ..errors import TilewrightError
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
    found = {WALL.name: WALL}
    for timer in get_manager().collect("tilewright_timers"):
        found.setdefault(timer.name, timer)
    return found


def get_timer(name: str) -> Timer:
    known = timers()
    timer = known.get(name)
    if timer is None:
        raise TilewrightError(f"unknown timer {name!r}; available: "
                              f"{', '.join(n for n, t in known.items() if t.available())}")
    availability = timer.available()
    if not availability:
        others = [n for n, t in known.items() if t.available()]
        raise TilewrightError(f"timer {name!r} is not available here: {availability.reason}; "
                              f"available: {', '.join(others)}")
    return timer
