"""Atomics returning the old value, written outside ``T.Parallel``, happen once per block."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import ATOMIC_PREV
from tilewright.transform import StmtMutator, prim_func_pass
from tvm import tirx

from .. import keys


def _has_atomic_prev(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV else None))
    return bool(found)


class GateScalarAtomics(StmtMutator):
    """``Y[i] = T.atomic_<kind>(X[j], v, return_prev=True)`` outside ``T.Parallel`` is block
    code, which every thread of the block runs; the atomic must happen once per block, so the
    store is made by thread 0 only."""

    def visit_BufferStore(self, stmt):
        if any(loop.kind == tirx.ForKind.PARALLEL for loop in self.loops) or \
                str(stmt.buffer.scope()) != "global" or not _has_atomic_prev(stmt.value):
            return stmt
        for loop in reversed(self.loops):
            if loop.thread_binding is not None and \
                    str(loop.thread_binding.thread_tag) == keys.THREAD_TAG:
                return tirx.IfThenElse(loop.loop_var == 0, stmt, None)
        return stmt


def gate_scalar_atomics():
    """The pass of :class:`GateScalarAtomics`."""
    return prim_func_pass("CUDAGateScalarAtomics",
                          lambda f: f.with_body(GateScalarAtomics().visit(f.body)))
