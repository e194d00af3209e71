"""``T.transpose``: a parallel nest over the source tile, each element stored at its
transposed place in the destination (converted to its dtype), spread over the block's threads
as a ``T.Parallel`` loop is. Layout inference gives neither operand a register layout (a
fragment a transpose touches stays in shared memory), so every thread reaches every element;
barrier insertion orders the nest against the statements around it."""

from __future__ import annotations

from tilewright.ir import TRANSPOSE, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import PARALLEL, transpose_nest

from .. import layout
from .table import register


@register(TRANSPOSE.name)
def lower_transpose(call: TileOpCall, ctx: RuleContext):
    dst = call.operands["dst"]
    # a thread-local destination (T.alloc_local) is every thread's own: each fills all of it
    every_thread = layout.is_thread_local(dst.buffer) and not layout.is_spread(dst.buffer)
    return transpose_nest(call, ctx, annotations={} if every_thread else PARALLEL)
