"""Portable kernels on Ascend: memory scopes by use, the grid on the 1-D core grid.

A kernel written with ``tilewright.language`` (``alloc_shared``/``alloc_fragment``,
``T.gemm``, ``T.clear``) becomes a dialect kernel before the other Ascend passes run:

- the block grid (up to 3-D) becomes ``cid`` on the 1-D grid: ``bx = cid % gx``,
  ``by = cid // gx % gy``, ``bz = cid // (gx * gy)``;
- a buffer used as a GEMM operand goes to L1, a GEMM accumulator to L0C, every other tile to
  UB; the body runs in ``T.Scope("C")`` when it uses only the cube, in ``T.Scope("V")``
  when it uses only vector tiles;
- ``T.gemm`` becomes ``gemm_v0``; ``T.clear(C)`` of an accumulator followed by the K loop
  becomes ``init=(k == start)`` on that loop's first GEMM into ``C``.

Kernels that need both cores (a GEMM with a vector epilogue, flash attention) are split into
a cube and a vector program that meet in GM workspaces (:mod:`.split`).
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode, make_call, tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from .language.dialect import SCOPE_KEY, VID_TAG
from .passes import allocations
from .split import WORKSPACES_KEY, Split
from .vector import PORTABLE_KEY

_PORTABLE = {"shared", "shared.dyn", "local.fragment", "local"}


def _block_loops(func):
    loops, body = [], func.body
    while isinstance(body, tirx.For) and body.kind == tirx.ForKind.THREAD_BINDING and \
            str(body.thread_binding.thread_tag).startswith("blockIdx"):
        loops.append(body)
        body = body.body
    return loops, body


def _scopes(func) -> dict:
    scopes = {}
    for call in tile_ops_in(func):
        if call.name == "gemm":
            for operand, scope in (("A", "ascend.l1"), ("B", "ascend.l1"), ("C", "ascend.l0c")):
                buf = call.operands[operand].buffer
                if str(buf.scope()) in _PORTABLE:
                    scopes[str(buf.name)] = scope
    for alloc in allocations(func):
        name = str(alloc.buffer.name)
        if str(alloc.buffer.scope()) in _PORTABLE:
            scopes.setdefault(name, "ascend.ub")
    return scopes


def _gemms(stmt, init):
    """Rewrite ``T.gemm`` calls in ``stmt``; ``init`` maps an accumulator name to the
    condition of its first GEMM (consumed when used)."""

    def rewrite(node):
        call = decode(node)
        if call is None or call.name != "gemm":
            return node
        c = call.operands["C"]
        name = str(c.buffer.name)
        cond = init.pop(name, None) if call.attrs["clear_accum"] is False else \
            tirx.IntImm("bool", 1)
        k = int(call.operands["A"].extents[0 if call.attrs["transpose_A"] else -1])
        return make_call("ascend.gemm_v0",
                         {"A": call.operands["A"], "B": call.operands["B"], "C": c,
                          "init": cond if cond is not None else tirx.IntImm("bool", 0)},
                         {"transpose_A": call.attrs["transpose_A"],
                          "transpose_B": call.attrs["transpose_B"], "kL0Size": min(128, k)},
                         span=node.span)

    return tvm_ffi.structural_map(stmt, (tirx.Evaluate, rewrite))


def _clear_accumulators(stmts: list, scopes: dict) -> list:
    out, init = [], {}
    for stmt in stmts:
        call = decode(stmt)
        if call is not None and call.name == "fill" and \
                scopes.get(str(call.operands["dst"].buffer.name)) == "ascend.l0c":
            value = call.operands["value"]
            if not (isinstance(value, (tirx.IntImm, tirx.FloatImm)) and value.value == 0):
                raise KernelError("an accumulator in L0C can only be cleared (T.clear); the "
                                  "cube has no fill", span_location(stmt.span))
            init[str(call.operands["dst"].buffer.name)] = "pending"
            continue
        if isinstance(stmt, tirx.For):
            pending = {n: tirx.EQ(stmt.loop_var, stmt.min) for n, v in init.items()
                       if v == "pending"}
            stmt = _gemms(stmt, pending)
            if pending:
                raise KernelError(f"T.clear({', '.join(pending)}) must be followed by the loop "
                                  "whose T.gemm accumulates into it", span_location(stmt.span))
            init = {}
        else:
            stmt = _gemms(stmt, {n: tirx.IntImm("bool", 1) for n in init})
            init = {}
        out.append(stmt)
    return out


def to_dialect(func):
    loops, body = _block_loops(func)
    if not loops or any("ascend.npu" in lp.annotations for lp in loops):
        return func
    extents = [lp.extent for lp in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        raise KernelError("backend 'ascend' needs a grid known at compile time",
                          span_location(loops[0].span))
    scopes = _scopes(func)
    kinds = {"cube" if s != "ascend.ub" else "vector" for s in scopes.values()}
    cid, vid = tirx.Var("cid", "int32"), tirx.Var("vid", "int32")
    sizes = [int(e.value) for e in extents]
    buffers = {str(a.buffer.name): a.buffer for a in allocations(func)}
    split = None
    top = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    if "cube" in kinds:
        split = Split([s for s in top if not isinstance(s, tirx.AllocBuffer)], buffers, cid,
                      vid, math.prod(sizes))
        split = split if split.has_vector else None
    if split is not None:  # cube and vector programs through GM workspaces
        cube, vector = split.run()
        scopes.update(split.scopes)
        body = tirx.SeqStmt([*[s for s in top if isinstance(s, tirx.AllocBuffer)],
                             *split.new_allocs, _scope("C", cube), _scope("V", vector)])
    remap = {}
    halves = split.row_halves if split is not None else {}  # tiles split over AIV0/AIV1
    for name, old in buffers.items():
        if name in scopes:
            remap[old] = tirx.decl_buffer(halves.get(name, old.shape), old.dtype, old.name,
                                          scope=scopes[name])
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
    new_scopes = {str(v.name): str(v.scope()) for v in remap.values()}
    if split is None:
        stmts = _clear_accumulators(list(body.seq) if isinstance(body, tirx.SeqStmt)
                                    else [body], new_scopes)
    else:
        *allocs, cube_scope, vector_scope = list(body.seq)
        cube = _clear_accumulators(list(cube_scope.body.seq) if isinstance(
            cube_scope.body, tirx.SeqStmt) else [cube_scope.body], new_scopes)
        stmts = [*allocs, _scope("C", cube), vector_scope]
    stride, subst = 1, {}
    # loops[0] is blockIdx.x (outermost); recover each axis from cid
    for loop, size in zip(loops, sizes):
        subst[loop.loop_var] = tirx.floormod(tirx.floordiv(cid, stride), size) \
            if stride > 1 else tirx.floormod(cid, size)
        stride *= size
    total = stride
    inner = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
    inner = tvm_ffi.structural_map(inner, (tirx.Var, lambda v: subst.get(v, v)))
    work = [s for s in (list(inner.seq) if isinstance(inner, tirx.SeqStmt) else [inner])
            if not isinstance(s, tirx.AllocBuffer)]
    scope = tirx.SeqStmt(work) if split is not None else \
        _scope("C" if kinds == {"cube"} else "V", work)
    new_allocs = [s for s in (list(inner.seq) if isinstance(inner, tirx.SeqStmt) else [inner])
                  if isinstance(s, tirx.AllocBuffer)]
    kernel_body = tirx.SeqStmt([*new_allocs, scope]) if new_allocs else scope
    vid_loop = tirx.For(vid, 0, 2, tirx.ForKind.THREAD_BINDING, kernel_body,
                        thread_binding=tirx.IterVar(tvm.ir.Range(0, 2), vid,
                                                    tirx.IterVar.ThreadIndex, VID_TAG))
    annotations = {**dict(loops[0].annotations), "ascend.npu": True}
    cid_loop = tirx.For(cid, 0, total, tirx.ForKind.THREAD_BINDING, vid_loop,
                        thread_binding=tirx.IterVar(tvm.ir.Range(0, total), cid,
                                                    tirx.IterVar.ThreadIndex, "blockIdx.x"),
                        annotations=annotations, span=loops[0].span)
    func = func.with_body(cid_loop).with_attr(PORTABLE_KEY, True)
    if split is not None and split.workspaces:
        func = func.with_attr(WORKSPACES_KEY, [
            [str(w.name), str(w.dtype), [int(x) for x in w.shape]] for w in split.workspaces])
    return func


def _scope(core: str, stmts):
    stmts = list(stmts)
    return tirx.AttrStmt(tirx.IntImm("int32", 0), SCOPE_KEY, tvm.ir.StringImm(core),
                         tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0])


def lower_portable():
    return prim_func_pass("AscendPortable", to_dialect)
