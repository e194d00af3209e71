"""Lifetimes of the shared buffers of a block's program, for sharing bytes of the pool between
buffers that are never live at once (``transforms.memory``).

The program is a sequence of *positions* in the order the block runs them: the statements
of the thread loop's body, and inside each counted loop and branch that every thread of the
block runs alike (bounds and condition free of the thread index; not a ``T.Parallel`` nest
spread over the threads) the statements of its body, recursively. Everything from the first
``T.ws`` role to the last is one position (roles run concurrently, with no block barrier
between them), and so is any other statement (a spread loop, a ``while`` loop, a branch on
the thread index).

A buffer lives from the first position that touches it (a load, a store, its address) to
the last, widened as follows. One touched at a position that starts an operation still
running when the call returns (``Intrinsic.in_flight``: cp.async, TMA, wgmma) lives on to the
next later position that waits for all such operations (``Intrinsic.completes``, with no
group left pending) and runs whenever that position does (in its loop body or around it;
with none, to the end), so no reuse starts while one may still read or write it. A buffer
that lives in part of a loop's body lives over the whole loop (every iteration) unless it is
*renewed* each iteration: it is touched only inside the loop, the first position touching it
writes it, every position touching it sits in the same loops and branches of the body (a
write may sit deeper, in loops of constant bounds: they run whole), and its
writes come before its reads and write the same elements in every iteration (their indices and
guards use nothing the loop changes: not its variable, nor a loop or a value bound inside it,
except a loop inside the writing statement itself); or it is a pipelined tile
(``keys.VERSIONS``) whose first position in the loop (the pipeline's prologue, which fills the
versions before they are read) runs whenever any other of its positions does and whose
versions are not picked by the loop's variable (its own loop). Then a value it
holds never passes from one iteration to the next, and another buffer may use its bytes in the
rest of the body (in its own loop a pipelined tile's stages are live together). A buffer
touched in several loops (each the outermost entered loop of its touches below the loops
and branches around all of them) lives over each apart when every one of them renews it and
writes the same elements of it: its bytes are free between the loops. An
mbarrier (initialised by ``tw_mbar_init``) lives throughout: PTX wants ``mbarrier.inval``
before its bytes serve as anything else."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from .. import intrinsics, keys
from .accesses import Access
from .ir import buffers_in, flat, is_parallel, is_role, seq, uses


@dataclass(frozen=True)
class Loop:
    """A loop whose body the positions enter: positions ``first`` to ``last`` (inclusive)."""

    first: int
    last: int
    stmt: tirx.For


@dataclass(frozen=True)
class Program:
    """The positions of a block's program (each a list of statements), per position the
    entered loops and branches around it (outermost first, each ``(kind, statement)``), and
    the entered loops."""

    positions: list
    contexts: list
    loops: list

    def runs_with(self, inner: int, outer: int) -> bool:
        """Whether position ``outer`` runs whenever position ``inner``'s loop iteration or
        branch does: its context is a prefix of ``inner``'s."""
        a, b = self.contexts[inner], self.contexts[outer]
        return len(b) <= len(a) and all(x[1].same_as(y[1]) for x, y in zip(a, b))


def _entered(stmt, thread) -> bool:
    if thread is None:
        return False
    if isinstance(stmt, tirx.For):
        return stmt.kind != tirx.ForKind.THREAD_BINDING and not is_role(stmt) and \
            not is_parallel(stmt) and keys.SPREAD not in stmt.annotations and \
            keys.OWN_ELEMENTS not in stmt.annotations and \
            not (uses(stmt.min, thread) or uses(stmt.extent, thread))
    if isinstance(stmt, tirx.IfThenElse):
        return not uses(stmt.condition, thread)
    return False


def program(thread_body, thread=None) -> Program:
    """The positions of ``thread_body`` (the module docstring), allocations left out;
    ``thread`` is the block's thread index (without it, no loop or branch is entered)."""
    positions, contexts, loops = [], [], []

    def walk(stmts, context):
        stmts = [s for s in flat(stmts) if not isinstance(s, (tirx.AllocBuffer,
                                                               tirx.DeclBuffer))]
        roles = [i for i, s in enumerate(stmts) if is_role(s)]
        groups = [[s] for s in stmts]
        if roles:
            lo, hi = roles[0], roles[-1]
            groups = groups[:lo] + [stmts[lo:hi + 1]] + groups[hi + 1:]
        for group in groups:
            stmt = group[0]
            if len(group) > 1 or not _entered(stmt, thread):
                positions.append(group)
                contexts.append(context)
            elif isinstance(stmt, tirx.For):
                first = len(positions)
                walk([stmt.body], (*context, ("loop", stmt)))
                if len(positions) == first:  # an empty body is still a statement
                    positions.append(group)
                    contexts.append(context)
                loops.append(Loop(first, len(positions) - 1, stmt))
            else:
                walk([stmt.then_case], (*context, ("then", stmt)))
                if stmt.else_case is not None:
                    walk([stmt.else_case], (*context, ("else", stmt)))

    walk([thread_body], ())
    return Program(positions, contexts, loops)


def _waits_all(stmt) -> bool:
    """Whether ``stmt`` waits until no cp.async group, wgmma or TMA operation is pending."""
    found = []

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda call: found.append(
        intrinsics.waits_all(call))))
    return any(found)


def _in_flight(stmt, buffers) -> list:
    """The buffers the operations in flight that ``stmt`` starts name (all it touches when
    one names none of them)."""
    named = []

    def visit(call):
        entry = intrinsics.lookup(intrinsics.extern_name(call) or "")
        if entry is not None and entry.in_flight:
            touched = _touched(tirx.Evaluate(call), buffers)
            named.extend(touched if touched else _touched(stmt, buffers))

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, visit))
    return named


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


def _has(entries, buf) -> bool:
    return any(b.same_as(buf) for b, *_ in entries)


def _bound(node) -> set:
    """The variables ``node`` binds (loops, lets), by hash."""
    out = set()

    def visit(s):
        if isinstance(s, tirx.For):
            out.add(hash(s.loop_var))
        elif isinstance(s, (tirx.LetStmt, tirx.Bind)):
            out.add(hash(s.var))

    tvm_ffi.structural_walk(node, [(tirx.For, visit), (tirx.LetStmt, visit),
                                   (tirx.Bind, visit)])
    return out


def _steady(stmt, buf, varying: set) -> bool:
    """Whether every access of ``buf`` in ``stmt`` has indices, and every branch around one
    a condition, that use none of ``varying`` except variables ``stmt`` binds from values
    that use none either (its own loops over fixed bounds)."""

    def free(node, env) -> bool:
        found = []
        tvm_ffi.structural_walk(node, (tirx.Var, lambda v: found.append(hash(v))))
        return all(h not in varying or h in env for h in found)

    def leaf(node, env) -> bool:
        hits = []
        tvm_ffi.structural_walk(node, [
            (tvm.ir.TensorLoad, lambda e: hits.append(e.indices) if e.source.same_as(buf)
             else None),
            (tirx.BufferStore, lambda s: hits.append(s.indices) if s.buffer.same_as(buf)
             else None)])
        return all(free(x, env) for ix in hits for x in ix)

    def visit(node, env) -> bool:
        if not any(b.same_as(buf) for b in buffers_in(node)):
            return True
        if isinstance(node, tirx.SeqStmt):
            for s in node.seq:
                if not visit(s, env):
                    return False
                if isinstance(s, tirx.Bind) and free(s.value, env):
                    env = env | {hash(s.var)}
            return True
        if isinstance(node, tirx.For):
            fixed = free(node.min, env) and free(node.extent, env)
            inner = env | {hash(node.loop_var)} if fixed else env
            return visit(node.body, inner)
        if isinstance(node, tirx.IfThenElse):
            return free(node.condition, env) and visit(node.then_case, env) and (
                node.else_case is None or visit(node.else_case, env))
        if isinstance(node, tirx.LetStmt):
            inner = env | {hash(node.var)} if free(node.value, env) else env
            return leaf(node.value, env) and visit(node.body, inner)
        return leaf(node, env)

    return visit(stmt, set())


def _versions_by(stmt, buf, var) -> bool:
    """Whether ``stmt`` picks a version of the pipelined tile ``buf`` by ``var``."""
    found = []
    tvm_ffi.structural_walk(stmt, [
        (tvm.ir.TensorLoad, lambda e: found.append(e.indices[0]) if e.source.same_as(buf)
         else None),
        (tirx.BufferStore, lambda st: found.append(st.indices[0]) if st.buffer.same_as(buf)
         else None)])
    return any(uses(ix, var) for ix in found)


def _renewed(prog: Program, loop: Loop, buf, touches: list, reads: list, writes: list,
             versioned: bool) -> bool:
    """Whether ``buf``, touched at positions ``touches`` (all in ``loop``), is renewed each
    iteration of ``loop`` (the module docstring)."""
    if not writes or writes[0] != touches[0]:
        return False
    if versioned:  # its pipeline fills each version before reading it
        return all(prog.runs_with(p, touches[0]) for p in touches) and not any(
            _versions_by(seq(prog.positions[p]), buf, loop.stmt.loop_var) for p in touches)
    base = _base(prog, touches, reads)
    if base is None or reads and max(writes) >= min(reads):
        return False
    varying = _bound(loop.stmt) - {hash(s.loop_var) for p in writes
                                   for _, s in prog.contexts[p][len(base):]}
    return all(_steady(seq(prog.positions[p]), buf, varying) for p in writes)


def _fixed(stmt) -> bool:
    """Whether ``stmt`` is a loop of constant bounds that runs at least once."""
    return isinstance(stmt, tirx.For) and isinstance(stmt.min, tirx.IntImm) and \
        isinstance(stmt.extent, tirx.IntImm) and int(stmt.extent.value) > 0


def _base(prog: Program, touches: list, reads: list):
    """The loops and branches around every one of ``touches`` (a context of ``prog``) when
    each read sits right in them and each write in them or in loops of constant bounds
    inside them (which run whole whenever the reads do), else None."""
    base = min((prog.contexts[p] for p in touches), key=len)
    for p in touches:
        context = prog.contexts[p]
        if not all(x[0] == y[0] and x[1].same_as(y[1]) for x, y in zip(context, base)):
            return None
        extra = context[len(base):]
        if extra and (p in reads or not all(kind == "loop" and _fixed(stmt)
                                            for kind, stmt in extra)):
            return None
    return base


def _interval(prog: Program, buf, touches: list, reads: list, writes: list, flying: list,
              completing: list, versioned: bool) -> tuple:
    """The ``(first, last)`` positions ``buf`` lives over for its ``touches`` (the module
    docstring: to the next full wait after an operation in flight, over every loop it is
    partly in and not renewed by)."""
    end = len(prog.positions) - 1
    lo, hi = touches[0], touches[-1]
    for p in flying:
        waits = [q for q in completing if q > p and prog.runs_with(p, q)]
        hi = max(hi, waits[0] if waits else end)
    for loop in sorted(prog.loops, key=lambda lp: lp.last - lp.first):
        if hi < loop.first or lo > loop.last or (lo <= loop.first and hi >= loop.last):
            continue
        inside = loop.first <= lo and hi <= loop.last
        if not (inside and _renewed(prog, loop, buf, touches, reads, writes, versioned)):
            lo, hi = min(lo, loop.first), max(hi, loop.last)
    return lo, hi


def _footprint(stmt, buf):
    """``stmt`` with the values it stores into ``buf`` zeroed, its stores into other buffers
    gone and the arguments of its calls that name other buffers but not ``buf`` zeroed (a
    copy's source): what it writes of ``buf`` (indices, guards, loops, the addresses of
    ``buf`` a call takes), not what."""

    def store(st):
        if st.buffer.same_as(buf):
            return tirx.BufferStore(st.buffer, tirx.const(0, st.buffer.dtype), st.indices)
        return tirx.Evaluate(tirx.const(0, "int32"))

    def names_buf(arg) -> bool:
        return any(b.same_as(buf) for b in _touched(tirx.Evaluate(arg), [buf]))

    def call(c):
        args = [a if names_buf(a) or not buffers_in(tirx.Evaluate(a)) else
                tirx.const(0, "int32") for a in c.args]
        return tvm.ir.Call(c.op, args, attrs=c.attrs, ty_args=c.ty_args, ret_ty=c.ty)

    return tvm_ffi.structural_map(stmt, [(tirx.BufferStore, store), (tvm.ir.Call, call)])


def _loop_groups(prog: Program, touches: list) -> list:
    """``touches`` split by the outermost entered loop each sits in below the loops and
    branches around all of them (None for a touch in no such loop), in order:
    ``[(loop, positions), ...]``."""
    contexts = [prog.contexts[p] for p in touches]
    common = 0
    while all(len(c) > common and c[common][0] == contexts[0][common][0] and
              c[common][1].same_as(contexts[0][common][1]) for c in contexts):
        common += 1
    groups: list = []
    for p, context in zip(touches, contexts):
        stmt = next((s for kind, s in context[common:] if kind == "loop"), None)
        loop = None if stmt is None else next(lp for lp in prog.loops if lp.stmt.same_as(stmt))
        if groups and loop is not None and groups[-1][0] is loop:
            groups[-1][1].append(p)
        else:
            groups.append((loop, [p]))
    return groups


def _split(prog: Program, buf, touches: list, reads: list, writes: list,
           versioned: bool) -> list:
    """The touches of ``buf`` as independent runs: one per loop it is touched in when every
    such loop renews it (no value passes from one iteration to the next, nor from before the
    loop) and each writes the same elements of it (so a read of an element its own loop does
    not write reads one no loop writes); else all of them as one run."""
    groups = _loop_groups(prog, touches)
    if len(groups) < 2 or any(loop is None for loop, _ in groups):
        return [touches]
    shapes = []
    for loop, group in groups:
        mine = [[p for p in ps if p in group] for ps in (reads, writes)]
        if not _renewed(prog, loop, buf, group, mine[0], mine[1], versioned):
            return [touches]
        base = _base(prog, group, mine[0])
        if base is None:  # a pipelined tile
            return [touches]
        written = []  # each write's position, or the outermost loop around it inside base
        for p in mine[1]:
            extra = prog.contexts[p][len(base):]
            stmt = extra[0][1] if extra else seq(prog.positions[p])
            if not any(stmt.same_as(w) for w in written):
                written.append(stmt)
        shapes.append([_footprint(w, buf) for w in written])
    if any(len(s) != len(shapes[0]) or not all(
            tvm_ffi.structural_equal(x, y) for x, y in zip(s, shapes[0])) for s in shapes):
        return [touches]
    return [group for _, group in groups]


def live_segments(thread_body, buffers, thread=None, versions=()) -> dict:
    """Per buffer of ``buffers``, the ordered, disjoint ``(first, last)`` intervals of
    :func:`program`'s positions it lives over (inclusive): one, unless each loop it is
    touched in renews it and writes the same elements (then one per loop, and its bytes are
    free between the loops); a buffer no position touches, or an mbarrier, lives over every
    position. ``versions`` names the pipelined tiles (``keys.VERSIONS``)."""
    prog = program(thread_body, thread)
    end = max(len(prog.positions) - 1, 0)
    touches = {i: [] for i in range(len(buffers))}
    reads = {i: [] for i in range(len(buffers))}
    writes = {i: [] for i in range(len(buffers))}
    flying = {i: [] for i in range(len(buffers))}
    completing = []
    for p, group in enumerate(prog.positions):
        stmt = seq(group)
        if _waits_all(stmt):
            completing.append(p)
        acc = Access(stmt, {})
        named = _in_flight(stmt, buffers)
        for b in _touched(stmt, buffers):
            i = next(k for k, x in enumerate(buffers) if x.same_as(b))
            touches[i].append(p)
            written = _has(acc.writes, b) or _has(acc.atomics, b) or _has(acc.issued, b)
            read = _has(acc.reads, b) or _has(acc.atomics, b)
            if not (written or read):  # its data pointer: anything
                written = read = True
            if written:
                writes[i].append(p)
            if read:
                reads[i].append(p)
            if any(b.same_as(x) for x in named):
                flying[i].append(p)
    always = _mbarriers(thread_body, buffers)
    segments = {}
    for i, b in enumerate(buffers):
        if not touches[i] or any(b.same_as(m) for m in always):
            segments[b] = ((0, end),)
            continue
        versioned = str(b.name) in versions
        spans = []
        for lo, hi in sorted(_interval(prog, b, run, *[[p for p in ps if p in run] for ps in (
                reads[i], writes[i], flying[i])], completing, versioned)
                for run in _split(prog, b, touches[i], reads[i], writes[i], versioned)):
            if spans and lo <= spans[-1][1] + 1:  # overlapping or adjacent: one
                lo, hi = spans[-1][0], max(hi, spans.pop()[1])
            spans.append((lo, hi))
        segments[b] = tuple(spans)
    return segments


def unused(body, buffers) -> list:
    """Those of ``buffers`` that nothing in ``body`` but their own allocation loads, stores or
    takes the data pointer of (a ``T.alloc_shared`` the kernel never touches, as the
    example kernels' bias tile without a bias): they need no bytes."""
    def drop(alloc):
        return tirx.Evaluate(0) if any(alloc.buffer.same_as(b) for b in buffers) else alloc

    used = _touched(tvm_ffi.structural_map(body, (tirx.AllocBuffer, drop)), buffers)
    return [b for b in buffers if not any(b.same_as(u) for u in used)]


def live_ranges(thread_body, buffers, thread=None, versions=()) -> dict:
    """Per buffer of ``buffers``, the ``(first, last)`` positions of :func:`program` it lives
    over (inclusive): from the first of its :func:`live_segments` to the end of the last."""
    return {b: (s[0][0], s[-1][1]) for b, s in
            live_segments(thread_body, buffers, thread, versions).items()}


def barrier_between(prog: Program, before: int, after: int, planned=()) -> bool:
    """Whether a block barrier (``__syncthreads``) runs after position ``before`` and before
    position ``after`` whenever ``after`` runs; ``planned`` are positions that will get one
    before their first statement."""
    return any(prog.runs_with(after, p) and (
        p in planned and p > before or p < after and any(intrinsics.is_sync(s)
                                                        for s in prog.positions[p]))
        for p in range(before + 1, after + 1))


def barrier_after(prog: Program, position: int, last: int, planned=()) -> bool:
    """Whether a block barrier runs after position ``position`` and by position ``last``
    whenever ``position`` runs (``planned`` as for :func:`barrier_between`)."""
    return any(prog.runs_with(position, p) and (
        p in planned or any(intrinsics.is_sync(s) for s in prog.positions[p]))
        for p in range(position + 1, last + 1))


def enclosing(prog: Program, first: int, last: int):
    """The innermost entered loop whose positions include ``first`` to ``last``, or None."""
    around = [lp for lp in prog.loops if lp.first <= first and last <= lp.last]
    return min(around, key=lambda lp: lp.last - lp.first) if around else None
