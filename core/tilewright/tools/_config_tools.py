"""Debug tools switched on per kernel by ``pass_configs``: IR dumps (``tw.dump_ir``,
``tw.dump_ir_dir``), pass timing (``tw.pass_timing``) and layout views
(``tw.layout_visualization_*``). The engine attaches them to one compile session."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..engine import events


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


def attach(session: int, configs: dict):
    """Subscribe the tools ``configs`` ask for to ``session``; returns the detach callable."""
    listeners = []
    if configs.get("tw.dump_ir") or configs.get("tw.dump_ir_dir"):
        listeners.append(_Dumper(session, configs))
    if configs.get("tw.pass_timing"):
        from .pass_timing import Collector

        listeners.append(Collector(only=session, echo=True))
    if configs.get("tw.layout_visualization_enable"):
        from .layout_view import InferredLayoutPrinter

        listeners.append(InferredLayoutPrinter(session, configs))
    for listener in listeners:
        events.subscribe(listener)

    def detach() -> None:
        for listener in listeners:
            events.unsubscribe(listener)

    return detach
