"""Loops after tile-op lowering: innermost ``T.Parallel`` loops vectorised where their extent
allows, the frontend's loop annotations dropped."""

from __future__ import annotations

import tvm_ffi
from tilewright.ir import vector_values
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx
from tvm.sym.pattern import detect_linear_equation

from .irutil import calls_out, substitute
from .lowering_float8 import touches_float8

LOOP_KEY = "tw.loop"
VECTOR_LANES = 8


def _has_loop(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.For, lambda s: found.append(s)))
    return bool(found)


def _has_side_effects(stmt) -> bool:
    """Assertions and calls out of the kernel (printing, atomics) run lane by lane."""
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.AssertStmt, lambda s: found.append(s)))
    return bool(found) or calls_out(stmt)


def _mentions(exprs, var) -> bool:
    """Whether any of ``exprs`` reads ``var``."""
    used = []
    for expr in exprs:
        tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: used.append(v)))
    return any(v.same_as(var) for v in used)


def _stores(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, found.append))
    return found


def _stores_vary(stmt, var) -> bool:
    """Whether every store in ``stmt`` writes a different element for each value of ``var``
    (a store that does not, such as a reducer update, must stay scalar)."""
    return all(_mentions(store.indices, var) for store in _stores(stmt))


def _stores_invariant_bfloat16(stmt, var) -> bool:
    """Whether ``stmt`` stores into a bfloat16 buffer a value that does not depend on ``var``:
    vectorised over ``var`` that value is a ``Broadcast`` of a bfloat16 scalar, which TVM
    0.27's BF16StorageLegalize does not rewrite ("dtype mismatch on BufferStore: buffer's
    dtype is uint16 ... RHS's dtype is bfloat16x8"; found by the differential fuzzer)."""
    return any(str(store.buffer.dtype) == "bfloat16" and not _mentions([store.value], var)
               for store in _stores(stmt))


class _Loops(StmtMutator):
    """Innermost ``T.Parallel`` loops with a constant extent become vector loops; every
    frontend annotation is dropped."""

    def __init__(self, vectorize: bool):
        super().__init__()
        self.vectorize = vectorize

    def visit_For(self, stmt):
        """A loop that builds vector values (``T.float32x2(a, b)``, ``T.ldg64``'s words) stays
        scalar: TVM 0.27's VectorizeLoop cannot widen a ``Shuffle`` of several vectors."""
        stmt = super().visit_For(stmt)
        annotations = {k: v for k, v in stmt.annotations.items() if not str(k).startswith("tw.")}
        kind = str(stmt.annotations.get(LOOP_KEY, ""))
        if kind == "unroll":
            return rebuild_for(stmt, annotations=annotations, kind=tirx.ForKind.UNROLLED)
        var = stmt.loop_var
        if kind != "parallel" or not self.vectorize or _has_loop(stmt.body) or \
                _has_side_effects(stmt.body) or not _stores_vary(stmt.body, var) or \
                touches_float8(stmt.body) or _stores_invariant_bfloat16(stmt.body, var) or \
                vector_values(stmt.body) or \
                not isinstance(stmt.extent, tirx.IntImm) or int(stmt.extent.value) % VECTOR_LANES:
            return rebuild_for(stmt, annotations=annotations)
        extent = int(stmt.extent.value)
        if extent == VECTOR_LANES:
            return _vector_chunk(stmt.loop_var, stmt.body)
        outer, lane = tirx.Var(f"{stmt.loop_var.name}_o", "int32"), tirx.Var(
            f"{stmt.loop_var.name}_v", "int32")
        body = substitute(stmt.body, stmt.loop_var, outer * VECTOR_LANES + lane)
        return tirx.For(outer, 0, extent // VECTOR_LANES, tirx.ForKind.SERIAL,
                        _vector_chunk(lane, body), span=stmt.span)


def _monotone_conjuncts(cond, var) -> bool:
    """Whether ``cond`` is a conjunction of comparisons linear in ``var`` (so it holds for a
    whole range of ``var`` when it holds at both ends)."""
    if isinstance(cond, tirx.And):
        return _monotone_conjuncts(cond.a, var) and _monotone_conjuncts(cond.b, var)
    if isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
        return bool(detect_linear_equation(cond.a - cond.b, [var]))
    return False


def _vector_chunk(lane, body):
    """A vector loop over ``lane``. A body guarded by a bounds-like ``if`` is split in two
    versions: the vector loop when the guard holds for every lane (checked at both ends), a
    scalar guarded loop for the ragged edge."""
    vector = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body)
    if not (isinstance(body, tirx.IfThenElse) and body.else_case is None and
            _monotone_conjuncts(body.condition, lane)):
        return vector
    whole = tirx.And(substitute(body.condition, lane, tirx.const(0, "int32")),
                     substitute(body.condition, lane, tirx.const(VECTOR_LANES - 1, "int32")))
    edge_lane = tirx.Var(lane.name, "int32")
    edge = tirx.For(edge_lane, 0, VECTOR_LANES, tirx.ForKind.SERIAL,
                    substitute(body, lane, edge_lane))
    fast = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body.then_case)
    return tirx.IfThenElse(whole, fast, edge)


def lower_loops(vectorize: bool = True):
    return prim_func_pass("CPULowerLoops",
                          lambda f: f.with_body(_Loops(vectorize).visit(f.body)))
