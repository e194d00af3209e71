"""Atomics: ``T.atomic_add/max/min`` become ``atomicAdd`` ... and the compare-and-swap
helpers of ``include/tw_cuda.h`` (``tw_atomic_*``, float16/bfloat16 max/min too), the bitwise
kinds ``include/tw_atomics.h``'s, one element per thread; the expression form returning the
old value (``return_prev=True``) too; ``T.atomic_store`` and ``T.atomic_load`` tw_atomics.h's
volatile accesses. A memory order other than relaxed calls the ``_ordered`` helper, its fences
around the atomic (``intrinsics.atomic``). A lone element's atomic in block code is made once
per block (by thread 0); one in thread-level code (``transforms.threads.thread_atomics``) is
already each thread's own call when it gets here."""

from __future__ import annotations

from tilewright.ir import ATOMIC_KINDS, ATOMIC_LOAD, ATOMIC_PREV, MEMORY_ORDERS, Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import in_bounds, loop_nest, non_unit, region_index
from tvm import tirx

from .. import intrinsics
from ..analysis.ir import is_parallel
from .common import thread_var
from .table import INTRINSIC_RULES, register


def atomic_call(kind: str, buffer, index, value, ctx: RuleContext | None = None,
                order: int = 0):
    """``tw_atomic_<kind>(&buffer[index], value)`` (``_ordered`` with a memory ``order`` other
    than relaxed), returning the previous value; the element types and the architecture each
    needs are the intrinsics table's."""
    sm = ctx.options.arch.sm if ctx is not None and ctx.options is not None else None
    return intrinsics.atomic(kind, tirx.BufferLoad(buffer, index), value, sm, order)


def _element_op(body, ctx: RuleContext):
    """``body`` (of the element's index) where an element's op goes: each iteration's in a
    T.Parallel loop, thread 0's in block code."""
    if any(is_parallel(loop) for loop in ctx.loops):  # each iteration's own element
        return body([])
    tx, _ = thread_var(ctx)  # block code: one thread updates the element
    return tirx.IfThenElse(tx == 0, body([]), None)


def _make_atomic_rule(kind: str):
    def lower_atomic(call: TileOpCall, ctx: RuleContext):
        dst, src = call.operands["dst"], call.operands["src"]
        ddims = non_unit(dst)
        sdims = non_unit(src) if isinstance(src, Region) else []
        order = MEMORY_ORDERS[call.attrs["memory_order"]]

        def body(v):
            index = region_index(dst, v, ddims)
            value = tirx.BufferLoad(src.buffer, region_index(src, v, sdims)) \
                if isinstance(src, Region) else src
            update = tirx.Evaluate(atomic_call(kind, dst.buffer, index, value, ctx, order))
            cond = in_bounds(dst.buffer, index, ctx)
            return update if cond is None else tirx.IfThenElse(cond, update, None)

        if not ddims:
            return _element_op(body, ctx)
        return loop_nest([dst.extents[d] for d in ddims], body, ctx=ctx)

    lower_atomic.__name__ = f"lower_atomic_{kind}"
    return lower_atomic


for _kind in ATOMIC_KINDS:
    register(f"atomic_{_kind}")(_make_atomic_rule(_kind))


@register("atomic_store")
def lower_atomic_store(call: TileOpCall, ctx: RuleContext):
    dst, value = call.operands["dst"], call.operands["src"]
    order = MEMORY_ORDERS[call.attrs["memory_order"]]

    def body(_):
        index = list(dst.starts)
        store = tirx.Evaluate(intrinsics.atomic_store(tirx.BufferLoad(dst.buffer, index), value,
                                                      order))
        cond = in_bounds(dst.buffer, index, ctx)
        return store if cond is None else tirx.IfThenElse(cond, store, None)

    return _element_op(body, ctx)


def _atomic_prev_rule(kind: str):
    def rule(call):
        load, value, order = call.args
        return atomic_call(kind, load.source, list(load.indices), value, order=order.value)

    return rule


def _atomic_load_rule(call):
    load, order = call.args
    return intrinsics.atomic_load(load, order.value)


# expression intrinsics (atomics returning the old value, atomic loads) become helper calls
INTRINSIC_RULES.update({name: _atomic_prev_rule(k) for name, k in ATOMIC_PREV.items()})
INTRINSIC_RULES[ATOMIC_LOAD] = _atomic_load_rule
