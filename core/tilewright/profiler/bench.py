"""``do_bench``: time a callable with a registered timer and summarise the samples."""

from __future__ import annotations

import statistics

import numpy as np

from .timers import get_timer

_FLUSH_BUFFERS: dict[int, np.ndarray] = {}


def _flusher(cache_size_mb: int):
    """Writing a buffer larger than the last-level cache evicts the kernel's data."""
    buf = _FLUSH_BUFFERS.get(cache_size_mb)
    if buf is None:
        buf = _FLUSH_BUFFERS[cache_size_mb] = np.empty(cache_size_mb << 18, dtype=np.float32)

    def flush():
        buf.fill(0.0)

    return flush


def do_bench(fn, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles=None, fast_flush: bool = True, backend: str = "wall",
             return_mode: str = "mean", device=None, cache_size: int = 256):
    """Time ``fn()`` in milliseconds.

    ``warmup`` and ``rep`` are time budgets in ms (as in TileLang); ``_n_warmup`` and
    ``_n_repeat`` override them with counts. ``quantiles`` returns those quantiles;
    otherwise ``return_mode`` picks ``mean``, ``median``, ``min``, ``max`` or ``all``.
    """
    if return_mode not in ("mean", "median", "min", "max", "all"):
        raise ValueError(f"return_mode must be mean, median, min, max or all, got "
                         f"{return_mode!r}")
    timer = get_timer(backend)
    estimate = statistics.median(timer.measure(fn, 1, 5))
    n_warmup = _n_warmup or max(1, int(warmup / max(estimate, 1e-3)))
    n_repeat = _n_repeat or max(1, int(rep / max(estimate, 1e-3)))
    flush = _flusher(cache_size) if fast_flush and cache_size else None
    samples = timer.measure(fn, n_warmup, n_repeat, flush=flush)
    if quantiles is not None:
        values = np.quantile(np.asarray(samples), list(quantiles)).tolist()
        return values[0] if len(values) == 1 else values
    if return_mode == "all":
        return samples
    return {"mean": statistics.fmean, "median": statistics.median, "min": min,
            "max": max}[return_mode](samples)
