"""Multi-buffering for ``T.Pipelined`` loops of kernels without hand-written synchronisation.

Each on-chip buffer used only inside a ``T.Pipelined(n, num_stages=S)`` loop (S >= 2), whose
first access in the loop body is a write, gets S versions: its allocation gains a leading
dimension of S and every access in the loop selects version ``(k - start) % S``. The
synchronisation pass then gives each dependency on a versioned buffer S event ids, one per
version, so the producer of iteration k+1 runs while the consumer of iteration k still reads.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.accesses import accesses, has_manual_sync
from ..analysis.buffers import loads_and_stores
from ..facts.keys import VERSION_KEY


def _pipelined_loops(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: found.append(f)
                                        if str(f.annotations.get("tw.loop", "")) == "pipelined"
                                        and int(f.annotations.get("tw.num_stages", 0)) >= 2
                                        else None))
    return found


def _uses(node) -> set:
    loads, stores = loads_and_stores(node)
    return {*loads, *stores}


def _body_items(loop) -> list:
    return list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]


def _candidates(func, loop) -> list:
    inside = _uses(loop.body)
    outside = set()
    for stmt in _outside(func.body, loop):
        outside |= _uses(stmt)
    first: dict = {}
    for item in _body_items(loop):
        for a in accesses(item):
            first.setdefault(a.buffer, a.write)
    return sorted((b for b in inside - outside if first.get(b)), key=lambda b: str(b.name))


def _outside(stmt, loop) -> list:
    """The statements of ``stmt`` that are not ``loop`` or inside it (allocations excluded)."""
    if stmt.same_as(loop) or isinstance(stmt, tirx.AllocBuffer):
        return []
    if isinstance(stmt, tirx.SeqStmt):
        return [s for child in stmt.seq for s in _outside(child, loop)]
    if isinstance(stmt, (tirx.For, tirx.AttrStmt)):
        return _outside(stmt.body, loop)
    if isinstance(stmt, tirx.IfThenElse):
        out = _outside(stmt.then_case, loop)
        return out + (_outside(stmt.else_case, loop) if stmt.else_case is not None else [])
    return [stmt]


def _version(loop, stages):
    return tirx.floormod(loop.loop_var - loop.min, tirx.IntImm("int32", stages))


def _rewrite_loop(loop, remap: dict, stages: int):
    v = _version(loop, stages)

    def load(x):
        new = remap.get(x.source)
        if new is None:
            return x
        return tirx.BufferLoad(new, [v, *x.indices])

    def store(x):
        new = remap.get(x.buffer)
        if new is None:
            return x
        return tirx.BufferStore(new, x.value, [v, *x.indices], span=x.span)

    def region(call):
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "tw.region"):
            return call
        ld = call.args[0]
        if len(call.args) - 1 == len(ld.indices) - 1:  # versioned load: add the stage extent
            return tvm.ir.Call(call.op, [ld, tirx.IntImm("int32", 1), *call.args[1:]])
        return call

    body = tvm_ffi.structural_map(loop.body, [(tvm.ir.TensorLoad, load),
                                              (tirx.BufferStore, store)])
    body = tvm_ffi.structural_map(body, (tvm.ir.Call, region))
    annotations = dict(loop.annotations)
    annotations[VERSION_KEY] = {new: stages for new in remap.values()}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                    annotations=annotations, span=loop.span)


def _version_buffers(func, loop, stages: int, buffers: list):
    remap = {}

    def alloc(stmt):
        old = stmt.buffer
        if old not in buffers:
            return stmt
        new = tirx.decl_buffer((stages, *old.shape), old.dtype, old.name, scope=old.scope())
        remap[old] = new
        return tirx.AllocBuffer(new, span=stmt.span)

    body = tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, alloc))
    target = next(f for f in _pipelined_loops(func.with_body(body))
                  if f.loop_var.same_as(loop.loop_var))
    new_loop = _rewrite_loop(target, remap, stages)
    body = tvm_ffi.structural_map(body, (tirx.For, lambda f: new_loop if f.same_as(target)
                                         else f))
    return func.with_body(body)


def multi_buffer():
    def run(func):
        if has_manual_sync(func):
            return func
        for loop in _pipelined_loops(func):
            buffers = _candidates(func, loop)
            if buffers:
                func = _version_buffers(func, loop, int(loop.annotations["tw.num_stages"]),
                                        buffers)
        return func

    return prim_func_pass("AscendMultiBuffer", run)
