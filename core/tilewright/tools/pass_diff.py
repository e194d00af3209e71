"""Pass Diff, the older interface, kept for scripts written against it; it is a thin layer on
the IR Lower Trace (:mod:`tilewright.tools.lower_trace`), which new code should use.

- ``pass_diff(func, passes)`` prints the diff of each pass and returns the trace's step dicts;
- ``TILEWRIGHT_PASS_DIFF=1`` prints the diff of every pass of every compilation (the lower
  trace in ``terminal`` mode; with ``TILEWRIGHT_LOWER_TRACE`` set as well, mode ``both``).
"""

from __future__ import annotations

import os

from . import lower_trace as _lt

ENV = "TILEWRIGHT_PASS_DIFF"


def pass_diff(func, passes, print_output: bool = True) -> list[dict]:
    """Run ``passes`` on ``func`` and report, for each, whether and how its IR changed."""
    mode = "terminal" if print_output else "html"
    if print_output:
        return _lt.lower_trace(func, passes, mode=mode)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tw-pass-diff-") as tmp:
        return _lt.lower_trace(func, passes, mode="html", html_path=os.path.join(tmp, "r.html"))


def enable() -> None:
    """Print the diff of every pass of every later compilation."""
    current = _lt._active.config if _lt._active is not None else None
    mode = "both" if current is not None and current.html else "terminal"
    _lt.enable(mode, current.trace_dir if current else None,
               current.codegen_output if current else None)


def enable_from_env() -> None:
    if os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        enable()


__all__ = ["enable", "pass_diff"]
