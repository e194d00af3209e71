"""Automatic synchronisation for Ascend kernels written without flags.

A kernel (or ``T.Scope`` body) that uses no ``set_flag``/``wait_flag``/barrier gets them
inserted here, at buffer granularity:

- each tile op is a list of accesses (pipe, buffer, read/write), from the op's data path;
  a serial loop or branch is one item whose accesses are its body's;
- for every access, the nearest earlier conflicting access (at least one write) of each other
  pipe is a dependency; in a loop body the search wraps around to the previous iteration
  (a loop-carried dependency);
- a dependency P -> C becomes ``SetFlag<P_C>`` right after the producer and ``WaitFlag<P_C>``
  right before the consumer, so the two pipes overlap in between; a loop-carried one is set
  at the end of its producer, waited before its consumer, raised once before the loop and
  drained once after it;
- a flag may be set again only once its wait has cleared it (a second set of a raised flag is
  undefined behaviour), so a loop-carried ``P -> C`` whose wait (on C) is not ordered before
  its set (on P) within the iteration by the other flags gets a ``C -> P`` pair from right
  after that wait to right before that set (an item that depends on itself, such as a branch
  holding a whole GEMM, has no such order otherwise);
- an access that leads its op (:attr:`..analysis.accesses.Access.leads`: CreateVecIndex's
  SetValue, which its own Adds on V follow) is a consumer only: a later access depends on the
  op's last access of the buffer instead;
- a dependency implied by another of the same event (a later producer on the same pipe whose
  consumer comes no later) is pruned; same-pipe dependencies of the vector, cube and DMA pipes
  get a ``PipeBarrier`` of the pipe (:data:`..facts.events.BARRIER_PIPES`), loop-carried ones
  too, unless a flag round trip through another pipe orders the two already (a ``SetFlag``
  waits for its pipe's earlier work);
- every remaining dependency takes an event id among the ids the core leaves free
  (:func:`..facts.events.free_ids`: 0-5, less TPipe's and the lowering rules'): a loop-carried
  one its own (one per buffer version), a one-off one an id of the same event that its
  sequence used before where every earlier wait of that id is ordered before the new set by
  the other flags (the flag is clear again), else a fresh one; when the ids run out, the
  dependency is ordered by ``PipeBarrier<PIPE_ALL>`` before its consumer instead.
"""

from __future__ import annotations

import tvm
from tilewright.ir import make_call
from tilewright.transform.walk import prim_func_pass
from tvm import sym, tirx

from ..analysis.accesses import accesses, has_manual_sync
from ..facts import ops
from ..facts.events import BARRIER_PIPES, EVENTS, PIPES, event_name, free_ids
from ..facts.keys import COUNTER_KEY, SCOPE_KEY, VERSION_KEY
from .memory import read_plan
from .tile_exprs import as_exprs, subst


class _Inserter:
    def __init__(self, plan: dict):
        self.core = "AIV"  # the core of the scope being synchronised
        self.next_id: dict[tuple[str, str], int] = {}
        # buffers the memory plan lets share bytes conflict like one buffer: pairs of their
        # handles (one buffer has one handle; comparing buffer objects builds an expression)
        self.aliases: set[tuple[int, int]] = set()
        # by scope and offset: a buffer can only overlap the ones starting before its end
        items = sorted(plan.items(), key=lambda item: (item[1][0], item[1][1]))
        for i, (x, (sx, ox, nx)) in enumerate(items):
            for y, (sy, oy, ny) in items[i + 1:]:
                if sy != sx or oy >= ox + nx:
                    break
                if ox < oy + ny:
                    hx, hy = x.__chandle__(), y.__chandle__()
                    self.aliases |= {(hx, hy), (hy, hx)}

    def same(self, a, b) -> bool:
        return a.same_as(b) or (a.__chandle__(), b.__chandle__()) in self.aliases

    def event_ids(self, event: str, count: int = 1) -> list[int] | None:
        """``count`` fresh ids of ``event`` on this core (:func:`..facts.events.free_ids`),
        never handed out before in this kernel; None when fewer are left."""
        ids = free_ids(self.core, event)
        n = self.next_id.get((self.core, event), 0)
        if n + count > len(ids):
            return None
        self.next_id[(self.core, event)] = n + count
        return list(ids[n:n + count])

    def deps(self, items, looped: bool, versions: dict, loop=None):
        """(producer index, consumer index, P, C, carried, versions, counter) for a sequence
        of items; ``versions`` is the stage count of the buffer (1 when it is not
        multi-buffered), ``counter`` the buffer whose counter selects its version ('': the
        iteration). A GM tensor counts where the sequence both reads and writes it, between
        accesses whose regions may overlap (:func:`_may_overlap`)."""
        acc = [accesses(s) for s in items]
        gm = [a.buffer for row in acc for a in row if str(a.buffer.scope()) == "global"]
        read_and_written = {b for b in gm if any(a.buffer.same_as(b) and a.write for row in acc
                                                 for a in row) and
                            any(a.buffer.same_as(b) and not a.write for row in acc for a in row)}
        acc = [[a for a in row if str(a.buffer.scope()) != "global" or
                any(a.buffer.same_as(b) for b in read_and_written)] for row in acc]
        found = []
        n = len(items)
        for j in range(n):
            for a in acc[j]:
                seen_pipes = set()
                order = list(range(j - 1, -1, -1))
                if looped:
                    order += list(range(n - 1, j - 1, -1))
                for i in order:
                    for b in acc[i]:
                        if not self.same(a.buffer, b.buffer) or not (a.write or b.write) or \
                                b.pipe in seen_pipes or \
                                not _may_overlap(a, b, loop if looped and i >= j else None):
                            continue
                        seen_pipes.add(b.pipe)
                        if b.leads:  # the op's own later accesses are ordered after it
                            continue
                        # an item that depends on itself (a guarded iteration) keeps one
                        # flag: the flags inside it are ordered across iterations only by
                        # its previous iteration's, which another version's flag is not
                        found.append((i, j, b.pipe, a.pipe, i >= j, *(
                            _stages(versions, a.buffer) if i != j else (1, ""))))
        return sorted(set(found))

    @staticmethod
    def prune(deps):
        alike: dict[tuple, list] = {}  # the deps of each (P, C, carried, stages, counter)
        for d in deps:
            alike.setdefault(d[2:], []).append(d)
        kept = []
        for d in deps:
            i, j = d[0], d[1]
            implied = any(o != d and o[0] >= i and o[1] <= j for o in alike[d[2:]])
            if not implied:
                kept.append(d)
        return kept

    def sequence(self, stmts: list, looped: bool, loop=None):
        """Rewrite a list of statements (one loop body or scope body); returns (stmts,
        prologue, epilogue) where the last two wrap a loop for its carried flags."""
        versions = (loop.annotations.get(VERSION_KEY, {}), loop.annotations.get(
            COUNTER_KEY, {})) if loop is not None else ({}, {})
        stmts = [self.visit(s) for s in stmts]
        before = [[] for _ in stmts]
        after = [[] for _ in stmts]
        prologue, epilogue = [], []
        kept = self.prune(self.deps(stmts, looped, versions, loop))
        barriers = set()  # the dependencies ordered by PipeBarrier<PIPE_ALL> instead of a flag
        uses = {}  # event -> [(id, producer, consumer)] of this sequence's one-off flags
        carried_flags = []  # (i, j, p, c, its set, its wait)
        n = len(stmts)
        ordered = _Order(kept, self.core, n, barriers)  # made again when either changes
        for dep in list(kept):
            i, j, p, c, carried, stages, counter = dep
            span = stmts[j].span if hasattr(stmts[j], "span") else None
            if p == c:  # unless a flag round trip through another pipe orders them already
                goal = next_iteration(2 * j, n) if carried else 2 * j
                if p in BARRIER_PIPES and not ordered((p, 2 * i + 1), (p, goal)):
                    before[j].append(make_call(ops.PIPE_BARRIER.name, {}, {"pipe": p}, span))
                continue
            event = event_name(p, c)
            ids = None
            if event in EVENTS[self.core] and (carried or stages > 1):
                ids = self.event_ids(event, stages)
            elif event in EVENTS[self.core]:
                ids = self.reused_id(uses.setdefault(event, []), ordered, dep)
            if ids is None:  # no such event on this core, or all its ids are taken
                kept.remove(dep)  # no flag: ordered already, or by a barrier
                goal = next_iteration(2 * j, n) if carried else 2 * j
                if not _Order(kept, self.core, n, barriers)((p, 2 * i + 1), (c, goal)):
                    kept.append(dep)
                    barriers.add(dep)
                    before[j].append(make_call(ops.BARRIER_ALL.name, {}, {}, span))
                ordered = _Order(kept, self.core, n, barriers)
                continue
            flag = {"src": p, "dst": c}
            eid = tirx.IntImm("int32", ids[0])
            if stages > 1:  # one flag per buffer version: id = base + version
                eid = eid + tirx.floormod(_version_index(loop, counter),
                                          tirx.IntImm("int32", stages))
            set_call = make_call(ops.SET_FLAG.name, {"event_id": eid}, flag, span)
            wait_call = make_call(ops.WAIT_FLAG.name, {"event_id": eid}, flag, span)
            after[i].append(set_call)
            before[j].append(wait_call)
            if carried:
                carried_flags.append((i, j, p, c, set_call, wait_call))
                for k in ids:
                    fixed = {"event_id": tirx.IntImm("int32", k)}
                    prologue.append(make_call(ops.SET_FLAG.name, fixed, flag, span))
                    epilogue.append(make_call(ops.WAIT_FLAG.name, fixed, flag, span))
        for i, j, p, c, set_call, wait_call in carried_flags:
            if not ordered((c, 2 * j), (p, 2 * i + 1)):
                self.order(before[j], after[i], c, p, set_call, wait_call, stmts[j])
        out = []
        for b, s, a in zip(before, stmts, after):
            out.extend(b)
            out.extend(s.seq if isinstance(s, tirx.SeqStmt) else [s])
            out.extend(a)
        return out, prologue, epilogue

    def reused_id(self, uses: list, ordered: _Order, dep) -> list[int] | None:
        """An id for the one-off flag ``dep`` (P -> C, not loop-carried): one this sequence
        used for the same event already, where each earlier wait of it (on C) is ordered
        before this set (on P) by the other flags and barriers (``ordered``), so the flag is
        clear again; else a fresh one. Recorded in ``uses``; None when none is left."""
        i, j, p, c = dep[:4]
        for eid in sorted({u[0] for u in uses}):
            if all(ordered((c, 2 * j0), (p, 2 * i + 1)) for e, _, j0 in uses if e == eid):
                uses.append((eid, i, j))
                return [eid]
        ids = self.event_ids(event_name(p, c))
        if ids is not None:
            uses.append((ids[0], i, j))
        return ids

    def order(self, before: list, after: list, c: str, p: str, set_call, wait_call, stmt):
        """Make the wait ``wait_call`` (on C, in ``before``) happen before the set ``set_call``
        (on P, in ``after``) of the same iteration: a C -> P pair between the two, or
        ``PipeBarrier<PIPE_ALL>`` before the set where the core has no such event."""
        span = stmt.span if hasattr(stmt, "span") else None
        at_set = next(k for k, x in enumerate(after) if x is set_call)
        event = event_name(c, p)
        ids = self.event_ids(event) if event in EVENTS[self.core] else None
        if ids is None:
            after.insert(at_set, make_call(ops.BARRIER_ALL.name, {}, {}, span))
            return
        eid = {"event_id": tirx.IntImm("int32", ids[0])}
        flag = {"src": c, "dst": p}
        after.insert(at_set, make_call(ops.WAIT_FLAG.name, eid, flag, span))
        at_wait = next(k for k, x in enumerate(before) if x is wait_call)
        before.insert(at_wait + 1, make_call(ops.SET_FLAG.name, eid, flag, span))

    def visit(self, stmt):
        if isinstance(stmt, tirx.For) and str(stmt.annotations.get("tw.loop", "")) in \
                ("serial", "pipelined", "unroll"):
            body, pro, epi = self.sequence(_flat(stmt.body), looped=True, loop=stmt)
            loop = tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, tirx.SeqStmt(body)
                            if len(body) > 1 else body[0], annotations=stmt.annotations,
                            span=stmt.span)
            return tirx.SeqStmt([*pro, loop, *epi]) if pro else loop
        if isinstance(stmt, tirx.IfThenElse):  # each branch is synchronised on its own
            then, _, _ = self.sequence(_flat(stmt.then_case), looped=False)
            other = None
            if stmt.else_case is not None:
                other, _, _ = self.sequence(_flat(stmt.else_case), looped=False)
                other = tirx.SeqStmt(other) if len(other) > 1 else other[0]
            return tirx.IfThenElse(stmt.condition, tirx.SeqStmt(then) if len(then) > 1
                                   else then[0], other, span=stmt.span)
        return stmt


class _Order:
    """Whether (pipe, position) ``start`` happens before (pipe, position) ``goal`` through the
    flags and barriers of ``deps`` in a sequence of ``n`` items (``barriers``: the deps
    ordered by ``PipeBarrier<PIPE_ALL>`` before their consumer, like those of an event the
    core does not have): ``_Order(deps, core, n, barriers)(start, goal)``. Position 2k is
    before item k, 2k + 1 after it, in one iteration; ``next_iteration(position)`` is the
    same place one iteration later, which a loop-carried flag of one version reaches. The
    items' own flags are not counted (a branch may not run). Asked many times over the same
    deps: the edges are made once, and the positions reached from each start once."""

    def __init__(self, deps, core: str, n: int, barriers=()):
        self.edges = _edges(deps, core, n, barriers)
        self.reach: dict[tuple, dict] = {}

    def __call__(self, start: tuple, goal: tuple) -> bool:
        arrived = self.reach.get(start)
        if arrived is None:
            arrived = self.reach[start] = _arrivals(self.edges, start)
        return goal[0] in arrived and arrived[goal[0]] <= goal[1]


def _edges(deps, core: str, n: int, barriers=()) -> list[tuple]:
    """The flags and barriers of ``deps`` as the edges :class:`_Order` follows."""
    edges = []  # (pipe or None for any, last position it leaves from, pipe or None, arrival)
    for dep in deps:
        i, j, p, c, carried, stages = dep[:6]
        if p == c:
            continue
        # PipeBarrier<PIPE_ALL> before item j
        barrier = event_name(p, c) not in EVENTS[core] or dep in barriers
        for t in (0, 1):
            if carried and not barrier:
                if t == 0 and stages == 1:  # set in one iteration, waited in the next
                    edges.append((p, 2 * i + 1, c, next_iteration(2 * j, n)))
                continue
            at = next_iteration(2 * j, n) if t else 2 * j
            edges.append((None, at - 1, None, at) if barrier else
                         (p, (next_iteration(2 * i + 1, n) if t else 2 * i + 1), c, at))
    return edges


def _arrivals(edges: list[tuple], start: tuple) -> dict[str, int]:
    """Pipe -> the earliest position (pipe, position) ``start`` reaches on it through
    ``edges``, a flag or barrier (not by start's own pipe order). An edge that has fired is
    done with: positions only decrease, so firing it again changes nothing."""
    reached = {start[0]: start[1]}  # pipe -> the earliest position reached on it
    arrived = {}  # the same, through a flag or barrier only (not by start's own pipe order)
    earliest = start[1]  # the least of reached's positions
    left, changed = edges, True
    while changed:
        changed, waiting = False, []
        for edge in left:
            p, leave, c, arrive = edge
            if p is None:
                ok, targets = earliest <= leave, PIPES
            else:
                ok, targets = p in reached and reached[p] <= leave, (c,)
            if not ok:
                waiting.append(edge)
                continue
            for q in targets:
                if arrive < arrived.get(q, arrive + 1):
                    arrived[q] = arrive
                    reached[q] = min(arrive, reached.get(q, arrive))
                    earliest = min(earliest, arrive)
                    changed = True
        left = waiting
    return arrived


def _may_overlap(a, b, loop) -> bool:
    """Whether the GM regions of accesses ``a`` and ``b`` may share an element (always for
    on-chip buffers and accesses without a region); with ``loop``, ``b`` is in an iteration
    of it and ``a`` in a later one."""
    if str(a.buffer.scope()) != "global" or a.region is None or b.region is None:
        return True
    analyzer = sym.Analyzer()
    starts_a = as_exprs(a.region.starts)
    if loop is not None:
        later = tirx.Var("later", "int32")
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
        analyzer.bind(later, tvm.ir.Range.from_min_extent(1, loop.extent))
        starts_a = [subst(s, [(loop.loop_var, loop.loop_var + later)]) for s in starts_a]
    for sa, ea, sb, eb in zip(starts_a, a.region.extents, as_exprs(b.region.starts),
                              b.region.extents):
        if analyzer.can_prove(sa + ea <= sb) or analyzer.can_prove(sb + eb <= sa):
            return False
    return True


def next_iteration(position: int, n: int) -> int:
    """A position of a sequence of ``n`` items, one loop iteration later."""
    return position + 2 * n + 2


def _stages(versions, buffer) -> tuple[int, str]:
    """The number of versions of ``buffer`` in a multi-buffered loop (1: not versioned) and the
    name of the buffer whose counter selects the version ('': the iteration does)."""
    for key, value in versions[0].items():
        if key.same_as(buffer):
            counted = any(k.same_as(buffer) for k in versions[1])
            return int(value), str(buffer.name) if counted else ""
    return 1, ""


def _version_index(loop, counter: str):
    """What selects the version of a buffer: its counter (``counter`` mode), else the
    iteration."""
    for key, value in loop.annotations.get(COUNTER_KEY, {}).items():
        if str(key.name) == counter:
            return value
    return loop.loop_var - loop.min


def _flat(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _rewrite_scopes(stmt, inserter):
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SCOPE_KEY:
        inserter.core = "AIC" if str(stmt.value.value) == "C" else "AIV"
        body, _, _ = inserter.sequence(_flat(stmt.body), looped=False)
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, tirx.SeqStmt(body)
                             if len(body) > 1 else body[0], span=stmt.span)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_rewrite_scopes(s, inserter) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                        _rewrite_scopes(stmt.body, inserter), thread_binding=stmt.thread_binding,
                        annotations=stmt.annotations, span=stmt.span)
    return stmt


def insert_sync():
    """The pass: kernels with hand-written synchronisation are left untouched."""

    def run(func):
        if has_manual_sync(func):
            return func
        return func.with_body(_rewrite_scopes(func.body, _Inserter(read_plan(func))))

    return prim_func_pass("AscendInsertSync", run)
