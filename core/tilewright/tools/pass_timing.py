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
import sys
import time
from dataclasses import dataclass, field

ENV = "TILEWRIGHT_PASS_TIMING"


@dataclass
class SessionTiming:
    """The timings of one compilation."""

    name: str = ""
    backend: str = ""
    passes: list = field(default_factory=list)  # (phase, pass, seconds, depth)
    phases: dict = field(default_factory=dict)  # engine-measured seconds per phase and step
    _stack: list = field(default_factory=list, repr=False)

    def table(self, top: int | None = None) -> str:
        """Passes sorted by time (inner passes of a wrapping pass are indented), then phases."""
        total = sum(s for _, _, s, d in self.passes if d == 0) or 1e-12
        rows = sorted(self.passes, key=lambda r: -r[2])[:top]
        lines = [f"pass timing: {self.name} (backend {self.backend})",
                 f"{'seconds':>9} {'share':>6}  phase / pass"]
        for phase, name, sec, depth in rows:
            lines.append(f"{sec:9.4f} {100 * sec / total:5.1f}%  {'  ' * depth}{phase} / {name}")
        if self.phases:
            lines.append(f"{'seconds':>9}         phase (engine)")
            for phase, sec in sorted(self.phases.items(), key=lambda kv: -kv[1]):
                lines.append(f"{sec:9.4f}         {phase}")
        return "\n".join(lines)


class Collector:
    """An engine-event listener timing passes; ``only`` limits it to one session."""

    def __init__(self, only: int | None = None, echo: bool = False):
        self.only = only
        self.echo = echo
        self.sessions: dict[int, SessionTiming] = {}
        self.finished: list[SessionTiming] = []

    def __call__(self, event) -> None:
        if self.only is not None and event.session != self.only:
            return
        kind, data = event.kind, event.data
        if kind == "session_start":
            self.sessions[event.session] = SessionTiming(data.get("name", ""),
                                                         data.get("backend", ""))
            return
        timing = self.sessions.get(event.session)
        if timing is None:
            return
        if kind == "pass_start":
            timing._stack.append((data.get("phase") or "unscoped", data["name"],
                                  time.perf_counter()))
        elif kind == "pass_end" and timing._stack:
            phase, name, start = timing._stack.pop()
            timing.passes.append((phase, name, time.perf_counter() - start, len(timing._stack)))
        elif kind == "session_end":
            timing.phases = {k: float(v) for k, v in (data.get("timings") or {}).items()
                             if isinstance(v, (int, float))}
            self.finished.append(self.sessions.pop(event.session))
            if self.echo:
                print(timing.table(), file=sys.stderr)

    def table(self) -> str:
        return "\n\n".join(t.table() for t in self.finished)


_active: Collector | None = None


def enable() -> None:
    """Print a timing table when each later compilation ends."""
    global _active
    from ..engine import events

    disable()
    _active = Collector(echo=True)
    events.subscribe(_active)


def disable() -> None:
    global _active
    from ..engine import events

    if _active is not None:
        events.unsubscribe(_active)
        _active = None


@contextlib.contextmanager
def collect():
    """Collect the timings of the compilations inside the ``with`` block."""
    from ..engine import events

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
