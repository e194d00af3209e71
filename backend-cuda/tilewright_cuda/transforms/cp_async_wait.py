"""Deferred cp.async waits (the ``insert_sync`` phase, after the barriers are placed).

A ``T.copy`` from global into shared memory is lowered as its cp.async nest, a commit and a
``cp.async.wait_group 0`` (rules/copy), so two copies in a row each wait for their data
before the next is issued: two memory latencies where one would do. Here such a wait moves
down its statement sequence past statements that neither need the copies' data nor order
anything with other threads, and a later wait for all groups absorbs it::

    cp.async A -> A_s; commit; wait 0          cp.async A -> A_s; commit
    cp.async B -> B_s; commit; wait 0    ->    cp.async B -> B_s; commit
    __syncthreads()                            wait 0
                                               __syncthreads()

A wait may pass a commit, another cp.async nest, and a statement that writes only
thread-local storage with no barrier, fence or unknown call (``accesses.registers_only``),
each touching none of the memory the copies in flight write (compared by the buffers' data,
so a view of a destination counts). Anything else -- a barrier, a shared or global store, a
read of a destination -- stops it, and it lands right before that statement, in its own
sequence (every thread still executes it under the same control flow)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

from .. import intrinsics
from ..analysis.accesses import (
    cp_async_destinations,
    is_cp_async,
    only_cp_async,
    registers_only,
)
from ..analysis.ir import buffers_in, flat


def _shares_memory(stmt, buffers) -> bool:
    return any(b.data.same_as(x.data) for b in buffers_in(stmt) for x in buffers)


def _is_commit(stmt) -> bool:  # a cp.async group's commit: the table's group role, no wait
    entry = intrinsics.of(stmt)
    return entry is not None and entry.role == "group" and not entry.completes


def _copy_waits(items: list) -> list[int]:
    """The positions in ``items`` of the waits of the copy pattern: a cp.async nest, its
    commit, ``wait_group 0``."""
    return [k for k, stmt in enumerate(items) if k >= 2 and intrinsics.waits_all(stmt, "group")
            and _is_commit(items[k - 1]) and only_cp_async(items[k - 2])]


def _defer(items: list) -> list | None:
    """``items`` with each copy's ``wait_group 0`` moved down, or None when none moves."""
    out, wait, dests, moved = [], None, [], False
    for stmt in items:
        if wait is not None:
            if intrinsics.waits_all(stmt, "group"):  # waits for the pending wait's groups too
                wait, moved = None, True
            elif _is_commit(stmt) or (only_cp_async(stmt) or registers_only(stmt)) and \
                    not _shares_memory(stmt, dests):
                out.append(stmt)
                dests += cp_async_destinations(stmt)
                # passing an allocation alone changes no order worth a different source
                moved = moved or not isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer))
                continue
            else:
                out += [wait]
                wait, dests = None, []
        if intrinsics.waits_all(stmt, "group") and len(out) >= 2 and _is_commit(out[-1]) and \
                only_cp_async(out[-2]):
            wait = stmt
            dests += cp_async_destinations(out[-2])
            continue
        out.append(stmt)
    if wait is not None:
        out.append(wait)
    return out if moved else None


def _only_copy_groups(body) -> bool:
    """Whether every cp.async group of ``body`` is a copy pattern's (``_copy_waits``): no
    group stays in flight past its own wait (a pipelined loop's ``wait_group N``, a user's
    own groups), so a wait moved down leaves no other copy's data unwaited for."""
    commits, patterns, issued, in_patterns = [], [], [], []

    def visit(node):  # each sequence's own statements: a nested one is visited on its own
        items = list(node.seq)
        for k in _copy_waits(items):
            patterns.append(k)
            tvm_ffi.structural_walk(items[k - 2], (tvm.ir.Call, lambda c: in_patterns.append(c)
                                                   if is_cp_async(c) else None))

    left = []  # waits that leave groups in flight

    def evaluate(e):
        if _is_commit(e):
            commits.append(e)
        elif intrinsics.role(e) == "group" and not intrinsics.waits_all(e):
            left.append(e)

    tvm_ffi.structural_walk(body, [
        (tirx.SeqStmt, visit), (tirx.Evaluate, evaluate),
        (tvm.ir.Call, lambda c: issued.append(c) if is_cp_async(c) else None)])
    return not left and len(commits) == len(patterns) and len(issued) == len(in_patterns)


def defer_cp_async_waits():
    """Moves each copy's ``cp.async.wait_group 0`` down to the first statement after it that
    needs the copies done (the module docstring)."""

    def visit(node):
        done = _defer(flat(list(node.seq)))
        return node if done is None else tirx.SeqStmt(done)

    def run(func):
        if not _only_copy_groups(func.body):
            return func
        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.SeqStmt, visit)))

    return prim_func_pass("CUDADeferCpAsyncWaits", run)
