"""Thread-level code run by a backend without threads: each thread's part, thread after thread.

``tx = T.get_thread_binding()`` (:mod:`tilewright.language.threads`) makes the code that
reads it per-thread code. :func:`thread_dependence` finds it: the per-thread storage
(``local*`` scopes) and the names bound to values that may differ between the block's
threads, because they are computed from the thread index, under a condition or a loop
bound reading it, or from an atomic's previous value. :func:`serialize_threads` is the pass
for backends that run a block as one sequence (the CPU, the interpreter):

- per-thread storage becomes an array with a leading thread dimension (``acc`` of shape
  ``(1,)`` becomes ``(threads, 1)``, each thread's row its copy); a name bound to a
  thread's value becomes such an array of one element a thread;
- a statement that does not depend on the thread stays the block's, run once; a sequence, a
  loop whose bounds and a branch whose condition do not depend on the thread keep their
  shape and have their parts treated in turn. Each part that does depend on the thread runs
  in a loop over the threads (``x`` fastest): every thread finishes it before the next
  part starts, the order the barriers of a GPU backend give to code that shares memory
  between threads;
- a branch on the thread index that holds the block's work (tile ops, ``T.Parallel`` loops
  that read nothing of a thread's: TileLang's ``if tx < 32: ... else: ...`` splitting the
  block into roles) runs that work once when some thread takes the branch, and its
  per-thread parts for the threads that take it. The same work in a loop whose trip count
  depends on the thread has no such meaning and is refused at the loop's line;
- an op whose threads exchange values (``T.tvm_thread_allreduce``, the warp shuffles and
  votes of ``ir.SHUFFLE_OPS`` / ``ir.VOTE_OPS``) is a statement of every thread at once: each
  thread's value is staged in an array (with whether it runs the op: meets the conditions of
  the branches it is in), then each thread computes its result from the others'. A branch
  holding one keeps its shape, as a branch holding the block's work does; a loop whose trip
  count depends on the thread refuses one, and so does a condition a block's vote (a barrier
  every thread must reach) is under.
"""

from __future__ import annotations

import itertools

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import KernelError, span_location
from ..ir import (
    ATOMIC_OPS,
    BLOCK_VOTE_OPS,
    NAMED_BARRIER,
    SHUFFLE_OPS,
    SYNC_WARP,
    THREAD_ALLREDUCE,
    THREAD_BINDING,
    VOTE_OPS,
    WARP_OPS,
    decode,
    lane_mask,
)
from .lowering_utils import compare_floats
from .walk import StmtMutator, prim_func_pass, rebuild_for

PARALLEL_KEY = "tw.loop"
KERNEL_THREADS_KEY = "tw.threads"  # on a kernel's block loop: T.Kernel's threads
# the ops of thread-level code :func:`serialize_threads` removes (a backend running it
# declares them among its tile ops)
THREAD_OPS = (THREAD_BINDING.name, NAMED_BARRIER.name, THREAD_ALLREDUCE.name,
              *sorted(WARP_OPS))
# the ops whose threads exchange values: each a statement of every thread at once
COLLECTIVE_OPS = frozenset({THREAD_ALLREDUCE.name, *SHUFFLE_OPS, *VOTE_OPS})


def thread_indices(body) -> list:
    """``(buffer, dim, threads)`` of each ``T.get_thread_binding`` in ``body``: the
    variable it fills, the thread dimension, the kernel's three thread extents."""
    found = []
    tvm_ffi.structural_walk(body, (tirx.Evaluate, lambda s: found.append(decode(s))))
    return [(c.operands["dst"].buffer, int(c.attrs["dim"]),
             tuple(int(t) for t in c.attrs["threads"].split(",")))
            for c in found if c is not None and c.name == THREAD_BINDING.name]


def collective_results(body) -> list:
    """The arrays the warp ops (shuffles, votes) under ``body`` write: each thread's result,
    whatever the values it is computed from."""
    found = []

    def note(stmt):
        call = decode(stmt)
        if call is not None and call.name in WARP_OPS and "dst" in call.operands:
            found.append(call.operands["dst"].buffer)

    tvm_ffi.structural_walk(body, (tirx.Evaluate, note))
    return found


def contains_collective(stmt) -> bool:
    """Whether ``stmt`` holds an op whose threads exchange values (:data:`COLLECTIVE_OPS`)."""
    found = []

    def note(s):
        call = decode(s)
        if call is not None and call.name in COLLECTIVE_OPS:
            found.append(s)

    tvm_ffi.structural_walk(stmt, (tirx.Evaluate, note))
    return bool(found)


def is_per_thread(buffer) -> bool:
    """Per-thread storage: ``T.alloc_local`` / ``T.alloc_var`` (a fragment is the block's)."""
    return str(buffer.scope()) in ("local", "local.var")


def guarded_writes(body, per_thread=is_per_thread, binds: bool = True,
                   tile_ops: bool = True) -> list:
    """``(target, bound, parts, guards)`` of every assignment under ``body`` that can make a
    value per-thread: a store to per-thread storage (``per_thread`` of its buffer), with
    ``tile_ops`` a tile op writing it, with ``binds`` every ``Bind`` (``bound``: the target is
    its variable, else a buffer); ``parts`` the expressions the assigned value and place come
    from (the value first), ``guards`` the conditions and loop bounds it runs under."""
    found: list = []

    def walk(stmt, guards: tuple) -> None:
        if isinstance(stmt, tirx.IfThenElse):
            walk(stmt.then_case, guards + (stmt.condition,))
            if stmt.else_case is not None:
                walk(stmt.else_case, guards + (stmt.condition,))
        elif isinstance(stmt, tirx.SeqStmt):
            for part in stmt.seq:
                walk(part, guards)
        elif isinstance(stmt, tirx.For):
            walk(stmt.body, guards + (stmt.min, stmt.extent))
        elif isinstance(stmt, tirx.While):
            walk(stmt.body, guards + (stmt.condition,))
        elif isinstance(stmt, tirx.Bind):
            if binds:
                found.append((stmt.var, True, (stmt.value,), guards))
        elif isinstance(stmt, tirx.BufferStore) and per_thread(stmt.buffer):
            found.append((stmt.buffer, False, (stmt.value, *stmt.indices), guards))
        elif isinstance(stmt, tirx.Evaluate) and tile_ops:
            call = decode(stmt)
            if call is not None and call.name != THREAD_BINDING.name:
                for region in call.regions("write"):
                    if per_thread(region.buffer):
                        found.append((region.buffer, False, tuple(call.stmt.value.args),
                                      guards))
        elif hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
            walk(stmt.body, guards)

    walk(body, ())
    return found


class ThreadDependence:
    """What under a kernel body may differ between the block's threads: ``buffers`` (the
    thread indices and the per-thread storage computed from them) and ``variables`` (names
    bound to such values). ``per_thread`` and ``tile_ops`` as :func:`guarded_writes`'s (a
    backend whose fragments live in its threads' registers counts them too)."""

    def __init__(self, body, indices, per_thread=is_per_thread, tile_ops: bool = True):
        self.buffers, self.variables = [*indices, *collective_results(body)], []
        pending = guarded_writes(body, per_thread, tile_ops=tile_ops)
        changed = True
        while changed:
            changed, rest = False, []
            for target, bound, parts, guards in pending:
                if self._known(target):
                    continue
                if any(self.reads(e) for e in (*parts, *guards)):
                    (self.variables if bound else self.buffers).append(target)
                    changed = True
                else:
                    rest.append((target, bound, parts, guards))
            pending = rest

    def _known(self, target) -> bool:
        return any(t.same_as(target) for t in (*self.buffers, *self.variables))

    def reads(self, node) -> bool:
        """Whether ``node`` reads a value that may differ between the threads. An atomic's
        previous value does when the atomic is each thread's (its element or value read the
        thread's, or a condition on the thread guards it: found so); in block code the atomic
        is the block's, made once, and so is its value (``pos = T.atomic_add(C[0], 1,
        return_prev=True)`` is one ticket a block, as on CUDA; counting it per thread made
        it once per thread, inside ``T.Parallel`` once per thread and iteration)."""
        found = []

        def load(ld):
            if any(ld.source.same_as(b) for b in self.buffers):
                found.append(ld)

        def var(v):
            if any(v.same_as(x) for x in self.variables):
                found.append(v)

        tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, load), (tirx.Var, var)])
        return bool(found)

    def touches(self, stmt) -> bool:
        """Whether ``stmt`` reads such a value or writes per-thread storage."""
        if self.reads(stmt):
            return True
        found = []
        tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda s: found.append(s) if any(
            s.buffer.same_as(b) for b in self.buffers) else None))
        return bool(found)


def thread_dependence(body) -> ThreadDependence | None:
    """The :class:`ThreadDependence` of a kernel body, or None when it reads no thread
    index."""
    indices = [buf for buf, _, _ in thread_indices(body)]
    return ThreadDependence(body, indices) if indices else None


class _Serialize:
    def __init__(self, body):
        found = thread_indices(body)
        self.dims = {buf: dim for buf, dim, _ in found}
        self.threads = found[0][2]
        self.count = self.threads[0] * self.threads[1] * self.threads[2]
        self.dep = ThreadDependence(body, [buf for buf, _, _ in found])
        self.expanded = {}  # per-thread buffer -> the threads' copies, one after another
        for buf in self.dep.buffers:
            if buf not in self.dims:
                self._expand(buf)
        self.bound = {}  # per-thread Bind variable -> its array of one element a thread
        self.flags = itertools.count()

    def _expand(self, buf):
        """The threads' copies of per-thread ``buf``: thread ``t``'s rows ``t * d0 ..`` of
        its first dimension ``d0`` (the rank stays, so do a tile op's dims)."""
        shape = list(buf.shape)
        self.expanded[buf] = tirx.decl_buffer((shape[0] * self.count, *shape[1:]), buf.dtype,
                                              f"{buf.name}_threads", scope="local")
        return self.expanded[buf]

    @staticmethod
    def _at(buf, indices, linear):
        """``indices`` of per-thread ``buf`` as thread ``linear``'s in its expanded array."""
        return [linear * buf.shape[0] + indices[0], *indices[1:]]

    # -- the per-thread statement of thread t ------------------------------------------------
    def _index_of(self, buf, ids):
        return ids[self.dims[buf]]

    def _per_thread(self, node, ids, linear):
        """``node`` as thread ``ids`` (one variable a dimension; ``linear`` its number)
        runs it."""

        def load(ld):
            if ld.source in self.dims:
                return ids[self.dims[ld.source]]
            if ld.source in self.expanded:
                return tirx.BufferLoad(self.expanded[ld.source],
                                       self._at(ld.source, ld.indices, linear))
            return ld

        def store(st):
            if st.buffer in self.expanded:
                return tirx.BufferStore(self.expanded[st.buffer], st.value,
                                        self._at(st.buffer, st.indices, linear), span=st.span)
            return st

        def var(v):
            return tirx.BufferLoad(self.expanded[self.bound[v]], [linear]) \
                if v in self.bound else v

        def alloc(a):  # per-thread storage allocated inside the statement
            return tirx.AllocBuffer(self.expanded[a.buffer], span=a.span) \
                if a.buffer in self.expanded else a

        return tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, load),
                                             (tirx.BufferStore, store), (tirx.Var, var),
                                             (tirx.AllocBuffer, alloc)])

    def _each_thread(self, make):
        """A loop over the block's threads (``x`` fastest) around ``make(ids, linear)``."""
        ids = [tirx.Var(f"thread_{'xyz'[d]}", "int32") if self.threads[d] > 1 else
               tirx.const(0, "int32") for d in range(3)]
        stmt = make(ids, self._linear(ids))
        for d in range(3):
            if self.threads[d] > 1:
                stmt = tirx.For(ids[d], 0, self.threads[d], tirx.ForKind.SERIAL, stmt)
        return stmt

    def _linear(self, ids):
        """The number of the thread of indices ``ids`` (``x`` fastest)."""
        return tvm.sym.Analyzer().simplify(
            ids[0] + self.threads[0] * (ids[1] + self.threads[1] * ids[2]))

    def allreduce(self, call, guards):
        """``T.tvm_thread_allreduce``: each thread's value into an array, then each thread
        combines its group's (the threads differing only along the op's dimension; with a
        ``width``, runs of that many of them, the last of which may be shorter), in thread
        order."""
        if guards:
            raise KernelError("T.tvm_thread_allreduce under a condition on the thread index: "
                              "every thread of the block must reach it", span_location(
                                  call.span))
        dim, dst = int(call.attrs["dim"]), call.operands["dst"]
        width = int(call.attrs.get("width", 0)) or self.threads[dim]
        dtype = str(dst.buffer.dtype)
        kind = call.attrs["combiner"]
        # a float max / min with the language's NaN rule (CUDA's fmaxf: a NaN is ignored)
        combine = compare_floats(kind) if kind in ("max", "min") and \
            dtype.startswith(("float", "bfloat")) else \
            {"sum": tirx.Add, "max": tirx.Max, "min": tirx.Min, "bitand": tirx.bitwise_and,
             "bitor": tirx.bitwise_or}[kind]
        value = tirx.decl_buffer((1,), dtype, "allreduce_value", scope="local")
        values = self._expand(value)
        held = self.leaf(tirx.BufferStore(value, tirx.Cast(dtype, call.operands["value"]),
                                          [0], span=call.span), guards)

        def make(ids, linear):
            def of(k):  # the group's k-th value (the group: WIDTH consecutive threads)
                at = tirx.floordiv(ids[dim], width) * width + k
                return tirx.BufferLoad(values, [self._linear([*ids[:dim], at, *ids[dim + 1:]])])

            k = tirx.Var("k", "int32")
            mine = tirx.BufferLoad(dst.buffer, list(dst.starts))
            # the group's threads: WIDTH, but for a last group the block leaves shorter
            size = width if self.threads[dim] % width == 0 else tirx.min(
                width, self.threads[dim] - tirx.floordiv(ids[dim], width) * width)
            combined = tirx.SeqStmt([
                tirx.BufferStore(dst.buffer, of(tirx.const(0, "int32")), list(dst.starts)),
                tirx.For(k, 1, size - 1, tirx.ForKind.SERIAL, tirx.BufferStore(
                    dst.buffer, combine(mine, of(k)), list(dst.starts)))])
            return self._per_thread(combined, ids, linear)

        return tirx.SeqStmt([tirx.AllocBuffer(values), held, self._each_thread(make)])

    def warp_op(self, call, guards):
        """A shuffle or a vote (``ir.SHUFFLE_OPS``, ``ir.VOTE_OPS``): each thread's value and
        whether it runs the op (meets ``guards``) into arrays, then each thread that runs it
        computes its result from those of its warp (of the block for a block's vote)."""
        if guards and call.name in BLOCK_VOTE_OPS:
            raise KernelError(f"T.{call.name} under a condition on the thread index: it is a "
                              "barrier of the whole block, which every thread must reach; move "
                              "it out of the condition", span_location(call.span))
        value = call.operands["value"]
        staged = tirx.decl_buffer((1,), str(value.ty), f"{call.name}_values", scope="local")
        running = tirx.decl_buffer((1,), "int32", f"{call.name}_running", scope="local")
        values, runs = self._expand(staged), self._expand(running)
        flag = tirx.Cast("int32", _all(guards)) if guards else tirx.const(1, "int32")
        parts = [tirx.AllocBuffer(values), tirx.AllocBuffer(runs),
                 self.leaf(tirx.BufferStore(running, flag, [0], span=call.span), ()),
                 self.leaf(tirx.BufferStore(staged, value, [0], span=call.span), guards)]
        rule = self._shuffle if call.name in SHUFFLE_OPS else self._vote

        def make(ids, linear):
            body = self._per_thread(rule(call, values, runs, linear), ids, linear)
            if guards:
                body = tirx.IfThenElse(self._per_thread(_all(guards), ids, linear), body, None)
            return body

        parts.append(self._each_thread(make))
        return tirx.SeqStmt(parts)

    def _exists(self, thread, runs, linear):
        """(whether ``thread`` exists and runs the op, ``thread`` or ``linear`` when not:
        an index safe to read)."""
        inside = tirx.And(thread >= 0, thread < self.count)
        safe = tirx.Select(inside, thread, linear)
        return tirx.And(inside, tirx.BufferLoad(runs, [safe]) != 0), safe

    def _shuffle(self, call, values, runs, linear):
        """The source lane as PTX's shfl picks it (``ir.SHUFFLE_OPS``); the caller's own value
        when it is out of its group or the mask, or does not exist or run the shuffle."""
        width = int(call.attrs["width"])
        lane = tirx.floormod(linear, 32)
        first = lane - tirx.floormod(lane, width)  # the first lane of the caller's group
        last = first + (width - 1)
        b = tirx.bitwise_and(call.operands["lane"], tirx.const(31, "int32"))
        mode = SHUFFLE_OPS[call.name]
        if mode == "idx":
            source, ok = first + tirx.bitwise_and(b, tirx.const(width - 1, "int32")), None
        elif mode == "xor":
            source = tirx.bitwise_xor(lane, b)
            ok = source <= last
        elif mode == "down":
            source = lane + b
            ok = source <= last
        else:
            source = lane - b
            ok = source >= first
        thread = linear - lane + source
        there, safe = self._exists(thread, runs, linear)
        take = there if ok is None else tirx.And(ok, there)
        mask = lane_mask(call.attrs["mask"])
        if mask != 0xFFFFFFFF:  # a source lane outside the mask: the caller's own value
            bit = tirx.shift_right(tirx.const(mask, "int64"), tirx.Cast(
                "int64", tirx.bitwise_and(source, tirx.const(31, "int32"))))
            take = tirx.And(take, tirx.bitwise_and(bit, tirx.const(1, "int64")) == 1)
        pick = tirx.Select(take, safe, linear)
        dst = call.operands["dst"]
        return tirx.BufferStore(dst.buffer, tirx.BufferLoad(values, [pick]), list(dst.starts))

    def _vote(self, call, values, runs, linear):
        """The vote of ``ir.VOTE_OPS`` over the lanes of the mask in the caller's warp that
        run it, or over the block's threads that do."""
        kind = call.name
        dst = call.operands["dst"]
        dtype = str(dst.buffer.dtype)
        mask = lane_mask(call.attrs["mask"])
        k = tirx.Var("k", "int32")
        if VOTE_OPS[kind][0] == "block":
            thread, extent, bit = k, self.count, None
            member, safe = self._exists(thread, runs, linear)
        else:
            thread, extent = linear - tirx.floormod(linear, 32) + k, 32
            there, safe = self._exists(thread, runs, linear)
            bit = tirx.shift_left(tirx.const(1, "uint64"), tirx.Cast("uint64", k))
            in_mask = tirx.bitwise_and(tirx.const(mask, "uint64"), bit) != \
                tirx.const(0, "uint64")
            member = there if kind == "activemask" else tirx.And(there, in_mask)
        theirs, mine = tirx.BufferLoad(values, [safe]), tirx.BufferLoad(values, [linear])
        acc = tirx.BufferLoad(dst.buffer, list(dst.starts))
        one, zero = tirx.const(1, dtype), tirx.const(0, dtype)
        true = tirx.And(member, theirs != tirx.const(0, str(theirs.ty)))
        init, update, final = zero, None, None
        if kind in ("any_sync", "syncthreads_or"):
            update = tirx.Select(true, one, acc)
        elif kind in ("all_sync", "syncthreads_and"):
            init = one
            update = tirx.Select(tirx.And(member, tirx.Not(true)), zero, acc)
        elif kind == "syncthreads_count":
            update = acc + tirx.Select(true, one, zero)
        elif kind in ("ballot_sync", "activemask"):
            hit = member if kind == "activemask" else true
            update = tirx.Select(hit, tirx.bitwise_or(acc, tirx.Cast(dtype, bit)), acc)
        elif kind == "match_any_sync":
            update = tirx.Select(tirx.And(member, theirs == mine),
                                 tirx.bitwise_or(acc, tirx.Cast(dtype, bit)), acc)
        else:  # match_all_sync: count the lanes that differ, then the mask when none does
            update = tirx.Select(tirx.And(member, theirs != mine), one, acc)
            # the lanes of the mask that exist (a partial warp has fewer)
            lanes = tirx.min(self.count - (linear - tirx.floormod(linear, 32)), 32)
            live = tirx.shift_left(tirx.const(1, "uint64"), tirx.Cast("uint64", lanes)) - \
                tirx.const(1, "uint64")
            final = tirx.Select(acc == zero, tirx.Cast(dtype, tirx.bitwise_and(
                live, tirx.const(mask, "uint64"))), zero)
        stmts = [tirx.BufferStore(dst.buffer, init, list(dst.starts)),
                 tirx.For(k, 0, extent, tirx.ForKind.SERIAL,
                          tirx.BufferStore(dst.buffer, update, list(dst.starts)))]
        if final is not None:
            stmts.append(tirx.BufferStore(dst.buffer, final, list(dst.starts)))
        return tirx.SeqStmt(stmts)

    def leaf(self, stmt, guards):
        """``stmt`` run by each thread in turn (those meeting ``guards``). A store into
        memory the threads share whose value reads that memory (``s[tx] = s[n - 1 - tx]``)
        reads every thread's value before any thread stores, as the threads of one warp
        do."""

        def each(node):
            def make(ids, linear):
                body = self._per_thread(node, ids, linear)
                if guards:
                    cond = self._per_thread(_all(guards), ids, linear)
                    body = tirx.IfThenElse(cond, body, None, span=stmt.span)
                return body

            return self._each_thread(make)

        if isinstance(stmt, tirx.BufferStore) and stmt.buffer not in self.expanded and \
                any(ld.same_as(stmt.buffer) for ld in _loaded(stmt.value)):
            value = tirx.decl_buffer((1,), stmt.value.ty, f"{stmt.buffer.name}_value",
                                     scope="local")
            self._expand(value)
            read = tirx.BufferStore(value, stmt.value, [0], span=stmt.span)
            write = tirx.BufferStore(stmt.buffer, tirx.BufferLoad(value, [0]), stmt.indices,
                                     span=stmt.span)
            return tirx.SeqStmt([tirx.AllocBuffer(self.expanded[value]), each(read),
                                 each(write)])
        return each(stmt)

    def any_thread(self, guards, body, span):
        """``body`` once when some thread meets every one of ``guards``."""
        flag = tirx.decl_buffer((1,), "int32", f"any_thread_{next(self.flags)}",
                                scope="local.var")
        zero, one = (tirx.BufferStore(flag, tirx.const(v, "int32"), [0]) for v in (0, 1))
        scan = self._each_thread(lambda ids, linear: tirx.IfThenElse(
            self._per_thread(_all(guards), ids, linear), one, None))
        taken = tirx.IfThenElse(tirx.BufferLoad(flag, [0]) == 1, body, None, span=span)
        return tirx.SeqStmt([tirx.AllocBuffer(flag), zero, scan, taken])

    # -- the block's statements ----------------------------------------------------------------
    def _per_thread_op(self, call) -> bool:
        """A tile op each calling thread makes for itself: an atomic on one element."""
        return call.name in ATOMIC_OPS and bool(call.attrs.get("element"))

    def block_work(self, stmt) -> bool:
        """Whether ``stmt`` holds work of the block that reads nothing of a thread's: a
        tile op (but an element's atomic) or a ``T.Parallel`` loop."""
        found = []

        def tile(s):
            call = decode(s)
            if call is not None and not self._per_thread_op(call) and \
                    not self.dep.touches(s):
                found.append(s)

        def loop(s):
            if _is_parallel(s) and not self.dep.touches(s):
                found.append(s)

        tvm_ffi.structural_walk(stmt, [(tirx.Evaluate, tile), (tirx.For, loop)])
        return bool(found)

    def _lockstep(self, stmt) -> bool:
        """Whether a branch on the thread index keeps its shape, each of its statements
        run for the threads taking it before the next: when it holds the block's work, loops
        (whose iterations the threads may share memory between, at barriers) or an op whose
        threads exchange values."""
        found = []
        tvm_ffi.structural_walk(stmt, (tirx.For, lambda s: found.append(s)
                                       if not _is_parallel(s) else None))
        return bool(found) or self.block_work(stmt) or contains_collective(stmt)

    def visit(self, stmt, guards=()):
        """``stmt`` of the block's program, under ``guards`` (the conditions on the thread
        of the branches it is in)."""
        if isinstance(stmt, tirx.SeqStmt):
            return tirx.SeqStmt([self.visit(s, guards) for s in stmt.seq])
        if isinstance(stmt, tirx.AllocBuffer):
            if stmt.buffer in self.dims:
                return tirx.Evaluate(0)
            if stmt.buffer in self.expanded:
                return tirx.AllocBuffer(self.expanded[stmt.buffer], span=stmt.span)
            return stmt
        call = decode(stmt)
        if call is not None and call.name in (THREAD_BINDING.name, NAMED_BARRIER.name,
                                              SYNC_WARP.name):
            return tirx.Evaluate(0)  # the index is the thread loop's; the order is the loops'
        if call is not None and call.name == THREAD_ALLREDUCE.name:
            return self.allreduce(call, guards)
        if call is not None and call.name in COLLECTIVE_OPS:
            return self.warp_op(call, guards)
        if isinstance(stmt, tirx.Bind) and any(stmt.var.same_as(v)
                                               for v in self.dep.variables):
            # a name bound to a thread's value: each thread's value in its element
            value = tirx.decl_buffer((1,), stmt.var.ty, stmt.var.name, scope="local")
            self._expand(value)
            store = self.leaf(tirx.BufferStore(value, stmt.value, [0], span=stmt.span), guards)
            self.bound[stmt.var] = value
            return tirx.SeqStmt([tirx.AllocBuffer(self.expanded[value]), store])
        if isinstance(stmt, tirx.Bind) or (not guards and not self.dep.touches(stmt)):
            return stmt
        header = isinstance(stmt, tirx.For | tirx.IfThenElse | tirx.While) and \
            self.dep.reads(_header(stmt))
        if isinstance(stmt, tirx.For) and not header and not _is_parallel(stmt):
            return rebuild_for(stmt, body=self.visit(stmt.body, guards))
        if isinstance(stmt, tirx.While) and not header:
            return tirx.While(stmt.condition, self.visit(stmt.body, guards), span=stmt.span)
        if isinstance(stmt, tirx.IfThenElse) and not header:
            return tirx.IfThenElse(stmt.condition, self.visit(stmt.then_case, guards),
                                   None if stmt.else_case is None else
                                   self.visit(stmt.else_case, guards), span=stmt.span)
        if isinstance(stmt, tirx.IfThenElse) and self._lockstep(stmt):
            # each thread's condition, taken before either branch runs (they may change
            # what it reads)
            flag = tirx.decl_buffer((1,), "int32", f"branch_{next(self.flags)}",
                                    scope="local")
            parts = [tirx.AllocBuffer(self._expand(flag)),
                     self.leaf(tirx.BufferStore(flag, tirx.Cast("int32", stmt.condition), [0],
                                                span=stmt.span), guards)]
            taken = tirx.BufferLoad(flag, [tirx.const(0, "int32")])
            branches = [(stmt.then_case, guards + (taken != 0,))]
            if stmt.else_case is not None:
                branches.append((stmt.else_case, guards + (taken == 0,)))
            for branch, inner in branches:
                body = self.visit(branch, inner)
                # the block's work in the branch is done once, when some thread takes it
                parts.append(self.any_thread(inner, body, stmt.span)
                             if self.block_work(branch) else body)
            return tirx.SeqStmt(parts)
        if isinstance(stmt, tirx.For | tirx.While) and header and contains_collective(stmt):
            raise KernelError(
                "a loop whose trip count depends on the thread index holds a warp shuffle, "
                "vote or reduction, which every thread of its warp (its block) must reach "
                "together: bound the loop by values every thread shares",
                span_location(stmt.span))
        if isinstance(stmt, tirx.For | tirx.While) and header and self.block_work(stmt):
            raise KernelError(
                "a loop whose trip count depends on the thread index "
                "(T.get_thread_binding) holds tile ops or T.Parallel loops, the block's "
                "work: which threads run them is not defined; bound the loop by values "
                "every thread shares, or make its body per-thread scalar code",
                span_location(stmt.span))
        if guards and not self.dep.touches(stmt) and (
                self.block_work(stmt) or (call is not None and not self._per_thread_op(call))):
            return stmt  # the block's work in a branch some thread takes: once
        return self.leaf(stmt, guards)


def _is_parallel(loop) -> bool:
    return bool(loop.annotations) and loop.annotations.get(PARALLEL_KEY) == "parallel"


def _header(stmt):
    if isinstance(stmt, tirx.For):
        return tirx.Evaluate(stmt.min + stmt.extent)
    return tirx.Evaluate(stmt.condition)


def _all(conds):
    out = conds[0]
    for c in conds[1:]:
        out = tirx.And(out, c)
    return out


def serialize_threads(name: str = "SerializeThreads"):
    """The pass (see the module): a kernel without ``T.get_thread_binding`` is left as it is,
    but for its named barriers (``T.sync_threads(id, count)``), which order nothing more
    here."""

    def run(func):
        if not thread_indices(func.body):
            return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Evaluate, _unnamed)))
        return func.with_body(_Kernels().visit(func.body))

    return prim_func_pass(name, run)


class _Kernels(StmtMutator):
    """Each ``T.Kernel`` of a function (several launch in order) serialised with its own
    threads and its own per-thread values."""

    def visit_For(self, stmt):
        if stmt.annotations and KERNEL_THREADS_KEY in stmt.annotations:
            if not thread_indices(stmt.body):
                return rebuild_for(stmt, body=tvm_ffi.structural_map(
                    stmt.body, (tirx.Evaluate, _unnamed)))
            return rebuild_for(stmt, body=_Serialize(stmt.body).visit(stmt.body))
        return super().visit_For(stmt)


def _unnamed(stmt):
    call = decode(stmt)
    return tirx.Evaluate(0) if call is not None and call.name == NAMED_BARRIER.name else stmt


def _loaded(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda ld: found.append(ld.source)))
    return found
