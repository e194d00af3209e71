"""The device classes of :mod:`tilewright.carver.arch`."""

from __future__ import annotations

import dataclasses
import re

import torch

from ...engine import resolve_target
from ...errors import ConfigError
from ...plugin import ArchModel
from ...profiler.arch import arch_models
from ...profiler.arch import get_arch as _model_named

_SM = re.compile(r"sm_(\d+)")


class TileDevice(ArchModel):
    """An architecture model with TileLang's ``TileDevice`` attributes."""

    platform = "unknown"

    def __init__(self, model: ArchModel, target: str):
        super().__init__(**{f.name: getattr(model, f.name) for f in dataclasses.fields(model)})
        object.__setattr__(self, "target", target)

    @property
    def compute_max_core(self) -> int:
        return self.compute_units

    @property
    def smem_cap(self) -> int:
        return self.block_shared_memory_bytes or self.shared_memory_bytes

    @property
    def max_smem_usage(self) -> int:
        return self.shared_memory_bytes

    @property
    def reg_cap(self) -> int:
        return int(self.details.get("registers_per_unit", self.register_budget))

    @property
    def warp_size(self) -> int:
        return int(self.details.get("warp_size", 1))

    @property
    def sm_partition(self) -> int:
        return self.unit_partitions

    @property
    def l2_cache_size_bytes(self) -> int:
        return int(self.details.get("l2_bytes", 0))

    @property
    def transaction_size(self) -> list[int]:
        return [32, self.transaction_bytes]

    @property
    def compute_capability(self) -> str:
        return str(self.details.get("compute_capability", "unknown")).replace(".", "")

    @property
    def sm_version(self) -> int:
        cc = self.compute_capability
        return int(cc) if cc.isdigit() else -1

    def get_avaliable_tensorintrin_shapes(self) -> list:  # TileLang's spelling
        return [list(s[:2]) for s in self.details.get("mma_shapes", (self.mma_shape,))]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target!r}: {self.name})"


def _cuda_model(target: str) -> ArchModel:
    models = [m for m in arch_models().values() if "compute_capability" in m.details]
    if not models:
        raise ConfigError("no CUDA architecture model is registered: install tilewright-cuda "
                          "(pip install ./backend-cuda)")
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0).lower().replace(" ", "")
        named = [m for m in models if m.name.lower() in device]
        if named:
            return named[0]
    arch = resolve_target(target)[0].option("arch", "")
    match = _SM.fullmatch(re.sub(r"[af]$", "", str(arch)))
    if match is None:
        raise ConfigError(f"CUDA({target!r}): the target names no sm_XX architecture")
    cc = f"{match.group(1)[:-1]}.{match.group(1)[-1]}"
    for model in models:
        if str(model.details["compute_capability"]) == cc:
            return model
    known = ", ".join(f"{m.name} ({m.details['compute_capability']})" for m in models)
    raise ConfigError(f"CUDA({target!r}): no registered model has compute capability {cc} "
                      f"(models: {known})")


class CUDA(TileDevice):
    """An NVIDIA GPU (see the module docstring for which)."""

    platform = "CUDA"

    def __init__(self, target="cuda"):
        target = str(target)
        super().__init__(_cuda_model(target), target)


class CPU(TileDevice):
    """The host CPU, as the CPU backend measures it."""

    platform = "CPU"

    def __init__(self, target="llvm"):
        super().__init__(_model_named("cpu"), str(target))


class CDNA(TileDevice):
    """An AMD CDNA GPU: no model of one is registered."""

    platform = "CDNA"

    def __init__(self, target="hip"):
        raise ConfigError(f"CDNA({target!r}): no AMD GPU architecture model is registered "
                          "(tilewright has no HIP backend)")


def get_arch(target="cuda") -> TileDevice:
    """The device a target compiles for: ``cuda ...`` -> :class:`CUDA`, ``llvm`` / ``cpu`` /
    ``interp`` -> :class:`CPU`, ``hip`` -> :class:`CDNA`."""
    kind = str(target).split()[0] if str(target).strip() else ""
    if kind == "cuda":
        return CUDA(target)
    if kind in ("llvm", "cpu", "c", "interp"):
        return CPU(target)
    if kind == "hip":
        return CDNA(target)
    raise ConfigError(f"get_arch: unsupported target {target!r} (cuda, hip, llvm, cpu)")


def auto_infer_current_arch() -> TileDevice:
    """The device that ``target="auto"`` compiles for here."""
    target, backend = resolve_target("auto")
    return CUDA(str(target)) if backend.name == "cuda" else CPU(str(target))


def is_cuda_arch(arch) -> bool:
    return isinstance(arch, CUDA)


def is_cpu_arch(arch) -> bool:
    return isinstance(arch, CPU)


def is_cdna_arch(arch) -> bool:
    return isinstance(arch, CDNA)


def is_volta_arch(arch) -> bool:
    return is_cuda_arch(arch) and 70 <= arch.sm_version < 80


def is_ampere_arch(arch) -> bool:
    return is_cuda_arch(arch) and 80 <= arch.sm_version < 89


def is_ada_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 89


def is_hopper_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 90


def has_mma_support(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version >= 80


def is_tensorcore_supported_precision(in_dtype: str, accum_dtype: str, arch) -> bool:
    """Whether ``arch``'s tensor cores multiply ``in_dtype`` into ``accum_dtype``."""
    if not has_mma_support(arch):
        return False
    pairs = {("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32"),
             ("int8", "int32"), ("float32", "float32")}
    if arch.sm_version >= 89:
        pairs |= {("float8_e4m3", "float32"), ("float8_e5m2", "float32")}
    return (str(in_dtype), str(accum_dtype)) in pairs


__all__ = ["CDNA", "CPU", "CUDA", "TileDevice", "auto_infer_current_arch", "get_arch",
           "has_mma_support", "is_ada_arch", "is_ampere_arch", "is_cdna_arch", "is_cpu_arch",
           "is_cuda_arch", "is_hopper_arch", "is_tensorcore_supported_precision",
           "is_volta_arch"]
