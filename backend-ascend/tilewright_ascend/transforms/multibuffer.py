"""Multi-buffering for ``T.Pipelined`` loops of kernels without hand-written synchronisation.

Each on-chip buffer used only inside a ``T.Pipelined(n, num_stages=S)`` loop (S >= 2), whose
first access in the loop body is a write, gets S versions: its allocation gains a leading
dimension of S and every access in the loop selects version ``(k - start) % S``. The
synchronisation pass then gives each dependency on a versioned buffer S event ids, one per
version, so the producer of iteration k+1 runs while the consumer of iteration k still reads.
"""

from __future__ import annotations

import warnings

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.accesses import accesses, has_manual_sync
from ..analysis.buffers import loads_and_stores
from ..facts.keys import BUFFER_VERSIONS_KEY, VERSION_KEY


def _pipelined_loops(func, least: int = 2) -> list:
    """The ``T.Pipelined`` loops with at least ``least`` stages."""
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: found.append(f)
                                        if str(f.annotations.get("tw.loop", "")) == "pipelined"
                                        and int(f.annotations.get("tw.num_stages", 0)) >= least
                                        else None))
    return found


def _uses(node) -> set:
    loads, stores = loads_and_stores(node)
    return {*loads, *stores}


def _body_items(loop) -> list:
    return list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]


def _candidates(func, loop) -> tuple[list, dict]:
    """The buffers of ``loop`` that can be versioned, and why each other buffer it uses
    cannot."""
    inside = _uses(loop.body)
    outside = set()
    for stmt in _outside(func.body, loop):
        outside |= _uses(stmt)
    first: dict = {}
    for item in _body_items(loop):
        for a in accesses(item):
            first.setdefault(a.buffer, a.write)
    why = {b: "it is used outside the loop" for b in inside & outside}
    why.update({b: "its first access in the loop reads it (a value carried from the previous "
                   "iteration)" for b in inside - outside if not first.get(b, True)})
    return sorted((b for b in inside - outside if first.get(b)), key=lambda b: str(b.name)), why


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


def _rewrite_loop(loop, remap: dict, stages: dict):
    """``remap``: old buffer -> versioned buffer; ``stages``: old buffer -> its versions."""
    v = {old: _version(loop, n) for old, n in stages.items()}

    def load(x):
        new = remap.get(x.source)
        if new is None:
            return x
        return tirx.BufferLoad(new, [v[x.source], *x.indices])

    def store(x):
        new = remap.get(x.buffer)
        if new is None:
            return x
        return tirx.BufferStore(new, x.value, [v[x.buffer], *x.indices], span=x.span)

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
    annotations[VERSION_KEY] = {new: stages[old] for old, new in remap.items()}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                    annotations=annotations, span=loop.span)


def _version_buffers(func, loop, stages: dict):
    remap = {}

    def alloc(stmt):
        old = stmt.buffer
        if old not in stages:
            return stmt
        new = tirx.decl_buffer((stages[old], *old.shape), old.dtype, old.name,
                               scope=old.scope())
        remap[old] = new
        return tirx.AllocBuffer(new, span=stmt.span)

    body = tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, alloc))
    target = next(f for f in _pipelined_loops(func.with_body(body), 0)
                  if f.loop_var.same_as(loop.loop_var))
    new_loop = _rewrite_loop(target, remap, stages)
    body = tvm_ffi.structural_map(body, (tirx.For, lambda f: new_loop if f.same_as(target)
                                         else f))
    return func.with_body(body)


def _annotated(func) -> dict:
    """``T.annotate_buffer_versions``: buffer name -> [count (0: num_stages), mode]."""
    table = {}
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: table.update(
        {str(k): [int(v[0]), str(v[1])] for k, v in f.annotations[BUFFER_VERSIONS_KEY].items()})
        if BUFFER_VERSIONS_KEY in f.annotations else None))
    return table


def _hand_staged(loop, buf, count: int) -> bool:
    """Whether ``buf``'s leading dimension, of extent ``count``, is indexed by the loop in
    every access inside it (a stage dimension written by hand)."""
    if len(buf.shape) < 2 or not isinstance(buf.shape[0], tirx.IntImm) or \
            int(buf.shape[0]) != count:
        return False
    indices = []
    tvm_ffi.structural_walk(loop.body, [
        (tvm.ir.TensorLoad, lambda x: indices.append(x.indices[0])
         if x.source.same_as(buf) else None),
        (tirx.BufferStore, lambda x: indices.append(x.indices[0])
         if x.buffer.same_as(buf) else None)])
    return bool(indices) and all(_uses_var(index, loop.loop_var) for index in indices)


def _uses_var(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tirx.Var, lambda x: found.append(x) if x.same_as(var)
                                   else None))
    return bool(found)


def _stages(func, loop, annotated: dict) -> dict:
    """buffer -> versions for the buffers of ``loop`` that get more than one."""
    default = max(1, int(loop.annotations["tw.num_stages"]))
    buffers, why = _candidates(func, loop)
    out = {b: default for b in buffers}
    for buf in [*buffers, *why]:
        spec = annotated.get(str(buf.name))
        if spec is None:
            continue
        count, mode = spec[0] or default, spec[1]
        if mode == "counter":
            raise KernelError(f"T.annotate_buffer_versions: mode 'counter' for {buf.name!r} is "
                              "not implemented by backend 'ascend' yet; use 'iteration' or "
                              "'auto' (both select the version by the loop's iteration here)",
                              span_location(loop.span))
        if count > 1 and buf in why:
            raise KernelError(f"T.annotate_buffer_versions gives {buf.name!r} {count} versions, "
                              f"but it cannot be versioned in this T.Pipelined loop: "
                              f"{why[buf]}", span_location(loop.span))
        if count > 1 and _hand_staged(loop, buf, int(buf.shape[0])):
            warnings.warn(f"buffer {buf.name!r} has a stage dimension of its own (extent "
                          f"{int(buf.shape[0])}, indexed by the loop) and "
                          f"T.annotate_buffer_versions gives it {count} versions more: that "
                          "multi-buffers it twice; drop the hand-written stage dimension "
                          "(the compiler adds the versions)", stacklevel=1)
        if buf in out:
            out[buf] = count
    return {b: n for b, n in out.items() if n > 1}


def multi_buffer():
    def run(func):
        if has_manual_sync(func):
            return func
        annotated = _annotated(func)
        # an annotated buffer may be versioned in a loop of one stage
        for loop in _pipelined_loops(func, 0 if annotated else 2):
            stages = _stages(func, loop, annotated)
            if stages:
                func = _version_buffers(func, loop, stages)
        return func

    return prim_func_pass("AscendMultiBuffer", run)
