"""TileLang's ``carver.arch.driver``: facts about the device kernels run on.

With a CUDA GPU visible to torch, the facts are that GPU's; otherwise they describe the device
that ``target="auto"`` compiles for here (:func:`.devices.auto_infer_current_arch`): on the CPU
backend ``get_num_sms`` is the number of cores, the workers that blocks are spread over.
"""

from __future__ import annotations

import torch

from .devices import auto_infer_current_arch


def _gpu(device_id: int):
    return torch.cuda.get_device_properties(device_id) if torch.cuda.is_available() else None


def _scaled(value: int, format: str) -> int:  # noqa: A002 - TileLang's argument name
    units = {"bytes": 1, "kb": 1 << 10, "mb": 1 << 20}
    if format not in units:
        raise ValueError(f"format must be one of {', '.join(units)}, got {format!r}")
    return value // units[format]


def get_num_sms(device_id: int = 0) -> int:
    """Streaming multiprocessors of the GPU (compute units of the device: CPU cores)."""
    gpu = _gpu(device_id)
    return gpu.multi_processor_count if gpu is not None else auto_infer_current_arch().compute_units


def get_device_name(device_id: int = 0) -> str:
    gpu = _gpu(device_id)
    return gpu.name if gpu is not None else auto_infer_current_arch().description


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    gpu = _gpu(device_id)
    value = getattr(gpu, "shared_memory_per_block", 0) if gpu is not None else \
        auto_infer_current_arch().smem_cap
    return _scaled(value, format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0,
                                      format: str = "bytes") -> int:  # noqa: A002
    gpu = _gpu(device_id)
    value = getattr(gpu, "shared_memory_per_block_optin", 0) if gpu is not None else \
        auto_infer_current_arch().smem_cap
    return _scaled(value, format)


def get_registers_per_block(device_id: int = 0) -> int:
    gpu = _gpu(device_id)
    return getattr(gpu, "regs_per_multiprocessor", 65536) if gpu is not None else \
        auto_infer_current_arch().reg_cap
