"""Pipes and hardware events of A2/A3 (dav-2201), shared by the dialect, passes and codegen."""

from __future__ import annotations

PIPES = ("s", "v", "m", "mte1", "mte2", "mte3", "fix")
HARD_EVENTS = frozenset({
    "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3",
    "M_V", "V_M", "V_V", "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1",
    "M_FIX", "FIX_M", "MTE3_MTE2", "MTE2_MTE3", "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3",
    "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S", "FIX_MTE3",
})
EVENT_IDS = 8
CROSS_IDS = 11  # cross-core flags 0-10
PIPE_CORE = {"v": "AIV", "mte3": "AIV", "m": "AIC", "mte1": "AIC", "fix": "AIC"}


def event_name(src: str, dst: str) -> str:
    return f"{src}_{dst}".upper()
