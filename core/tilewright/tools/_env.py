"""Debug tools switched on by environment variables, applied when ``tilewright`` is imported."""

from __future__ import annotations

from . import lower_trace, pass_diff, pass_timing


def apply() -> None:
    lower_trace.enable_from_env()
    pass_diff.enable_from_env()
    pass_timing.enable_from_env()
