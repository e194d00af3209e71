"""Block code runs once per block.

Statements of a ``T.Kernel`` body outside ``T.Parallel`` (block code) happen once per block in
the language: the CPU and interpreter backends run a block's program as one sequence. A CUDA
block runs its program on every thread, which gives the same result for a store of a value
every thread computes alike (each writes the same value, and barrier insertion orders it
against the other threads' accesses) and for per-thread storage (``T.alloc_local``,
``T.alloc_var``: every thread updates its own copy alike), but not for a store to shared or
global memory whose value reads the element it replaces (``S[0] = S[0] + x``: each thread adds
``x`` once more) or makes an atomic (``return_prev=True``: one atomic per thread). Such a store
is made by the first thread of the block (of the ``T.ws`` role) only, consecutive ones under one
condition (barrier insertion, ``transforms.sync``, orders it against the other threads'
accesses of the shared or global memory it touches). An atomic's previous value bound to a
name or stored to per-thread storage is made by the first thread into a shared slot that every
thread then reads. Code inside ``T.Parallel``, and code the threads run individually (under a
condition on ``T.get_thread_binding``'s index, or computed from it, which
:func:`transforms.threads.thread_atomics` already made each thread's), is left alone.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import ATOMIC_PREV
from tilewright.transform import StmtMutator, prim_func_pass
from tvm import tirx

from .. import keys, layout
from ..analysis.accesses import shared
from ..analysis.ir import index_dependent, is_parallel, loads_in, thread_index_buffers


def _makes_atomic(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV else None))
    return bool(found)


def _without_atomics(expr):
    """``expr`` with each atomic's previous value replaced by its operands' sum: what is
    left to tell whether the threads compute it alike (an atomic's value differs in each
    thread that makes one, which ``analysis.ir.index_dependent`` counts)."""

    def visit(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV:
            return tirx.Add(tirx.Cast(str(c.ty), c.args[0]), tirx.Cast(str(c.ty), c.args[1]))
        return c

    return tvm_ffi.structural_map(expr, (tvm.ir.Call, visit))


def _is_thread_loop(loop) -> bool:
    return loop.thread_binding is not None and \
        str(loop.thread_binding.thread_tag) == keys.THREAD_TAG


class RunOnce(StmtMutator):
    """Gates the block code that must run once per block (see the module)."""

    def __init__(self, reads_index):
        super().__init__()
        self.reads_index = reads_index
        self.tx = None

    # -- where block code is --------------------------------------------------------------------
    def visit_For(self, stmt):
        if is_parallel(stmt):
            return stmt
        if _is_thread_loop(stmt):
            outer, self.tx = self.tx, stmt.loop_var
            try:
                return super().visit_For(stmt)
            finally:
                self.tx = outer
        return super().visit_For(stmt)

    def visit_IfThenElse(self, stmt):
        if self.tx is None or self.reads_index(stmt.condition):
            return stmt  # each thread's own code
        return super().visit_IfThenElse(stmt)

    def visit_While(self, stmt):
        if self.tx is None or self.reads_index(stmt.condition):
            return stmt
        return super().visit_While(stmt)

    # -- what runs once ---------------------------------------------------------------------
    def _once(self, stmt) -> bool:
        """Whether ``stmt`` is a store to shared or global memory that all threads would make
        differently from one: it reads what it writes, or makes an atomic."""
        if self.tx is None or not isinstance(stmt, tirx.BufferStore) or \
                not (shared(stmt.buffer) or layout.memory(stmt.buffer) == "global"):
            return False
        parts = (stmt.value, *stmt.indices)
        if any(self.reads_index(_without_atomics(e)) for e in parts):
            return False
        return _makes_atomic(stmt.value) or any(
            b.same_as(stmt.buffer) for e in parts for b in loads_in(e))

    def _broadcast(self, stmt):
        """An atomic's previous value bound to a name or stored to per-thread storage: the
        first thread makes it into a shared slot, every thread reads the slot."""
        if not isinstance(stmt, (tirx.BufferStore, tirx.Bind)):
            return None
        value = stmt.value
        if self.tx is None or not _makes_atomic(value) or \
                self.reads_index(_without_atomics(value)):
            return None
        if isinstance(stmt, tirx.BufferStore):
            if not layout.is_thread_local(stmt.buffer) or \
                    any(self.reads_index(e) for e in stmt.indices):
                return None
        slot = tirx.decl_buffer((1,), str(value.ty), "once", scope="shared.dyn")
        read = tirx.BufferLoad(slot, [0])
        kept = tirx.Bind(stmt.var, read) if isinstance(stmt, tirx.Bind) else \
            tirx.BufferStore(stmt.buffer, read, stmt.indices, span=stmt.span)
        return [tirx.AllocBuffer(slot),
                tirx.IfThenElse(self.tx == 0, tirx.BufferStore(slot, value, [0]), None),
                kept]

    def visit_BufferStore(self, stmt):
        return self._block([stmt], stmt)

    def visit_Bind(self, stmt):
        return self._block([stmt], stmt)

    def visit_SeqStmt(self, stmt):
        return self._block(list(stmt.seq), stmt)

    def _block(self, parts: list, stmt):
        """``parts`` (the statements of ``stmt``) with consecutive stores that run once under
        one condition on the first thread."""
        out, group = [], []

        def close():
            if not group:
                return
            out.append(tirx.IfThenElse(self.tx == 0, group[0] if len(group) == 1 else
                                       tirx.SeqStmt(list(group)), None))
            group.clear()

        for part in parts:
            if self._once(part):
                group.append(part)
                continue
            close()
            made = self._broadcast(part)
            if made is not None:
                out.extend(made)
            elif isinstance(part, (tirx.BufferStore, tirx.Bind)):
                out.append(part)
            else:
                new = self.visit(part)
                out.extend(new.seq if isinstance(new, tirx.SeqStmt) else [new])
        close()
        if len(out) == len(parts) and all(a.same_as(b) for a, b in zip(out, parts)):
            return stmt
        return out[0] if len(out) == 1 else tirx.SeqStmt(out)


def run_once():
    """The pass of :class:`RunOnce`."""

    def run(func):
        reads_index = index_dependent(func.body, thread_index_buffers(func.body))
        mutator = RunOnce(reads_index)
        return func.with_body(mutator.visit(func.body))

    return prim_func_pass("CUDARunBlockCodeOnce", run)
