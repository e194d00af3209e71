"""Lowering of the core's warp ops (``ir.SHUFFLE_OPS``, ``ir.VOTE_OPS``, ``ir.SYNC_WARP``):
CUDA's warp intrinsics, registered from one table each. Their member mask is the user's
limited to the lanes of the caller's warp that exist (``common.lane_mask``: a 1-D block's
last warp may be partial); a shuffle (``common.SHUFFLE_FUNCTIONS``, which the reductions and
``T.tvm_warp_shuffle`` use too) of a value narrower than 32 bits (bool, 8- and 16-bit
integers) moves it as an int; a block's vote (``__syncthreads_count/and/or``) is a barrier
of the whole block, which a role's threads alone cannot reach."""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import SHUFFLE_OPS, SYNC_WARP, VOTE_OPS, TileOpCall, lane_mask
from tilewright.transform import RuleContext
from tvm import tirx

from .. import intrinsics, keys
from ..keys import WARP
from . import common
from .common import SHUFFLE_FUNCTIONS
from .table import register

# the core's op -> (CUDA's function, the dtype it returns); tw_match_all_sync drops
# __match_all_sync's predicate output (include/tw_cuda.h)
VOTE_FUNCTIONS = {
    "any_sync": ("__any_sync", "int32"), "all_sync": ("__all_sync", "int32"),
    "ballot_sync": ("__ballot_sync", "uint32"), "activemask": ("__activemask", "uint32"),
    "match_any_sync": ("__match_any_sync", "uint32"),
    "match_all_sync": ("tw_match_all_sync", "uint32"),
    "syncthreads_count": ("__syncthreads_count", "int32"),
    "syncthreads_and": ("__syncthreads_and", "int32"),
    "syncthreads_or": ("__syncthreads_or", "int32"),
}
assert set(SHUFFLE_FUNCTIONS) == set(SHUFFLE_OPS) and set(VOTE_FUNCTIONS) == set(VOTE_OPS)
NARROW = ("bool", "int8", "int16", "uint8", "uint16")


def member_mask(call: TileOpCall, ctx: RuleContext):
    """The op's mask, less the lanes of the caller's warp that do not exist."""
    mask = lane_mask(call.attrs["mask"])
    tx, threads = common.thread_var(ctx)
    live = common.lane_mask(tx, threads)
    if threads % WARP == 0:
        return tirx.const(mask, "uint32")
    if mask == 0xFFFFFFFF:
        return live
    return tirx.bitwise_and(tirx.const(mask, "uint32"), live)


def _store(call: TileOpCall, value):
    dst = call.operands["dst"]
    return tirx.BufferStore(dst.buffer, common.cast(value, str(dst.buffer.dtype)),
                            list(dst.starts))


def _lower_shuffle(call: TileOpCall, ctx: RuleContext):
    value = call.operands["value"]
    moved = "int32" if str(value.ty) in NARROW else str(value.ty)
    shuffled = tirx.call_extern(moved, SHUFFLE_FUNCTIONS[call.name], member_mask(call, ctx),
                                common.cast(value, moved), call.operands["lane"],
                                tirx.const(int(call.attrs["width"]), "int32"))
    return _store(call, shuffled)


def _lower_vote(call: TileOpCall, ctx: RuleContext):
    function, returns = VOTE_FUNCTIONS[call.name]
    scope = VOTE_OPS[call.name][0]
    if scope == "block":
        _, running = common.thread_var(ctx)
        block = next(int(loop.extent.value) for loop in ctx.loops
                     if loop.kind == tirx.ForKind.THREAD_BINDING and
                     loop.thread_binding is not None and
                     str(loop.thread_binding.thread_tag) == keys.THREAD_TAG)
        if running < block:
            raise KernelError(f"T.{call.name} is a barrier of the whole block ({block} "
                              f"threads), which a role of {running} threads (T.ws, or a "
                              "branch on the thread index selecting warps) cannot reach "
                              "alone: move it out of the role")
        args = [call.operands["value"]]
    elif call.name == "activemask":
        args = []
    else:
        args = [member_mask(call, ctx), call.operands["value"]]
    return _store(call, tirx.call_extern(returns, function, *args))


for _name in SHUFFLE_FUNCTIONS:
    register(_name)(_lower_shuffle)
for _name in VOTE_FUNCTIONS:
    register(_name)(_lower_vote)


@register(SYNC_WARP.name)
def lower_sync_warp(call: TileOpCall, ctx: RuleContext):
    """``__syncwarp(mask)``."""
    return intrinsics.call("__syncwarp", member_mask(call, ctx))
