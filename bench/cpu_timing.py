"""Timing helpers of the CPU benchmarks: alternating calls, the machine's load, and a competing
process on one core.

On a shared or busy machine two callables timed one after the other see different load; timed
alternately, call by call, they see the same, and the ratio of their medians stays meaningful.
"""

import contextlib
import multiprocessing
import os
import statistics
import time


def alternate(fns, warmup: int, runs: int) -> list[list[float]]:
    """The times in seconds of ``runs`` calls of each of ``fns``, their calls alternating
    (after ``warmup`` untimed rounds)."""
    times = [[] for _ in fns]
    for n in range(warmup + runs):
        for fn, acc in zip(fns, times):
            start = time.perf_counter()
            fn()
            if n >= warmup:
                acc.append(time.perf_counter() - start)
    return times


def compare(ours, theirs, budget_s: float = 4.0, most: int = 25) -> tuple[float, float]:
    """Median milliseconds of ``ours()`` and ``theirs()`` called alternately: as many rounds
    as fit ``budget_s`` (at least 3, at most ``most``) after one warm-up round."""
    first = alternate([ours, theirs], 0, 1)
    per_round = sum(t[0] for t in first)
    runs = max(3, min(most, int(budget_s / max(per_round, 1e-6))))
    a, b = alternate([ours, theirs], 0, runs)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages and the core count, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def _spin(core: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    while True:
        pass


@contextlib.contextmanager
def competing_process(core: int = 0):
    """A process spinning on ``core`` for the duration of the block."""
    proc = multiprocessing.get_context("spawn").Process(target=_spin, args=(core,), daemon=True)
    proc.start()
    try:
        time.sleep(0.2)  # let it start spinning
        yield proc
    finally:
        proc.terminate()
        proc.join()
