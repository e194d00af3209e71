"""The ``insert_sync`` phase: barriers where shared- or global-memory dependencies cross
threads.

:class:`Syncs` walks the block's program (each T.ws role's too, whose barriers become named
barriers of its threads; none goes between roles, which hand data over with mbarriers). Before
it, :func:`drop_redundant_fences` removes the async-proxy fence and barrier in front of a
register-A wgmma whose shared operand needs none."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import UnsupportedOpError, span_location
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from .. import intrinsics, keys
from ..analysis import tickets as ticket_stores
from ..analysis.accesses import (
    Access,
    atomics_conflict,
    bound_variables,
    conflict,
    rekey,
    tickets_conflict,
    tma_only,
)
from ..analysis.ir import (
    depends_on_thread,
    find_thread,
    flat,
    is_role,
    map_roles,
    role_loops,
    thread_varying,
)
from ..keys import WARPGROUP


class Syncs:
    """Inserts ``__syncthreads()`` before a statement that reads shared memory written since
    the last barrier, or writes shared memory read or written since then; global memory the
    same, except for an element that identifies the thread touching it
    (``accesses.thread_key``: ``B[bx, i]`` of a ``T.Parallel(threads)`` loop, read back by
    the same thread, needs no barrier; ``B[bx, 127 - i]`` does). An atomic (the
    ``atomic`` effect of ``intrinsics``) reads and writes, except that atomics of one function
    need no barrier between them: a histogram's atomic adds in a loop have none between
    iterations, but one before the loop after the zeroing and one after it before the reads.
    A store at a ticket (``analysis.tickets``) writes, except that stores at tickets of one
    counter need no barrier between them: a compaction's loop of ``pos = T.atomic_add(cnt[0],
    1, return_prev=True); buf[pos] = v`` has none inside; a ticket store whose expressions
    read a variable a loop binds counts as a plain write on that loop's back edge (the next
    iteration's value differs). ``cp.async`` writes count as written at the ``wait_group``
    that follows them. Versions of a pipelined tile (transforms/pipeline) are told apart,
    with the previous iteration's versions shifted by one on a loop's back edge. Statements
    whose control flow is the same in every thread of the block are entered; others are
    leaves. A state is (reads, writes, atomics, ticket stores, issued) since the last barrier
    (issued: since the last ``wait_group``); ``tickets`` are the block's ticket stores
    (``analysis.tickets.find``), None to count every store as a plain write; ``threads`` the
    count of threads ``tx`` numbers from zero; ``bound`` what ``accesses.bound_variables`` says
    of the program."""

    def __init__(self, tx, threads, versions: dict | None = None, varying: list | None = None,
                 tickets=None, bound: tuple | None = None):
        self.tx, self.versions, self.varying = tx, versions or {}, varying or []
        self.tickets, self.thread = tickets, (tx, threads, *(bound or ([], {})))

    def uniform(self, node) -> bool:
        """Whether ``node`` is the same in every thread: it reads neither the thread index nor
        a per-thread buffer derived from it (``tx = T.get_thread_binding()``; ``v = s[tx]``)."""
        return not depends_on_thread(node, self.tx, self.varying)

    def run(self, stmt, state):
        reads, writes, atomics, tickets, issued = state
        if isinstance(stmt, tirx.SeqStmt):
            out = []
            for s in stmt.seq:
                s, state = self.run(s, state)
                out.append(s)
            return tirx.SeqStmt(out), state
        if intrinsics.is_sync(stmt):
            return stmt, (set(), set(), set(), set(), issued)
        if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING and \
                self.uniform(stmt.extent) and self.uniform(stmt.min) and \
                not self._is_spread(stmt):
            return self._headed(stmt, [stmt.min, stmt.extent], state, self._loop)
        if isinstance(stmt, tirx.While):
            self._check_while(stmt)
            return self._loop(stmt, state)
        if isinstance(stmt, tirx.IfThenElse) and self.uniform(stmt.condition):
            return self._headed(stmt, [stmt.condition], state, self._branch)
        acc = Access(stmt, self.versions, self.tickets, self.thread)
        if _needs_sync(acc, state):
            stmt = tirx.SeqStmt([intrinsics.sync(), stmt])
            reads, writes, atomics, tickets = set(), set(), set(), set()
        reads, writes, issued = reads | acc.reads, writes | acc.writes, issued | acc.issued
        atomics, tickets = atomics | acc.atomics, tickets | acc.tickets
        if acc.lands:
            writes, issued = writes | issued, set()
        return stmt, (reads, writes, atomics, tickets, issued)

    def _headed(self, stmt, header: list, state, enter):
        """A branch or a counted loop entered alike by every thread, whose condition or bounds
        (``header``) are read before its body: a barrier goes before it when they read shared
        memory written since the last one (``if s[0] > 0:`` after the threads wrote ``s``:
        threads would decide apart, and a barrier inside the branch then waits forever)."""
        reading = [tirx.Evaluate(e) for e in header]
        head = Access(reading[0] if len(reading) == 1 else tirx.SeqStmt(reading), self.versions,
                      self.tickets, self.thread)
        if not _needs_sync(head, state):
            reads, writes, atomics, tickets, issued = state
            return enter(stmt, (reads | head.reads, writes, atomics, tickets, issued))
        entered, after = enter(stmt, (set(head.reads), set(), set(), set(), state[4]))
        return tirx.SeqStmt([intrinsics.sync(), entered]), after

    def _branch(self, stmt, state):
        then_case, s1 = self.run(stmt.then_case, state)
        else_case, s2 = (self.run(stmt.else_case, state) if stmt.else_case is not None
                         else (None, state))
        return (tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span),
                tuple(a | b for a, b in zip(s1, s2)))

    def _check_while(self, stmt) -> None:
        """A ``while`` loop is entered like a counted one when every thread of the block
        evaluates its condition alike and the condition reads no shared memory (nothing
        orders it after the body's writes); otherwise it is refused at the loop's line."""
        cond = Access(tirx.Evaluate(stmt.condition), self.versions)
        if not self.uniform(stmt.condition):
            why = "reads the thread index (threads would leave the loop apart, and the " \
                "barriers inside it need every thread)"
        elif cond.reads or cond.atomics:
            why = "reads shared memory"
        else:
            return
        raise UnsupportedOpError(
            f"backend 'cuda' runs a 'while' loop whose condition is the same in every thread "
            f"and reads no shared memory; this condition {why}: keep the value in a "
            "T.alloc_var or a local fragment every thread computes alike",
            span_location(stmt.span))

    def _loop(self, stmt, state):
        """A barrier the first iteration needs goes before the loop; inside, only what one
        iteration needs after the previous one (a counted loop's versions shifted back by
        one). A ``while`` loop is one whose iterations are not counted. A ticket store of
        the body whose expressions read a variable the loop binds gets a barrier before it
        in the body (its renewed self conflicts with it), so every iteration, the first
        too, has one before it."""
        reads, writes, atomics, tickets, issued = state
        before = None
        if not _starts_with_sync(stmt.body) and _needs_sync(
                Access(stmt.body, self.versions, self.tickets, self.thread), state):
            before = intrinsics.sync()
            reads, writes, atomics, tickets = set(), set(), set(), set()
        counted = isinstance(stmt, tirx.For)
        var = hash(stmt.loop_var) if counted else None

        def back_edge(key):
            return (key[0], key[1], (key[2] - 1) % key[3], key[3])

        _, end = self.run(stmt.body, (set(), set(), set(), set(), set(issued)))
        if counted:
            end = tuple(rekey(e, var, back_edge) for e in end)
        body, end = self.run(stmt.body, _renewed(end, stmt))
        if counted:
            loop = rebuild_for(stmt, body=body)
            end = tuple(rekey(e, var, lambda key: None) for e in end)
        else:
            loop = tirx.While(stmt.condition, body, span=stmt.span)
        after = (reads | end[0], writes | end[1], atomics | end[2], tickets | end[3], end[4])
        return (loop if before is None else tirx.SeqStmt([before, loop])), after

    def _is_spread(self, loop) -> bool:
        return keys.SPREAD in loop.annotations or keys.OWN_ELEMENTS in loop.annotations


def _needs_sync(acc: Access, state) -> bool:
    """Whether a statement of accesses ``acc`` needs a barrier after ``state``'s: it reads what
    was written or updated atomically, writes what was read, written or updated atomically,
    or updates atomically what was read, written or updated by another atomic function."""
    reads, writes, atomics, tickets, _ = state
    return conflict(acc.reads, writes | atomics | tickets) or \
        conflict(acc.writes | acc.issued, reads | writes | atomics | tickets) or \
        conflict(acc.atomics, reads | writes | tickets) or \
        atomics_conflict(acc.atomics, atomics) or \
        conflict(acc.tickets, reads | writes | atomics) or \
        tickets_conflict(acc.tickets, tickets)


def _renewed(state, loop):
    """``state`` at ``loop``'s back edge: a ticket store whose expressions read a variable
    bound in the loop (its own or one its body binds) counts as a plain write."""
    tickets = state[3]
    if not tickets:
        return state
    bound: set = set()
    if isinstance(loop, tirx.For):
        bound.add(loop.loop_var)
    tvm_ffi.structural_walk(loop.body, [
        (tirx.For, lambda s: bound.add(s.loop_var)),
        (tirx.Bind, lambda s: bound.add(s.var))])
    renewed = {e for e in tickets if e[2].variables & bound}
    return (state[0], state[1] | {(buf, key) for buf, key, _ in renewed}, state[2],
            tickets - renewed, state[4])


_NOTHING = (frozenset(),) * 5  # a state: nothing touched


def _starts_with_sync(body) -> bool:
    """A barrier comes before any shared access of ``body`` (cp.async waits may precede it)."""
    for s in (body.seq if isinstance(body, tirx.SeqStmt) else [body]):
        if intrinsics.is_sync(s):
            return True
        found = intrinsics.of(s) if isinstance(s, tirx.Evaluate) else None
        if found is None or not found.lands:
            return False
    return False


class _DropRoleSyncs(StmtMutator):
    """A block-wide barrier between two roles is dropped: roles hand data over through
    mbarriers, and a ``__syncthreads`` there would serialise them."""

    def visit_SeqStmt(self, stmt):
        return self._clean(flat([stmt]), loop_body=False)

    def visit_For(self, stmt):
        if keys.ROLE in stmt.annotations:
            return stmt
        body = flat([stmt.body])
        if len(body) > 1:
            loop_body = stmt.kind != tirx.ForKind.THREAD_BINDING
            return rebuild_for(stmt, body=self._clean(body, loop_body=loop_body))
        return super().visit_For(stmt)

    def _clean(self, items, loop_body: bool):
        items = [self.visit(s) if not intrinsics.is_sync(s) else s for s in items]
        real = [s for s in items if not intrinsics.is_sync(s)]
        out = []
        for i, s in enumerate(items):
            if intrinsics.is_sync(s):
                before = [x for x in items[:i] if not intrinsics.is_sync(x)]
                after = [x for x in items[i + 1:] if not intrinsics.is_sync(x)]
                prev = before[-1] if before else (real[-1] if loop_body and real else None)
                nxt = after[0] if after else None
                if prev is not None and nxt is not None and is_role(prev) and is_role(nxt):
                    continue
            out.append(s)
        return tirx.SeqStmt(out) if len(out) != 1 else out[0]


def _barrier_ids(loops) -> dict:
    """The named barrier of each first thread of the roles ``loops`` (those that have
    barriers): ``1 + lo / 128`` (1-8) for a role starting a warpgroup, ids 11-15 in order for
    the other first threads (9 and 10 are the ping-pong turns'); more of those than 5 is
    refused at the sixth role."""
    ids = {}
    for loop in sorted(loops, key=lambda loop: int(loop.annotations[keys.ROLE])):
        lo = int(loop.annotations[keys.ROLE])
        if lo in ids:
            continue
        if lo % WARPGROUP == 0:
            ids[lo] = 1 + lo // WARPGROUP
            continue
        ids[lo] = 11 + sum(1 for k in ids if k % WARPGROUP)
        if ids[lo] > 15:
            raise UnsupportedOpError(
                "cuda backend: roles with barriers starting at more than 5 threads inside a "
                f"warpgroup (here {', '.join(str(k) for k in ids if k % WARPGROUP)}) need "
                "more named barriers than a block has; start some roles at a multiple of 128 "
                "threads", span_location(loop.span))
    return ids


def _has_sync(body) -> bool:
    found = []
    tvm_ffi.structural_walk(body, (tirx.Evaluate, lambda s: found.append(s)
                                   if intrinsics.is_sync(s) else None))
    return bool(found)


def _named_barriers(body, ident: int | None, n: int):
    if ident is None:  # no barrier in the role
        return body
    ident = tirx.const(ident, "int32")

    def visit(stmt):
        if intrinsics.is_sync(stmt):
            return intrinsics.call("tw_named_barrier_sync", ident, tirx.const(n, "int32"))
        return stmt

    return tvm_ffi.structural_map(body, (tirx.Evaluate, visit))


def _refuse_user_named_barriers(body) -> None:
    """A warp-specialised kernel's roles take named barriers 1-8 and 11-15
    (:func:`_barrier_ids`) and the ping-pong turns 9 and 10; the user's
    ``T.sync_threads(id, count)`` beside them is
    refused rather than renumbered (its id is the user's handshake with other code)."""
    found = []
    tvm_ffi.structural_walk(body, (tirx.Evaluate, lambda s: found.append(s)
                                   if intrinsics.role(s.value) == "named_barrier" else None))
    if found:
        raise UnsupportedOpError(
            "cuda backend: T.sync_threads(barrier_id, arrive_count) in a warp-specialised "
            "kernel, whose roles use named barriers 1-15 themselves; order the role's threads "
            "with its own barriers (T.sync_threads()) or with mbarriers",
            span_location(found[0].span))


def insert_sync():
    """Barriers for the block (:class:`Syncs` over its thread loop), then barriers inside each
    T.ws role as named barriers of its threads (:func:`_barrier_ids`); none between
    roles."""

    def run(func):
        versions = {str(k): int(v) for k, v in func.attrs[keys.VERSIONS].items()} \
            if func.attrs is not None and keys.VERSIONS in func.attrs else {}
        tx_loop = find_thread(func)
        varying = thread_varying(tx_loop.body, tx_loop.loop_var)
        found = ticket_stores.find(tx_loop.body, tx_loop.loop_var, func.body)
        body, _ = Syncs(tx_loop.loop_var, int(tx_loop.extent.value), versions, varying, found,
                        bound_variables(tx_loop.body)).run(tx_loop.body, _NOTHING)
        new_loop = rebuild_for(tx_loop, body=body)
        func = func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.For, lambda s: new_loop if s.same_as(tx_loop) else s)))
        if not role_loops(func.body):
            return func
        _refuse_user_named_barriers(func.body)
        func = func.with_body(_DropRoleSyncs().visit(func.body))

        def sync_role(loop):
            body, _ = Syncs(loop.loop_var, int(loop.extent.value),
                            varying=thread_varying(loop.body, loop.loop_var),
                            bound=bound_variables(loop.body)).run(loop.body, _NOTHING)
            return body

        func = map_roles(func, sync_role)
        ids = _barrier_ids([loop for loop in role_loops(func.body) if _has_sync(loop.body)])
        return map_roles(func, lambda loop: _named_barriers(
            loop.body, ids.get(int(loop.annotations[keys.ROLE])), int(loop.extent.value)))

    return prim_func_pass("CUDAInsertSync", run)


def drop_redundant_fences():
    """A register-A wgmma is lowered behind ``fence.proxy.async; __syncthreads()`` for B's
    writers (A needs neither). The pair is dropped (``tw_mbar_wait``s between it and the gemm
    stay) when B needs no fence here: every write of every shared tile the gemm reads is a
    TMA load (async proxy, made visible by the mbarrier wait each thread does before the gemm,
    as pipelined TMA loops have it), or the same statement list holds an earlier ``fence;
    sync`` pair after which nothing writes (or lands ``cp.async`` copies into) those tiles.
    FlashAttention's P @ V: P in registers, V a TMA (or cp.async) pipeline tile. Runs after
    pipelining, before barrier insertion."""

    def run(func):
        calls = []
        tvm_ffi.structural_walk(func.body, (tvm.ir.Call, lambda c: calls.append(c) if
                                            _is_register_a_gemm(c) else None))
        if not calls:
            return func
        versions = {str(k): int(v) for k, v in func.attrs[keys.VERSIONS].items()} \
            if func.attrs is not None and keys.VERSIONS in func.attrs else {}
        return func.with_body(_drop_fences(func.body, versions, tma_only(func.body)))

    return prim_func_pass("CUDAWgmmaDropFences", run)


def _is_register_a_gemm(node) -> bool:
    found = intrinsics.of(node)
    return found is not None and found.name == "tw_gemm_wgmma_rs"


def _drop_fences(stmt, versions: dict, tma_only: set):
    if isinstance(stmt, tirx.SeqStmt):
        out: list = []
        items = flat([stmt])
        for s in (_drop_fences(x, versions, tma_only) for x in items):
            if _is_register_a_gemm(s.value if isinstance(s, tirx.Evaluate) else s):
                j = len(out)
                while j > 0 and intrinsics.role(out[j - 1]) == "mbar_wait":
                    j -= 1
                if j >= 2 and intrinsics.is_sync(out[j - 1]) and \
                        intrinsics.role(out[j - 2]) == "fence_async":
                    reads = Access(s, versions).reads
                    if all(any(buf.same_as(t) for t in tma_only) for buf, _ in reads) or \
                            _fenced_before(out[:j - 2], reads, versions):
                        del out[j - 2:j]
                    else:
                        out = _fence_after_landing(out, j, reads, versions)
            out.append(s)
        if len(out) == len(items) and all(a.same_as(b) for a, b in zip(out, items)):
            return stmt  # nothing dropped here: the nesting stays as it was
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]
    if isinstance(stmt, tirx.For):
        body = _drop_fences(stmt.body, versions, tma_only)
        return stmt if body.same_as(stmt.body) else rebuild_for(stmt, body=body)
    if isinstance(stmt, tirx.IfThenElse):
        then_case = _drop_fences(stmt.then_case, versions, tma_only)
        else_case = None if stmt.else_case is None else \
            _drop_fences(stmt.else_case, versions, tma_only)
        if then_case.same_as(stmt.then_case) and (else_case is None or
                                                   else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span)
    return stmt


def _fence_after_landing(out: list, j: int, reads, versions: dict) -> list:
    """``out`` with the ``fence; sync`` pair at ``out[j - 2 : j]`` moved up to just after the
    last statement before it that lands ``cp.async`` copies (a ``cp.async.wait_group``),
    when none of the statements in between writes what ``reads`` names; where a barrier
    already follows that statement (a pipelined loop's), only the fence moves, in front of
    it. Each thread's landed copies are then fenced before the one barrier that also orders
    them for the statements in between: W4A16's register_w loop (the codes' and activations'
    wait and barrier, the dequantisation into registers, the gemm) keeps one barrier a
    k-tile instead of two. ``out`` as it is when no such statement exists."""
    for p in range(j - 3, -1, -1):
        acc = Access(out[p], versions)
        if acc.lands:
            if intrinsics.is_sync(out[p + 1]):
                return [*out[:p + 1], out[j - 2], *out[p + 1:j - 2], *out[j:]]
            return [*out[:p + 1], *out[j - 2:j], *out[p + 1:j - 2], *out[j:]]
        if conflict(reads, acc.writes | acc.atomics | acc.issued):
            return out
    return out


def _fenced_before(before: list, reads, versions: dict) -> bool:
    """Whether ``before`` holds a ``fence; sync`` pair followed by statements none of which
    writes what ``reads`` names (nor waits for cp.async copies)."""
    for j in range(len(before) - 1, 0, -1):
        s = before[j]
        if intrinsics.is_sync(s) and intrinsics.role(before[j - 1]) == "fence_async":
            return True
        acc = Access(s, versions)
        if acc.lands or conflict(reads, acc.writes | acc.atomics | acc.issued):
            return False
    return False
