"""Atomics: ``T.atomic_add/max/min`` become ``atomicAdd`` and the compare-and-swap helpers of
``include/tw_cuda.h`` (``tw_atomic_*``, float16/bfloat16 max/min too), one element per
thread; the expression form returning the old value (``return_prev=True``) too."""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import ATOMIC_KINDS, ATOMIC_PREV, Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import in_bounds, loop_nest, non_unit, region_index
from tvm import tirx

from ..analysis.ir import is_parallel
from .common import cast, thread_var
from .table import INTRINSIC_RULES, register

_HELPER = {"add": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "uint64",
                   "int64"),
           "max": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64",
                   "uint64"),
           "min": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64",
                   "uint64")}


def atomic_call(kind: str, buffer, index, value):
    """``tw_atomic_<kind>(&buffer[index], value)``, returning the previous value."""
    dtype = str(buffer.dtype)
    if dtype not in _HELPER[kind]:
        raise KernelError(f"T.atomic_{kind} on {dtype} is not supported by backend 'cuda' "
                          f"(supported: {', '.join(_HELPER[kind])})")
    ptr = tirx.address_of(tirx.BufferLoad(buffer, index))
    return tirx.call_extern(dtype, f"tw_atomic_{kind}", ptr, cast(value, dtype))


def _make_atomic_rule(kind: str):
    def lower_atomic(call: TileOpCall, ctx: RuleContext):
        dst, src = call.operands["dst"], call.operands["src"]
        ddims = non_unit(dst)
        sdims = non_unit(src) if isinstance(src, Region) else []

        def body(v):
            index = region_index(dst, v, ddims)
            value = tirx.BufferLoad(src.buffer, region_index(src, v, sdims)) \
                if isinstance(src, Region) else src
            update = tirx.Evaluate(atomic_call(kind, dst.buffer, index, value))
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
