"""``do_bench``: time a callable with a registered timer and summarise the samples."""

from __future__ import annotations

import functools
import logging
import statistics
import time
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .timers import availability, get_timer, supports_flush, timers

RETURN_MODES = ("mean", "median", "min", "max", "all")
# TileLang's GPU timers: asked for where no plugin provides them (no GPU backend installed,
# or its device is absent), do_bench times with the wall clock and says so once
GPU_TIMERS = ("event", "cupti", "cudagraph")
_log = logging.getLogger(__name__)
_FELL_BACK: set = set()
_FLUSH_BUFFERS: dict[int, np.ndarray] = {}


# Fewer samples than this say little about a median; a budget too small for them is exceeded.
MIN_SAMPLES = 10
# The flush may take this share of a repetition's budget (rep / MIN_SAMPLES) at most: a larger
# buffer is cut down to what is written in that time (never below FLUSH_FLOOR_MB).
FLUSH_SHARE = 0.25
FLUSH_FLOOR_MB = 8


@functools.cache
def last_level_cache_bytes() -> int:
    """The largest CPU cache of this machine (from sysfs), or 32 MiB when unknown."""
    largest = 0
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            largest = max(largest, int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return largest or 32 << 20


def _flusher(cache_size_mb: int):
    """Writing a buffer larger than the last-level cache evicts the kernel's data."""
    buf = _FLUSH_BUFFERS.get(cache_size_mb)
    if buf is None:
        buf = _FLUSH_BUFFERS[cache_size_mb] = np.empty(cache_size_mb << 18, dtype=np.float32)
        buf.fill(0.0)  # its pages are mapped now, not during the first timed flush

    def flush():
        buf.fill(0.0)

    return flush


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _sized_flush(cache_size: int | None, rep: float):
    """The flush and its time in ms: ``cache_size`` MiB when given, else the last-level
    cache's size, cut down so that one flush takes at most ``FLUSH_SHARE`` of the time a
    repetition may take when ``rep`` is shared by ``MIN_SAMPLES`` of them (a VM may report a
    last-level cache of hundreds of MiB, whose flush would eat the budget)."""
    size = cache_size or max(FLUSH_FLOOR_MB, last_level_cache_bytes() >> 20)
    flush = _flusher(int(size))
    flush_ms = _timed(flush)
    limit = FLUSH_SHARE * rep / MIN_SAMPLES
    if not cache_size and flush_ms > limit and size > FLUSH_FLOOR_MB:
        size = max(FLUSH_FLOOR_MB, int(size * limit / flush_ms))
        flush = _flusher(size)
        flush_ms = _timed(flush)
        _log.debug("do_bench: flushing %d MiB (%.2f ms) instead of the last-level cache's "
                   "%d MiB", size, flush_ms, last_level_cache_bytes() >> 20)
    return flush, flush_ms


def _check_args(warmup, rep, quantiles, return_mode):
    if return_mode not in RETURN_MODES:
        raise ConfigError(f"return_mode must be one of {', '.join(RETURN_MODES)}, got "
                          f"{return_mode!r}")
    for name, value in (("warmup", warmup), ("rep", rep)):
        if not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"do_bench: {name} is a time budget in ms and must be >= 0, got "
                              f"{value!r}")
    if quantiles is not None:
        quantiles = list(quantiles)
        bad = [q for q in quantiles if not 0 <= q <= 1]
        if not quantiles or bad:
            raise ConfigError(f"do_bench: quantiles must be numbers in [0, 1], got {quantiles}")
    return quantiles


def _usable(backend: str) -> str:
    """``backend``, or ``wall`` for one of TileLang's GPU timers that is unavailable here."""
    if backend in GPU_TIMERS:
        timer = timers().get(backend)
        if timer is None or not availability(timer):
            if backend not in _FELL_BACK:
                _FELL_BACK.add(backend)
                _log.warning("do_bench: timer %r needs a CUDA device; timing with 'wall'",
                             backend)
            return "wall"
    return backend


def do_bench(fn, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles=None, fast_flush: bool = True, backend: str = "wall",
             return_mode: str = "median", device=None, cache_size: int | None = None):
    """Time ``fn()`` in milliseconds.

    ``warmup`` and ``rep`` are time budgets in ms (as in TileLang); ``_n_warmup`` and
    ``_n_repeat`` override them with counts. ``backend`` names the timer (``wall`` from the
    core, others from plugins; see :func:`tilewright.profiler.timers`); TileLang's GPU timers
    (``event``, ``cupti``, ``cudagraph``) fall back to ``wall``, with one log line, where no
    CUDA device is present. When ``fast_flush`` is
    set and the timer supports it, a buffer of ``cache_size`` MiB is overwritten before every
    timed repetition, so each one starts from cold caches; the flush itself is not timed. By
    default the buffer is the size of the host's last-level cache, cut down to what is written in
    a quarter of ``rep / MIN_SAMPLES`` (at least 8 MiB). The budgets count the flushes, and at
    least ``MIN_SAMPLES`` (10) repetitions are timed, unless one call takes longer than
    ``rep / MIN_SAMPLES``: then, as in TileLang, as many as ``rep`` holds, at least one.
    ``quantiles`` returns those quantiles of
    the samples; otherwise ``return_mode`` picks ``median`` (the default), ``mean``, ``min``,
    ``max`` or ``all`` (every sample).
    """
    quantiles = _check_args(warmup, rep, quantiles, return_mode)
    timer = get_timer(_usable(backend))
    flush, flush_ms = None, 0.0
    if fast_flush and cache_size != 0 and supports_flush(timer):
        flush, flush_ms = _sized_flush(cache_size, rep)
    estimate = statistics.median(timer.measure(fn, 1, 5))
    # budgets count the flushes too, so a cold-cache benchmark takes about as long as a warm one
    per_rep = max(estimate + flush_ms, 1e-3)
    n_warmup = _n_warmup or max(1, int(warmup / max(estimate, 1e-3)))
    # a call longer than rep / MIN_SAMPLES is timed as TileLang times it: as often as the
    # budget allows, at least once (a 40 s kernel at a GPU's sizes on a CPU runs twice, not 10x)
    floor = MIN_SAMPLES if estimate * MIN_SAMPLES <= rep else 1
    n_repeat = _n_repeat or max(floor, int(rep / per_rep))
    if flush is not None:
        samples = timer.measure(fn, n_warmup, n_repeat, flush=flush)
    else:
        samples = timer.measure(fn, n_warmup, n_repeat)
    if quantiles is not None:
        values = np.quantile(np.asarray(samples), quantiles).tolist()
        return values[0] if len(values) == 1 else values
    if return_mode == "all":
        return list(samples)
    return {"mean": statistics.fmean, "median": statistics.median, "min": min,
            "max": max}[return_mode](samples)
