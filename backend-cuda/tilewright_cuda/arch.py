"""NVIDIA architectures the backend compiles for, and which one ``cuda`` means here.

``cuda -arch=sm_XY`` names one explicitly. Plain ``cuda`` means the visible GPU's architecture,
else the one in ``TILEWRIGHT_CUDA_ARCH``, else ``sm_90a`` (the H200 the GPU checks run on).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from tilewright.errors import TargetError
from tilewright.plugin import Availability

ENV = "TILEWRIGHT_CUDA_ARCH"
DEFAULT = "sm_90a"


@dataclass(frozen=True)
class Arch:
    """One architecture: its name and the limits the compiler checks against."""

    name: str
    major: int
    minor: int
    max_shared_bytes: int  # dynamic shared memory one block may opt in to

    @property
    def sm(self) -> int:
        return self.major * 10 + self.minor

    @property
    def gencode(self) -> str:
        return f"-gencode=arch=compute_{self.name[3:]},code={self.name}"


_TABLE = {
    "sm_70": (7, 0, 98304), "sm_75": (7, 5, 65536), "sm_80": (8, 0, 166912),
    "sm_86": (8, 6, 101376), "sm_87": (8, 7, 166912), "sm_89": (8, 9, 101376),
    "sm_90": (9, 0, 232448), "sm_90a": (9, 0, 232448), "sm_100": (10, 0, 232448),
    "sm_100a": (10, 0, 232448), "sm_120": (12, 0, 101376), "sm_120a": (12, 0, 101376),
}
KNOWN = tuple(_TABLE)


def get(name: str) -> Arch:
    """The :class:`Arch` called ``name``; an unknown name is an error listing the known ones."""
    if name not in _TABLE:
        raise TargetError(f"unknown CUDA architecture {name!r}; use one of {', '.join(KNOWN)} "
                          f"(in the target, e.g. 'cuda -arch=sm_90a', or in ${ENV})")
    major, minor, smem = _TABLE[name]
    return Arch(name, major, minor, smem)


@functools.lru_cache(maxsize=1)
def visible_gpu_arch() -> str | None:
    """The architecture of GPU 0 through the driver API, or None when no GPU is visible."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return None
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
        _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0)
    except Exception:  # noqa: BLE001 - no cuda-bindings or no libcuda: no GPU
        return None
    name = f"sm_{major}{minor}"
    return name + "a" if f"{name}a" in _TABLE else name


def resolve(option: str | None) -> Arch:
    """The architecture a target compiles for (see the module docstring)."""
    if option:
        return get(option)
    return get(visible_gpu_arch() or os.environ.get(ENV) or DEFAULT)


def device_present() -> Availability:
    """The backend's device probe (also declared in the entry-point group
    ``tilewright.devices``, so that target ``"auto"`` asks it without importing the backend):
    a visible GPU, else what plain ``cuda`` compiles for."""
    return Availability(visible_gpu_arch() is not None, describe_default())


def describe_default() -> str:
    """A sentence saying what plain ``cuda`` compiles for on this machine."""
    gpu = visible_gpu_arch()
    if gpu:
        return f"GPU visible; 'cuda' compiles for {gpu}"
    env = os.environ.get(ENV)
    source = f"${ENV}" if env else f"the default ({ENV} unset)"
    return f"no GPU visible; 'cuda' compiles for {env or DEFAULT} from {source}, kernels build " \
           "but cannot run here"
