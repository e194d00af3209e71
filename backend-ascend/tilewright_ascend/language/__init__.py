"""``import tilewright_ascend.language as T``: the portable language plus the Ascend dialect.

The dialect uses the names of the tilelang-ascend adapter tree (A2/A3, Ascend C route):
``T.Kernel(n, is_npu=True) as (cid, vid)``, ``T.Scope("C"|"V")``, ``T.alloc_L1`` ...
Names of the other Ascend tree (TileLang mainline's ``tilelang.ascend.language`` for Ascend
950: ``T.alloc_l1``, ``T.dual_copy`` ...) raise an error saying which names this backend uses.
"""

# the portable language is re-exported whole; its names are spelled out in __all__ via _PORTABLE
from tilewright.language import *  # noqa: F403
from tilewright.language import __all__ as _PORTABLE

from .dialect import OTHER_TREE as _OTHER_TREE
from .dialect import (
    Kernel,
    Scope,
    alloc_L0A,
    alloc_L0B,
    alloc_L0C,
    alloc_L1,
    alloc_ub,
    annotate_address,
    barrier_all,
    dump_tensor,
    gemm_v0,
    mma,
    pipe_barrier,
    printf,
    set_cross_flag,
    set_flag,
    tile,
    wait_cross_flag,
    wait_flag,
)

__all__ = [  # noqa: PLE0604 - the portable names plus the dialect's
    *_PORTABLE, "Kernel", "Scope", "alloc_L0A", "alloc_L0B", "alloc_L0C", "alloc_L1", "alloc_ub",
    "annotate_address", "barrier_all", "dump_tensor", "gemm_v0", "mma", "pipe_barrier", "printf",
    "set_cross_flag", "set_flag", "tile", "wait_cross_flag", "wait_flag",
]


def __getattr__(name):
    ours = _OTHER_TREE.get(name)
    if ours is not None:
        raise AttributeError(
            f"T.{name} belongs to TileLang mainline's Ascend 950 dialect "
            f"(tilelang.ascend.language); this backend speaks the tilelang-ascend A2/A3 dialect "
            f"(tilewright_ascend.language): use {ours}")
    raise AttributeError(f"module 'tilewright_ascend.language' has no attribute {name!r}")
