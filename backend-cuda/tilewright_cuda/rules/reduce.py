"""Reductions: ``T.reduce_<kind>`` along one dimension (a shuffle reduction over groups of
lanes, a serial one for thread-local operands, a register one for accumulators whose warps own
whole rows, per-thread partials combined across the block for spread fragments) and
``T.finalize_reducer`` (per-thread partials combined across the block). The kinds come from
the core's table (``REDUCE_KINDS``); their algebra from ``common.reduce_parts``."""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import REDUCE_KINDS, Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import (
    as_expr,
    guarded_store,
    loop_nest,
    non_unit,
    region_index,
)
from tvm import tirx

from .. import intrinsics, keys, layout
from ..analysis.ir import const, substitute
from ..keys import WARP
from .common import butterfly, cast, combine_lanes, lane_mask, reduce_parts, thread_var
from .table import register


def _make_reduce_rule(kind: str):
    def lower_reduce(call: TileOpCall, ctx: RuleContext):
        src, dst = call.operands["src"], call.operands["dst"]
        axis, clear = call.attrs["dim"], call.attrs["clear"]
        nan = bool(call.attrs.get("nan_propagate", False))
        if layout.is_accumulator(src.buffer):
            return _reduce_registers(kind, src, dst, clear, ctx, nan)
        axis = axis % len(src.extents)
        if layout.is_spread(src.buffer):
            return _reduce_spread(kind, src, dst, axis, clear, ctx, nan)
        dtype = str(dst.buffer.dtype)
        identity, combine, merge = reduce_parts(kind, dtype, nan)
        kept = [d for d in range(len(src.extents)) if d != axis]
        keep_rank = len(dst.extents) == len(src.extents)
        kept_extents = [src.extents[d] for d in kept]
        rows = 1
        for e in kept_extents:
            rows = rows * as_expr(e) if not isinstance(rows, int) or const(e) is None \
                else rows * const(e)
        length = src.extents[axis]

        def dst_index(v):
            if keep_rank:
                return [as_expr(s) + (v[kept.index(d)] if d in kept else 0)
                        for d, s in enumerate(dst.starts)]
            return [as_expr(s) + v[n] for n, s in enumerate(dst.starts)]

        def src_index(v, r):
            return [as_expr(s) + (r if d == axis else v[kept.index(d)])
                    for d, s in enumerate(src.starts)]

        if layout.is_thread_local(src.buffer) or layout.is_thread_local(dst.buffer):
            return _serial_reduce(kept_extents, length, src, dst, clear, identity, combine,
                                  dst_index, src_index, dtype, ctx)
        return _shuffle_reduce(kept_extents, rows, length, src, dst, clear, identity, combine,
                               merge, dst_index, src_index, dtype, ctx)

    lower_reduce.__name__ = f"lower_reduce_{kind}"
    return lower_reduce


def _reduce_registers(kind: str, src: Region, dst: Region, clear: bool, ctx: RuleContext,
                      nan_propagate: bool = False):
    """A row reduction of an accumulator in registers whose warps own whole rows: each thread
    combines its registers of each of its rows, the four lanes sharing a row (lane / 4) combine
    with XOR shuffles, and the first of them writes the row's result."""
    tx, threads = thread_var(ctx)
    m, n = (int(e.value) for e in src.buffer.shape)
    wm, _ = layout.grid(src.buffer, threads)
    dtype = str(dst.buffer.dtype)
    identity, combine, merge = reduce_parts(kind, dtype, nan_propagate)
    tiles_m, tiles_n = m // wm // 16, n // 8
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    lane = tirx.floormod(tx, WARP)
    stmts = [tirx.AllocBuffer(part)]
    for mi in range(tiles_m):
        for half in range(2):  # rows lane / 4 and lane / 4 + 8 of the 16-row tile
            row = tirx.floordiv(tx, WARP) * (m // wm) + mi * 16 + half * 8 + \
                tirx.floordiv(lane, 4)
            stmts.append(tirx.BufferStore(part, identity, [0]))
            for ni in range(tiles_n):
                for e in range(2):
                    r = (mi * tiles_n + ni) * 4 + half * 2 + e
                    x = cast(tirx.BufferLoad(src.buffer, layout.register_index(
                        src.buffer, tirx.const(r, "int32"))), dtype)
                    stmts.append(tirx.BufferStore(
                        part, combine(tirx.BufferLoad(part, [0]), x), [0]))
            stmts += butterfly(part, merge, 4)
            in_rows = layout.is_rows(dst.buffer)  # every lane of the row keeps the result
            index = [tirx.const(mi * 2 + half, "int32")] if in_rows else \
                [as_expr(dst.starts[0]) + row]
            result = tirx.BufferLoad(part, [0])
            if not clear:
                result = merge(tirx.BufferLoad(dst.buffer, index), result)
            store = tirx.BufferStore(dst.buffer, result, index)
            stmts.append(store if in_rows else
                         tirx.IfThenElse(tirx.floormod(lane, 4) == 0, store, None))
    # each row's result is read and written by its one writer lane: no barrier between rows
    return tirx.For(tirx.Var("rows", "int32"), 0, 1, tirx.ForKind.UNROLLED,
                    tirx.SeqStmt(stmts), annotations={keys.OWN_ELEMENTS: 1})


def _reduce_spread(kind: str, src: Region, dst: Region, axis: int, clear: bool,
                   ctx: RuleContext, nan_propagate: bool = False):
    """A reduction of a spread fragment (layout.Spread) along its last dimension: each thread
    combines the registers it holds of each row (``layout.spread_rows``), each warp combines
    its lanes' partials with XOR shuffles and its first lane puts them in a shared slot per
    warp and row; after a barrier every thread combines the warps' slots of each row, and
    writes the result when ``dst`` is thread-local (every thread keeps it), else the first
    thread does. A barrier after it keeps the slots until every thread has read them. Each
    loop writes a shared element from one thread once (``keys.OWN_ELEMENTS``): no barrier
    between rows. A block's last warp may be partial (``common.combine_lanes``)."""
    tx, threads = thread_var(ctx)
    warps = -(-threads // WARP)
    rows, per_row = layout.spread_rows(src.buffer.shape, axis, threads)
    dtype = str(dst.buffer.dtype)
    identity, combine, merge = reduce_parts(kind, dtype, nan_propagate)
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    scratch = tirx.decl_buffer((warps, rows), dtype, "red_warps", scope="shared.dyn")
    row, q = tirx.Var("row", "int32"), tirx.Var("q", "int32")
    x = cast(tirx.BufferLoad(src.buffer, layout.spread_register_index(
        src.buffer, row * per_row + q)), dtype)
    lane, warp = tirx.floormod(tx, WARP), tirx.floordiv(tx, WARP)
    partial = tirx.SeqStmt([
        tirx.BufferStore(part, identity, [0]),
        tirx.For(q, 0, per_row, tirx.ForKind.UNROLLED,
                 tirx.BufferStore(part, combine(tirx.BufferLoad(part, [0]), x), [0])),
        *combine_lanes(part, merge, WARP, tx, threads),
        tirx.IfThenElse(lane == 0, tirx.BufferStore(scratch, tirx.BufferLoad(part, [0]),
                                                    [warp, row]), None),
    ])
    out = tirx.Var("row_out", "int32")
    total = tirx.BufferLoad(scratch, [0, out])
    for w in range(1, warps):
        total = merge(total, tirx.BufferLoad(scratch, [w, out]))
    index = _row_index(dst, [e for d, e in enumerate(src.extents) if d != axis],
                       len(dst.extents) == len(src.extents), axis, out)
    if not clear:
        total = merge(tirx.BufferLoad(dst.buffer, index), total)
    store = tirx.BufferStore(dst.buffer, total, index)
    if not layout.is_thread_local(dst.buffer):
        store = tirx.IfThenElse(tx == 0, store, None)
    return tirx.SeqStmt([
        tirx.AllocBuffer(part), tirx.AllocBuffer(scratch),
        tirx.For(row, 0, rows, tirx.ForKind.UNROLLED, partial,
                 annotations={keys.OWN_ELEMENTS: 1}),
        intrinsics.sync(),
        tirx.For(out, 0, rows, tirx.ForKind.SERIAL, store, annotations={keys.OWN_ELEMENTS: 1}),
        intrinsics.sync(),
    ])


def _row_index(dst: Region, kept, keep_rank: bool, axis: int, row) -> list:
    """The index of ``dst`` for row ``row`` of a reduction whose kept extents (the source's
    dimensions other than ``axis``, row-major) are ``kept``; with ``keep_rank`` ``dst`` keeps
    the reduced dimension (extent one)."""
    coords, stride = [], 1
    for e in reversed(kept):
        coords.insert(0, tirx.floormod(tirx.floordiv(row, stride), const(e)))
        stride *= const(e)
    if keep_rank:
        coords.insert(axis, tirx.const(0, "int32"))
    return [as_expr(s) + c for s, c in zip(dst.starts, coords)]


def _serial_reduce(kept_extents, length, src, dst, clear, identity, combine, dst_index,
                   src_index, dtype, ctx):
    """Every thread reduces every row (thread-local operands)."""
    def body(v):
        index = dst_index(v)
        r = tirx.Var("r", "int32")
        x = cast(tirx.BufferLoad(src.buffer, src_index(v, r)), dtype)
        update = tirx.For(r, 0, as_expr(length), tirx.ForKind.SERIAL, tirx.BufferStore(
            dst.buffer, combine(tirx.BufferLoad(dst.buffer, index), x), index))
        return tirx.SeqStmt([tirx.BufferStore(dst.buffer, identity, index), update]) \
            if clear else update

    return loop_nest(kept_extents, body, annotations={}, ctx=ctx)


def _shuffle_reduce(kept_extents, rows, length, src, dst, clear, identity, combine, merge,
                    dst_index, src_index, dtype, ctx):
    """Rows are shared among groups of G lanes (G a power of two up to a warp that divides
    the block's threads: every group whole, in a last warp that may be partial too): each
    lane reduces a strided part of its row in a register, the group combines with XOR
    shuffles, and the group's first lane writes the result. Every lane runs every shuffle."""
    tx, threads = thread_var(ctx)
    rows_c, length_c = const(rows), const(length)
    group = WARP
    while threads % group:
        group //= 2
    if rows_c is not None:
        while group > 1 and group * rows_c > threads:
            group //= 2
    if length_c is not None:
        while group > 1 and group > length_c:
            group //= 2
    per_pass = threads // group
    passes = (rows + per_pass - 1) // per_pass if isinstance(rows, int) else \
        tirx.floordiv(rows + per_pass - 1, per_pass)
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    p, r = tirx.Var("rp", "int32"), tirx.Var("r", "int32")
    row = p * per_pass + tirx.floordiv(tx, group)
    lane = tirx.floormod(tx, group)
    row_ok = row < as_expr(rows)
    # the row index as one index per kept dimension
    coords, stride = [], 1
    for e in reversed(kept_extents):
        coords.insert(0, tirx.floormod(tirx.floordiv(row, stride), as_expr(e))
                      if stride != 1 else tirx.floormod(row, as_expr(e)))
        stride = stride * as_expr(e) if not isinstance(stride, int) or const(e) is None \
            else stride * const(e)
    if len(kept_extents) == 1:
        coords = [row]
    steps = tirx.floordiv(as_expr(length) - lane + group - 1, group)
    x = cast(tirx.BufferLoad(src.buffer, src_index(coords, r * group + lane)), dtype)
    accumulate = tirx.For(r, 0, steps, tirx.ForKind.SERIAL, tirx.BufferStore(
        part, combine(tirx.BufferLoad(part, [0]), x), [0]))
    index = dst_index(coords)
    result = tirx.BufferLoad(part, [0])
    if not clear:
        result = merge(tirx.BufferLoad(dst.buffer, index), result)
    write = tirx.IfThenElse(tirx.And(row_ok, lane == 0),
                            tirx.BufferStore(dst.buffer, result, index), None)
    body = tirx.SeqStmt([
        tirx.BufferStore(part, identity, [0]),
        tirx.IfThenElse(row_ok, accumulate, None),
        *butterfly(part, merge, group, lane_mask(tx, threads)),
        write,
    ])
    return tirx.SeqStmt([tirx.AllocBuffer(part),
                         tirx.For(p, 0, as_expr(passes), tirx.ForKind.SERIAL, body)])


for _kind in REDUCE_KINDS:
    register(f"reduce_{_kind}")(_make_reduce_rule(_kind))


def finalize_reducer(kind: str, src: Region, dst: Region, ctx: RuleContext):
    """``T.finalize_reducer``: every thread holds a partial reducer; combine them across the
    block (XOR shuffles within each warp, a partial last warp's too (``common.combine_lanes``),
    then one slot per warp in shared memory)."""
    tx, threads = thread_var(ctx)
    warps = -(-threads // WARP)
    dtype = str(src.buffer.dtype)
    identity, _, merge = reduce_parts(kind, dtype)
    size = const(src.extents[0]) if len(src.extents) == 1 else None
    if size is None:
        raise KernelError("T.finalize_reducer on the CUDA backend needs a 1-D reducer of "
                          "constant size")
    scratch = tirx.decl_buffer((warps, size), dtype, "reducer_scratch", scope="shared.dyn")
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    e = tirx.Var("e", "int32")
    warp, lane = tirx.floordiv(tx, WARP), tirx.floormod(tx, WARP)
    per_warp = tirx.SeqStmt([
        tirx.BufferStore(part, tirx.BufferLoad(src.buffer, [as_expr(src.starts[0]) + e]), [0]),
        *combine_lanes(part, merge, WARP, tx, threads),
        tirx.IfThenElse(lane == 0, tirx.BufferStore(scratch, tirx.BufferLoad(part, [0]),
                                                    [warp, e]), None),
    ])
    total = identity
    for k in range(warps):
        total = merge(total, tirx.BufferLoad(scratch, [k, e]))
    dims = non_unit(dst)
    out_index = region_index(dst, [e], dims) if dims else [as_expr(s) for s in dst.starts]
    store = guarded_store(dst.buffer, cast(total, str(dst.buffer.dtype)), out_index, ctx)
    return tirx.SeqStmt([
        tirx.AllocBuffer(part), tirx.AllocBuffer(scratch),
        tirx.For(e, 0, size, tirx.ForKind.SERIAL, per_warp),
        intrinsics.sync(),
        _spread_over_threads(size, threads, tx, e, store),
        intrinsics.sync(),
    ])


def _spread_over_threads(size: int, threads: int, tx, var, body):
    """``body`` for ``var`` in ``range(size)`` spread over the threads."""
    it = tirx.Var(f"{var.name}_it", "int32")
    value = it * threads + tx
    inner = substitute(body, {var: value})
    if size % threads:
        inner = tirx.IfThenElse(value < size, inner, None)
    return tirx.For(it, 0, (size + threads - 1) // threads, tirx.ForKind.SERIAL, inner)
