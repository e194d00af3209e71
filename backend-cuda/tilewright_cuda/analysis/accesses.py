"""Shared-memory accesses of statements, for barrier insertion, pipelining and fence removal:
what a statement reads and writes (and which version of a pipelined tile), what it issues
asynchronously, which tiles TMA loads fill; for barrier insertion, which names the block's
threads, global-memory accesses too (an element that identifies the thread touching it is
that thread's own). Effects of intrinsic calls come from
``intrinsics.TABLE``."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .. import intrinsics, layout
from .ir import pure_call, substitute

SHARED_MEMORIES = ("shared", "shared.dyn", "local.fragment")  # fragments not in registers


def shared(buffer) -> bool:
    """Whether ``buffer`` lives in shared memory (fragments not in registers do)."""
    return layout.memory(buffer) in SHARED_MEMORIES


def bound_variables(body) -> tuple:
    """The variables ``body``'s loops and ``Bind`` statements bind, and the loop variables of
    its loops of one iteration mapped to their value (a constant start)."""
    found, once = [], {}

    def loop(f):
        found.append(f.loop_var)
        if isinstance(f.extent, tirx.IntImm) and int(f.extent.value) == 1 and \
                isinstance(f.min, tirx.IntImm):
            once[f.loop_var] = f.min

    tvm_ffi.structural_walk(body, [(tirx.For, loop), (tirx.Bind, lambda b: found.append(b.var))])
    return found, once


def block_visible(buffer) -> bool:
    """Whether ``buffer`` is memory every thread of the block reaches: shared or global (the
    ``__syncthreads`` that orders a block's shared accesses orders its global ones too)."""
    return shared(buffer) or layout.memory(buffer) == "global"


def tracked(buffer, thread) -> bool:
    """Whether an access to ``buffer`` counts: shared memory always, global memory when the
    accesses are told apart by ``thread``."""
    return shared(buffer) if thread is None else block_visible(buffer)


class Offset:
    """A thread-independent term of an index (compared by identity inside keys)."""

    def __init__(self, expr):
        self.expr = expr


def _fixed(expr, thread) -> bool:
    """Whether ``expr`` has the same value wherever the block's threads evaluate it: no loads
    or calls, no thread index, no variable bound inside the block's program (a loop's or a
    ``Bind``'s, ``thread[2]``)."""
    bad = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, bad.append), (tvm.ir.Call, bad.append)])
    return not bad and not any(v.same_as(thread[0]) or any(v.same_as(b) for b in thread[2])
                               for v in tirx.analysis.undefined_vars(expr))


def thread_key(indices, thread, analyzer, only=None):
    """Which threads touch an element of a global tensor, for accesses by thread ``tx``
    (``thread``: ``(tx, threads, variables bound in the block's program, its loops of one
    iteration's variables -> value)``, ``tx`` in ``[0, threads)``): ``("a", dimension,
    scale, threads, Offset(u))`` when index ``dimension`` is ``scale * tx + u`` with ``u``
    fixed (:func:`_fixed`); else ``("t", dimension, scale, threads)`` when the index names
    the thread, ``floormod(floordiv(index, scale), threads) == tx`` for every value of the
    other variables (``analyzer`` bounds those of the loops inside the statement); else
    ``("1", only)`` for an access only thread ``only`` makes; else ``("e", indices)`` for an
    element of constant indices; else None. Accesses of one ``"t"`` or ``"1"`` key touch an
    element from one thread only; of ``"a"`` keys, when ``u`` differs by other than a
    multiple of ``scale`` below ``threads`` of them; of ``"e"`` keys, one element when the
    indices are equal."""
    tx, threads = thread[0], thread[1]
    if thread[3]:
        indices = [analyzer.simplify(substitute(i, thread[3])) for i in indices]
    for d, index in enumerate(indices):
        if not any(v.same_as(tx) for v in tirx.analysis.undefined_vars(index)):
            continue
        coeff = tvm.sym.detect_linear_equation(index, [tx])
        if not coeff or not isinstance(coeff[0], tirx.IntImm) or int(coeff[0].value) <= 0:
            continue
        scale = int(coeff[0].value)
        if _fixed(coeff[1], thread):
            return ("a", d, scale, threads, Offset(coeff[1]))
        if analyzer.can_prove_equal(tirx.floormod(tirx.floordiv(index, scale), threads), tx):
            return ("t", d, scale, threads)
    if only is not None:
        return ("1", only)
    if all(isinstance(i, tirx.IntImm) for i in indices):
        return ("e", tuple(int(i.value) for i in indices))
    return None


def _offsets_overlap(k1, k2) -> bool:
    """Whether two ``"a"`` keys' elements may meet from two threads."""
    if k1[1:4] != k2[1:4]:
        return True
    apart = tvm.sym.Analyzer().simplify(k1[4].expr - k2[4].expr)
    if not isinstance(apart, tirx.IntImm):
        return True
    c, scale, threads = abs(int(apart.value)), k1[2], k1[3]
    return c != 0 and c % scale == 0 and c // scale < threads


def only_thread(stmt, tx):
    """The thread that alone runs ``stmt``: ``c`` for ``if tx == c: ...`` (no else), else
    None."""
    if not isinstance(stmt, tirx.IfThenElse) or stmt.else_case is not None or \
            not isinstance(stmt.condition, tirx.EQ):
        return None
    a, b = stmt.condition.a, stmt.condition.b
    if isinstance(a, tirx.IntImm):
        a, b = b, a
    return int(b.value) if a.same_as(tx) and isinstance(b, tirx.IntImm) else None


def version_key(index, stages: int):
    """Which version of a pipelined tile an index names: ``("c", v)`` for a constant,
    ``("k", loop var, offset, stages)`` for ``floormod(var + offset, stages)``, else None."""
    if isinstance(index, tirx.IntImm):
        return ("c", int(index.value) % stages)
    if isinstance(index, tirx.FloorMod) and isinstance(index.b, tirx.IntImm) and \
            int(index.b.value) == stages:
        a = index.a
        if isinstance(a, tirx.Var):
            return ("k", hash(a), 0, stages)
        if isinstance(a, tirx.Add) and isinstance(a.a, tirx.Var) and isinstance(a.b, tirx.IntImm):
            return ("k", hash(a.a), int(a.b.value) % stages, stages)
    return None


def _overlap(k1, k2) -> bool:
    if k1 is not None and k2 is not None and k1[0] == k2[0] == "a":
        return _offsets_overlap(k1, k2)
    if k1 is not None and k1[0] in ("t", "1") and k1 == k2:
        return False  # each element from one thread
    if k1 is not None and k2 is not None and k1[0] == k2[0] == "e":
        return k1[1] == k2[1]
    if k1 is None or k2 is None or k1[0] != k2[0]:
        return True
    if k1[0] == "c":
        return k1[1] == k2[1]
    return k1[1] != k2[1] or k1[2] == k2[2]


def conflict(xs, ys) -> bool:
    """Whether two sets of entries (``(buffer, version key)``, or an atomic's
    ``(buffer, version key, function)``) may touch the same memory."""
    return any(b1.same_as(b2) and _overlap(k1, k2) for b1, k1, *_ in xs for b2, k2, *_ in ys)


def _apart(xs, ys) -> bool:
    return any(t1 != t2 and b1.same_as(b2) and _overlap(k1, k2)
               for b1, k1, t1 in xs for b2, k2, t2 in ys)


def atomics_conflict(xs, ys) -> bool:
    """Whether two sets of atomics' entries may touch the same memory with different functions
    (one function's atomics commute: the ``atomic`` effect of ``intrinsics``)."""
    return _apart(xs, ys)


def tickets_conflict(xs, ys) -> bool:
    """Whether two sets of ticket stores' entries may touch the same memory through different
    tickets (stores at tickets of one counter, :mod:`.tickets`, write distinct elements)."""
    return _apart(xs, ys)


def rekey(entries, var_hash, fn):
    """``entries`` with the version keys of loop variable ``var_hash`` mapped by ``fn``."""
    out = set()
    for buf, key, *rest in entries:
        out.add((buf, fn(key) if key is not None and key[0] == "k" and key[1] == var_hash
                 else key, *rest))
    return out


class Access:
    """The shared-memory effects of a statement: plain ``reads`` and ``writes`` (visible to
    other threads after the next barrier), ``atomics`` (atomic read-modify-writes: each reads
    and writes its element, and needs no barrier from another thread's atomic of the same
    function), ``tickets`` (stores at tickets, given ``tickets`` from :func:`.tickets.find`:
    writes that need no barrier from another thread's store at a ticket of the same
    counter), ``issued`` (cp.async writes, visible only after a wait and a barrier), and
    whether it waits for cp.async groups (``lands``). Entries are ``(buffer, version key)``,
    an atomic's ``(buffer, version key, function)``, a ticket store's ``(buffer, version key,
    Ticket)``; an atomic on a ticket counter that is not a step counts as a function of its
    own, apart from the steps (so the tickets taken between two barriers stay distinct).
    Pointer arguments of intrinsics count as their table entry says; any other element
    address a call takes counts as written, any other element read as read. Given
    ``thread`` (``(tx, threads, *bound_variables(program))``: the thread index of the
    accesses, the threads' count and the variables bound inside the block's program),
    global tensors count too, keyed by :func:`thread_key` (TMA and ``cp.async`` sources are
    the pointer arguments the table declares read)."""

    def __init__(self, stmt, versions: dict, tickets=None, thread=None):
        self.reads, self.writes, self.issued, self.lands = set(), set(), set(), False
        self.atomics, self.tickets = set(), set()
        handled = []
        analyzer, only = None, None
        if thread is not None:
            only = only_thread(stmt, thread[0])
            analyzer = tvm.sym.Analyzer()
            analyzer.bind(thread[0], tvm.ir.Range.from_min_extent(0, thread[1]))
            tvm_ffi.structural_walk(stmt, (tirx.For, lambda f: analyzer.bind(
                f.loop_var, tvm.ir.Range.from_min_extent(f.min, f.extent)) if isinstance(
                    f.min, tirx.IntImm) and isinstance(f.extent, tirx.IntImm) else None))

        def entry(buf, indices):
            if not shared(buf):
                return buf, thread_key(indices, thread, analyzer, only)
            stages = versions.get(str(buf.name))
            key = version_key(indices[0], stages) if stages and len(indices) == len(
                buf.shape) == 3 else None
            return buf, key

        def add(target, *sets):
            if tracked(target.source, thread):
                for into in sets:
                    into.add(entry(target.source, target.indices))

        sets = {"read": lambda: (self.reads,), "write": lambda: (self.writes,),
                "readwrite": lambda: (self.reads, self.writes), "async": lambda: (self.issued,)}

        def call(c):
            found = intrinsics.of(c)
            if found is None:
                return
            if found.lands:
                self.lands = True
            for load, effect in intrinsics.pointer_effects(c):
                handled.append(load)
                if effect == "atomic":
                    if tracked(load.source, thread):
                        function = found.name
                        if tickets is not None and tickets.counts(load.source) and \
                                intrinsics.ticket_step(c) is None:
                            function = (found.name, "not a step")
                        self.atomics.add((*entry(load.source, load.indices), function))
                else:
                    add(load, *sets[effect]())

        tvm_ffi.structural_walk(stmt, (tvm.ir.Call, call))

        def load(e):
            if tracked(e.source, thread) and not any(e.same_as(x) for x in handled):
                self.reads.add(entry(e.source, e.indices))

        def store(s):
            if tracked(s.buffer, thread):
                ticket = tickets.of(s) if tickets is not None else None
                if ticket is None:
                    self.writes.add(entry(s.buffer, s.indices))
                else:
                    self.tickets.add((*entry(s.buffer, s.indices), ticket))

        def address(c):  # printf and calls without declared effects take element addresses
            if intrinsics.is_address_of(c) and not any(c.args[0].same_as(h) for h in handled):
                add(c.args[0], self.writes)

        tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                       (tvm.ir.Call, address)])


def producer_writes(stmt) -> list | None:
    """The shared buffers ``stmt`` fills from global memory, or None when it is not such a
    copy (it reads anything but global tensors, writes anything but shared tiles, or calls
    anything but the 16-byte copies and cp.async group operations)."""
    written, bad, copy_dst = [], [], []

    def call(c):
        found = intrinsics.of(c)
        if found is None:
            if isinstance(c.op, tvm.ir.Op) and c.op.name not in (
                    "tirx.address_of", "tirx.if_then_else", "prim.if_then_else", "tirx.likely"):
                bad.append(c)
            return
        if found.role == "copy16":
            dst = c.args[1].args[0]
            copy_dst.append(dst)
            written.append(dst.source)
        elif found.role != "group":
            bad.append(c)

    def load(e):
        if layout.memory(e.source) != "global" and not any(e.same_as(d) for d in copy_dst):
            bad.append(e)

    def store(s):
        written.append(s.buffer)
        if layout.memory(s.buffer) not in SHARED_MEMORIES:
            bad.append(s)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, call))
    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    if bad or not written or any(layout.memory(b) not in SHARED_MEMORIES for b in written):
        return None
    unique = []
    for b in written:
        if not any(b.same_as(u) for u in unique):
            unique.append(b)
    return unique


def tma_loads(stmt) -> list:
    """The TMA load calls of ``stmt``, in order."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if
                                   intrinsics.role(c) == "tma_load" else None))
    return found


def tma_destination(load_call):
    """The shared tile a TMA load writes (its destination, possibly at a byte offset)."""
    smem = load_call.args[3]
    while intrinsics.extern_name(smem) == "tw_offset_bytes":
        smem = smem.args[1]
    return smem.args[0].source  # tw.cuda.shared_addr(tile[...])


def loaded_tiles(stmt) -> list:
    """The shared tiles the TMA loads of ``stmt`` write."""
    found = []
    for call in tma_loads(stmt):
        buf = tma_destination(call)
        if not any(buf.same_as(b) for b in found):
            found.append(buf)
    return found


def tma_only(body) -> set:
    """Shared buffers whose every write in ``body`` is a TMA load: a buffer stored to, or
    passed to a call that writes it (or whose effects the table does not declare), is not;
    a gemm's operands are only read."""
    loaded, other = set(), set()

    def addressed(e) -> list:
        found = []
        tvm_ffi.structural_walk(e, (tvm.ir.Call, lambda c: found.append(c.args[0].source) if (
            intrinsics.is_address_of(c) or intrinsics.is_shared_addr(c))
            and isinstance(c.args[0], tvm.ir.TensorLoad) else None))
        return found

    def call(c):
        found = intrinsics.of(c)
        if found is None:
            return
        if found.role == "tma_load":
            loaded.update(addressed(c.args[3]))  # (map, barrier, destination, coordinates...)
        elif found.args:
            other.update(load.source for load, effect in intrinsics.pointer_effects(c)
                         if effect != "read")
        else:
            other.update(addressed(c))

    tvm_ffi.structural_walk(body, [(tvm.ir.Call, call),
                                   (tirx.BufferStore, lambda st: other.add(st.buffer))])
    return {b for b in loaded if not any(b.same_as(o) for o in other)}


def registers_only(stmt) -> bool:
    """Whether ``stmt`` writes nothing but thread-local storage and orders nothing with other
    threads or the async proxy: every store goes to thread-local storage, every call is a TVM
    operator without side effects or an intrinsic the table marks ``local`` (a warp shuffle,
    a register pack) whose element addresses are thread-local. A barrier, an mbarrier, a
    fence, a shared or global store, a call whose effects are unknown: not so. Loads of any
    memory are allowed (reading does not disturb an asynchronous reader)."""
    bad = []

    def call(c):
        if not isinstance(c.op, tvm.ir.Op):
            bad.append(c)
            return
        name = intrinsics.extern_name(c)
        if name is not None:
            entry = intrinsics.lookup(name)
            if entry is None or not entry.local or any(
                    not layout.is_thread_local(load.source) for load, _ in
                    intrinsics.pointer_effects(c)):
                bad.append(c)
            return
        if intrinsics.is_address_of(c):
            target = c.args[0]
            if not isinstance(target, tvm.ir.TensorLoad) or \
                    not layout.is_thread_local(target.source):
                bad.append(c)
            return
        if not pure_call(c):
            bad.append(c)

    def store(s):
        if not layout.is_thread_local(s.buffer):
            bad.append(s)

    tvm_ffi.structural_walk(stmt, [(tvm.ir.Call, call), (tirx.BufferStore, store)])
    return not bad


def is_cp_async(call) -> bool:
    """Whether ``call`` is a 16-byte cp.async copy (the table's in-flight ``copy16``)."""
    entry = intrinsics.of(call)
    return entry is not None and entry.role == "copy16" and entry.in_flight


def only_cp_async(stmt) -> bool:
    """Whether ``stmt`` (a lone copy's nest, rules/copy) does nothing but issue cp.async."""
    calls, stores = [], []
    tvm_ffi.structural_walk(stmt, [(tirx.Evaluate, lambda e: calls.append(e.value)),
                                   (tirx.BufferStore, stores.append)])
    return bool(calls) and not stores and all(is_cp_async(c) for c in calls)


def cp_async_destinations(stmt) -> list:
    """The shared buffers the cp.async copies in ``stmt`` write (their ``async`` pointers)."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.extend(
        load.source for load, effect in intrinsics.pointer_effects(c) if effect == "async")
        if is_cp_async(c) else None))
    return found
