"""Lowering rules of the CUDA backend: one function per tile op, in a table keyed by op.

A rule returns one of two kinds of code:

- a *parallel nest*: loops annotated ``tw.loop = "parallel"`` over the elements of a tile; the
  ``distribute`` phase spreads their iterations over the block's threads, exactly like a
  user's ``T.Parallel`` loop;
- *thread code*: statements written for one thread of the block, using ``threadIdx.x``
  (the enclosing ``thread_binding`` loop in ``ctx.loops``), such as the shuffle reductions.

Accesses that may fall outside a buffer are guarded: reads give zero, writes are skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tilewright.errors import KernelError
from tilewright.ir import REDUCE_KINDS, Region, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import (
    PARALLEL,
    as_expr,
    guarded_load,
    guarded_store,
    loop_nest,
    non_unit,
    region_index,
)
from tvm import tirx

Rule = Callable[[TileOpCall, RuleContext], tirx.Stmt]
RULES: dict[str, Rule] = {}
WARP = 32
FULL_MASK = tirx.const(0xFFFFFFFF, "uint32")


def register_lowering(name: str):
    def wrap(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return wrap


# -- memory scopes --------------------------------------------------------------------------
# A float32 fragment that only fill, mma gemm (as C) and copy (as source) touch lives in
# registers in the mma.m16n8k16 accumulator layout (see passes.infer_layout).
MMA_ACC = "local.mma_acc"


def mma_acc_registers(buffer, threads: int) -> int:
    """Registers per thread of an ``MMA_ACC`` fragment: four per 16x8 tile the warp owns."""
    m, n = (int(e.value) for e in buffer.shape)
    return (m // 16) * (n // 8) // (threads // WARP) * 4


def mma_acc_element(buffer, r, threads: int, tx):
    """(row, column) of register ``r`` of thread ``tx`` in an ``MMA_ACC`` fragment."""
    n = int(buffer.shape[1].value)
    warps, tiles_n = threads // WARP, n // 8
    tile = tirx.floordiv(tx, WARP) + tirx.floordiv(r, 4) * warps
    lane = tirx.floormod(tx, WARP)
    q = tirx.floormod(r, 4)
    row = tirx.floordiv(tile, tiles_n) * 16 + tirx.floordiv(lane, 4) + tirx.floordiv(q, 2) * 8
    col = tirx.floormod(tile, tiles_n) * 8 + tirx.floormod(lane, 4) * 2 + tirx.floormod(q, 2)
    return row, col


def register_index(buffer, r):
    """Register ``r`` as an index of the (M, N) fragment buffer (flattened: ``r``)."""
    n = int(buffer.shape[1].value)
    return [tirx.floordiv(r, n), tirx.floormod(r, n)]


def scope(buffer) -> str:
    return str(buffer.scope())


def is_thread_local(buffer) -> bool:
    """Storage private to each thread (``alloc_local``, ``alloc_var``, reducers)."""
    return scope(buffer).startswith("local") and scope(buffer) != "local.fragment"


def reducer_kind(buffer) -> str | None:
    s = scope(buffer)
    return s.rsplit(".", 1)[-1] if s.startswith("local.reducer") else None


# -- thread context -------------------------------------------------------------------------
def thread_var(ctx: RuleContext):
    """(threadIdx.x var, threads per block) of the enclosing thread loop."""
    for loop in reversed(ctx.loops):
        if loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None and \
                str(loop.thread_binding.thread_tag) == "threadIdx.x":
            return loop.loop_var, int(loop.extent.value)
    raise KernelError("CUDA lowering found a tile op outside the block's thread loop")


def sync() -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync",
                                          tvm.ir.StringImm("shared")))


# -- loop and index helpers -----------------------------------------------------------------
def cast(value, dtype: str):
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


# -- reductions -----------------------------------------------------------------------------
def reduce_parts(kind: str, dtype: str):
    """(identity, combine(acc, x), merge(a, b)) of a reduction kind."""
    is_float = dtype.startswith(("float", "bfloat"))
    lowest = tirx.infinity(dtype) * -1 if is_float else tirx.min_value(dtype)
    highest = tirx.infinity(dtype) if is_float else tirx.max_value(dtype)
    zero = tirx.const(0, dtype)
    add, mx, mn = (lambda a, b: a + b), tirx.Max, tirx.Min
    return {
        "sum": (zero, add, add),
        "abssum": (zero, lambda a, x: a + tirx.abs(x), add),
        "max": (lowest, mx, mx),
        "min": (highest, mn, mn),
        "absmax": (zero, lambda a, x: tirx.Max(a, tirx.abs(x)), mx),
    }[kind]


def shfl_xor(value, offset: int, width: int = WARP):
    return tirx.call_extern(str(value.ty), "__shfl_xor_sync", FULL_MASK, value,
                            tirx.const(offset, "int32"), tirx.const(width, "int32"))


def butterfly(buf, merge, group: int) -> list:
    """Combine ``buf[0]`` across ``group`` consecutive lanes with XOR shuffles."""
    stmts, offset = [], group // 2
    while offset:
        value = tirx.BufferLoad(buf, [0])
        stmts.append(tirx.BufferStore(buf, merge(value, shfl_xor(value, offset)), [0]))
        offset //= 2
    return stmts


# -- rules ----------------------------------------------------------------------------------
@register_lowering("copy")
def lower_copy(call: TileOpCall, ctx: RuleContext):
    src, dst = call.operands["src"], call.operands["dst"]
    kind = reducer_kind(src.buffer)
    if kind is not None:
        return _finalize_reducer(kind, src, dst, ctx)
    if scope(src.buffer) == MMA_ACC:
        return _copy_from_registers(src, dst, ctx)
    sdims, ddims = non_unit(src), non_unit(dst)
    extents = [dst.extents[d] for d in ddims]
    if len(sdims) != len(ddims):
        raise KernelError(f"T.copy between regions of different ranks ({len(sdims)} and "
                          f"{len(ddims)} non-unit dimensions)")

    def body(v):
        value = guarded_load(src.buffer, region_index(src, v, sdims), ctx, str(dst.buffer.dtype))
        return guarded_store(dst.buffer, value, region_index(dst, v, ddims), ctx)

    every_thread = is_thread_local(dst.buffer)
    return loop_nest(extents, body, annotations={} if every_thread else PARALLEL, ctx=ctx)


def _copy_from_registers(src: Region, dst: Region, ctx: RuleContext):
    """Each thread writes its accumulator registers to their (row, column) in ``dst``."""
    tx, threads = thread_var(ctx)
    r = tirx.Var("r", "int32")
    row, col = mma_acc_element(src.buffer, r, threads, tx)
    value = cast(tirx.BufferLoad(src.buffer, register_index(src.buffer, r)), str(dst.buffer.dtype))
    store = guarded_store(dst.buffer, value, region_index(dst, [row, col], non_unit(dst)), ctx)
    return tirx.For(r, 0, mma_acc_registers(src.buffer, threads), tirx.ForKind.UNROLLED, store)


@register_lowering("fill")
def lower_fill(call: TileOpCall, ctx: RuleContext):
    dst = call.operands["dst"]
    value = cast(call.operands["value"], str(dst.buffer.dtype))
    if scope(dst.buffer) == MMA_ACC:
        _, threads = thread_var(ctx)
        r = tirx.Var("r", "int32")
        return tirx.For(r, 0, mma_acc_registers(dst.buffer, threads), tirx.ForKind.UNROLLED,
                        tirx.BufferStore(dst.buffer, value, register_index(dst.buffer, r)))
    dims = non_unit(dst)
    # a thread-local buffer (reducers included) is filled whole by every thread
    annotations = {} if is_thread_local(dst.buffer) else PARALLEL
    return loop_nest([dst.extents[d] for d in dims],
                     lambda v: guarded_store(dst.buffer, value, region_index(dst, v, dims), ctx),
                     annotations=annotations, ctx=ctx)


@register_lowering("gemm")
def lower_gemm(call: TileOpCall, ctx: RuleContext):
    """The first variant whose predicate holds: tensor cores (``mma.sync``), else a
    thread-distributed loop."""
    for variant, fits in GEMM_VARIANTS:
        if fits(call, ctx) is None:
            return variant(call, ctx)
    raise AssertionError("the thread gemm fits every gemm")


def _leading_dim(region: Region):
    shape = region.buffer.shape
    return _const(shape[-1]) if len(shape) == 2 else None


def mma_misfit(call: TileOpCall, ctx: RuleContext) -> str | None:
    """Why ``mma.sync.m16n8k16`` cannot run this gemm, or None when it can."""
    return mma_misfit_for(call, ctx.options, thread_var(ctx)[1])


def mma_misfit_for(call: TileOpCall, arch, threads: int) -> str | None:
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    if arch is None or arch.sm < 80:
        return "mma.sync m16n8k16 needs sm_80 or newer"
    dtypes = (str(a.buffer.dtype), str(b.buffer.dtype), str(c.buffer.dtype))
    if dtypes not in (("float16", "float16", "float32"), ("bfloat16", "bfloat16", "float32")):
        return f"operand dtypes {dtypes} are not (float16|bfloat16, same, float32)"
    for name, region in (("A", a), ("B", b), ("C", c)):
        if (is_thread_local(region.buffer) and scope(region.buffer) != MMA_ACC) or \
                scope(region.buffer) == "global":
            return f"{name} is not in shared memory or a fragment"
        if _leading_dim(region) is None or len(non_unit(region)) != 2:
            return f"{name} is not a 2-D tile of a 2-D buffer with a constant row length"
    adims, cdims = non_unit(a), non_unit(c)
    m, n = _const(c.extents[cdims[0]]), _const(c.extents[cdims[1]])
    k = _const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    if None in (m, n, k) or m % 16 or n % 8 or k % 16:
        return f"tile {m}x{n}x{k} is not a multiple of the 16x8x16 instruction"
    if (m // 16) * (n // 8) % (threads // WARP):
        return f"{(m // 16) * (n // 8)} 16x8 output tiles do not split evenly over " \
               f"{threads // WARP} warps"
    return None


def lower_gemm_mma(call: TileOpCall, ctx: RuleContext):
    """One call of ``tw_gemm_mma`` (include/tw_mma.h) by every thread of the block."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    cdims, adims = non_unit(c), non_unit(a)
    m, n = _const(c.extents[cdims[0]]), _const(c.extents[cdims[1]])
    k = _const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    _, threads = thread_var(ctx)
    flags = ", ".join("true" if call.attrs[f] else "false" for f in ("transpose_A",
                                                                     "transpose_B"))
    in_registers = scope(c.buffer) == MMA_ACC
    name = f"tw_gemm_mma{'_rf' if in_registers else ''}<{m}, {n}, {k}, {flags}, {threads}>"

    def ptr(region):
        return tirx.address_of(tirx.BufferLoad(region.buffer, [as_expr(s) for s in region.starts]))

    c_args = [ptr(c)] if in_registers else [ptr(c), as_expr(_leading_dim(c))]
    gemm = tirx.Evaluate(tirx.call_extern(
        "int32", name, ptr(a), as_expr(_leading_dim(a)), ptr(b), as_expr(_leading_dim(b)), *c_args))
    if not call.attrs["clear_accum"]:
        return gemm
    zero = lower_fill(_fill_call(c), ctx)
    return tirx.SeqStmt([zero, gemm] if in_registers else [zero, sync(), gemm])


def _fill_call(region: Region) -> TileOpCall:
    from tilewright.ir import get_schema

    return TileOpCall(get_schema("fill"), {"dst": region, "value": tirx.const(0, "float32")}, {})


def lower_gemm_threads(call: TileOpCall, ctx: RuleContext):
    """C += op(A) @ op(B): the (i, j) elements of C are spread over the threads; each thread
    accumulates its dot products in a register."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    ta, tb = call.attrs["transpose_A"], call.attrs["transpose_B"]
    adims, bdims, cdims = non_unit(a), non_unit(b), non_unit(c)
    if len(adims) != 2 or len(bdims) != 2 or len(cdims) != 2:
        raise KernelError("T.gemm needs 2-D tiles for A, B and C")
    m, n = c.extents[cdims[0]], c.extents[cdims[1]]
    k = a.extents[adims[0]] if ta else a.extents[adims[1]]
    dtype = str(c.buffer.dtype)
    acc = tirx.decl_buffer((1,), dtype, "gemm_acc", scope="local")

    def body(v):
        i, j = v
        r = tirx.Var("kk", "int32")
        a_idx = region_index(a, [r, i] if ta else [i, r], adims)
        b_idx = region_index(b, [j, r] if tb else [r, j], bdims)
        c_idx = region_index(c, [i, j], cdims)
        product = cast(tirx.BufferLoad(a.buffer, a_idx), dtype) * \
            cast(tirx.BufferLoad(b.buffer, b_idx), dtype)
        init = tirx.const(0, dtype) if call.attrs["clear_accum"] else \
            tirx.BufferLoad(c.buffer, c_idx)
        return tirx.SeqStmt([
            tirx.AllocBuffer(acc),
            tirx.BufferStore(acc, init, [0]),
            tirx.For(r, 0, as_expr(k), tirx.ForKind.SERIAL, tirx.BufferStore(
                acc, tirx.BufferLoad(acc, [0]) + product, [0])),
            tirx.BufferStore(c.buffer, tirx.BufferLoad(acc, [0]), c_idx),
        ])

    return loop_nest([m, n], body, ctx=ctx)


GEMM_VARIANTS = ((lower_gemm_mma, mma_misfit), (lower_gemm_threads, lambda call, ctx: None))


def _const(e) -> int | None:
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _make_reduce_rule(kind: str):
    def lower_reduce(call: TileOpCall, ctx: RuleContext):
        src, dst = call.operands["src"], call.operands["dst"]
        axis, clear = call.attrs["dim"], call.attrs["clear"]
        axis = axis % len(src.extents)
        dtype = str(dst.buffer.dtype)
        identity, combine, merge = reduce_parts(kind, dtype)
        kept = [d for d in range(len(src.extents)) if d != axis]
        keep_rank = len(dst.extents) == len(src.extents)
        kept_extents = [src.extents[d] for d in kept]
        rows = 1
        for e in kept_extents:
            rows = rows * as_expr(e) if not isinstance(rows, int) or _const(e) is None \
                else rows * _const(e)
        length = src.extents[axis]

        def dst_index(v):
            if keep_rank:
                return [as_expr(s) + (v[kept.index(d)] if d in kept else 0)
                        for d, s in enumerate(dst.starts)]
            return [as_expr(s) + v[n] for n, s in enumerate(dst.starts)]

        def src_index(v, r):
            return [as_expr(s) + (r if d == axis else v[kept.index(d)])
                    for d, s in enumerate(src.starts)]

        if is_thread_local(src.buffer) or is_thread_local(dst.buffer):
            return _serial_reduce(kept_extents, length, src, dst, clear, identity, combine,
                                  dst_index, src_index, dtype, ctx)
        return _shuffle_reduce(kept_extents, rows, length, src, dst, clear, identity, combine,
                               merge, dst_index, src_index, dtype, ctx)

    lower_reduce.__name__ = f"lower_reduce_{kind}"
    return lower_reduce


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
    """Rows are shared among groups of G lanes (G a power of two up to a warp): each lane
    reduces a strided part of its row in a register, the group combines with XOR shuffles,
    and the group's first lane writes the result. Every lane runs every shuffle."""
    tx, threads = thread_var(ctx)
    rows_c, length_c = _const(rows), _const(length)
    group = WARP
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
        stride = stride * as_expr(e) if not isinstance(stride, int) or _const(e) is None \
            else stride * _const(e)
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
        *butterfly(part, merge, group),
        write,
    ])
    return tirx.SeqStmt([tirx.AllocBuffer(part),
                         tirx.For(p, 0, as_expr(passes), tirx.ForKind.SERIAL, body)])


for _kind in REDUCE_KINDS:
    register_lowering(f"reduce_{_kind}")(_make_reduce_rule(_kind))


def _finalize_reducer(kind: str, src: Region, dst: Region, ctx: RuleContext):
    """``T.finalize_reducer``: every thread holds a partial reducer; combine them across the
    block (XOR shuffles within each warp, then one slot per warp in shared memory)."""
    tx, threads = thread_var(ctx)
    warps = threads // WARP
    dtype = str(src.buffer.dtype)
    identity, _, merge = reduce_parts(kind if kind in ("sum", "max", "min") else "sum", dtype)
    size = _const(src.extents[0]) if len(src.extents) == 1 else None
    if size is None:
        raise KernelError("T.finalize_reducer on the CUDA backend needs a 1-D reducer of "
                          "constant size")
    scratch = tirx.decl_buffer((warps, size), dtype, "reducer_scratch", scope="shared.dyn")
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    e = tirx.Var("e", "int32")
    warp, lane = tirx.floordiv(tx, WARP), tirx.floormod(tx, WARP)
    per_warp = tirx.SeqStmt([
        tirx.BufferStore(part, tirx.BufferLoad(src.buffer, [as_expr(src.starts[0]) + e]), [0]),
        *butterfly(part, merge, WARP),
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
        sync(),
        loop_nest_thread(size, threads, tx, e, store),
        sync(),
    ])


def loop_nest_thread(size: int, threads: int, tx, var, body):
    """``body`` for ``var`` in ``range(size)`` spread over the threads."""
    it = tirx.Var(f"{var.name}_it", "int32")
    value = it * threads + tx
    inner = tvm_substitute(body, var, value)
    if size % threads:
        inner = tirx.IfThenElse(value < size, inner, None)
    return tirx.For(it, 0, (size + threads - 1) // threads, tirx.ForKind.SERIAL, inner)


def tvm_substitute(node, var, value):
    import tvm_ffi

    return tvm_ffi.structural_map(node, (tirx.Var, lambda v: value if v.same_as(var) else v))
