"""Multi-buffering for ``T.Pipelined`` loops of kernels without hand-written synchronisation.

Each on-chip buffer used only inside a ``T.Pipelined(n, num_stages=S)`` loop (S >= 2), whose
first access in the loop body is a write, gets S versions: its allocation gains a leading
dimension of S and every access in the loop selects version ``(k - start) % S``. The
synchronisation pass then gives each dependency on a versioned buffer S event ids, one per
version, so the producer of iteration k+1 runs while the consumer of iteration k still reads.

``T.annotate_buffer_versions`` sets a buffer's count and how its version is chosen: by the
iteration, or (``counter`` mode, and ``auto`` for a buffer whose uses a guard skips) by a
scalar counter that advances at the end of each iteration under the guard of the buffer's
last use. The version's flag ids follow the same index. In a mainline kernel a loop that hands
data between the cube and vector cores versions no buffer (the seed's flat pattern).
"""

from __future__ import annotations

import warnings

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import make_call, tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.accesses import accesses, has_manual_sync
from ..analysis.buffers import allocations, loads_and_stores
from ..facts import ops
from ..facts.keys import BUFFER_VERSIONS_KEY, COUNTER_KEY, VERSION_KEY
from ..language.trees import MAINLINE
from .switches import tree_of


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


def _candidates(func, loop) -> tuple[list, dict]:
    """The buffers of ``loop`` that can be versioned, and why each other buffer it uses
    cannot (GM tensors are not versioned: the kernel's arguments and workspaces)."""
    inside = {b for b in _uses(loop.body) if str(b.scope()) != "global"}
    outside = set()
    for stmt in _outside(func.body, loop):
        outside |= _uses(stmt)
    first: dict = {}
    for item in _body_items(loop.body):
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


def _rewrite_loop(loop, remap: dict, stages: dict, counters: dict):
    """``remap``: old buffer -> versioned buffer; ``stages``: old buffer -> its versions;
    ``counters``: old buffer -> the counter that selects its version (``counter`` mode; the
    others are selected by the iteration)."""
    v = {old: tirx.floormod(counters.get(old, loop.loop_var - loop.min),
                            tirx.IntImm("int32", n)) for old, n in stages.items()}

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
    if counters:
        annotations[COUNTER_KEY] = {remap[old]: c for old, c in counters.items()}
        steps = [make_call(ops.COUNTER.name, {"counter": c, "value": c + _used(body, remap[old])},
                           span=loop.span) for old, c in counters.items()]
        body = tirx.SeqStmt([*_body_items(body), *steps])
    new_loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                        annotations=annotations, span=loop.span)
    if not counters:
        return new_loop
    return tirx.SeqStmt([*(make_call(ops.COUNTER.name, {"counter": c, "value": tirx.IntImm(
        "int32", 0)}, {"declare": True}, span=loop.span) for c in counters.values()), new_loop])


def _body_items(body) -> list:
    """The statements of a loop body."""
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _used(body, buf):
    """1 when the iteration used ``buf``, else 0: the guard of the last statement of the loop
    body that uses it (``counter`` mode advances only in such iterations)."""
    last = [item for item in _body_items(body) if buf in _uses(item)][-1]
    one, zero = tirx.IntImm("int32", 1), tirx.IntImm("int32", 0)
    if not isinstance(last, tirx.IfThenElse):
        return one
    then = buf in _uses(last.then_case)
    other = last.else_case is not None and buf in _uses(last.else_case)
    if then and other:
        return one
    return tirx.Select(last.condition, one, zero) if then else \
        tirx.Select(last.condition, zero, one)


def _version_buffers(func, loop, stages: dict, counters: dict):
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
    new_loop = _rewrite_loop(target, remap, stages, counters)
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


def _cross_core(loop) -> bool:
    """Whether ``loop`` hands data between the cube and the vector cores (cross-core flags)."""
    cross = (ops.SET_CROSS_FLAG.name, ops.WAIT_CROSS_FLAG.name, ops.RELEASE_CROSS_FLAG.name)
    return any(c.name in cross for c in tile_ops_in(loop.body))


def _warn_at(func, buf, message: str) -> None:
    """A ``UserWarning`` located at the user's line that allocates ``buf``."""
    where = next((span_location(a.span) for a in allocations(func) if a.buffer.same_as(buf)),
                 None)
    if where is None:
        warnings.warn(message, UserWarning, stacklevel=1)
    else:
        warnings.warn_explicit(f"{where}: {message}", UserWarning, where.filename, where.line)


def _uses_var(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tirx.Var, lambda x: found.append(x) if x.same_as(var)
                                   else None))
    return bool(found)


def _stages(func, loop, annotated: dict) -> tuple[dict, dict]:
    """(buffer -> versions for the buffers of ``loop`` that get more than one, buffer -> the
    counter variable of those in ``counter`` mode)."""
    default = max(1, int(loop.annotations["tw.num_stages"]))
    buffers, why = _candidates(func, loop)
    out = {b: default for b in buffers}
    counters = {}
    for buf in [*buffers, *why]:
        spec = annotated.get(str(buf.name))
        if spec is None:
            continue
        count, mode = spec[0] or default, spec[1]
        # 'auto': by the iteration where every iteration uses the buffer, else by a counter
        guarded = buf in buffers and not isinstance(_used(loop.body, buf), tirx.IntImm)
        if mode == "counter" or (mode == "auto" and guarded):
            counters[buf] = tirx.Var(f"{buf.name}_version", "int32")
        if count > 1 and buf in why:
            raise KernelError(f"T.annotate_buffer_versions gives {buf.name!r} {count} versions, "
                              f"but it cannot be versioned in this T.Pipelined loop: "
                              f"{why[buf]}", span_location(loop.span))
        if count > 1 and _hand_staged(loop, buf, int(buf.shape[0])):
            _warn_at(func, buf, f"buffer {buf.name!r} has a stage dimension of its own (extent "
                                f"{int(buf.shape[0])}, indexed by the loop) and "
                                f"T.annotate_buffer_versions gives it {count} versions more: "
                                "that multi-buffers it twice; drop the hand-written stage "
                                "dimension (the compiler adds the versions)")
        if buf in out:
            out[buf] = count
    out = {b: n for b, n in out.items() if n > 1}
    return out, {b: c for b, c in counters.items() if b in out}


def multi_buffer():
    def run(func):
        if has_manual_sync(func):
            return func
        annotated = _annotated(func)
        tree, _ = tree_of(func)
        # an annotated buffer may be versioned in a loop of one stage
        for loop in _pipelined_loops(func, 0 if annotated else 2):
            stages, counters = _stages(func, loop, annotated)
            if stages and tree is MAINLINE and _cross_core(loop):
                raise KernelError(
                    "T.Pipelined pipelines within a core (here: versions of "
                    f"{', '.join(repr(str(b.name)) for b in stages)}) or across the cube and "
                    "vector cores (here: a handoff between them in the loop), not both at "
                    "once; use the flat pattern: T.Pipelined for the cube/vector handoff with "
                    "one version of each tile (T.annotate_buffer_versions({tile: 1})), or "
                    "T.serial and flags by hand within the core",
                    span_location(loop.span))
            if stages:
                func = _version_buffers(func, loop, stages, counters)
        return func

    return prim_func_pass("AscendMultiBuffer", run)
