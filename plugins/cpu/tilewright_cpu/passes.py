"""CPU-specific phases after tile-op lowering: loops, memory scopes, block grid."""

from __future__ import annotations

import os

import tvm
import tvm_ffi
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx
from tvm.sym.pattern import detect_linear_equation

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
    tvm_ffi.structural_walk(stmt, [(tirx.AssertStmt, lambda s: found.append(s)),
                                   (tvm.ir.Call, lambda c: found.append(c) if isinstance(
                                       c.op, tvm.ir.Op) and c.op.name in _OPAQUE_CALLS else None)])
    return bool(found)


def _stores_vary(stmt, var) -> bool:
    """Whether every store in ``stmt`` writes a different element for each value of ``var``
    (a store that does not, such as a reducer update, must stay scalar)."""
    ok = []

    def visit(store):
        used = set()
        for index in store.indices:
            tvm_ffi.structural_walk(index, (tirx.Var, lambda v: used.add(v)))
        ok.append(any(v.same_as(var) for v in used))

    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, visit))
    return all(ok)


_OPAQUE_CALLS = frozenset({"tirx.tvm_call_packed", "tirx.call_extern", "tirx.call_packed"})


class _Loops(StmtMutator):
    """Innermost ``T.Parallel`` loops with a constant extent become vector loops; every
    frontend annotation is dropped."""

    def __init__(self, vectorize: bool):
        super().__init__()
        self.vectorize = vectorize

    def visit_For(self, stmt):
        stmt = super().visit_For(stmt)
        annotations = {k: v for k, v in stmt.annotations.items() if not str(k).startswith("tw.")}
        kind = str(stmt.annotations.get(LOOP_KEY, ""))
        if kind == "unroll":
            return rebuild_for(stmt, annotations=annotations, kind=tirx.ForKind.UNROLLED)
        if kind != "parallel" or not self.vectorize or _has_loop(stmt.body) or \
                _has_side_effects(stmt.body) or not _stores_vary(stmt.body, stmt.loop_var) or \
                touches_float8(stmt.body) or \
                not isinstance(stmt.extent, tirx.IntImm) or int(stmt.extent.value) % VECTOR_LANES:
            return rebuild_for(stmt, annotations=annotations)
        extent = int(stmt.extent.value)
        if extent == VECTOR_LANES:
            return _vector_chunk(stmt.loop_var, stmt.body)
        outer, lane = tirx.Var(f"{stmt.loop_var.name}_o", "int32"), tirx.Var(
            f"{stmt.loop_var.name}_v", "int32")
        body = _substitute(stmt.body, stmt.loop_var, outer * VECTOR_LANES + lane)
        return tirx.For(outer, 0, extent // VECTOR_LANES, tirx.ForKind.SERIAL,
                        _vector_chunk(lane, body), span=stmt.span)


def _substitute(node, var, value):
    return tvm_ffi.structural_map(node, (tirx.Var, lambda v: value if v.same_as(var) else v))


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
    whole = tirx.And(_substitute(body.condition, lane, tirx.const(0, "int32")),
                     _substitute(body.condition, lane, tirx.const(VECTOR_LANES - 1, "int32")))
    edge_lane = tirx.Var(lane.name, "int32")
    edge = tirx.For(edge_lane, 0, VECTOR_LANES, tirx.ForKind.SERIAL,
                    _substitute(body, lane, edge_lane))
    fast = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body.then_case)
    return tirx.IfThenElse(whole, fast, edge)


def lower_loops(vectorize: bool = True):
    return prim_func_pass("CPULowerLoops",
                          lambda f: f.with_body(_Loops(vectorize).visit(f.body)))


def _scope_for(scope: str) -> str:
    return "local" if scope in ("local", "local.var") else "global"


def lower_scopes():
    """Shared and fragment tiles become per-block arrays in host memory."""

    def run(func):
        remap = {}

        def collect(stmt):
            buf = stmt.buffer
            scope = str(buf.scope())
            if scope not in ("global", "local"):
                remap[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name,
                                              scope=_scope_for(scope))

        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, collect))
        if not remap:
            return func
        body = tvm_ffi.structural_map(func.body, (tirx.Buffer, lambda b: remap.get(b, b)))
        return func.with_body(body)

    return prim_func_pass("CPULowerScopes", run)


def lower_blocks(workers: int | None = None):
    """The block grid becomes a parallel loop over ``workers`` CPU workers (the host's core
    count by default), each running every ``workers``-th block in turn. The kernel's tiles are
    allocated once per worker, not once per block: a large tile allocated per block costs a
    fresh mapping and page faults every time. A function with several ``T.Kernel`` blocks
    runs them one after the other, each lowered so."""
    workers = workers or os.cpu_count() or 1

    def lower_grid(stmt):
        loops = []
        while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
            loops.append(stmt)
            stmt = stmt.body
        if not loops:
            return None
        body = list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
        tiles = [s for s in body if isinstance(s, tirx.AllocBuffer)]
        rest = [s for s in body if not isinstance(s, tirx.AllocBuffer)]
        total = loops[0].extent
        for loop in loops[1:]:
            total = total * loop.extent
        total = tvm.sym.Analyzer().simplify(total)
        count = min(int(total.value), workers) if isinstance(total, tirx.IntImm) else workers
        worker, step = tirx.Var("worker", "int32"), tirx.Var("step", "int32")
        block = worker + step * count
        binds, stride = [], None
        for loop in reversed(loops):
            value = block if stride is None else tirx.floordiv(block, stride)
            binds.append(tirx.Bind(loop.loop_var, tirx.floormod(value, loop.extent)
                                   if loop is not loops[0] else value))
            stride = loop.extent if stride is None else stride * loop.extent
        steps = tirx.floordiv(total - worker + (count - 1), count)
        per_block = tirx.For(step, 0, steps, tirx.ForKind.SERIAL,
                             tirx.SeqStmt(list(reversed(binds)) + rest))
        worker_body = tirx.SeqStmt([*tiles, per_block]) if tiles else per_block
        return tirx.For(worker, 0, count, tirx.ForKind.PARALLEL, worker_body,
                        span=loops[0].span)

    def run(func):
        stmts = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]
        lowered = [lower_grid(s) for s in stmts]
        if all(s is None for s in lowered):
            return func
        stmts = [new if new is not None else old for old, new in zip(stmts, lowered)]
        return func.with_body(stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts))

    return prim_func_pass("CPULowerBlocks", run)
