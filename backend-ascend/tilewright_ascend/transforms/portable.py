"""Portable kernels on Ascend: memory scopes by use, the grid on the 1-D core grid.

A kernel written with ``tilewright.language`` (``alloc_shared``/``alloc_fragment``,
``T.gemm``, ``T.clear``) becomes a dialect kernel before the other Ascend passes run:

- the block grid (up to 3-D) becomes ``cid`` on the 1-D grid: ``bx = cid % gx``,
  ``by = cid // gx % gy``, ``bz = cid // (gx * gy)``;
- a buffer used as a GEMM operand goes to L1, a GEMM accumulator to L0C, every other tile to
  UB; the body runs in ``T.Scope("C")`` when it uses only the cube, in ``T.Scope("V")``
  when it uses only vector tiles;
- ``T.gemm`` becomes ``gemm_v0``; ``T.clear(C)`` of an accumulator followed by the K loop
  becomes ``init=(k == start)`` on that loop's first GEMM into ``C``, and ``clear_accum=cond``
  (an ``if cond: T.fill(C, 0)`` before the GEMM) ``init=cond``; a fill of ``C`` that the next
  loop clears before any use is dropped;
- A2's cube has no fill of L0C: a kernel that fills an accumulator with a nonzero value the
  GEMMs accumulate onto is split, the fill done in UB by the vector core, which adds the
  cube's products.

Kernels that need both cores (a GEMM with a vector epilogue, flash attention) are split into
a cube and a vector program that meet in GM workspaces (:mod:`.split`).
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region, decode, make_call, tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import sym, tirx

from ..analysis.buffers import allocations, loads_and_stores
from ..facts import ops
from ..facts.arch import MEMORIES
from ..facts.keys import MIXED_KEY, NPU_KEY, PORTABLE_KEY, SCOPE_KEY, VID_TAG, WORKSPACES_KEY
from ..facts.paths import L0A, L0B, L1
from .memory import PORTABLE_SCOPES
from .split import Split


def _block_loops(func):
    loops, body = [], func.body
    while isinstance(body, tirx.For) and body.kind == tirx.ForKind.THREAD_BINDING and \
            str(body.thread_binding.thread_tag).startswith("blockIdx"):
        loops.append(body)
        body = body.body
    return loops, body


def _scopes(func) -> dict:
    """buffer -> Ascend memory for every tile in a portable scope, and for every tile already
    in an Ascend memory."""
    scopes = {}
    for call in tile_ops_in(func):
        if call.name == "gemm":
            for operand, scope in (("A", "ascend.l1"), ("B", "ascend.l1"), ("C", "ascend.l0c")):
                buf = call.operands[operand].buffer
                if str(buf.scope()) in PORTABLE_SCOPES:
                    scopes[buf] = scope
    for alloc in allocations(func):
        scope = str(alloc.buffer.scope())
        if scope in PORTABLE_SCOPES:
            scopes.setdefault(alloc.buffer, "ascend.ub")
        elif scope in MEMORIES:  # a tile the mainline dialect placed itself (T.alloc_l1 ...)
            scopes.setdefault(alloc.buffer, scope)
    return scopes


def _gemms(stmt, init):
    """Rewrite ``T.gemm`` calls in ``stmt``; ``init`` maps an accumulator to the condition of
    its first GEMM (consumed when used)."""

    def rewrite(node):
        call = decode(node)
        if call is None or call.name != "gemm":
            return node
        c = call.operands["C"]
        cond = init.pop(c.buffer, None) if call.attrs["clear_accum"] is False else \
            tirx.IntImm("bool", 1)
        cond = cond if cond is not None else tirx.IntImm("bool", 0)
        if str(call.operands["A"].buffer.scope()) == "ascend.l0a":
            return _mma(call, cond, node.span)
        k = int(call.operands["A"].extents[0 if call.attrs["transpose_A"] else -1])
        return make_call("ascend.gemm_v0",
                         {"A": call.operands["A"], "B": call.operands["B"], "C": c,
                          "init": cond},
                         {"transpose_A": call.attrs["transpose_A"],
                          "transpose_B": call.attrs["transpose_B"], "kL0Size": min(128, k)},
                         span=node.span)

    return tvm_ffi.structural_map(stmt, (tirx.Evaluate, rewrite))


def _mma(call, init, span):
    """``T.gemm`` of operands the mainline dialect put in L0A and L0B (T.alloc_l0a/l0b) as one
    MMAD; the L1 -> L0 copies before it lay the operands out as the cube reads them."""
    a, b = call.operands["A"], call.operands["B"]
    if str(b.buffer.scope()) != "ascend.l0b":
        raise KernelError(f"T.gemm with A {a.buffer.name!r} in L0A needs B in L0B "
                          f"(T.alloc_l0b), but {b.buffer.name!r} is in {b.buffer.scope()}",
                          span_location(span))
    return make_call(ops.MMA.name, {"A": a, "B": b, "C": call.operands["C"], "init": init},
                     {"transpose_A": call.attrs["transpose_A"],
                      "transpose_B": call.attrs["transpose_B"]}, span=span)


def _operand_loads(func):
    """The layouts of L0A/L0B tiles (``T.alloc_l0a``/``T.alloc_l0b``), inferred from the GEMM
    that reads them: each ``T.copy`` from L1 into such a tile becomes ``ascend.load_l0``,
    transposed when that GEMM's ``transpose_A``/``transpose_B`` is set (the tile keeps the L1
    tile's shape, K x M for a transposed A and N x K for a transposed B, as T.gemm reads
    it)."""
    layout: dict = {}
    for call in tile_ops_in(func):
        if call.name != "gemm":
            continue
        for operand, scope in (("A", L0A), ("B", L0B)):
            buf, flag = call.operands[operand].buffer, bool(call.attrs[f"transpose_{operand}"])
            if str(buf.scope()) != scope:
                continue
            if layout.setdefault(buf, flag) != flag:
                raise KernelError(f"{buf.name!r} is read by GEMMs with transpose_{operand}="
                                  f"{layout[buf]} and ={flag}; its L0 layout follows the GEMM "
                                  "that reads it, so give each layout its own tile",
                                  span_location(call.span))
    if not layout:
        return func

    def rewrite(node):
        call = decode(node)
        if call is None or call.name != "copy" or call.operands["dst"].buffer not in layout or \
                str(call.operands["src"].buffer.scope()) != L1:
            return node
        return make_call(ops.LOAD_L0.name, dict(call.operands),
                         {"transpose": layout[call.operands["dst"].buffer]}, span=node.span)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Evaluate, rewrite)))


def _accumulator_fill(stmt, scopes: dict):
    """(buffer, value) when ``stmt`` is a ``T.fill`` of an L0C accumulator, else None."""
    call = decode(stmt)
    if call is not None and call.name == "fill" and \
            scopes.get(call.operands["dst"].buffer) == "ascend.l0c":
        return call.operands["dst"].buffer, call.operands["value"]
    return None


def _conditional_clear(stmt, scopes: dict):
    """(buffer, condition) when ``stmt`` is ``if cond: T.fill(C, 0)`` of an accumulator (a
    ``T.gemm`` whose ``clear_accum`` is known at run time only), else None."""
    if isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None:
        fill = _accumulator_fill(stmt.then_case, scopes)
        if fill is not None and _zero(fill[1]):
            return fill[0], stmt.condition
    return None


def _gemm_into(stmt, buffer) -> bool:
    call = decode(stmt)
    return call is not None and call.name == "gemm" and \
        call.operands["C"].buffer.same_as(buffer) and call.attrs["clear_accum"] is False


def _first_use_clears(loop, buffer, scopes: dict) -> bool:
    """Whether the first statement of ``loop``'s body that uses ``buffer`` clears it on the
    loop's first iteration (``T.gemm(..., clear_accum=k == 0)``)."""
    if not isinstance(loop, tirx.For):
        return False
    analyzer = sym.Analyzer()
    for stmt in list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]:
        clear = _conditional_clear(stmt, scopes)
        if clear is not None and clear[0].same_as(buffer):
            first = tvm_ffi.structural_map(
                clear[1], (tirx.Var, lambda v: loop.min if v.same_as(loop.loop_var) else v))
            return bool(analyzer.can_prove(first))
        used = []
        tvm_ffi.structural_walk(stmt, (tirx.Buffer, used.append))
        if any(b.same_as(buffer) for b in used):
            return False
    return False


def _dead_fills(body, scopes: dict) -> list:
    """The fills of accumulators that the next loop clears before any use (a ``T.fill`` ahead
    of a K loop whose first GEMM has ``clear_accum=k == 0``)."""
    dead = []

    def visit(seq):
        for stmt, after in zip(seq.seq[:-1], seq.seq[1:]):
            fill = _accumulator_fill(stmt, scopes)
            if fill is not None and _first_use_clears(after, fill[0], scopes):
                dead.append(stmt)

    tvm_ffi.structural_walk(body, (tirx.SeqStmt, visit))
    return dead


def _clear_accumulators(stmts: list, scopes: dict) -> list:
    out, init = [], {}
    for n, stmt in enumerate(stmts):
        after = stmts[n + 1] if n + 1 < len(stmts) else None
        fill = _accumulator_fill(stmt, scopes)
        if fill is not None:
            if _first_use_clears(after, fill[0], scopes):
                continue  # dead: the loop's first GEMM into it clears it
            if not _zero(fill[1]):
                raise KernelError("an accumulator in L0C can only be cleared (T.clear) in a "
                                  "kernel the cube runs alone; the cube has no fill",
                                  span_location(stmt.span))
            init[fill[0]] = "pending"
            continue
        clear = _conditional_clear(stmt, scopes)
        if clear is not None and after is not None and _gemm_into(after, clear[0]):
            init[clear[0]] = clear[1]  # the GEMM's init: C = A*B where the condition holds
            continue
        if not init and _clears_inside(stmt, scopes):  # e.g. under T.Persistent's guard
            out.append(_clear_nested(stmt, scopes))
            continue
        # a clear waits for the GEMM into its accumulator past statements that do not use it
        # (the copies of the operands); one that uses it otherwise cannot take the clear
        waiting = {b: v for b, v in init.items() if not _uses(stmt, b)}
        if isinstance(stmt, tirx.For):
            pending = {b: tirx.EQ(stmt.loop_var, stmt.min) for b, v in init.items()
                       if isinstance(v, str) and b not in waiting}
            for buf in pending:
                branch = _branch_around_gemm(stmt.body, buf)
                if branch is not None:
                    raise KernelError(
                        f"T.clear({buf.name}) is made the first iteration's T.gemm (A2's cube "
                        "has no fill of L0C), but this condition may skip that GEMM and leave "
                        f"{buf.name!r} unset: backend 'ascend' needs the loop's GEMM into it "
                        "unconditional (mask its operands instead)",
                        span_location(branch.span))
            stmt = _gemms(stmt, pending)
            if pending:
                names = ", ".join(str(b.name) for b in pending)
                raise KernelError(f"T.clear({names}) must be followed by the loop whose T.gemm "
                                  "accumulates into it", span_location(stmt.span))
        else:
            pending = {b: tirx.IntImm("bool", 1) if isinstance(v, str) else v
                       for b, v in init.items() if b not in waiting}
            stmt = _gemms(stmt, pending)
            if pending:
                names = ", ".join(str(b.name) for b in pending)
                raise KernelError(f"T.clear({names}) must be followed by the T.gemm that "
                                  "accumulates into it before any other use",
                                  span_location(stmt.span))
        init = waiting
        out.append(stmt)
    if init:
        names = ", ".join(str(b.name) for b in init)
        raise KernelError(f"T.clear({names}) is followed by no T.gemm into it")
    return out


def _branch_around_gemm(stmt, buffer):
    """The innermost ``if`` around the first ``T.gemm`` into ``buffer`` in ``stmt``, or None
    when that GEMM is not under a condition."""
    found = []

    def visit(node, branch):
        if found:
            return
        if _gemm_into(node, buffer):
            found.append(branch)
        elif isinstance(node, tirx.SeqStmt):
            for child in node.seq:
                visit(child, branch)
        elif isinstance(node, tirx.IfThenElse):
            visit(node.then_case, node)
            if node.else_case is not None:
                visit(node.else_case, node)
        elif isinstance(node, (tirx.For, tirx.AttrStmt, tirx.While)):
            visit(node.body, branch)

    visit(stmt, None)
    return found[0] if found else None


def _uses(stmt, buffer) -> bool:
    used = []
    tvm_ffi.structural_walk(stmt, (tirx.Buffer, used.append))
    return any(b.same_as(buffer) for b in used)


def _clears_inside(stmt, scopes) -> bool:
    return decode(stmt) is None and any(
        c.name == "fill" and scopes.get(c.operands["dst"].buffer) == "ascend.l0c"
        for c in tile_ops_in(stmt))


def _clear_nested(stmt, scopes):
    """:func:`_clear_accumulators` inside the body of a loop or a branch."""
    def inner(body):
        stmts = _clear_accumulators(list(body.seq) if isinstance(body, tirx.SeqStmt)
                                    else [body], scopes)
        return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]

    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, inner(stmt.body),
                        thread_binding=stmt.thread_binding, annotations=stmt.annotations,
                        span=stmt.span)
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, inner(stmt.then_case),
                               inner(stmt.else_case) if stmt.else_case is not None else None,
                               span=stmt.span)
    if isinstance(stmt, tirx.SeqStmt):
        return inner(stmt)
    raise KernelError("T.clear of an accumulator nested in this statement is not supported "
                      "by backend 'ascend'", span_location(stmt.span))


def _zero(value) -> bool:
    return isinstance(value, (tirx.IntImm, tirx.FloatImm)) and value.value == 0


def _cube_only(body, scopes) -> bool:
    """Whether every tile op only moves data between GM and the cube memories or multiplies
    (and no statement stores scalars): such a kernel needs no split, whatever its nesting."""
    stores = []
    tvm_ffi.structural_walk(body, (tirx.BufferStore, stores.append))
    if stores:
        return False
    dead = _dead_fills(body, scopes)
    for call in tile_ops_in(body):
        if call.name not in ("gemm", "copy", "fill", ops.LOAD_L0.name):
            return False
        if call.name == "fill" and not _zero(call.operands["value"]) and \
                not any(call.stmt.same_as(d) for d in dead):
            return False  # filled in UB by the vector core, the GEMMs' products added there
        bufs = [r.buffer for r in call.regions("read") + call.regions("write")]
        if any(scopes.get(b) == "ascend.ub" for b in bufs) or all(b not in scopes for b in bufs):
            return False
    return True


def _fold_staging(func):
    """``T.copy(acc, X); T.copy(X, C[...])`` with ``X`` a tile used only there and ``acc`` a
    GEMM accumulator becomes ``T.copy(acc, C[...])``: L0C goes to GM by Fixpipe directly (the
    A2 cube has no path from L0C to UB)."""
    accumulators = {c.operands["C"].buffer for c in tile_ops_in(func) if c.name == "gemm"}
    if not accumulators:
        return func
    uses: dict = {}
    for c in tile_ops_in(func):
        for r in c.regions("read") + c.regions("write"):
            uses[r.buffer] = uses.get(r.buffer, 0) + 1
    # scalar accesses: loads beyond the one per tile-op region, and stores
    load_list, store_list = loads_and_stores(func.body)
    seen: dict = {}
    for buf in load_list:
        seen[buf] = seen.get(buf, 0) + 1
    loads = set(store_list) | {b for b, k in seen.items() if k > uses.get(b, 0)}

    def pair(a, b):
        ca, cb = decode(a), decode(b)
        if ca is None or cb is None or ca.name != "copy" or cb.name != "copy":
            return None
        acc, tile = ca.operands["src"], ca.operands["dst"]
        if acc.buffer not in accumulators or tile.buffer in accumulators or \
                tile.buffer in loads or uses.get(tile.buffer) != 2 or \
                not cb.operands["src"].buffer.same_as(tile.buffer) or \
                str(cb.operands["dst"].buffer.scope()) != "global" or \
                str(tile.buffer.dtype) != str(cb.operands["dst"].buffer.dtype):
            return None
        return make_call("copy", {"src": acc, "dst": cb.operands["dst"]}, span=b.span)

    def fold(seq):
        stmts, out, i = list(seq.seq), [], 0
        while i < len(stmts):
            folded = pair(stmts[i], stmts[i + 1]) if i + 1 < len(stmts) else None
            out.append(folded if folded is not None else stmts[i])
            i += 2 if folded is not None else 1
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]

    body = tvm_ffi.structural_map(func.body, (tirx.SeqStmt, fold))
    left = {r.buffer for c in tile_ops_in(body)
            for r in c.regions("read") + c.regions("write")} | loads

    def drop(seq):  # the allocation of a folded tile goes with it
        stmts = [x for x in seq.seq if not (isinstance(x, tirx.AllocBuffer) and
                                            x.buffer in uses and x.buffer not in left)]
        return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]

    return func.with_body(tvm_ffi.structural_map(body, (tirx.SeqStmt, drop)))


def _reducer_nest(loop):
    """``for i, j in T.Parallel(R, C): acc[i] = op(acc[i], tile[i, j])`` (a T.alloc_reducer
    update over a whole 2-D tile) as ``T.reduce_<op>(tile, acc, dim=1, clear=False)``; None
    for any other loop."""
    inner = loop.body
    if not (isinstance(inner, tirx.For) and isinstance(inner.body, tirx.BufferStore)):
        return None
    if any(str(lp.annotations.get("tw.loop", "")) != "parallel" for lp in (loop, inner)):
        return None
    store, i, j = inner.body, loop.loop_var, inner.loop_var
    scope = str(store.buffer.scope())
    if not scope.startswith("local.reducer.") or len(store.indices) != 1 or \
            not store.indices[0].same_as(i):
        return None
    op = scope.rsplit(".", 1)[-1]
    kinds = {"sum": tirx.Add, "max": tirx.Max, "min": tirx.Min}
    value = store.value
    if op not in kinds or not isinstance(value, kinds[op]):
        return None
    acc, other = value.a, value.b
    if not _loads(acc, store.buffer, [i]):
        acc, other = other, acc
    if not _loads(acc, store.buffer, [i]) or not isinstance(other, tvm.ir.TensorLoad):
        return None
    tile = other.source
    shape = [int(x) for x in tile.shape] if all(isinstance(x, tirx.IntImm) for x in tile.shape) \
        else None
    if not _loads(other, tile, [i, j]) or shape is None or \
            [loop.extent, inner.extent] != [tirx.IntImm("int32", x) for x in shape] and \
            [int(loop.extent), int(inner.extent)] != shape:
        return None
    if not all(isinstance(lp.min, tirx.IntImm) and lp.min.value == 0 for lp in (loop, inner)):
        return None
    return make_call(f"reduce_{op}", {"src": Region.full(tile), "dst": Region.full(store.buffer)},
                     {"dim": 1, "clear": False}, span=loop.span)


def _loads(e, buf, idx) -> bool:
    return isinstance(e, tvm.ir.TensorLoad) and e.source.same_as(buf) and \
        len(e.indices) == len(idx) and all(a.same_as(b) for a, b in zip(e.indices, idx))


def _reducers(func):
    def rewrite(loop):
        call = _reducer_nest(loop)
        return loop if call is None else call
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, rewrite)))


def _drop_unused(func):
    """``func`` without the allocations of tiles nothing reads or writes: an unused tile would
    count as vector work and put a cube-only kernel in the vector scope."""
    used = set()

    def note(b):
        used.add(b)

    def skip_allocs(node):
        return tirx.Evaluate(tirx.const(0, "int32")) if isinstance(node, tirx.AllocBuffer) \
            else node

    # a tile is used where its buffer or its data pointer appears (an address taken)
    tvm_ffi.structural_walk(tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, skip_allocs)),
                            [(tirx.Buffer, note), (tirx.Var, note)])

    def unused(buf) -> bool:
        return buf not in used and buf.data not in used

    if not any(unused(a.buffer) for a in allocations(func)):
        return func

    def keep(seq):
        kept = [s for s in seq.seq if not (isinstance(s, tirx.AllocBuffer) and
                                           unused(s.buffer))]
        return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept, span=seq.span)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.SeqStmt, keep)))


def to_dialect(func):
    loops, _ = _block_loops(func)
    if loops and not any(NPU_KEY in lp.annotations for lp in loops):  # a portable kernel
        func = _drop_unused(func)
    func = _operand_loads(_fold_staging(_reducers(func)))
    loops, body = _block_loops(func)
    if not loops or any(NPU_KEY in lp.annotations for lp in loops):
        return func
    extents = [lp.extent for lp in loops]
    dynamic = not all(isinstance(e, tirx.IntImm) for e in extents)
    scopes = _scopes(func)
    kinds = {"cube" if s != "ascend.ub" else "vector" for s in scopes.values()}
    cid, vid = tirx.Var("cid", "int32"), tirx.Var("vid", "int32")
    sizes = [e if dynamic else int(e.value) for e in extents]
    local = {a.buffer for a in allocations(func)}
    split = None
    top = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    sids, sid = loops[0].annotations.get(MIXED_KEY, (0, None))  # T.MixedKernel
    if sids and not any(c.name == "gemm" for c in tile_ops_in(body)):
        raise KernelError("a T.MixedKernel holds cube work (a T.gemm) beside its vector work; "
                          "this one has none: write 'with T.Kernel(n) as bx' (T.dual_copy "
                          "does not make a vector-only kernel run on two AIVs)",
                          span_location(loops[0].span))
    if sids or ("cube" in kinds and not _cube_only(body, scopes)):
        split = Split([s for s in top if not isinstance(s, tirx.AllocBuffer)], local, cid,
                      vid, 0 if dynamic else math.prod(sizes), int(sids))
        split = split if split.has_vector else None
        if split is not None and dynamic:
            raise KernelError("backend 'ascend' splits this kernel into cube and vector "
                              "programs whose GM workspaces are sized by the grid; with "
                              "dynamic shapes (T.dynamic) the grid is known at run time only, "
                              "which the split does not support yet",
                              span_location(loops[0].span))
    if split is not None:  # cube and vector programs through GM workspaces
        cube, vector = split.run()
        scopes.update(split.scopes)
        body = tirx.SeqStmt([*[s for s in top if isinstance(s, tirx.AllocBuffer)],
                             *split.new_allocs, _scope("C", cube), _scope("V", vector)])
    halves = split.row_halves if split is not None else {}  # tiles split over AIV0/AIV1
    remap = {old: tirx.decl_buffer(halves.get(old, old.shape), old.dtype, old.name, scope=scope)
             for old, scope in scopes.items()}
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
    new_scopes = {new: str(new.scope()) for new in remap.values()}
    if split is None:
        stmts = _clear_accumulators(list(body.seq) if isinstance(body, tirx.SeqStmt)
                                    else [body], new_scopes)
    else:
        *allocs, cube_scope, vector_scope = list(body.seq)
        cube = _clear_accumulators(list(cube_scope.body.seq) if isinstance(
            cube_scope.body, tirx.SeqStmt) else [cube_scope.body], new_scopes)
        stmts = [*allocs, _scope("C", cube), vector_scope]
    stride, subst = 1, ({sid: vid} if sid is not None else {})
    # loops[0] is blockIdx.x (outermost); recover each axis from cid
    for loop, size in zip(loops, sizes):
        subst[loop.loop_var] = tirx.floormod(tirx.floordiv(cid, stride), size) \
            if not (isinstance(stride, int) and stride == 1) else tirx.floormod(cid, size)
        stride = stride * size
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
    annotations = {**dict(loops[0].annotations), NPU_KEY: True}
    cid_loop = tirx.For(cid, 0, total, tirx.ForKind.THREAD_BINDING, vid_loop,
                        thread_binding=tirx.IterVar(tvm.ir.Range(0, total), cid,
                                                    tirx.IterVar.ThreadIndex, "blockIdx.x"),
                        annotations=annotations, span=loops[0].span)
    func = func.with_body(cid_loop).with_attr(PORTABLE_KEY, True)
    if split is not None:  # a split kernel guards its own vector work, even without workspaces
        func = func.with_attr(WORKSPACES_KEY, list(split.workspaces))
    return func


def _scope(core: str, stmts):
    stmts = list(stmts)
    return tirx.AttrStmt(tirx.IntImm("int32", 0), SCOPE_KEY, tvm.ir.StringImm(core),
                         tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0])


def lower_portable():
    return prim_func_pass("AscendPortable", to_dialect)
