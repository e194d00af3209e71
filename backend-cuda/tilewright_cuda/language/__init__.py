"""``import tilewright_cuda.language as T``: the portable language plus the CUDA dialect.

What only NVIDIA hardware (Hopper, sm_90+) has, with TileLang's names: ``T.tma_copy``,
``T.alloc_barrier``, ``T.mbarrier_arrive``, ``T.mbarrier_wait_parity`` (and TileLang's other
names for these two, ``T.barrier_arrive``, ``T.barrier_wait``), ``T.mbarrier_expect_tx``,
``T.tma_store_wait``, ``T.fence_proxy_async``, ``T.fence_gpu`` (``__threadfence``),
hand-issued asynchronous copies and gemms
(``T.ptx_cp_async``, ``T.cp_async_barrier_noinc``, ``T.ptx_commit_group``,
``T.ptx_wait_group``, ``T.wgmma_gemm``, ``T.wait_wgmma``), per-thread tensor-core fragments
(``T.ptx_ldmatrix``, ``T.ptx_mma``: sm_80+), a barrier of the whole grid
(``T.sync_grid``, a cooperative launch), named barriers of part of a block
(``T.sync_threads(id, count)``), the
thread index (``T.get_thread_binding``, ``T.thread_binding``), warp-specialised roles
(``with T.ws(1):``), register budgets
(``T.set_max_nreg``, ``T.inc_max_nreg``, ``T.dec_max_nreg``, ``T.no_set_max_nreg``) and
``T.ClusterKernel``; the user's own CUDA device code (``T.import_source`` or ``T.Kernel``'s
``prelude=``, called with
``T.call_extern`` on pointers from ``T.access_ptr``). A TileLang Hopper kernel ports by
changing its imports; a portable kernel never needs these, and other backends refuse them by
name.
"""

# the portable language is re-exported whole; its names are spelled out in __all__ via _PORTABLE
from tilewright.language import *  # noqa: F403
from tilewright.language import __all__ as _PORTABLE

from .dialect import (
    ClusterKernel,
    Kernel,
    access_ptr,
    alloc_barrier,
    attr,
    barrier_arrive,
    barrier_wait,
    call_extern,
    comm_reducer,
    cp_async_barrier_noinc,
    dec_max_nreg,
    disable_warp_group_reg_alloc,
    evaluate,
    fence_gpu,
    fence_proxy_async,
    get_thread_binding,
    import_source,
    inc_max_nreg,
    mbarrier_arrive,
    mbarrier_expect_tx,
    mbarrier_wait_parity,
    no_set_max_nreg,
    ptx_commit_group,
    ptx_cp_async,
    ptx_ldmatrix,
    ptx_mma,
    ptx_wait_group,
    set_max_nreg,
    sync_grid,
    sync_threads,
    thread_binding,
    tma_copy,
    tma_store_wait,
    tvm_thread_allreduce,
    tvm_warp_shuffle,
    wait_wgmma,
    wgmma_gemm,
    ws,
)

__all__ = [  # noqa: PLE0604 - the portable names plus the dialect's
    *_PORTABLE, "ClusterKernel", "Kernel", "access_ptr", "alloc_barrier", "attr", "barrier_arrive",
    "barrier_wait", "call_extern", "comm_reducer", "cp_async_barrier_noinc", "dec_max_nreg",
    "disable_warp_group_reg_alloc", "evaluate", "fence_gpu", "fence_proxy_async",
    "get_thread_binding",
    "import_source", "inc_max_nreg",
    "mbarrier_arrive", "mbarrier_expect_tx", "mbarrier_wait_parity", "no_set_max_nreg",
    "ptx_commit_group", "ptx_cp_async", "ptx_ldmatrix", "ptx_mma", "ptx_wait_group",
    "set_max_nreg", "sync_grid",
    "sync_threads", "thread_binding", "tma_copy", "tma_store_wait",
    "tvm_thread_allreduce", "tvm_warp_shuffle", "wait_wgmma", "wgmma_gemm", "ws",
]
