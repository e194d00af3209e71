"""Building blocks for backends' lowering rules: loop nests over tile regions, region indexing
and bounds guards that the analyser drops when it can prove them."""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir import Region, TileOpCall, transpose_dims
from .lower_tile_ops import RuleContext

PARALLEL = {"tw.loop": "parallel"}


def is_one(extent) -> bool:
    return (isinstance(extent, tirx.IntImm) and int(extent.value) == 1) or \
        (isinstance(extent, int) and extent == 1)


def as_expr(x):
    """A Python int as an int32 constant; expressions unchanged."""
    return tirx.const(x, "int32") if isinstance(x, int) else x


def loop_nest(extents, body_fn, annotations=PARALLEL, names="ijkl", ctx=None):
    """``for v0 in extents[0]: ... body_fn(vars)``; binds the new vars in ``ctx.analyzer``."""
    loop_vars = [tirx.Var(f"{names[n % len(names)]}{n}", "int32") for n in range(len(extents))]
    if ctx is not None:
        for var, ext in zip(loop_vars, extents):
            ctx.analyzer.bind(var, tvm.ir.Range.from_min_extent(0, as_expr(ext)))
    body = body_fn(loop_vars)
    for var, ext in reversed(list(zip(loop_vars, extents))):
        body = tirx.For(var, 0, as_expr(ext), tirx.ForKind.SERIAL, body, annotations=annotations)
    return body


def non_unit(region: Region) -> list[int]:
    """The dimensions of ``region`` whose extent is not 1."""
    return [d for d, e in enumerate(region.extents) if not is_one(e)]


def region_index(region: Region, loop_vars, dims) -> list:
    """Indices into ``region`` for loop vars over its non-unit dims ``dims``."""
    return [as_expr(s) + loop_vars[dims.index(d)] if d in dims else as_expr(s)
            for d, s in enumerate(region.starts)]


def in_bounds(buffer, index, ctx: RuleContext):
    """The condition that ``index`` lies inside ``buffer``, or None when provably true."""
    conds = [i < as_expr(s) for i, s in zip(index, buffer.shape)
             if not ctx.can_prove(i < as_expr(s))]
    if not conds:
        return None
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return cond


def guarded_load(buffer, index, ctx, dtype=None):
    """``buffer[index]`` (cast to ``dtype``), reading zero where it may be out of bounds."""
    dtype = dtype or str(buffer.dtype)
    load = tirx.BufferLoad(buffer, index)
    load = load if str(buffer.dtype) == dtype else tirx.Cast(dtype, load)
    cond = in_bounds(buffer, index, ctx)
    return load if cond is None else tirx.if_then_else(cond, load, tirx.const(0, dtype))


def guarded_store(buffer, value, index, ctx):
    """``buffer[index] = value``, skipped where it may be out of bounds."""
    store = tirx.BufferStore(buffer, value, index)
    cond = in_bounds(buffer, index, ctx)
    return store if cond is None else tirx.IfThenElse(cond, store, None)


def transpose_nest(call: TileOpCall, ctx: RuleContext, annotations=PARALLEL):
    """``T.transpose(src, dst)`` as a loop nest over the source region (its dimensions of
    ``ir.transpose_dims``), element ``(..., i, j)`` of ``src`` stored at ``(..., j, i)`` of
    ``dst``, converted to ``dst``'s dtype; guarded where it may leave either tile."""
    src, dst = call.operands["src"], call.operands["dst"]
    sdims, ddims = transpose_dims(src.extents), transpose_dims(dst.extents)
    dtype = str(dst.buffer.dtype)

    def body(v):
        swapped = [*v[:-2], v[-1], v[-2]]
        value = guarded_load(src.buffer, region_index(src, v, sdims), ctx, dtype)
        return guarded_store(dst.buffer, value, region_index(dst, swapped, ddims), ctx)

    return loop_nest([src.extents[d] for d in sdims], body, annotations=annotations, ctx=ctx)


# the float types a backend's native maxNum / minNum takes; narrower ones compare as float32
WIDE_FLOATS = frozenset({"float64", "float32"})


def compare_floats(kind: str, nan_propagate: bool = False, native=None):
    """``combine(acc, x)`` of a reduction that compares floats (``ir.NAN_REDUCE_KINDS``: max,
    min, absmax) with the language's NaN rule: a NaN operand is ignored (IEEE 754's maxNum /
    minNum: the other operand; NaN only when both are), or, with ``nan_propagate``, makes the
    result NaN. TVM's own ``Max`` / ``Min`` of a NaN is the backend's choice (the CPU's
    depends on the operands' order). ``native(kind, a, b)``, where a backend has the rule in
    one call of float32 or float64 operands (the CPU's ``llvm.maxnum``), computes it: TVM's
    ``isnan`` is no vectorisable op, so the selects on it keep a reduction's lanes scalar."""
    pick = tirx.Min if kind == "min" else tirx.Max
    native_kind = "min" if kind == "min" else "max"

    def combine(acc, x):
        if kind == "absmax":
            x = tirx.abs(x)
        if native is not None and not nan_propagate:
            dtype = str(acc.ty)
            a, b = ((o if dtype in WIDE_FLOATS else tirx.Cast("float32", o)) for o in (acc, x))
            result = native(native_kind, a, b)
            return result if dtype in WIDE_FLOATS else tirx.Cast(dtype, result)
        if nan_propagate:
            return tirx.Select(_isnan(acc) | _isnan(x), acc + x, pick(acc, x))
        return tirx.Select(_isnan(x), acc, tirx.Select(_isnan(acc), x, pick(acc, x)))

    return combine


def _isnan(x):
    """TVM's isnan, of float32 for the narrower formats (it has none of bfloat16's; a
    conversion to float32 keeps a NaN)."""
    return tirx.isnan(x if str(x.ty) in ("float32", "float64") else tirx.Cast("float32", x))


# each scan op -> how an element combines with the result before it (ir.ops.SCAN_KINDS)
SCAN_COMBINE = {"cumsum": lambda prev, x: prev + x, "cummax": tirx.Max}


def scan_rows(call: TileOpCall):
    """``T.cumsum`` / ``T.cummax`` as (extents of the rows, ``body(row vars)``): each row is one
    serial inclusive scan along the op's dimension (reversed when asked), so it may run in
    place."""
    src, dst = call.operands["src"], call.operands["dst"]
    axis, reverse = call.attrs["dim"] % len(src.extents), call.attrs["reverse"]
    combine = SCAN_COMBINE[call.name]
    dtype = str(dst.buffer.dtype)
    kept = [d for d in range(len(src.extents)) if d != axis]
    n = as_expr(src.extents[axis])

    def body(v):
        r = tirx.Var("r", "int32")
        pos = n - 1 - r if reverse else r
        prev = pos + 1 if reverse else pos - 1

        def index(region: Region, at):
            return [as_expr(s) + (at if d == axis else v[kept.index(d)])
                    for d, s in enumerate(region.starts)]

        x = tirx.BufferLoad(src.buffer, index(src, pos))
        x = x if str(src.buffer.dtype) == dtype else tirx.Cast(dtype, x)
        # the first element is itself (no identity needed: TVM has no bfloat16 infinity)
        value = tirx.if_then_else(r > 0, combine(tirx.BufferLoad(dst.buffer, index(dst, prev)),
                                                 x), x)
        return tirx.For(r, 0, n, tirx.ForKind.SERIAL,
                        tirx.BufferStore(dst.buffer, value, index(dst, pos)))

    return [src.extents[d] for d in kept], body
