"""Compile time per pass and per phase (compile time, not kernel time).

``TILEWRIGHT_PASS_TIMING=1`` (read when ``tilewright`` is imported) or :func:`enable` prints a
table when each compilation ends; the pass config ``tw.pass_timing`` does it for one kernel;
:func:`collect` gathers the timings in code::

    with pass_timing.collect() as timings:
        tilewright.compile(func)
    print(timings.table())
"""

from __future__ import annotations

import contextlib
import os

from ..engine import events
from ..engine.listeners import Collector, SessionTiming

ENV = "TILEWRIGHT_PASS_TIMING"


_active: Collector | None = None


def enable() -> None:
    """Print a timing table when each later compilation ends."""
    global _active
    disable()
    _active = Collector(echo=True)
    events.subscribe(_active)


def disable() -> None:
    global _active
    if _active is not None:
        events.unsubscribe(_active)
        _active = None


@contextlib.contextmanager
def collect():
    """Collect the timings of the compilations inside the ``with`` block."""
    collector = Collector()
    events.subscribe(collector)
    try:
        yield collector
    finally:
        events.unsubscribe(collector)


def enable_from_env() -> None:
    if os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        enable()


__all__ = ["Collector", "SessionTiming", "collect", "disable", "enable"]
