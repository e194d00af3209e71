"""The listeners of compile events that ``pass_configs`` switch on for one kernel: IR dumps
(``tw.dump_ir``, ``tw.dump_ir_dir``), pass timing (``tw.pass_timing``) and layout views
(``tw.layout_visualization_*``). The engine attaches them to one compile session; the debug
tools of :mod:`tilewright.tools` build on the same listeners (``pass_timing`` on
:class:`Collector`)."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TilewrightError
from ..layout.view import (
    FragmentView,
    as_view,
    default_fragment,
    fragments_of,
    layout_text,
    plot_layout,
)
from . import events


class _Dumper:
    def __init__(self, session: int, configs: dict):
        self.session = session
        self.print_ir = bool(configs.get("tw.dump_ir"))
        self.folder = Path(configs["tw.dump_ir_dir"]) if configs.get("tw.dump_ir_dir") else None
        self.count = 0
        self.depth = 0

    def __call__(self, event) -> None:
        if event.session != self.session:
            return
        if event.kind == "pass_start":
            self.depth += 1
        elif event.kind == "pass_end":
            self.depth -= 1
            phase = event.data.get("phase") or "unscoped"
            name = event.data["name"]
            text = event.data["mod"].script()
            if self.print_ir:
                print(f"# ---- IR after {phase} / {name} ----\n{text}", file=sys.stderr)
            if self.folder is not None:
                self.folder.mkdir(parents=True, exist_ok=True)
                stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.count:02d}_{phase}_{name}")
                (self.folder / f"{stem}.tir").write_text(text)
            self.count += 1


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


class InferredLayoutPrinter:
    """Engine-event listener behind ``tw.layout_visualization_enable``."""

    def __init__(self, session: int, configs: dict):
        self.session = session
        self.formats = configs.get("tw.layout_visualization_formats") or "txt"
        self.folder = configs.get("tw.layout_visualization_dir") or "./tmp/layout_visualization"
        self.func = None
        self.backend = ""
        self.inferred: dict = {}

    def __call__(self, event) -> None:
        if event.session != self.session:
            return
        if event.kind == "session_start":
            self.func, self.backend = event.data.get("func"), event.data.get("backend", "")
        elif event.kind == "layout":
            self.inferred[event.data["buffer"]] = event.data["layout"]
        elif event.kind == "session_end" and self.func is not None:
            self.report()

    def report(self) -> None:
        for name, shape, threads in fragments_of(self.func):
            layout = self.inferred.get(name)
            if layout is None:
                view = default_fragment(shape, threads)
                view = FragmentView(view.shape, view.threads, view.thread_fn, view.index_fn,
                                    f"{view.label}; backend '{self.backend}' inferred no "
                                    "layout")
            else:
                view = as_view(layout, threads)
            try:
                out = plot_layout(view, name, self.formats, self.folder, verbose=False)
            except TilewrightError as exc:  # too large, or no matplotlib: say so, go on
                print(f"{name}: {exc}", file=sys.stderr)
                continue
            print(out.get("txt") or layout_text(view, name), file=sys.stderr)
            for fmt, path in out.items():
                if fmt != "txt":
                    print(f"  {fmt}: {path}", file=sys.stderr)



def attach(session: int, configs: dict):
    """Subscribe the tools ``configs`` ask for to ``session``; returns the detach callable."""
    listeners = []
    if configs.get("tw.dump_ir") or configs.get("tw.dump_ir_dir"):
        listeners.append(_Dumper(session, configs))
    if configs.get("tw.pass_timing"):
        listeners.append(Collector(only=session, echo=True))
    if configs.get("tw.layout_visualization_enable"):
        listeners.append(InferredLayoutPrinter(session, configs))
    for listener in listeners:
        events.subscribe(listener)

    def detach() -> None:
        for listener in listeners:
            events.unsubscribe(listener)

    return detach
