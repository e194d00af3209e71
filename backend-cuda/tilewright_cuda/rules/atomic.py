"""Atomics: ``T.atomic_add/max/min`` become ``atomicAdd`` and the compare-and-swap helpers of
``include/tw_cuda.h`` (``tw_atomic_*``, float16/bfloat16 max/min too), one element per
thread; the expression form returning the old value (``return_prev=True``) too. A lone
element's atomic in block code is made once per block (by thread 0); one in thread-level code
(``transforms.threads.thread_atomics``) is already each thread's own call when it gets here."""

from __future__ import annotations

from tilewright.ir import ATOMIC_KINDS, ATOMIC_PREV, Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import in_bounds, loop_nest, non_unit, region_index
from tvm import tirx

from .. import intrinsics
from ..analysis.ir import is_parallel
from .common import thread_var
from .table import INTRINSIC_RULES, register


def atomic_call(kind: str, buffer, index, value, ctx: RuleContext | None = None):
    """``tw_atomic_<kind>(&buffer[index], value)``, returning the previous value; the element
    types and the architecture each needs are the intrinsics table's."""
    sm = ctx.options.arch.sm if ctx is not None and ctx.options is not None else None
    return intrinsics.atomic(kind, tirx.BufferLoad(buffer, index), value, sm)


def _make_atomic_rule(kind: str):
    def lower_atomic(call: TileOpCall, ctx: RuleContext):
        dst, src = call.operands["dst"], call.operands["src"]
        ddims = non_unit(dst)
        sdims = non_unit(src) if isinstance(src, Region) else []

        def body(v):
            index = region_index(dst, v, ddims)
            value = tirx.BufferLoad(src.buffer, region_index(src, v, sdims)) \
                if isinstance(src, Region) else src
            update = tirx.Evaluate(atomic_call(kind, dst.buffer, index, value, ctx))
            cond = in_bounds(dst.buffer, index, ctx)
            return update if cond is None else tirx.IfThenElse(cond, update, None)

        if not ddims:
            if any(is_parallel(loop) for loop in ctx.loops):  # each iteration's own element
                return body([])
            tx, _ = thread_var(ctx)  # block code: one thread updates the element
            return tirx.IfThenElse(tx == 0, body([]), None)
        return loop_nest([dst.extents[d] for d in ddims], body, ctx=ctx)

    lower_atomic.__name__ = f"lower_atomic_{kind}"
    return lower_atomic


for _kind in ATOMIC_KINDS:
    register(f"atomic_{_kind}")(_make_atomic_rule(_kind))


def _atomic_prev_rule(kind: str):
    def rule(call):
        load, value = call.args
        return atomic_call(kind, load.source, list(load.indices), value)

    return rule


# expression intrinsics (atomics returning the old value) become helper calls
INTRINSIC_RULES.update({name: _atomic_prev_rule(k) for name, k in ATOMIC_PREV.items()})
