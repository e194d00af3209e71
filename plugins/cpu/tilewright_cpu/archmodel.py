"""The host CPU as an architecture model for the roofline analyser (``--arch cpu``).

Peak FLOP/s for float32 and float64 and the memory bandwidth are measured once per machine and
kept in the tilewright cache (``runtime/tw_cpu_roofline-<digest>.json``, the digest of the CPU's
name and features, its core count and cache sizes), so every process sees the same model:

- peak: a torch matrix product on one thread, sized so it takes at least ``PROBE_SECONDS`` of
  that thread's CPU time, best of ``REPEATS``, times the cores (CPU time, unlike wall time,
  does not grow when other processes share the cores; sleeping worker threads play no part);
- bandwidth: torch copies (every core) of a buffer four times the last-level cache (64 to
  512 MiB), counting a read and a write per byte, timed by the wall clock: the fastest of
  ``BURSTS`` bursts (``BURST_PAUSE`` apart) of ``REPEATS`` back-to-back copies, after an
  untimed one that wakes the threads. The record's ``bandwidth`` says how it was measured:
  ``method``, two readings (the best of each half of the bursts) and ``cpu_share``, the share
  of its threads' CPU time the fastest copy got (process CPU time over wall time over
  threads).

A measurement is checked against what the host can do: the nominal peak is cores x float32
lanes of the widest vector unit x 2 FLOPs per FMA x 2 FMA units x clock (``/proc/cpuinfo``).
A float32 peak under a quarter of the nominal one says the machine was busy: it is used but not
cached, so the next process measures again; so is a bandwidth whose two readings differ by
more than ``AGREEMENT`` times, or whose copy got under ``CPU_SHARE`` of its threads' CPU time
(other processes held the cores). Under 1/16 of the nominal peak or above 1.5 times it, a
float64 peak above 3/4 of the float32 one, or a bandwidth under 1 GB/s, the value is replaced
by an estimate (half the nominal peak; half the float32 peak for float64; 10 GB/s per core),
not cached either. The model's description and ``details`` (``estimated``, ``busy``) say so.

Environment variables override the model, measured or cached: ``TILEWRIGHT_CPU_PEAK_TFLOPS``
(one number for float32, or ``float32=0.1,float64=0.05``) and ``TILEWRIGHT_CPU_BANDWIDTH_GBPS``.
To measure again, remove the cache file (``details["cache_file"]``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
import warnings
from pathlib import Path

from tilewright.errors import ConfigError
from tilewright.jit.cache import CacheError, DiskCache
from tilewright.plugin import ArchModel

from .hostcpu import host_cpu, host_fingerprint

PEAK_ENV = "TILEWRIGHT_CPU_PEAK_TFLOPS"
BANDWIDTH_ENV = "TILEWRIGHT_CPU_BANDWIDTH_GBPS"
FORMAT = 2  # 2: the bandwidth's record says how it was measured
PROBE_SECONDS = 0.02
REPEATS = 3
BUDGET_SECONDS = 0.5
BURSTS = 4  # bursts of copies timed for the bandwidth, BURST_PAUSE seconds apart
BURST_PAUSE = 0.05
AGREEMENT = 1.5  # the two bandwidth readings agree within this factor, or the machine is busy
CPU_SHARE = 0.75  # the least share of its threads' CPU time an unhindered copy gets
FMA_UNITS = 2
FLOPS_PER_FMA = 2


class Uncacheable(Exception):
    """A measurement the model may use but must not cache; ``values`` holds it."""

    def __init__(self, values: dict):
        super().__init__("a measurement of a busy machine")
        self.values = values


def _best(fn, clock=time.perf_counter, repeat: int = REPEATS) -> float:
    """The shortest of ``repeat`` back-to-back calls of ``fn`` by ``clock`` (fewer when they
    pass ``BUDGET_SECONDS``), after an untimed one that wakes the worker threads."""
    fn()
    best, deadline = float("inf"), time.perf_counter() + BUDGET_SECONDS
    for _ in range(repeat):
        start = clock()
        fn()
        best = min(best, clock() - start)
        if time.perf_counter() > deadline:
            break
    return best


def _clock_ghz() -> float:
    """The highest clock ``/proc/cpuinfo`` reports (3 GHz when it reports none)."""
    try:
        mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)",
                                            Path("/proc/cpuinfo").read_text(), re.M)]
    except OSError:
        mhz = []
    return max(mhz) / 1e3 if mhz else 3.0


def nominal_tflops() -> float:
    """The float32 peak the host's cores, vector width and clock allow."""
    host = host_cpu()
    fma = FMA_UNITS * FLOPS_PER_FMA if host.fma else FMA_UNITS
    return host.cores * host.lanes(32) * fma * _clock_ghz() / 1e3


def _peak_tflops(dtype) -> float:
    """The peak of all cores: one core's, timed by the CPU time of the thread that runs it
    (other load on the machine delays the product but does not change that time), times the
    cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        n = 128
        while True:
            a = torch.randn(n, n, dtype=dtype)
            product = functools.partial(torch.matmul, a, a)
            if _best(product, time.thread_time, 1) >= PROBE_SECONDS or n >= 4096:
                break
            n *= 2
        return 2 * n ** 3 / _best(product, time.thread_time) / 1e12 * host_cpu().cores
    finally:
        torch.set_num_threads(threads)


def _copy_bursts() -> tuple[int, int, list[tuple[float, float]]]:
    """``(bytes, threads, bursts)``: the buffer size, torch's thread count, and for each of
    ``BURSTS`` bursts (``BURST_PAUSE`` apart, fewer past ``BUDGET_SECONDS`` but at least two)
    the wall and process CPU seconds of its fastest of ``REPEATS`` copies, after an untimed
    one that wakes the threads."""
    import torch

    size = min(max(64 << 20, 4 * host_cpu().l3_bytes), 512 << 20)
    src = torch.ones(size // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    bursts, deadline = [], time.perf_counter() + BUDGET_SECONDS
    while len(bursts) < 2 or len(bursts) < BURSTS and time.perf_counter() < deadline:
        time.sleep(BURST_PAUSE)
        runs = []
        for _ in range(REPEATS):
            wall, cpu = time.perf_counter(), time.process_time()
            dst.copy_(src)
            runs.append((time.perf_counter() - wall, time.process_time() - cpu))
        bursts.append(min(runs))
    return size, torch.get_num_threads(), bursts


def _bandwidth() -> dict:
    """The copy bandwidth (a read and a write per byte) of the fastest burst, with how it was
    measured: two readings (the best of the first and of the second half of the bursts),
    and the share of its threads' CPU time the fastest copy got (CPU time over wall time
    over threads; a machine busy with other work gives less)."""
    size, threads, bursts = _copy_bursts()
    rates = [2 * size / wall / 1e9 for wall, _ in bursts]
    half = len(rates) // 2
    readings = [max(rates[:half]), max(rates[half:])]
    wall, cpu = min(bursts)
    return {"gbps": max(readings), "readings_gbps": readings,
            "cpu_share": cpu / wall / threads,
            "method": f"wall clock, best of {len(bursts)} bursts of {REPEATS} copies of "
                      f"{size >> 20} MiB on {threads} thread(s); cached only when the two "
                      f"readings agree within {AGREEMENT:g}x and the copy had at least "
                      f"{CPU_SHARE:.0%} of its threads' CPU time"}


def measure() -> dict:
    """A fresh measurement as stored in the cache; raises :class:`Uncacheable` (carrying the
    values, estimates in place of implausible ones) when it must not be cached."""
    import torch

    nominal = nominal_tflops()
    fp32, fp64 = _peak_tflops(torch.float32), _peak_tflops(torch.float64)
    bandwidth = _bandwidth()
    values = {"format": FORMAT, "host": host_fingerprint(), "cores": host_cpu().cores,
              "nominal_tflops": nominal, "peak_tflops": {"float32": fp32, "float64": fp64},
              "bandwidth_gbps": bandwidth.pop("gbps"), "bandwidth": bandwidth,
              "estimated": [], "busy": False, "notes": []}
    if not nominal / 16 <= fp32 <= nominal * 1.5:
        values["notes"].append(f"measured {fp32 * 1e3:.3g} GFLOP/s float32 is implausible for "
                               f"a nominal {nominal * 1e3:.3g}")
        values["peak_tflops"]["float32"] = fp32 = nominal / 2
        values["estimated"].append("float32")
    elif fp32 < nominal / 4:
        values["notes"].append(f"measured {fp32 * 1e3:.3g} GFLOP/s float32, under a quarter "
                               f"of a nominal {nominal * 1e3:.3g}")
        values["busy"] = True
    if not fp32 / 16 <= fp64 <= fp32 * 0.75:
        values["notes"].append(f"measured {fp64 * 1e3:.3g} GFLOP/s float64 is implausible next "
                               f"to {fp32 * 1e3:.3g} float32")
        values["peak_tflops"]["float64"] = fp32 / 2
        values["estimated"].append("float64")
    low, high = sorted(bandwidth["readings_gbps"])
    if values["bandwidth_gbps"] < 1.0:
        values["notes"].append(f"measured {values['bandwidth_gbps']:.3g} GB/s is implausible")
        values["bandwidth_gbps"] = 10.0 * host_cpu().cores
        values["estimated"].append("bandwidth")
    elif high > low * AGREEMENT:
        values["notes"].append(f"two bandwidth readings disagree: {low:.3g} and {high:.3g} "
                               "GB/s")
        values["busy"] = True
    elif bandwidth["cpu_share"] < CPU_SHARE:
        values["notes"].append(f"the bandwidth copy had {bandwidth['cpu_share']:.0%} of its "
                               "threads' CPU time")
        values["busy"] = True
    if values["estimated"] or values["busy"]:
        raise Uncacheable(values)
    return values


def _valid(values) -> bool:
    try:
        return values["format"] == FORMAT and values["bandwidth_gbps"] > 0 and \
            "method" in values["bandwidth"] and all(
            values["peak_tflops"][d] > 0 for d in ("float32", "float64"))
    except (KeyError, TypeError):
        return False


def cache_name() -> str:
    """The cache file of this machine's model."""
    host = host_cpu()
    key = f"{FORMAT} {host_fingerprint()} cores={host.cores} caches={host.l1_bytes}," \
          f"{host.l2_bytes},{host.l3_bytes}"
    return f"tw_cpu_roofline-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _write(path: Path, values: dict) -> None:
    path.write_text(json.dumps(values, indent=1, sort_keys=True))


def _measured_or_cached() -> dict:
    """The model's values from the cache, measured (and stored) when absent."""
    cache, name = DiskCache(), cache_name()
    try:
        path = cache.helper_library(name, lambda path: _write(path, measure()))
        values = json.loads(path.read_text())
        if not _valid(values):
            raise ValueError(f"{path} is malformed; remove it to measure again")
        return {**values, "cache_file": str(path)}
    except Uncacheable as exc:
        warnings.warn("tilewright: the CPU roofline measurement was not cached (" +
                      "; ".join(exc.values["notes"]) + "): the machine is probably busy; "
                      f"set {PEAK_ENV} / {BANDWIDTH_ENV} to give the values",
                      RuntimeWarning, stacklevel=2)
        return exc.values
    except (CacheError, OSError, ValueError) as exc:
        warnings.warn(f"tilewright: the CPU roofline model is measured without the cache: {exc}",
                      RuntimeWarning, stacklevel=2)
        try:
            return measure()
        except Uncacheable as busy:
            return busy.values


def _given() -> dict:
    """The environment's overrides: ``{"float32": .., "float64": .., "bandwidth": ..}``, the
    keys it sets."""
    given = {}
    text = os.environ.get(PEAK_ENV, "").strip()
    if text:
        try:
            if "=" in text:
                given = {k.strip(): float(v) for k, v in
                         (item.split("=", 1) for item in text.split(","))}
            else:
                given = {"float32": float(text)}
        except ValueError:
            raise ConfigError(f"{PEAK_ENV}={text!r}: give TFLOP/s as a number (float32) or as "
                              "dtype=number pairs, e.g. float32=0.1,float64=0.05") from None
        if any(not v > 0 for v in given.values()):
            raise ConfigError(f"{PEAK_ENV}={text!r}: peaks must be positive")
    text = os.environ.get(BANDWIDTH_ENV, "").strip()
    if text:
        try:
            bandwidth = float(text)
        except ValueError:
            bandwidth = 0.0
        if not bandwidth > 0:
            raise ConfigError(f"{BANDWIDTH_ENV}={text!r}: give a positive number of GB/s")
        given["bandwidth"] = bandwidth
    return given


def _values() -> dict:
    """The model's values: measured or cached, with the environment's overrides applied
    (their names in ``overridden``); nothing is measured when the environment gives all of
    the float32 and float64 peaks and the bandwidth."""
    given = _given()
    if {"float32", "float64", "bandwidth"} <= set(given):
        values = {"nominal_tflops": nominal_tflops(), "peak_tflops": {}, "estimated": [],
                  "busy": False}
    else:
        values = _measured_or_cached()
    values = {**values, "peak_tflops": dict(values["peak_tflops"]), "overridden": []}
    for key, value in sorted(given.items(), key=lambda item: (item[0] == "bandwidth", item[0])):
        if key == "bandwidth":
            values["bandwidth_gbps"] = value
        else:
            values["peak_tflops"][key] = value
        values["overridden"].append(key)
    return values


def _describe(values: dict) -> str:
    host = host_cpu()
    fp32, bandwidth = values["peak_tflops"]["float32"] * 1e3, values["bandwidth_gbps"]
    how = []
    if values["overridden"]:
        how.append(f"{', '.join(values['overridden'])} from the environment")
    estimated = [e for e in values["estimated"] if e not in values["overridden"]]
    if estimated:
        how.append(f"{', '.join(estimated)} estimated: the measurement looked wrong")
    elif values["busy"] and "float32" not in values["overridden"]:
        how.append("the machine looked busy: not cached")
    return (f"host CPU, {host.cores} core(s), {host.isa}, measured: {fp32:.1f} GFLOP/s fp32, "
            f"{bandwidth:.1f} GB/s copy" + (f" ({'; '.join(how)})" if how else ""))


@functools.lru_cache(maxsize=1)
def host_model() -> ArchModel:
    """The model of this machine's CPU, named ``cpu`` (see the module docstring)."""
    values = _values()
    host = host_cpu()
    return ArchModel(
        name="cpu",
        peak_tflops=values["peak_tflops"],
        bandwidth_gbps=values["bandwidth_gbps"],
        description=_describe(values),
        compute_units=host.cores,
        # a CPU worker keeps a block's shared and fragment tiles in its private L2
        shared_memory_bytes=host.l2_bytes,
        # the accumulator tile should stay in L1 (4-byte words)
        register_budget=host.l1_bytes // 4,
        mma_shape=(8, 8, 1),
        transaction_bytes=64,
        unit_partitions=1,
        details={"nominal_tflops": values["nominal_tflops"],
                 "estimated": tuple(values["estimated"]), "busy": values["busy"],
                 "overridden": tuple(values["overridden"]),
                 "overrides": (PEAK_ENV, BANDWIDTH_ENV),
                 "cache_file": values.get("cache_file", ""), "l2_bytes": host.l2_bytes},
    )
