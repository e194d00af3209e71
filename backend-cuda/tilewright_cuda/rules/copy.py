"""``T.copy``: between register layouts (accumulators, row vectors, register A operands),
into an accumulator, from a reducer (``T.finalize_reducer``), in 16-byte chunks (``cp.async``
into shared memory, or TMA boxes in ``T.Pipelined`` loops on sm_90+), else element by element
with bounds guards."""

from __future__ import annotations

import tvm
from tilewright.errors import KernelError
from tilewright.ir import Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import (
    PARALLEL,
    as_expr,
    guarded_load,
    guarded_store,
    in_bounds,
    loop_nest,
    non_unit,
    region_index,
)
from tvm import tirx

from .. import intrinsics, keys, layout
from ..analysis.accesses import SHARED_MEMORIES
from ..analysis.ir import const, row_step, unit_inner
from . import tma
from .common import cast, reducer_kind, thread_var
from .reduce import finalize_reducer
from .table import register

VECTOR_BYTES = 16


@register("copy")
def lower_copy(call: TileOpCall, ctx: RuleContext):
    src, dst = call.operands["src"], call.operands["dst"]
    kind = reducer_kind(src.buffer)
    if kind is not None:
        return finalize_reducer(kind, src, dst, ctx)
    if layout.is_accumulator(src.buffer) and layout.is_register_a(dst.buffer):
        return convert_registers(src, dst, ctx)
    if layout.is_accumulator(src.buffer):
        return copy_from_registers(src, dst, ctx)
    if layout.is_accumulator(dst.buffer):
        return copy_to_registers(src, dst, ctx)
    if layout.is_rows(src.buffer) and layout.is_rows(dst.buffer):  # whole vectors
        return every_row_register(dst.buffer, thread_var(ctx)[1], lambda s: tirx.BufferStore(
            dst.buffer, tirx.BufferLoad(src.buffer, [s]), [s]))
    sdims, ddims = non_unit(src), non_unit(dst)
    extents = [dst.extents[d] for d in ddims]
    if len(sdims) != len(ddims):
        raise KernelError(f"T.copy between regions of different ranks ({len(sdims)} and "
                          f"{len(ddims)} non-unit dimensions)")
    rows = layout.is_rows(src.buffer) or layout.is_rows(dst.buffer)  # with a shared row buffer
    vector = None if rows else vector_copy(src, dst, sdims, ddims, ctx)
    if vector is not None:
        return tma.copy_choice(call, ctx, vector)  # in T.Pipelined on sm_90+: maybe TMA

    def body(v):
        value = guarded_load(src.buffer, region_index(src, v, sdims), ctx, str(dst.buffer.dtype))
        return guarded_store(dst.buffer, value, region_index(dst, v, ddims), ctx)

    # a spread fragment's nest is spread over the threads that own its elements
    # and a row vector's, over the rows its threads hold
    every_thread = layout.is_thread_local(dst.buffer) and not layout.is_spread(dst.buffer) \
        and not rows
    return loop_nest(extents, body, annotations={} if every_thread else PARALLEL, ctx=ctx)


def every_row_register(buffer, threads: int, body) -> tirx.Stmt:
    """``body(s)`` for each register of a row vector, unrolled."""
    s = tirx.Var("s", "int32")
    return tirx.For(s, 0, layout.row_registers(buffer, threads), tirx.ForKind.UNROLLED, body(s))


def vector_copy(src: Region, dst: Region, sdims, ddims, ctx: RuleContext):
    """A global -> shared or shared -> global copy in 16-byte chunks, or None when the regions
    do not allow it: both innermost dimensions contiguous, the chunk count whole, and every
    chunk 16-byte aligned on both sides (tensor bases are taken to be 16-byte aligned, as
    torch allocates). Into shared memory on sm_80+ each chunk is a ``cp.async.cg`` (committed
    and waited for here; T.Pipelined moves the wait), else a 128-bit load and store. A chunk
    outside the source tensor is zero-filled; one outside the destination is skipped."""
    smem, gmem = SHARED_MEMORIES, "global"
    loading = layout.memory(src.buffer) == gmem and layout.memory(dst.buffer) in smem
    storing = layout.memory(src.buffer) in smem and layout.memory(dst.buffer) == gmem
    if not (loading or storing) or not sdims or str(src.buffer.dtype) != str(dst.buffer.dtype):
        return None
    bits = tvm.runtime.DataType(str(dst.buffer.dtype)).bits
    if bits % 8 or VECTOR_BYTES % (bits // 8):
        return None
    vec = VECTOR_BYTES // (bits // 8)
    if sdims[-1] != len(src.buffer.shape) - 1 or ddims[-1] != len(dst.buffer.shape) - 1:
        return None
    tile, tensor = (dst, src) if loading else (src, dst)
    tile_dims = ddims if loading else sdims
    inner, row, start = (const(e) for e in (tile.extents[tile_dims[-1]],
                                             tile.buffer.shape[-1], tile.starts[-1]))
    if None in (inner, row, start) or inner % vec or row % vec or start % vec:
        return None
    if not unit_inner(tensor.buffer) or \
            not ctx.can_prove(tirx.floormod(as_expr(row_step(tensor.buffer)), vec) == 0) or \
            not ctx.can_prove(tirx.floormod(as_expr(tensor.starts[-1]), vec) == 0):
        return None
    use_async = loading and ctx.options.arch.sm >= 80
    extents = [dst.extents[d] for d in ddims[:-1]] + [inner // vec]

    def body(v):
        v = [*v[:-1], v[-1] * vec]
        s_idx, d_idx = region_index(src, v, sdims), region_index(dst, v, ddims)
        inside = in_bounds(src.buffer, s_idx, ctx)  # the first element decides for the chunk
        nbytes = tirx.const(VECTOR_BYTES, "int32")
        if inside is not None:
            s_idx = [tirx.if_then_else(inside, i, tirx.const(0, "int32")) for i in s_idx]
            nbytes = tirx.if_then_else(inside, nbytes, tirx.const(0, "int32"))
        chunk = tirx.Evaluate(tirx.call_extern(
            "int32", "tw_cp_async16" if use_async else "tw_copy16",
            tirx.address_of(tirx.BufferLoad(dst.buffer, d_idx)),
            tirx.address_of(tirx.BufferLoad(src.buffer, s_idx)), nbytes))
        fits = in_bounds(dst.buffer, d_idx, ctx)
        return chunk if fits is None else tirx.IfThenElse(fits, chunk, None)

    nest = loop_nest(extents, body, ctx=ctx)
    return tirx.SeqStmt([nest, intrinsics.cp_async_commit(), intrinsics.cp_async_wait(0)]) \
        if use_async else nest


def copy_from_registers(src: Region, dst: Region, ctx: RuleContext):
    """Each thread writes its accumulator registers to their (row, column) in ``dst``; the two
    registers of one row pair (adjacent columns) as one 2-element store where ``dst``'s rows
    are contiguous and of even length (``tw::store_pair``)."""
    tx, threads = thread_var(ctx)
    r = tirx.Var("r", "int32")
    count, dims = layout.registers(src.buffer, threads), non_unit(dst)
    dtype = str(dst.buffer.dtype)
    paired = dtype in ("float16", "bfloat16", "float32") and len(dims) == 2 and \
        dims[-1] == len(dst.buffer.shape) - 1 and \
        unit_inner(dst.buffer) and \
        ctx.can_prove(tirx.floormod(as_expr(row_step(dst.buffer)), 2) == 0) and \
        ctx.can_prove(tirx.floormod(as_expr(dst.starts[-1]), 2) == 0)
    first = r * 2 if paired else r
    row, col = layout.element(src.buffer, first, threads, tx)
    index = region_index(dst, [row, col], dims)

    def value(reg):
        return cast(tirx.BufferLoad(src.buffer, layout.register_index(src.buffer, reg)), dtype)

    if not paired:
        store = guarded_store(dst.buffer, value(r), index, ctx)
        return tirx.For(r, 0, count, tirx.ForKind.UNROLLED, store,
                        annotations={keys.OWN_ELEMENTS: 1})
    # the pair starts at an even column of an even-length row: in bounds when its first is
    store = tirx.Evaluate(tirx.call_extern(
        "int32", "tw::store_pair", tirx.address_of(tirx.BufferLoad(dst.buffer, index)),
        tirx.BufferLoad(src.buffer, layout.register_index(src.buffer, first)),
        tirx.BufferLoad(src.buffer, layout.register_index(src.buffer, first + 1))))
    inside = in_bounds(dst.buffer, index, ctx)
    store = store if inside is None else tirx.IfThenElse(inside, store, None)
    return tirx.For(r, 0, count // 2, tirx.ForKind.UNROLLED, store,
                    annotations={keys.OWN_ELEMENTS: 1})


def copy_to_registers(src: Region, dst: Region, ctx: RuleContext):
    """A whole copy into an accumulator (layout inference admits only those, from shared tiles
    and global tensors): each thread loads the (row, column) of ``src`` each of its
    registers holds, converted to the accumulator's type, zero outside a global tensor."""
    tx, threads = thread_var(ctx)
    r = tirx.Var("r", "int32")
    row, col = layout.element(dst.buffer, r, threads, tx)
    value = guarded_load(src.buffer, region_index(src, [row, col], non_unit(src)), ctx,
                         str(dst.buffer.dtype))
    store = tirx.BufferStore(dst.buffer, value, layout.register_index(dst.buffer, r))
    return tirx.For(r, 0, layout.registers(dst.buffer, threads), tirx.ForKind.UNROLLED, store,
                    annotations={keys.OWN_ELEMENTS: 1})


def convert_registers(src, dst, ctx: RuleContext):
    """``T.copy`` of a wgmma accumulator into a register A fragment of the same shape and
    layout: register ``r`` of one is register ``r`` of the other, converted a pair at a time
    (``tw_wgmma_pack``: one ``cvt`` to f16x2/bf16x2 per 32-bit A register)."""
    _, threads = thread_var(ctx)
    r = tirx.Var("r", "int32")
    pack = tirx.Evaluate(tirx.call_extern(
        "void", "tw_wgmma_pack",
        tirx.address_of(tirx.BufferLoad(dst.buffer, layout.register_index(dst.buffer, r * 2))),
        tirx.BufferLoad(src.buffer, layout.register_index(src.buffer, r * 2)),
        tirx.BufferLoad(src.buffer, layout.register_index(src.buffer, r * 2 + 1))))
    return tirx.For(r, 0, layout.registers(src.buffer, threads) // 2, tirx.ForKind.UNROLLED,
                    pack)
