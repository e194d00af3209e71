"""Ticket stores: ``pos = T.atomic_add(cnt[0], 1, return_prev=True); buf[pos] = v``.

A step (``intrinsics.ticket_step``: an atomic add of a positive constant that returns the
counter's previous value) hands every thread a distinct ticket as long as nothing else changes
the counter, so stores at tickets of one counter write distinct elements whichever threads
make them. :func:`find` recognises them in a block's program:

- a ticket is a step, a per-thread variable (``T.alloc_var``: a thread-local buffer stored at
  constant indices) or a ``Bind`` variable holding one, or one of these plus
  thread-independent terms; a variable stops holding its ticket at any other store to it and
  wherever the counter's buffer may change other than by a step (a store, another atomic, a
  call taking its address): after an ``if`` or a loop that does so anywhere, and inside a
  loop from its start; a ticket taken in a branch or a loop body is held there only;
- a ticket store is a store to shared or global memory whose index along one dimension is a
  ticket and whose other indices are thread-independent; thread-independent means built from
  constants and variables whose values are the same in every thread of the block, without
  loads or calls with side effects;
- the counter is a shared element at thread-independent indices (barrier insertion keeps
  other changes of it apart from the steps: :class:`accesses.Access` counts an atomic on it
  that is not a step as another function) or a global one that the kernel changes only by
  steps.

Two ticket stores of equal :class:`Ticket` (same counter element, dimension, offset terms and
other indices) never write one element from two threads; any other access of the buffer
still conflicts with them."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .. import intrinsics, layout
from .accesses import block_visible, shared
from .ir import pure_call


class Ticket:
    """Where a ticket store writes: along dimension ``dim`` of its buffer, a ticket of the
    counter element ``counter`` (a load) plus the ``offset`` terms, at the ``others`` indices
    elsewhere. ``variables``: the variables these expressions read (a loop's back edge changes
    the values of those bound in it). Equal tickets name the same counter element, dimension
    and expressions (the same variables, not renamed ones)."""

    def __init__(self, counter, dim: int, offset: tuple, others: tuple):
        self.counter, self.dim, self.offset, self.others = counter, dim, offset, others
        found: set = set()
        for e in (*counter.indices, *offset, *others):
            tvm_ffi.structural_walk(e, (tirx.Var, found.add))
        self.variables = frozenset(found)

    def _exprs(self) -> list:
        return [*self.counter.indices, *self.offset, tirx.IntImm("int32", len(self.offset)),
                *self.others]

    def __eq__(self, other) -> bool:
        return isinstance(other, Ticket) and self.dim == other.dim and \
            len(self.offset) == len(other.offset) and \
            self.counter.source.same_as(other.counter.source) and \
            tvm_ffi.structural_equal(self._exprs(), other._exprs())

    def __hash__(self) -> int:
        return hash((self.counter.source, self.dim))


class Tickets:
    """The ticket stores of a block's program (:func:`find`): ``of(store)`` is a store's
    :class:`Ticket` or None; ``counts(buffer)`` whether ``buffer`` holds a counter of one."""

    def __init__(self, stores: dict):
        self.stores = stores
        self.counters = [t.counter.source for t in stores.values()]

    def of(self, store) -> Ticket | None:
        return self.stores.get(store)

    def counts(self, buffer) -> bool:
        return any(buffer.same_as(c) for c in self.counters)


def changed(node) -> list:
    """The buffers ``node`` may change other than by a step: those it stores to, those a call
    writes through a pointer the table declares (a step's own excepted), and those whose
    address it passes anywhere else."""
    out, handled = [], []

    def call(c):
        if intrinsics.ticket_step(c) is not None:
            handled.append(c.args[1].args[0])
            return
        for load, effect in intrinsics.pointer_effects(c):
            handled.append(load)
            if intrinsics.writes(effect):
                out.append(load.source)

    def address(c):
        if (intrinsics.is_address_of(c) or intrinsics.is_shared_addr(c)) and \
                isinstance(c.args[0], tvm.ir.TensorLoad) and \
                not any(c.args[0].same_as(h) for h in handled):
            out.append(c.args[0].source)

    tvm_ffi.structural_walk(node, (tvm.ir.Call, call))
    tvm_ffi.structural_walk(node, [(tvm.ir.Call, address),
                                   (tirx.BufferStore, lambda s: out.append(s.buffer))])
    return out


def find(body, tx, whole=None) -> Tickets:
    """The ticket stores of ``body``, a block's program whose thread index is ``tx``;
    ``whole`` (default ``body``) is the kernel, where a global counter must change only by
    steps."""
    steps = []
    tvm_ffi.structural_walk(body, (tvm.ir.Call, lambda c: steps.append(c) if
                                   intrinsics.ticket_step(c) is not None else None))
    if not steps:
        return Tickets({})
    walk = _Walk(tx, whole if whole is not None else body)
    walk.stmt(body, {})
    return Tickets(walk.stores)


class _Walk:
    """One pass in program order; ``held`` maps a variable (a ``Var``, or a thread-local
    buffer and its constant indices) to the ticket it holds: (counter load, offset terms)."""

    def __init__(self, tx, whole):
        self.varying = {tx}  # variables whose value may differ between threads
        self.whole, self.unsteady = whole, None
        self.stores: dict = {}

    def uniform(self, e) -> bool:
        """Whether ``e`` is the same in every thread: no thread-dependent variable, no load,
        no call with side effects."""
        bad = []

        def call(c):
            if not pure_call(c):
                bad.append(c)

        tvm_ffi.structural_walk(e, [
            (tirx.Var, lambda v: bad.append(v) if v in self.varying else None),
            (tvm.ir.TensorLoad, bad.append), (tvm.ir.Call, call)])
        return not bad

    def counter_ok(self, load) -> bool:
        memory = layout.memory(load.source)
        if memory == "global":
            if self.unsteady is None:  # global buffers the kernel changes other than by steps
                self.unsteady = [b for b in changed(self.whole) if layout.memory(b) == "global"]
            if any(load.source.same_as(b) for b in self.unsteady):
                return False
        elif not shared(load.source) or memory == "local.fragment":
            return False
        return all(self.uniform(i) for i in load.indices)

    def ticket(self, e, held):
        """``(counter load, offset terms)`` when ``e`` is a ticket, else None."""
        if isinstance(e, tirx.Add):
            for a, b in ((e.a, e.b), (e.b, e.a)):
                found = self.ticket(a, held)
                if found is not None and self.uniform(b):
                    return found[0], found[1] + (b,)
            return None
        if isinstance(e, tirx.Var):
            return held.get(e)
        if isinstance(e, tvm.ir.TensorLoad):
            key = _variable(e.source, e.indices)
            return held.get(key) if key is not None else None
        counter = intrinsics.ticket_step(e)
        if counter is not None and self.counter_ok(counter):
            return counter, ()
        return None

    def store(self, s, held):
        if not block_visible(s.buffer):
            return
        found = None
        for dim, index in enumerate(s.indices):
            ticket = self.ticket(index, held)
            if ticket is not None and found is None:
                found = (dim, ticket)
            elif not self.uniform(index):
                return
        if found is not None:
            dim, (counter, offset) = found
            others = tuple(i for d, i in enumerate(s.indices) if d != dim)
            self.stores[s] = Ticket(counter, dim, offset, others)

    def stmt(self, s, held: dict) -> dict:
        """Records the ticket stores of ``s``; returns what is held after it."""
        if isinstance(s, tirx.SeqStmt):
            for part in s.seq:
                held = self.stmt(part, held)
            return held
        if isinstance(s, tirx.BufferStore):
            self.store(s, held)
            ticket = self.ticket(s.value, held)
            held = _drop(held, s)
            key = _variable(s.buffer, s.indices)
            if ticket is not None and key is not None:
                held[key] = ticket
            return held
        if isinstance(s, tirx.Bind):
            ticket = self.ticket(s.value, held)
            if not self.uniform(s.value):
                self.varying.add(s.var)
            held = _drop(held, tirx.Evaluate(s.value))
            if ticket is not None:
                held[s.var] = ticket
            return held
        if isinstance(s, tirx.IfThenElse):
            held = _drop(held, tirx.Evaluate(s.condition))
            self.stmt(s.then_case, dict(held))
            if s.else_case is not None:
                self.stmt(s.else_case, dict(held))
            return _drop(held, s)
        if isinstance(s, (tirx.For, tirx.While)):
            if isinstance(s, tirx.For) and (s.kind == tirx.ForKind.THREAD_BINDING or not (
                    self.uniform(s.min) and self.uniform(s.extent))):
                self.varying.add(s.loop_var)
            inside = _drop(held, s)
            self.stmt(s.body, dict(inside))
            return inside
        body = getattr(s, "body", None)
        if isinstance(body, tirx.Stmt):
            return self.stmt(body, held)
        return _drop(held, s)


def _variable(buffer, indices):
    """The key of a per-thread variable element (a thread-local buffer at constant indices),
    None for anything else."""
    if not layout.is_thread_local(buffer) or \
            not all(isinstance(i, tirx.IntImm) for i in indices):
        return None
    return (buffer, tuple(int(i.value) for i in indices))


def _drop(held: dict, node) -> dict:
    """``held`` without what ``node`` may change: variables it stores to, tickets whose
    counter's buffer it changes other than by a step."""
    if not held:
        return held
    gone = changed(node)
    if not gone:
        return held

    def hit(buf):
        return any(buf.same_as(g) for g in gone)

    return {k: v for k, v in held.items()
            if not (isinstance(k, tuple) and hit(k[0])) and not hit(v[0].source)}
