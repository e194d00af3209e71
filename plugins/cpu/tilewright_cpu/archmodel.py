"""The host CPU as an architecture model, measured by a short benchmark (about 0.2 s).

Peak FLOP/s comes from a float32 and a float64 matrix product (numpy's BLAS, every core);
bandwidth from copying a buffer several times larger than the last-level cache. The numbers
are measured once per process.
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np
from tilewright.plugin import ArchModel


def _best_seconds(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _peak_tflops(dtype, n: int = 256) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    b = a.copy()
    seconds = _best_seconds(lambda: a @ b, 4)
    return 2 * n ** 3 / seconds / 1e12


def _bandwidth_gbps(llc_bytes: int) -> float:
    size = min(max(32 << 20, 2 * llc_bytes), 256 << 20)
    src = np.ones(size // 8, dtype=np.float64)
    dst = np.empty_like(src)
    seconds = _best_seconds(lambda: np.copyto(dst, src), 3)
    return 2 * size / seconds / 1e9  # one read and one write per byte copied


def _cache_bytes(level: int) -> int:
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(root)):
            base = os.path.join(root, entry)
            if not entry.startswith("index"):
                continue
            with open(os.path.join(base, "level")) as f:
                if int(f.read()) != level:
                    continue
            with open(os.path.join(base, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(base, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            return int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        pass
    return {1: 32 << 10, 2: 1 << 20, 3: 32 << 20}.get(level, 0)


@functools.lru_cache(maxsize=1)
def host_model() -> ArchModel:
    """The measured model of this machine's CPU, named ``cpu``."""
    fp32 = _peak_tflops(np.float32)
    fp64 = _peak_tflops(np.float64)
    bandwidth = _bandwidth_gbps(_cache_bytes(3))
    cores = os.cpu_count() or 1
    return ArchModel(
        name="cpu",
        peak_tflops={"float32": fp32, "float64": fp64},
        bandwidth_gbps=bandwidth,
        description=f"host CPU, {cores} core(s), measured: {fp32 * 1e3:.1f} GFLOP/s fp32, "
                    f"{bandwidth:.1f} GB/s copy",
        compute_units=cores,
        # a CPU worker keeps a block's shared and fragment tiles in its private L2
        shared_memory_bytes=_cache_bytes(2),
        # the accumulator tile should stay in L1 (4-byte words)
        register_budget=_cache_bytes(1) // 4,
        mma_shape=(8, 8, 1),
        transaction_bytes=64,
        unit_partitions=1,
    )
