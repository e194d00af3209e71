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
refused, and so is a statement that touches a tile whose copies may still be in flight there
(a read of another stage of the tile than the groups in flight write is not: :class:`_Copies`).
Then each ``T.wgmma_gemm`` becomes the
portable ``gemm`` op with ``wg_wait=-1`` (TileLang's encoding of "no wait"), so that layout
inference gives its operands the wgmma layouts ``T.gemm`` gets, and ``rules.gemm`` lowers it
as the wgmma form without its ``wait_group``."""

from __future__ import annotations

import itertools

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode, make_call, tile_ops_in
from tilewright.transform import prim_func_pass
from tvm import sym as arith
from tvm import tirx

from .. import ops
from ..analysis.ir import accessed, buffers_in, substitute, uses

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
            return held[max(0, len(held) - keep):] if keep else []
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
            held = held[max(0, len(held) - wait):] if wait else []
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


class _Copy:
    """One ``T.ptx_cp_async``: its call, destination tile and the index of the destination's
    leading dimension (a pipeline's stage, in ``[stages, ...]`` tiles) with the values of the
    loops followed one iteration at a time put in."""

    def __init__(self, call, env: dict):
        element = call.operands["dst"].args[0]
        self.call, self.dst = call, element.source
        self.stage = substitute(element.indices[0], env) if env else element.indices[0]


# the ops that start, group or retire cp.async copies: a loop containing one is followed
# iteration by iteration
_FLIGHT = frozenset({ops.CP_ASYNC.name, ops.PTX_COMMIT_GROUP.name, ops.PTX_WAIT_GROUP.name,
                     ops.CP_ASYNC_BARRIER_NOINC.name, ops.WAIT_PARITY.name})


class _Copies:
    """The ``T.ptx_cp_async`` copies in flight, in program order, as (uncommitted, committed
    groups, behind an mbarrier arrival): a commit closes the uncommitted ones into a group (an
    empty one too: PTX counts it), ``T.ptx_wait_group(n)`` retires all but the ``n`` newest
    groups, a ``T.cp_async_barrier_noinc`` puts all of the thread's copies behind the mbarrier
    and a ``T.mbarrier_wait_parity`` retires those.

    Any statement other than a copy that touches a tile in flight is refused, unless each of
    its accesses provably reads another stage of the tile: the leading index of the tile (at
    least 2-D) differs from the copy's for every value of the loops inside the statement (a
    ``T.Parallel`` nest; enumerated, at most ``STAGE_CASES`` combinations). That needs the
    stage indices known: a loop that issues, groups or retires copies is followed one
    iteration at a time with its variable's value put in (constant bounds, at most
    ``ITERATIONS`` iterations in all), and an ``if`` whose condition those values decide takes
    its branch. A loop beyond that is followed twice with its variable left symbolic (no
    stage is then proved other), and the branches of an undecided ``if`` are merged."""

    EMPTY = ((), (), ())
    STAGE_CASES = 4096
    ITERATIONS = 1 << 14

    def __init__(self):
        self.error: KernelError | None = None
        self.budget = self.ITERATIONS
        self.analyzer = arith.Analyzer()

    def walk(self, stmt, state, span=None, env=None, ranges=None):
        env, ranges = env or {}, ranges or {}
        span = getattr(stmt, "span", None) or span
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                state = self.walk(s, state, span, env, ranges)
            return state
        if isinstance(stmt, tirx.IfThenElse):
            decided = self.analyzer.simplify(substitute(stmt.condition, env)) if env else None
            if isinstance(decided, tirx.IntImm):
                taken = stmt.then_case if int(decided) else stmt.else_case
                return self.walk(taken, state, span, env, ranges) if taken is not None \
                    else state
            then = self.walk(stmt.then_case, state, span, env, ranges)
            other = self.walk(stmt.else_case, state, span, env, ranges) \
                if stmt.else_case is not None else state
            return tuple(a + tuple(x for x in b if x not in a) for a, b in zip(then, other))
        if isinstance(stmt, tirx.For) and not _flight_in(stmt.body):
            # a loop that only reads or writes (a T.Parallel nest): its values are enumerated
            if isinstance(stmt.min, tirx.IntImm) and isinstance(stmt.extent, tirx.IntImm):
                ranges = {**ranges, stmt.loop_var: [
                    tirx.IntImm(stmt.min.dtype, v)
                    for v in range(int(stmt.min), int(stmt.min) + int(stmt.extent))]}
            return self.walk(stmt.body, state, span, env, ranges)
        if isinstance(stmt, tirx.For) and isinstance(stmt.min, tirx.IntImm) and \
                isinstance(stmt.extent, tirx.IntImm) and int(stmt.extent) <= self.budget:
            self.budget -= int(stmt.extent)
            for value in range(int(stmt.min), int(stmt.min) + int(stmt.extent)):
                bound = {**env, stmt.loop_var: tirx.IntImm(stmt.min.dtype, value)}
                state = self.walk(stmt.body, state, span, bound, ranges)
            return state
        if isinstance(stmt, (tirx.For, tirx.While)):
            once = self.walk(stmt.body, state, span, env, ranges)
            return self.walk(stmt.body, once, span, env, ranges)
        if not isinstance(stmt, (tirx.Evaluate, tirx.BufferStore)) and \
                isinstance(getattr(stmt, "body", None), tirx.Stmt):
            return self.walk(stmt.body, state, span, env, ranges)
        return self.leaf(stmt, state, span, env, ranges)

    def leaf(self, stmt, state, span, env, ranges):
        loose, committed, barred = state
        call = decode(stmt)
        name = call.name if call is not None else None
        if name == ops.CP_ASYNC.name:
            return (*loose, _Copy(call, env)), committed, barred
        if name == ops.PTX_COMMIT_GROUP.name:
            return (), (*committed, loose), barred
        if name == ops.PTX_WAIT_GROUP.name:
            keep = int(call.attrs["count"])
            return loose, committed[max(0, len(committed) - keep):] if keep else (), barred
        if name == ops.CP_ASYNC_BARRIER_NOINC.name:
            return (), (), barred + tuple(c for g in committed for c in g) + loose
        if name == ops.WAIT_PARITY.name:
            return loose, committed, ()
        if self.error is None:
            touched = buffers_in(stmt)
            for copy in (*loose, *(c for g in committed for c in g), *barred):
                if any(buf.same_as(copy.dst) for buf in touched) and \
                        not self.other_stage(stmt, copy, env, ranges):
                    what = f"T.{name}" if name is not None else "this statement"
                    self.error = KernelError(
                        f"{what} touches {copy.dst.name!r} while the T.ptx_cp_async copy"
                        f"{_where(copy.call.span)} into it may still be in flight: wait for it "
                        "first with T.ptx_commit_group() then T.ptx_wait_group(n) leaving only "
                        "groups of other stages in flight, or with T.cp_async_barrier_noinc "
                        "and T.mbarrier_wait_parity", span_location(span))
                    break
        return state

    def other_stage(self, stmt, copy, env, around) -> bool:
        """Whether every access of ``stmt`` to ``copy``'s tile provably has another leading
        index than the copy's, for every value of the loops ``around`` it and in it."""
        if len(copy.dst.shape) < 2:
            return False
        indices, ranges = [], dict(around)

        def add(access):
            if accessed(access).same_as(copy.dst):
                indices.append(access.indices[0] if access.indices else None)

        def loop(node):
            if isinstance(node.min, tirx.IntImm) and isinstance(node.extent, tirx.IntImm):
                ranges[node.loop_var] = [tirx.IntImm(node.min.dtype, v) for v in
                                         range(int(node.min), int(node.min) + int(node.extent))]

        tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, add), (tirx.BufferStore, add),
                                       (tirx.For, loop)])
        for index in indices:
            if index is None or isinstance(index, tirx.Ramp) or not self.differ(
                    substitute(index, env) if env else index, copy.stage, ranges):
                return False
        return bool(indices)

    def differ(self, a, b, ranges: dict) -> bool:
        """Whether ``a != b`` for every value of the variables in ``ranges`` (``{var:
        values}``; no other variable may occur; at most ``STAGE_CASES`` combinations)."""
        free = [v for v in ranges if uses(a, v) or uses(b, v)]
        cases = 1
        for v in free:
            cases *= len(ranges[v])
        if cases > self.STAGE_CASES:
            return False
        for values in itertools.product(*(ranges[v] for v in free)):
            diff = self.analyzer.simplify(substitute(a - b, dict(zip(free, values))))
            if not isinstance(diff, tirx.IntImm) or int(diff) == 0:
                return False
        return True


def _flight_in(stmt) -> bool:
    return any(c.name in _FLIGHT for c in tile_ops_in(stmt))


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
