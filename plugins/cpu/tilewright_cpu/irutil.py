"""Facts about TVM IR that the CPU's passes share: constant integers, substitution, statement
sequences, whole-buffer regions, calls out of the kernel."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import Region
from tvm import tirx

# calls out of the kernel (printing, runtime atomics): run once each, in order
OPAQUE_CALLS = frozenset({"tirx.tvm_call_packed", "tirx.call_extern", "tirx.call_packed"})


def calls_out(node) -> bool:
    """Whether ``node`` holds a call of :data:`OPAQUE_CALLS`."""
    found = []
    tvm_ffi.structural_walk(node, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in OPAQUE_CALLS else None))
    return bool(found)


def substitute(node, var, value):
    """``node`` with the variable ``var`` replaced by ``value``."""
    return tvm_ffi.structural_map(node, (tirx.Var, lambda v: value if v.same_as(var) else v))


def const_int(x):
    """The value of an integer constant (``IntImm`` or ``int``), else None."""
    return int(x.value) if isinstance(x, tirx.IntImm) else x if isinstance(x, int) else None


def is_full(region: Region) -> bool:
    """Whether ``region`` is the whole of its buffer, by constant starts and extents."""
    return len(region.extents) == len(region.buffer.shape) and all(
        const_int(s) == 0 for s in region.starts) and all(
        const_int(e) is not None and const_int(e) == const_int(d)
        for e, d in zip(region.extents, region.buffer.shape))


def is_no_op(stmt) -> bool:
    """Whether ``stmt`` is ``T.evaluate(0)``, a placeholder for a removed statement."""
    return isinstance(stmt, tirx.Evaluate) and const_int(stmt.value) == 0


def seq_of(stmts):
    """``stmts`` as one statement: a no-op when empty, the statement when one."""
    if not stmts:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def flatten(stmt):
    """Nested sequences spliced into their parents (an allocation must sit in the sequence
    whose statements use it), no-ops dropped from them."""

    def splice(seq):
        flat = []
        for s in seq.seq:
            flat.extend(s.seq if isinstance(s, tirx.SeqStmt) else [] if is_no_op(s) else [s])
        if len(flat) == len(seq.seq) and all(a.same_as(b) for a, b in zip(flat, seq.seq)):
            return seq
        return seq_of(flat)

    return tvm_ffi.structural_map(stmt, (tirx.SeqStmt, splice))
