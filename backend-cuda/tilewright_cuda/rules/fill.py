"""``T.fill`` and ``T.clear``: every register of an accumulator or row vector, every element
of a thread-local buffer in each thread, else (a spread fragment too) a parallel nest over the
region."""

from __future__ import annotations

from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import (
    PARALLEL,
    guarded_store,
    loop_nest,
    non_unit,
    region_index,
)
from tvm import tirx

from .. import layout
from .common import cast, thread_var
from .copy import every_row_register
from .table import register


@register("fill")
def lower_fill(call: TileOpCall, ctx: RuleContext):
    dst = call.operands["dst"]
    value = cast(call.operands["value"], str(dst.buffer.dtype))
    if layout.is_accumulator(dst.buffer):
        _, threads = thread_var(ctx)
        r = tirx.Var("r", "int32")
        return tirx.For(r, 0, layout.registers(dst.buffer, threads), tirx.ForKind.UNROLLED,
                        tirx.BufferStore(dst.buffer, value, layout.register_index(dst.buffer, r)))
    if layout.is_rows(dst.buffer):
        return every_row_register(dst.buffer, thread_var(ctx)[1],
                                  lambda s: tirx.BufferStore(dst.buffer, value, [s]))
    dims = non_unit(dst)
    # a thread-local buffer (reducers included) is filled whole by every thread; a spread
    # fragment's nest is spread over its owners
    every_thread = layout.is_thread_local(dst.buffer) and not layout.is_spread(dst.buffer)
    annotations = {} if every_thread else PARALLEL
    return loop_nest([dst.extents[d] for d in dims],
                     lambda v: guarded_store(dst.buffer, value, region_index(dst, v, dims), ctx),
                     annotations=annotations, ctx=ctx)
