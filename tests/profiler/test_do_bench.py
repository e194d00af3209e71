"""do_bench: timers from plugins, clear errors, cache flushing, median by default."""

import statistics
import sys
import time

import pytest
from tilewright.errors import ConfigError
from tilewright.plugin import Availability, Timer
from tilewright.profiler import bench, do_bench, get_timer, timers
from tilewright.profiler.timers import describe, supports_flush


def _sleeper(ms):
    return lambda: time.sleep(ms / 1e3)


def test_wall_timer_measures_a_known_duration():
    value = do_bench(_sleeper(2), warmup=1, rep=20, cache_size=0)
    assert 1.8 < value < 20


def test_median_is_the_default(monkeypatch):
    samples = [5.0, 1.0, 1.0, 1.0, 100.0]
    fake = Timer("wall", lambda: Availability(True),
                 lambda fn, w, n, flush=None: samples if n == len(samples) else [1.0] * n)
    monkeypatch.setattr(bench, "get_timer", lambda name: fake)
    assert do_bench(lambda: None, _n_repeat=5) == statistics.median(samples)
    assert do_bench(lambda: None, _n_repeat=5, return_mode="mean") == statistics.fmean(samples)
    assert do_bench(lambda: None, _n_repeat=5, return_mode="min") == 1.0
    assert do_bench(lambda: None, _n_repeat=5, return_mode="all") == samples
    low, high = do_bench(lambda: None, _n_repeat=5, quantiles=[0.0, 1.0])
    assert (low, high) == (1.0, 100.0)


def test_a_long_call_is_timed_as_often_as_the_budget_holds(monkeypatch):
    """TileLang's counts for a call longer than rep / MIN_SAMPLES: rep // estimate, at least 1
    (a kernel at a GPU's sizes on a CPU is not run ten times)."""
    counts = []

    def measure(fn, warmup, n, flush=None):
        counts.append((warmup, n))
        return [40.0] * n

    fake = Timer("wall", lambda: Availability(True), measure)
    monkeypatch.setattr(bench, "get_timer", lambda name: fake)
    assert len(do_bench(lambda: None, rep=100, cache_size=0, return_mode="all")) == 2
    assert counts[-1] == (1, 2)
    assert len(do_bench(lambda: None, rep=20, cache_size=0, return_mode="all")) == 1
    # a call of rep / MIN_SAMPLES or less still gets the minimum
    fake = Timer("wall", lambda: Availability(True), lambda fn, w, n, flush=None: [10.0] * n)
    monkeypatch.setattr(bench, "get_timer", lambda name: fake)
    assert len(do_bench(lambda: None, rep=100, cache_size=0, return_mode="all")) == \
        bench.MIN_SAMPLES


def test_caches_are_flushed_before_each_timed_repetition(monkeypatch):
    flushed = []
    monkeypatch.setattr(bench, "_flusher", lambda size: lambda: flushed.append(size))
    do_bench(lambda: None, _n_warmup=2, _n_repeat=7, cache_size=8)
    # one flush is timed to size the budget, then one before each of the 7 repetitions
    assert flushed == [8] * 8
    flushed.clear()
    do_bench(lambda: None, _n_warmup=2, _n_repeat=7, fast_flush=False)
    assert flushed == []


def test_a_huge_reported_cache_is_flushed_within_the_budget(monkeypatch):
    """A VM reporting a 300 MiB last-level cache: writing it (here 0.05 ms per MiB) would
    leave a handful of samples in the default budget, so the flush is cut down."""
    flushed = []

    def flusher(size):
        def flush():
            flushed.append(size)
            time.sleep(size * 0.05e-3)

        return flush

    monkeypatch.setattr(bench, "last_level_cache_bytes", lambda: 300 << 20)
    monkeypatch.setattr(bench, "_flusher", flusher)
    samples = do_bench(lambda: None, return_mode="all")
    used = flushed[-1]
    assert flushed[0] == 300 and bench.FLUSH_FLOOR_MB <= used < 300
    assert used * 0.05 <= bench.FLUSH_SHARE * 100 / bench.MIN_SAMPLES * 1.5
    # the minimum of samples whatever the load (the count past it depends on the clock: 17
    # in one make test run on 2 busy cores, where this asked for 20)
    assert len(samples) >= bench.MIN_SAMPLES and flushed.count(used) >= len(samples)
    # a size the caller gives is kept, and the budget still buys the minimum of samples
    flushed.clear()
    assert len(do_bench(lambda: None, rep=10, cache_size=300, return_mode="all")) == \
        bench.MIN_SAMPLES
    assert set(flushed) == {300}


def test_timer_without_flush_support_is_not_given_one(fake_plugins):
    assert supports_flush(timers()["wall"])
    no_flush = Timer("plain", lambda: Availability(True), lambda fn, w, n: [1.0] * n)
    assert not supports_flush(no_flush)


def test_plugin_timer_is_used_with_flush(fake_plugins):
    assert do_bench(lambda: None, backend="fixed", _n_repeat=6, cache_size=8) == 1.0
    # the estimate call, then the timed one with a flush callback:
    assert fake_plugins[-1] == ("measure", 25, 6, True)  # 25 ms warm-up of 1 ms calls


def test_unknown_timer_names_available_and_why_others_are_not(fake_plugins):
    with pytest.raises(ConfigError) as info:
        do_bench(lambda: None, backend="nvtx")
    text = str(info.value)
    assert "unknown timer 'nvtx'" in text
    # TileLang's GPU timers time with the wall clock where no CUDA device is present
    assert do_bench(lambda: None, backend="cupti", _n_warmup=1, _n_repeat=2) >= 0
    assert "available: wall, fixed" in text
    assert "event (no CUDA device is visible)" in text


def test_timer_on_a_machine_without_its_device(fake_plugins):
    with pytest.raises(ConfigError, match=r"timer 'event' is not available here: no CUDA "
                                          r"device is visible; available: wall, fixed"):
        get_timer("event")
    assert "unavailable: event" in describe()


def test_a_probe_that_raises_is_a_reason(monkeypatch):
    def broken():
        raise RuntimeError("driver missing")

    bad = Timer("bad", broken, lambda fn, w, n: [])
    module = sys.modules["tilewright.profiler.timers"]  # the package re-exports a function
    monkeypatch.setattr(module, "timers", lambda: {"bad": bad})
    with pytest.raises(ConfigError, match="RuntimeError: driver missing"):
        get_timer("bad")


@pytest.mark.parametrize("kwargs, words", [
    ({"return_mode": "p50"}, "return_mode must be one of"),
    ({"warmup": -1}, "warmup is a time budget"),
    ({"rep": "x"}, "rep is a time budget"),
    ({"quantiles": [0.5, 2]}, "quantiles must be numbers in [0, 1]"),
    ({"quantiles": []}, "quantiles must be numbers in [0, 1]"),
])
def test_bad_arguments(kwargs, words):
    with pytest.raises(ConfigError) as info:
        do_bench(lambda: None, **kwargs)
    assert words in str(info.value)


def test_last_level_cache_is_read():
    assert bench.last_level_cache_bytes() >= 1 << 20
