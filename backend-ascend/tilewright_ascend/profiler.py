"""Timers of ``do_bench`` on an NPU: ``msprof`` and ``msprof_detail``.

``do_bench(fn, backend="msprof", _n_warmup=30, _n_repeat=100)`` (the seed's call) runs ``fn``
``_n_warmup`` times, then ``_n_repeat`` times under CANN's profiler through ``torch_npu``
(``torch_npu.profiler.profile`` with NPU activities, which collects with msprof), and returns
the device time of each repetition: the durations of the kernels it launched, read from the
profiler's ``kernel_details.csv`` (column ``Duration(us)``) in launch order. Where msprof or an
NPU is missing the timer is unavailable and ``do_bench`` refuses it with the reason.
``msprof_detail`` (TileLang's per-pipe ``KernelProfile``) is registered unavailable: not
implemented here.
"""

from __future__ import annotations

import csv
import importlib
import shutil
import tempfile
from pathlib import Path

from tilewright.plugin import Availability, Timer

from .facts.device import npu_available

KERNEL_DETAILS = "kernel_details.csv"  # under <dir>/<worker>/ASCEND_PROFILER_OUTPUT/
DURATION_COLUMN = "Duration(us)"


def msprof_available() -> Availability:
    if shutil.which("msprof") is None:
        return Availability(False, "msprof is not on PATH (install CANN and source "
                                   "ascend-toolkit/set_env.sh)")
    return npu_available()


def _detail_available() -> Availability:
    state = msprof_available()
    if not state:
        return state
    return Availability(False, "msprof_detail (per-pipe ratios) is not implemented by "
                               "tilewright-ascend; use backend='msprof' for the duration")


def kernel_rows(folder) -> list[dict]:
    """The rows of the newest ``kernel_details.csv`` the profiler wrote under ``folder``."""
    found = sorted(Path(folder).rglob(KERNEL_DETAILS), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"timer msprof: the profiler wrote no {KERNEL_DETAILS} under "
                           f"{folder}")
    with open(found[-1], newline="") as f:
        return list(csv.DictReader(f))


def repetitions_ms(rows: list[dict], n_repeat: int) -> list[float]:
    """Each repetition's device time in ms: the kernels' durations in launch order, split
    into ``n_repeat`` equal groups (every call of the timed function launches the same
    kernels)."""
    if rows and DURATION_COLUMN not in rows[0]:
        raise RuntimeError(f"timer msprof: {KERNEL_DETAILS} has no column {DURATION_COLUMN!r} "
                           f"(columns: {', '.join(rows[0])})")
    durations = [float(row[DURATION_COLUMN]) for row in rows]
    if not durations or len(durations) % n_repeat:
        raise RuntimeError(f"timer msprof: {len(durations)} kernels were recorded for "
                           f"{n_repeat} repetitions; each call of the timed function must "
                           "launch the same kernels")
    per = len(durations) // n_repeat
    return [sum(durations[i * per:(i + 1) * per]) / 1000.0 for i in range(n_repeat)]


def measure_msprof(fn, n_warmup: int, n_repeat: int) -> list[float]:
    state = msprof_available()
    if not state:
        raise RuntimeError(f"timer msprof is unavailable: {state.reason}")
    # torch_npu only where it is installed (the availability above checked that), and only
    # when timing: importing it registers the NPU device with torch
    torch = importlib.import_module("torch")
    profiler = importlib.import_module("torch_npu.profiler")
    for _ in range(n_warmup):
        fn()
    torch.npu.synchronize()
    with tempfile.TemporaryDirectory(prefix="tw_msprof_") as folder:
        with profiler.profile(activities=[profiler.ProfilerActivity.NPU],
                              on_trace_ready=profiler.tensorboard_trace_handler(folder)):
            for _ in range(n_repeat):
                fn()
            torch.npu.synchronize()
        return repetitions_ms(kernel_rows(folder), n_repeat)


def _refuse_detail(fn, n_warmup, n_repeat):
    raise RuntimeError(f"timer msprof_detail is unavailable: {_detail_available().reason}")


TIMERS = (
    Timer("msprof", msprof_available, measure_msprof,
          "per-kernel device duration from CANN's profiler (msprof) through torch_npu; needs "
          "CANN and an NPU"),
    Timer("msprof_detail", _detail_available, _refuse_detail,
          "duration plus AIC/AIV pipe ratios (not implemented: unavailable)"),
)
