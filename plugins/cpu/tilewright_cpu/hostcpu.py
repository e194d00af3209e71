"""Facts about the host CPU that code generation and blocking depend on.

The instruction set comes from LLVM's view of the host (``GetHostCPUName`` and
``GetHostCPUFeatures``, the CPU kernels are compiled for with ``-mcpu``); cache sizes come from
sysfs (``/sys/devices/system/cpu/cpu0/cache``), with common sizes where it is absent.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import tvm

CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
# Used where sysfs says nothing: sizes most x86-64 cores of the last decade have or exceed.
DEFAULT_CACHE_BYTES = {1: 32 << 10, 2: 1 << 20, 3: 32 << 20}


@dataclass(frozen=True)
class HostCPU:
    """The vector unit and caches of one core.

    ``vector_bytes`` is the widest vector register the code generator uses, ``vector_registers``
    how many of them there are, ``fma`` whether fused multiply-add exists. Cache sizes are per
    core for L1 data and L2 and per package for L3, in bytes.
    """

    name: str
    features: frozenset
    vector_bytes: int
    vector_registers: int
    fma: bool
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    cores: int

    def lanes(self, dtype_bits: int = 32) -> int:
        """Elements of ``dtype_bits`` bits in one vector register."""
        return max(1, self.vector_bytes * 8 // dtype_bits)

    @property
    def isa(self) -> str:
        """The vector instruction set in one word (``avx512``, ``avx2``, ``avx``, ``sse``...)."""
        for name, feature in (("avx512", "avx512f"), ("avx2", "avx2"), ("avx", "avx"),
                              ("sse", "sse2"), ("neon", "neon")):
            if feature in self.features:
                return name
        return "scalar"

    def describe(self) -> str:
        return (f"{self.name}, {self.isa}{'+fma' if self.fma else ''}, {self.cores} core(s), "
                f"L1d {self.l1_bytes >> 10} KiB, L2 {self.l2_bytes >> 10} KiB, "
                f"L3 {self.l3_bytes >> 20} MiB")


def cache_bytes(level: int, root: Path = CACHE_SYSFS) -> int:
    """The size of the data (or unified) cache of ``level`` as sysfs reports it."""
    try:
        for entry in sorted(root.iterdir()):
            if not entry.name.startswith("index"):
                continue
            if int((entry / "level").read_text()) != level or \
                    (entry / "type").read_text().strip() == "Instruction":
                continue
            text = (entry / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            return int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_CACHE_BYTES.get(level, 0)


def _vector_unit(features: frozenset) -> tuple[int, int]:
    """(widest vector in bytes, vector registers) of an x86-64 or Arm feature set."""
    if "avx512f" in features:
        return 64, 32
    if "avx" in features:
        return 32, 16
    if "neon" in features or "sve" in features:
        return 16, 32
    return 16, 16


@functools.lru_cache(maxsize=1)
def host_cpu() -> HostCPU:
    """The host CPU, read once per process."""
    name = str(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
    raw = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    features = frozenset(str(k) for k, v in raw.items() if bool(v))
    vector_bytes, registers = _vector_unit(features)
    return HostCPU(name=name, features=features, vector_bytes=vector_bytes,
                   vector_registers=registers, fma="fma" in features or "avx512f" in features,
                   l1_bytes=cache_bytes(1), l2_bytes=cache_bytes(2), l3_bytes=cache_bytes(3),
                   cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def host_fingerprint() -> str:
    """The host CPU as kernels are compiled and blocked for it: LLVM's name and enabled
    features (kernels are built with ``-mcpu`` of the host) and the cache sizes (the GEMM
    blocking follows them). Part of the disk-cache key of CPU kernels: a kernel built on
    another CPU may use instructions this one lacks."""
    host = host_cpu()
    return f"llvm {host.name} +{',+'.join(sorted(host.features))} caches {host.l1_bytes}," \
           f"{host.l2_bytes},{host.l3_bytes}"
