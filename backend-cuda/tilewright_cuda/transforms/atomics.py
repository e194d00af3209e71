"""Atomics returning the old value, written outside ``T.Parallel``, happen once per block."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import ATOMIC_PREV
from tilewright.transform import StmtMutator, prim_func_pass
from tvm import tirx

from .. import keys

PER_THREAD = ("local", "local.var")  # a copy in every thread
SHARED = ("shared", "shared.dyn")


def _has_atomic_prev(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV else None))
    return bool(found)


class GateScalarAtomics(StmtMutator):
    """``Y[i] = T.atomic_<kind>(X[j], v, return_prev=True)`` outside ``T.Parallel`` is block
    code, which every thread of the block runs; the atomic must happen once per block, so the
    store (to global or shared memory) is made by thread 0 only. Stored into a per-thread
    variable (``T.alloc_var``), which every thread reads after, thread 0 makes the atomic into
    a shared slot and every thread copies the slot (barrier insertion orders the two). Thread-
    level code's atomics are each thread's already (transforms.threads.thread_atomics)."""

    def visit_BufferStore(self, stmt):
        scope = str(stmt.buffer.scope())
        if any(loop.kind == tirx.ForKind.PARALLEL for loop in self.loops) or \
                scope not in ("global", *SHARED, *PER_THREAD) or \
                not _has_atomic_prev(stmt.value):
            return stmt
        for loop in reversed(self.loops):
            if loop.thread_binding is not None and \
                    str(loop.thread_binding.thread_tag) == keys.THREAD_TAG:
                first = loop.loop_var == 0
                if scope not in PER_THREAD:
                    return tirx.IfThenElse(first, stmt, None)
                slot = tirx.decl_buffer((1,), str(stmt.value.ty), "atomic_prev",
                                        scope="shared.dyn")
                return tirx.SeqStmt([
                    tirx.AllocBuffer(slot),
                    tirx.IfThenElse(first, tirx.BufferStore(slot, stmt.value, [0]), None),
                    tirx.BufferStore(stmt.buffer, tirx.BufferLoad(slot, [0]), stmt.indices),
                ])
        return stmt


def gate_scalar_atomics():
    """The pass of :class:`GateScalarAtomics`."""
    return prim_func_pass("CUDAGateScalarAtomics",
                          lambda f: f.with_body(GateScalarAtomics().visit(f.body)))
