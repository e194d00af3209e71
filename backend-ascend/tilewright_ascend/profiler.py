"""Timers: ``msprof`` and ``msprof_detail`` need CANN's msprof and an NPU; here they are
registered as unavailable with the reason, so ``do_bench`` explains what is missing."""

from __future__ import annotations

import shutil

from tilewright.plugin import Availability, Timer

from .executor import npu_available


def _msprof_available() -> Availability:
    if shutil.which("msprof") is None:
        return Availability(False, "msprof is not on PATH (install CANN and source "
                                   "ascend-toolkit/set_env.sh)")
    return npu_available()


def _unavailable(fn, n_warmup, n_repeat, flush=None):
    reason = _msprof_available().reason or "msprof timing is not implemented by this version"
    raise RuntimeError(f"timer msprof is unavailable: {reason}")


TIMERS = (
    Timer("msprof", _msprof_available, _unavailable,
          "per-kernel device duration from msprof (needs CANN and an NPU)"),
    Timer("msprof_detail", _msprof_available, _unavailable,
          "duration plus AIC/AIV pipe ratios, each against its own core's cycles"),
)
