"""Deferred wgmma waits (the last pass of the ``insert_sync`` phase).

A wgmma gemm is lowered as its issue followed by ``wgmma.wait_group 0`` (rules/gemm). Here
that wait moves down its statement sequence, past every statement that leaves the group's
operands alone, and lands right before the first one that does not::

    wgmma(Q, K, S_next); wait 0          wgmma(Q, K, S_next)
    softmax(S)                    ->     softmax(S)            # overlaps the tensor cores
    O *= rescale                         O *= rescale
    wgmma(P, V, O); wait 0               wait 0
                                         wgmma(P, V, O); wait 0

A statement the wait may pass (``accesses.registers_only``) writes only thread-local storage,
calls only side-effect-free operators or intrinsics the table marks ``local``, holds no
barrier, mbarrier or fence, and touches neither the accumulator nor a register A operand of
the group in flight. Anything else -- a shared or global store (which could overwrite a
shared operand, or memory the pool places there), a barrier (after which other threads
could), another gemm, an unknown call -- stops it. A gemm whose group reads registers of its
own (``own_registers``: wgmma.sp's metadata, dead once the call returns, free for the code
after it) keeps its wait right after it. The wait stays in its sequence, so every
thread of the warpgroup still executes it under the same control flow. A kernel that keeps
groups in flight on purpose (``wait_group 1`` in a pipelined loop) is left as it is.

ptxas schedules such register work across ``wgmma.wait_group`` by itself (the benchmark
kernels' cubins are the same without this pass); the pass makes the CUDA source, and the
host emulation that retires a group at its wait, say what the SASS does."""

from __future__ import annotations

import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

from .. import intrinsics, layout
from ..analysis.accesses import registers_only
from ..analysis.ir import flat, loads_in, touches


def _is_wgmma(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and intrinsics.role(stmt) == "wgmma"


def _held(gemm) -> list:
    """The thread-local operands (accumulator, register A) a wgmma call reads or writes until
    its group retires."""
    return [b for arg in gemm.value.args[1:] for b in loads_in(arg)
            if layout.is_thread_local(b)]


def _defer(items: list) -> list | None:
    """``items`` with each gemm's ``wait_group 0`` moved down, or None when none moves."""
    out, pending, moved = [], None, False
    for k, stmt in enumerate(items):
        if pending is not None:
            if registers_only(stmt) and not touches(stmt, pending[1]):
                out.append(stmt)
                moved = True
                continue
            out.append(pending[0])
            pending = None
        if intrinsics.waits_all(stmt, "wgmma_wait") and k and _is_wgmma(items[k - 1]) and \
                not intrinsics.of(items[k - 1]).own_registers:
            pending = (stmt, _held(items[k - 1]))
            continue
        out.append(stmt)
    if pending is not None:
        out.append(pending[0])
    return out if moved else None


def _keeps_groups_in_flight(body) -> bool:
    found = []
    tvm_ffi.structural_walk(body, (tirx.Evaluate, lambda e: found.append(e) if
                                   intrinsics.role(e) == "wgmma_wait" and
                                   not intrinsics.waits_all(e) else None))
    return bool(found)


def defer_wgmma_waits():
    """Moves each wgmma gemm's ``wait_group 0`` to the first statement after it that needs
    the group retired (the module docstring)."""

    def visit(node):
        items = flat(list(node.seq))
        done = _defer(items)
        return node if done is None else tirx.SeqStmt(done)

    def run(func):
        if _keeps_groups_in_flight(func.body):
            return func
        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.SeqStmt, visit)))

    return prim_func_pass("CUDADeferWgmmaWaits", run)
