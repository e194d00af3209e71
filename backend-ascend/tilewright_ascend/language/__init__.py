"""``import tilewright_ascend.language as T``: the portable language plus the Ascend dialect.

The dialect uses the names of the tilelang-ascend adapter tree (A2/A3, Ascend C route):
``T.Kernel(n, is_npu=True) as (cid, vid)``, ``T.Scope("C"|"V")``, ``T.alloc_L1`` ...
Names of the other Ascend tree (TileLang mainline's ``tilelang.ascend.language`` for Ascend
950: ``T.alloc_l1``, ``T.dual_copy`` ...) raise an error saying which names this backend uses.
"""

# the portable language is re-exported whole; its names are spelled out in __all__ via _PORTABLE
from tilewright.language import *  # noqa: F403
from tilewright.language import __all__ as _PORTABLE

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
from .trees import ADAPTER as _ADAPTER
from .trees import foreign_name as _foreign_name

__all__ = [  # noqa: PLE0604 - the portable names plus the dialect's
    *_PORTABLE, "Kernel", "Scope", "alloc_L0A", "alloc_L0B", "alloc_L0C", "alloc_L1", "alloc_ub",
    "annotate_address", "barrier_all", "dump_tensor", "gemm_v0", "mma", "pipe_barrier", "printf",
    "set_cross_flag", "set_flag", "tile", "wait_cross_flag", "wait_flag",
]


def __getattr__(name):
    raise _foreign_name(_ADAPTER, __name__, name)
