"""Lifetimes of the shared buffers of a block's program, for sharing bytes of the pool between
buffers that are never live at once (``transforms.memory``).

The units of the program are the statements of the thread loop's body, in order; a loop
(pipelined or not, all its iterations and pipeline versions) and a branch are each one unit,
and so is everything from the first ``T.ws`` role to the last (roles run concurrently, with
no block barrier between them). A buffer lives from the first unit that
touches it (a load, a store, its address) to the last. A buffer touched in a unit that starts
an operation still running when the call returns (``Intrinsic.in_flight``: cp.async, TMA,
wgmma) lives on to the next later unit that waits for such operations
(``Intrinsic.completes``; with none, to the end), so no reuse starts while one may still
read or write it. An
mbarrier (initialised by ``tw_mbar_init``) lives throughout: PTX wants ``mbarrier.inval``
before its bytes serve as anything else."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .. import intrinsics
from .ir import buffers_in, flat, is_role, seq


def units(thread_body) -> list:
    """The units of the program in order (the module docstring), allocations left out; each
    a list of statements."""
    stmts = [s for s in flat([thread_body]) if not isinstance(s, (tirx.AllocBuffer,
                                                                   tirx.DeclBuffer))]
    roles = [i for i, s in enumerate(stmts) if is_role(s)]
    if not roles:
        return [[s] for s in stmts]
    lo, hi = roles[0], roles[-1]
    return [[s] for s in stmts[:lo]] + [stmts[lo:hi + 1]] + [[s] for s in stmts[hi + 1:]]


def _in_flight(stmt, buffers) -> tuple[bool, list]:
    """Whether ``stmt`` waits for operations in flight, and the buffers the operations it
    starts name (all it touches when one names none of them)."""
    calls = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: calls.append(c)
                                   if intrinsics.extern_name(c) is not None else None))
    completes, named = False, []
    for call in calls:
        entry = intrinsics.lookup(intrinsics.extern_name(call))
        if entry is None:
            continue
        completes = completes or entry.completes
        if entry.in_flight:
            touched = _touched(tirx.Evaluate(call), buffers)
            named += touched if touched else _touched(stmt, buffers)
    return completes, named


def _touched(stmt, buffers) -> list:
    """Which of ``buffers`` ``stmt`` loads, stores or takes the data pointer of."""
    data = [(b, b.data) for b in buffers]
    found = []

    def pointer(v):
        found.extend(b for b, d in data if d.same_as(v))

    tvm_ffi.structural_walk(stmt, (tirx.Var, pointer))
    accessed = buffers_in(stmt)
    return [b for b in buffers if any(b.same_as(x) for x in accessed + found)]


def _mbarriers(body, buffers) -> list:
    inits = []
    tvm_ffi.structural_walk(body, (tvm.ir.Call, lambda c: inits.append(c)
                                   if intrinsics.extern_name(c) == "tw_mbar_init" else None))
    return [b for c in inits for b in _touched(tirx.Evaluate(c), buffers)]


def live_ranges(thread_body, buffers) -> dict:
    """Per buffer of ``buffers``, the ``(first, last)`` units it lives over (inclusive); a
    buffer no unit touches, or an mbarrier, lives over every unit."""
    program = units(thread_body)
    end = max(len(program) - 1, 0)
    first, last, pending = {}, {}, {}
    completing = []
    for i, unit in enumerate(program):
        stmt = seq(unit)
        completes, named = _in_flight(stmt, buffers)
        if completes:
            completing.append(i)
        for b in _touched(stmt, buffers):
            first.setdefault(b, i)
            last[b] = i
            if any(b.same_as(x) for x in named):
                pending[b] = i
    for b, i in pending.items():
        waits = [j for j in completing if j > i]
        last[b] = max(last[b], waits[0] if waits else end)
    always = _mbarriers(thread_body, buffers)
    return {b: (0, end) if any(b.same_as(m) for m in always) or b not in first
            else (first[b], last[b]) for b in buffers}


def barrier_between(thread_body, before: int, after: int) -> bool:
    """Whether a block barrier (``__syncthreads``) is a unit after unit ``before`` and before
    unit ``after``."""
    program = units(thread_body)
    return any(intrinsics.is_sync(s) for unit in program[before + 1:after] for s in unit)
