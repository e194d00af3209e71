"""Hand-issued wgmma groups (``T.wgmma_gemm`` / ``T.wait_wgmma``, the ``bind_threads`` phase).

:func:`issue_wgmma_groups` first follows each warpgroup's wgmma groups through the tile
program, in program order: a ``T.wgmma_gemm`` (or a ``T.gemm(..., wg_wait=N)`` with N other
than 0) opens a group holding its accumulator C (and A when A is a fragment, which wgmma may
read from registers); ``T.wait_wgmma(n)`` retires all but the ``n`` newest groups. Any other
statement that reads or writes a buffer of a group still in flight is refused at its line,
naming the gemm: the accumulator's registers are the tensor cores' until the wait. Only
another wgmma onto the same accumulator may come first (the hardware orders those). A loop
is followed twice, so a group left in flight at the end of an iteration meets the next
iteration's statements; the two branches of an ``if`` are merged (a group either leaves in
flight stays in flight).

Before, a kernel whose ``T.ptx_cp_async`` copies nothing waits for (a
``T.cp_async_barrier_noinc`` arrival, or a ``T.ptx_commit_group`` and ``T.ptx_wait_group``) is
refused, and so is a statement that touches a tile whose copies have no wait after them yet.
Then each ``T.wgmma_gemm`` becomes the
portable ``gemm`` op with ``wg_wait=-1`` (TileLang's encoding of "no wait"), so that layout
inference gives its operands the wgmma layouts ``T.gemm`` gets, and ``rules.gemm`` lowers it
as the wgmma form without its ``wait_group``."""

from __future__ import annotations

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode, make_call, tile_ops_in
from tilewright.transform import prim_func_pass
from tvm import tirx

from .. import ops
from ..analysis.ir import buffers_in

GEMM = "gemm"
NO_WAIT = -1  # a gemm's wg_wait when the user retires its group (T.wgmma_gemm)
REWRITTEN = (ops.WGMMA_GEMM.name,)  # dialect ops this module turns into portable ones


class _Group:
    def __init__(self, call, buffers):
        self.call, self.buffers = call, buffers


def _where(span) -> str:
    loc = span_location(span)
    return f" (line {loc.line})" if loc is not None and loc.line else ""


class _Groups:
    """The walk of the module docstring; ``error`` holds the first refusal."""

    def __init__(self):
        self.error: KernelError | None = None

    def check(self, stmt, held: list, span) -> None:
        if self.error is not None or not held:
            return
        touched = buffers_in(stmt)
        for group in held:
            for buf in touched:
                if any(buf.same_as(b) for b in group.buffers):
                    call = decode(stmt)
                    what = f"T.{call.name}" if call is not None else "this statement"
                    self.error = KernelError(
                        f"{what} touches {buf.name!r} while the wgmma group of "
                        f"T.wgmma_gemm{_where(group.call.span)} that holds it is in flight: "
                        "retire the group first with T.wait_wgmma(0) (or T.wait_wgmma(n) "
                        "leaving only newer groups in flight)", span_location(span))
                    return

    def walk(self, stmt, held: list, span=None) -> list:
        span = getattr(stmt, "span", None) or span
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                held = self.walk(s, held, span)
            return held
        if isinstance(stmt, tirx.IfThenElse):
            self.check(tirx.Evaluate(stmt.condition), held, span)
            then = self.walk(stmt.then_case, list(held), span)
            other = self.walk(stmt.else_case, list(held), span) \
                if stmt.else_case is not None else held
            return then + [g for g in other if g not in then]
        if isinstance(stmt, (tirx.For, tirx.While)):
            once = self.walk(stmt.body, list(held), span)
            return self.walk(stmt.body, once, span)
        if not isinstance(stmt, (tirx.Evaluate, tirx.BufferStore)) and \
                isinstance(getattr(stmt, "body", None), tirx.Stmt):
            return self.walk(stmt.body, held, span)
        return self.leaf(stmt, held, span)

    def leaf(self, stmt, held: list, span) -> list:
        call = decode(stmt)
        if call is not None and call.name == ops.WAIT_WGMMA.name:
            keep = int(call.attrs["count"])
            return held[len(held) - keep:] if keep else []
        wait = _wait_of(call)
        if wait is None:
            self.check(stmt, held, span)
            return held
        a, c = call.operands["A"].buffer, call.operands["C"].buffer
        own = [c] + ([a] if str(a.scope()).startswith("local") else [])
        # another wgmma onto the same accumulator may be issued while it is in flight
        others = [_Group(g.call, [b for b in g.buffers if not any(b.same_as(x) for x in own)])
                  for g in held]
        # a constant clear_accum zeroes C before the group; a run-time one is the group's
        # scale-d predicate (rules.gemm)
        self.check(stmt, held if call.attrs["clear_accum"] is True else others, span)
        held = held + [_Group(call, own)]
        if wait >= 0:
            held = held[len(held) - wait:] if wait else []
        return held


def _wait_of(call) -> int | None:
    """The groups a gemm leaves in flight after it (-1: all, the user waits), or None when
    ``call`` is not a gemm that leaves any."""
    if call is None:
        return None
    if call.name == ops.WGMMA_GEMM.name:
        return NO_WAIT
    if call.name == GEMM and int(call.attrs["wg_wait"]) != 0:
        return int(call.attrs["wg_wait"])
    return None


def _as_gemm(stmt):
    call = decode(stmt)
    if call is None or call.name != ops.WGMMA_GEMM.name:
        return stmt
    return make_call(GEMM, dict(call.operands), {**call.attrs, "wg_wait": NO_WAIT},
                     span=stmt.span)


def _check_copies_land(func) -> None:
    """A ``T.ptx_cp_async`` copy lands where a ``T.cp_async_barrier_noinc`` arrival of its
    thread completes an mbarrier phase, or at a ``T.ptx_wait_group`` after the
    ``T.ptx_commit_group`` that takes it: a kernel with copies and neither would read its
    tiles at an unknown time. A statement that touches a tile while copies into it have no
    such wait after them is refused at its line (:class:`_Copies`)."""
    names = [c.name for c in tile_ops_in(func)]
    waits = (ops.CP_ASYNC_BARRIER_NOINC.name, ops.PTX_WAIT_GROUP.name)
    if ops.CP_ASYNC.name in names and not any(w in names for w in waits):
        first = next(c for c in tile_ops_in(func) if c.name == ops.CP_ASYNC.name)
        raise KernelError("T.ptx_cp_async: nothing waits for this kernel's copies; after the "
                          "copies, T.ptx_commit_group() and T.ptx_wait_group(0) wait for them "
                          "to land, or T.cp_async_barrier_noinc(mbars[i]) makes each copying "
                          "thread arrive on an mbarrier once they land, and readers wait for "
                          "its phase (T.mbarrier_wait_parity)", span_location(first.span))
    if ops.CP_ASYNC.name in names:
        copies = _Copies()
        copies.walk(func.body, _Copies.EMPTY)
        if copies.error is not None:
            raise copies.error


class _Copies:
    """The ``T.ptx_cp_async`` copies in flight, in program order, as (uncommitted, committed,
    behind an mbarrier arrival) lists of ``(copy, destination tile)``: a commit moves the
    uncommitted ones into its group, any ``T.ptx_wait_group`` retires the committed ones (the
    count cannot say which pipeline stage a later read is of, so any wait counts), a
    ``T.cp_async_barrier_noinc`` puts all of the thread's copies behind the mbarrier and a
    ``T.mbarrier_wait_parity`` retires those. Any statement other than a copy that touches
    a tile in flight is refused. Loops are followed twice and the branches of an ``if``
    merged, as :class:`_Groups` does."""

    EMPTY = ((), (), ())

    def __init__(self):
        self.error: KernelError | None = None

    def walk(self, stmt, state, span=None):
        span = getattr(stmt, "span", None) or span
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                state = self.walk(s, state, span)
            return state
        if isinstance(stmt, tirx.IfThenElse):
            then = self.walk(stmt.then_case, state, span)
            other = self.walk(stmt.else_case, state, span) \
                if stmt.else_case is not None else state
            return tuple(a + tuple(x for x in b if x not in a) for a, b in zip(then, other))
        if isinstance(stmt, (tirx.For, tirx.While)):
            return self.walk(stmt.body, self.walk(stmt.body, state, span), span)
        if not isinstance(stmt, (tirx.Evaluate, tirx.BufferStore)) and \
                isinstance(getattr(stmt, "body", None), tirx.Stmt):
            return self.walk(stmt.body, state, span)
        return self.leaf(stmt, state, span)

    def leaf(self, stmt, state, span):
        loose, committed, barred = state
        call = decode(stmt)
        name = call.name if call is not None else None
        if name == ops.CP_ASYNC.name:
            dst = call.operands["dst"].args[0].source
            return (*loose, (call, dst)), committed, barred
        if name == ops.PTX_COMMIT_GROUP.name:
            return (), committed + loose, barred
        if name == ops.PTX_WAIT_GROUP.name:
            return loose, (), barred
        if name == ops.CP_ASYNC_BARRIER_NOINC.name:
            return (), (), barred + committed + loose
        if name == ops.WAIT_PARITY.name:
            return loose, committed, ()
        if self.error is None:
            touched = buffers_in(stmt)
            for copy, dst in (*loose, *committed, *barred):
                if any(buf.same_as(dst) for buf in touched):
                    what = f"T.{name}" if name is not None else "this statement"
                    self.error = KernelError(
                        f"{what} touches {dst.name!r} while the T.ptx_cp_async copy"
                        f"{_where(copy.span)} into it may still be in flight: wait for it "
                        "first with T.ptx_commit_group() then T.ptx_wait_group(0), or with "
                        "T.cp_async_barrier_noinc and T.mbarrier_wait_parity",
                        span_location(span))
                    break
        return state


def issue_wgmma_groups():
    """Refuses a touch of a wgmma group's registers before its wait, then makes each
    ``T.wgmma_gemm`` a gemm without a wait (the module docstring)."""

    def run(func):
        _check_copies_land(func)
        groups = _Groups()
        groups.walk(func.body, [])
        if groups.error is not None:
            raise groups.error
        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Evaluate, _as_gemm)))

    return prim_func_pass("CUDAIssueWgmmaGroups", run)
