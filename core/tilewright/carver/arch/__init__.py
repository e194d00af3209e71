"""TileLang's ``carver.arch``: the device a kernel is tuned or analysed for.

``CUDA(target)``, ``CDNA(target)`` and ``CPU(target)`` are :class:`TileDevice` objects: the
registered architecture model (:class:`tilewright.plugin.ArchModel`, so the roofline
``Analyzer`` and the ``MatmulTemplate`` recommender take them as they are) with TileLang's
attribute names on top (``platform``, ``sm_version``, ``compute_capability``,
``compute_max_core``, ``smem_cap``, ``reg_cap``, ``warp_size``, ``l2_cache_size_bytes`` ...).

The model comes from the target, not from a device: ``CUDA("cuda")`` is the GPU that a CUDA
GPU present here is (matched by name), else the first registered model with the compute
capability of the target's ``-arch`` (the CUDA backend's default, ``$TILEWRIGHT_CUDA_ARCH``,
or ``CUDA("cuda -arch=sm_80")``), so a kernel can be analysed for a GPU on a machine without
one. ``CPU()`` is the host. No AMD model is registered, so ``CDNA`` names that and stops.
:func:`auto_infer_current_arch` is the device that ``target="auto"`` compiles for here.
"""

from . import driver
from .devices import (
    CDNA,
    CPU,
    CUDA,
    TileDevice,
    auto_infer_current_arch,
    get_arch,
    has_mma_support,
    is_ada_arch,
    is_ampere_arch,
    is_cdna_arch,
    is_cpu_arch,
    is_cuda_arch,
    is_hopper_arch,
    is_tensorcore_supported_precision,
    is_volta_arch,
)

__all__ = ["CDNA", "CPU", "CUDA", "TileDevice", "auto_infer_current_arch", "driver", "get_arch",
           "has_mma_support", "is_ada_arch", "is_ampere_arch", "is_cdna_arch", "is_cpu_arch",
           "is_cuda_arch", "is_hopper_arch", "is_tensorcore_supported_precision",
           "is_volta_arch"]
