"""CPU-specific phases after tile-op lowering: loops, memory scopes, block grid."""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for

LOOP_KEY = "tw.loop"
VECTOR_LANES = 8


def _has_loop(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.For, lambda s: found.append(s)))
    return bool(found)


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
                not isinstance(stmt.extent, tirx.IntImm) or int(stmt.extent.value) % VECTOR_LANES:
            return rebuild_for(stmt, annotations=annotations)
        extent = int(stmt.extent.value)
        if extent == VECTOR_LANES:
            return rebuild_for(stmt, annotations=annotations, kind=tirx.ForKind.VECTORIZED)
        outer, lane = tirx.Var(f"{stmt.loop_var.name}_o", "int32"), tirx.Var(
            f"{stmt.loop_var.name}_v", "int32")
        index = outer * VECTOR_LANES + lane
        body = tvm_ffi.structural_map(
            stmt.body, (tirx.Var, lambda v: index if v.same_as(stmt.loop_var) else v))
        inner = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body)
        return tirx.For(outer, 0, extent // VECTOR_LANES, tirx.ForKind.SERIAL, inner,
                        span=stmt.span)


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


def lower_blocks():
    """The block grid becomes one parallel loop over all blocks: each CPU worker runs whole
    blocks, one after another."""

    def run(func):
        loops = []
        stmt = func.body
        while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
            loops.append(stmt)
            stmt = stmt.body
        if not loops:
            return func
        fused = tirx.Var("block", "int32")
        binds, stride = [], None
        for loop in reversed(loops):
            value = fused if stride is None else tirx.floordiv(fused, stride)
            binds.append(tirx.Bind(loop.loop_var, tirx.floormod(value, loop.extent)
                                   if loop is not loops[0] else value))
            stride = loop.extent if stride is None else stride * loop.extent
        body = tirx.SeqStmt(list(reversed(binds)) + [stmt])
        return func.with_body(tirx.For(fused, 0, stride, tirx.ForKind.PARALLEL, body,
                                       span=loops[0].span))

    return prim_func_pass("CPULowerBlocks", run)
