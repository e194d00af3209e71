"""Lowering rules of the CPU backend: one function per tile op, in a table keyed by op.

Each rule turns one tile op into plain loops. Loops over independent elements are marked
``tw.loop = "parallel"`` so the loop phase can vectorise them. Accesses that may fall outside
a buffer are guarded: reads give zero, writes are skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from tilewright.ir import PDL_SYNC, PDL_TRIGGER, REDUCE_KINDS, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import (
    as_expr,
    compare_floats,
    guarded_load,
    guarded_store,
    loop_nest,
    non_unit,
    region_index,
    transpose_nest,
)
from tvm import tirx

from .libm import llvm_min_max
from .microkernel import gemm_loops, gemm_sp_loops

Rule = Callable[[TileOpCall, RuleContext], tirx.Stmt]
RULES: dict[str, Rule] = {}


def register_lowering(name: str):
    def wrap(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return wrap


@register_lowering("copy")
def lower_copy(call: TileOpCall, ctx: RuleContext):
    src, dst = call.operands["src"], call.operands["dst"]
    sdims, ddims = non_unit(src), non_unit(dst)
    extents = [dst.extents[d] for d in ddims]

    def body(v):
        value = guarded_load(src.buffer, region_index(src, v, sdims), ctx, str(dst.buffer.dtype))
        return guarded_store(dst.buffer, value, region_index(dst, v, ddims), ctx)

    return loop_nest(extents, body, ctx=ctx)


@register_lowering("fill")
def lower_fill(call: TileOpCall, ctx: RuleContext):
    dst, value = call.operands["dst"], call.operands["value"]
    dims = non_unit(dst)
    value = value if str(value.ty) == str(dst.buffer.dtype) else tirx.Cast(str(dst.buffer.dtype),
                                                                           value)
    return loop_nest([dst.extents[d] for d in dims],
                     lambda v: guarded_store(dst.buffer, value, region_index(dst, v, dims), ctx),
                     ctx=ctx)


@register_lowering("transpose")
def lower_transpose(call: TileOpCall, ctx: RuleContext):
    return transpose_nest(call, ctx)


@register_lowering(PDL_TRIGGER.name)
@register_lowering(PDL_SYNC.name)
def lower_pdl(call: TileOpCall, ctx: RuleContext):
    """A kernel starts after the previous one has finished: nothing to order."""
    return tirx.Evaluate(tirx.const(0, "int32"))


@register_lowering("gemm")
def lower_gemm(call: TileOpCall, ctx: RuleContext):
    return gemm_loops(call, ctx)


@register_lowering("gemm_sp")
def lower_gemm_sp(call: TileOpCall, ctx: RuleContext):
    return gemm_sp_loops(call, ctx)


def _reduce_parts(kind: str, dtype: str, nan_propagate: bool = False):
    """(identity, combine(acc, x)) of a reduction kind; floats compared with the language's
    NaN rule (``compare_floats``), through ``llvm.maxnum`` / ``llvm.minnum``, which the
    vectoriser widens."""
    if dtype.startswith(("float", "bfloat")):
        # TVM has no bfloat16 infinity; float32's converts exactly
        highest = tirx.Cast(dtype, tirx.infinity("float32")) if dtype == "bfloat16" else \
            tirx.infinity(dtype)
        lowest = highest * -1
    else:  # integers have no infinity
        lowest, highest = tirx.min_value(dtype), tirx.max_value(dtype)
    zero = tirx.const(0, dtype)
    # every bit set: -1 of a signed type, the highest value of an unsigned one
    ones = tirx.const(-1, dtype) if dtype.startswith("int") else highest
    compare = dtype.startswith(("float", "bfloat"))
    return {
        "sum": (zero, lambda a, x: a + x),
        "abssum": (zero, lambda a, x: a + tirx.abs(x)),
        "max": (lowest, compare_floats("max", nan_propagate, llvm_min_max) if compare else
                tirx.Max),
        "min": (highest, compare_floats("min", nan_propagate, llvm_min_max) if compare else
                tirx.Min),
        "absmax": (zero, compare_floats("absmax", nan_propagate, llvm_min_max) if compare else
                   lambda a, x: tirx.Max(a, tirx.abs(x))),
        "bitand": (ones, tirx.bitwise_and),
        "bitor": (zero, tirx.bitwise_or),
        "bitxor": (zero, tirx.bitwise_xor),
    }[kind]


LANES = 8


def _reduce_last_axis_vectorised(kind, src, dst, axis, clear, kept, dst_index, ctx,
                                 nan_propagate=False):
    """A reduction along the contiguous last axis: LANES partial results in a vector, combined
    at the end. Only for constant extents that are a multiple of LANES."""
    dtype = str(dst.buffer.dtype)
    identity, combine = _reduce_parts(kind, dtype, nan_propagate)
    part = tirx.decl_buffer((LANES,), dtype, "partial", scope="local")
    extent = int(src.extents[axis].value if isinstance(src.extents[axis], tirx.IntImm)
                 else src.extents[axis])

    def body(v):
        index = dst_index(v)
        lane, chunk, r = (tirx.Var(n, "int32") for n in ("lane", "chunk", "r"))
        src_index = [as_expr(s) + (chunk * LANES + lane if d == axis else v[kept.index(d)])
                     for d, s in enumerate(src.starts)]
        x = tirx.BufferLoad(src.buffer, src_index)
        x = x if str(src.buffer.dtype) == dtype else tirx.Cast(dtype, x)
        init = tirx.For(lane, 0, LANES, tirx.ForKind.VECTORIZED,
                        tirx.BufferStore(part, identity, [lane]))
        accumulate = tirx.For(chunk, 0, extent // LANES, tirx.ForKind.SERIAL, tirx.For(
            lane, 0, LANES, tirx.ForKind.VECTORIZED,
            tirx.BufferStore(part, combine(tirx.BufferLoad(part, [lane]), x), [lane])))
        merge_combine = _reduce_parts("max" if kind == "absmax" else
                                      "sum" if kind == "abssum" else kind, dtype,
                                      nan_propagate)[1]
        merged = [tirx.BufferStore(dst.buffer, identity, index)] if clear else []
        merged.append(tirx.For(r, 0, LANES, tirx.ForKind.SERIAL, tirx.BufferStore(
            dst.buffer, merge_combine(tirx.BufferLoad(dst.buffer, index),
                                      tirx.BufferLoad(part, [r])), index)))
        return tirx.SeqStmt([init, accumulate, *merged])

    nest = loop_nest([src.extents[d] for d in kept], body, annotations={}, ctx=ctx)
    return tirx.SeqStmt([tirx.AllocBuffer(part), nest])


def _make_reduce_rule(kind: str):
    def lower_reduce(call: TileOpCall, ctx: RuleContext):
        src, dst = call.operands["src"], call.operands["dst"]
        axis, clear = call.attrs["dim"], call.attrs["clear"]
        nan_propagate = bool(call.attrs.get("nan_propagate", False))
        dtype = str(dst.buffer.dtype)
        identity, combine = _reduce_parts(kind, dtype, nan_propagate)
        kept = [d for d in range(len(src.extents)) if d != axis]
        keep_rank = len(dst.extents) == len(src.extents)

        def dst_index(v):
            if keep_rank:
                return [as_expr(s) + (v[kept.index(d)] if d in kept else 0)
                        for d, s in enumerate(dst.starts)]
            return [as_expr(s) + v[n] for n, s in enumerate(dst.starts)] if kept else \
                [as_expr(s) for s in dst.starts]

        extent = src.extents[axis]
        if axis == len(src.extents) - 1 and isinstance(extent, (int, tirx.IntImm)) and \
                int(getattr(extent, "value", extent)) % LANES == 0 and \
                int(getattr(extent, "value", extent)) >= 2 * LANES:
            return _reduce_last_axis_vectorised(kind, src, dst, axis, clear, kept, dst_index,
                                                ctx, nan_propagate)

        def body(v):
            index = dst_index(v)
            r = tirx.Var("r", "int32")
            src_index = []
            for d, s in enumerate(src.starts):
                src_index.append(as_expr(s) + (r if d == axis else v[kept.index(d)]))
            x = tirx.BufferLoad(src.buffer, src_index)
            x = x if str(src.buffer.dtype) == dtype else tirx.Cast(dtype, x)
            acc = tirx.BufferLoad(dst.buffer, index)
            update = tirx.For(r, 0, as_expr(src.extents[axis]), tirx.ForKind.SERIAL,
                              tirx.BufferStore(dst.buffer, combine(acc, x), index))
            if not clear:
                return update
            return tirx.SeqStmt([tirx.BufferStore(dst.buffer, identity, index), update])

        return loop_nest([src.extents[d] for d in kept], body, ctx=ctx)

    lower_reduce.__name__ = f"lower_reduce_{kind}"
    return lower_reduce


for _kind in REDUCE_KINDS:
    register_lowering(f"reduce_{_kind}")(_make_reduce_rule(_kind))
