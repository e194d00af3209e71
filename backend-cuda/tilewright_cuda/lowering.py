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

import math
from collections.abc import Callable

import tvm
from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.ir import REDUCE_KINDS, Region, TileOpCall
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

from . import rows, swizzle, tma, wgmma

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
# data_alignment mark of an MMA_ACC fragment in the layout of wgmma.m64nNk16 (wgmma.py)
WGMMA_ACC = 2048


def warp_grid(m: int, n: int, warps: int, policy: str = "square") -> tuple[int, int] | None:
    """How ``warps`` split an ``m`` x ``n`` mma output tile: ``(WM, WN)`` warps along rows and
    columns, each warp owning an ``m / WM`` x ``n / WN`` tile of whole 16x8 instruction tiles;
    None when no split exists. ``full_row`` puts every warp on its own rows, ``full_col`` on
    its own columns, ``square`` keeps the warp tile closest to square (fewest fragment loads
    per mma), preferring taller tiles on a tie."""
    grids = [(wm, warps // wm) for wm in range(1, warps + 1)
             if warps % wm == 0 and m % (16 * wm) == 0 and n % (8 * (warps // wm)) == 0]
    if not grids:
        return None
    if policy == "full_row":
        return max(grids)
    if policy == "full_col":
        return min(grids)
    return min(grids, key=lambda g: (abs(math.log2((m / g[0]) / (n / g[1]))), g[0]))


ROWS_MARK = 256  # data_alignment of an MMA_ACC fragment whose warps own whole rows
# annotation of a loop that writes each shared element it touches from one thread only, once,
# and reads only elements its own thread wrote or that no iteration writes: insert_sync puts
# no barrier between its iterations (passes.Syncs)
OWN_ELEMENTS = "tw.own_elements"


def acc_grid(buffer, threads: int) -> tuple[int, int]:
    """The warp grid of an ``MMA_ACC`` fragment: the square grid of its shape, whatever the
    policy of the gemms that write it (every op touching it must agree on one layout); one
    warp column (warps own whole rows, so row reductions stay in a warp) when infer_layout
    marked it ``ROWS_MARK`` (or wgmma.py ``WGMMA_ACC``)."""
    m, n = (int(e.value) for e in buffer.shape)
    if int(buffer.data_alignment) == WGMMA_ACC:  # one 16-row strip per warp (wgmma.py)
        return threads // WARP, 1
    if int(buffer.data_alignment) == ROWS_MARK:
        grid = warp_grid(m, n, threads // WARP, "full_row")
        return grid if grid is not None and grid[1] == 1 else None
    return warp_grid(m, n, threads // WARP)


def mma_acc_registers(buffer, threads: int) -> int:
    """Registers per thread of an ``MMA_ACC`` fragment: four per 16x8 tile of its warp tile."""
    m, n = (int(e.value) for e in buffer.shape)
    return m * n // threads


def mma_acc_element(buffer, r, threads: int, tx):
    """(row, column) of register ``r`` of thread ``tx`` in an ``MMA_ACC`` fragment: warp
    ``w`` owns the warp tile ``(w // WN, w % WN)``; register ``r`` is element ``r % 4`` of
    16x8 tile ``r // 4`` (row-major over the warp tile's tiles), in the PTX C layout."""
    m, n = (int(e.value) for e in buffer.shape)
    wm, wn = acc_grid(buffer, threads)
    tm, tn = m // wm, n // wn
    tiles_n = tn // 8
    warp, lane = tirx.floordiv(tx, WARP), tirx.floormod(tx, WARP)
    tile, q = tirx.floordiv(r, 4), tirx.floormod(r, 4)
    row = tirx.floordiv(warp, wn) * tm + tirx.floordiv(tile, tiles_n) * 16 + \
        tirx.floordiv(lane, 4) + tirx.floordiv(q, 2) * 8
    col = tirx.floormod(warp, wn) * tn + tirx.floormod(tile, tiles_n) * 8 + \
        tirx.floormod(lane, 4) * 2 + tirx.floormod(q, 2)
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


def is_sync(stmt) -> bool:
    """Whether ``stmt`` is a :func:`sync` (``__syncthreads``)."""
    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
        isinstance(stmt.value.op, tvm.ir.Op) and stmt.value.op.name == "tirx.tvm_storage_sync"


# -- loop and index helpers -----------------------------------------------------------------
def cast(value, dtype: str):
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


# -- reductions -----------------------------------------------------------------------------
def infinity(dtype: str, sign: int = 1):
    """Positive (``sign`` 1) or negative infinity of a floating-point type. TVM has no
    bfloat16 infinity, and folds a conversion of float32's into a constant it prints as
    ``inff``: the bfloat16 one is converted on the device (``__float2bfloat16_rn``)."""
    if dtype == "bfloat16":
        return tirx.call_pure_extern(dtype, "__float2bfloat16_rn",
                                     tirx.infinity("float32") * sign)
    return tirx.infinity(dtype) * sign if sign < 0 else tirx.infinity(dtype)


def reduce_parts(kind: str, dtype: str):
    """(identity, combine(acc, x), merge(a, b)) of a reduction kind."""
    is_float = dtype.startswith(("float", "bfloat"))
    lowest = infinity(dtype, -1) if is_float else tirx.min_value(dtype)
    highest = infinity(dtype) if is_float else tirx.max_value(dtype)
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
    if scope(src.buffer) == MMA_ACC and wgmma.is_register_a(dst.buffer):
        return wgmma.convert_registers(src, dst, ctx)
    if scope(src.buffer) == MMA_ACC:
        return _copy_from_registers(src, dst, ctx)
    if rows.is_rows(src.buffer) and rows.is_rows(dst.buffer):  # infer_layout: whole vectors
        return rows.every_register(dst.buffer, thread_var(ctx)[1], lambda s: tirx.BufferStore(
            dst.buffer, tirx.BufferLoad(src.buffer, [s]), [s]))
    sdims, ddims = non_unit(src), non_unit(dst)
    extents = [dst.extents[d] for d in ddims]
    if len(sdims) != len(ddims):
        raise KernelError(f"T.copy between regions of different ranks ({len(sdims)} and "
                          f"{len(ddims)} non-unit dimensions)")
    vector = _vector_copy(src, dst, sdims, ddims, ctx)
    if vector is not None:
        return tma.lower_copy(call, ctx, vector)  # in T.Pipelined on sm_90+: maybe TMA

    def body(v):
        value = guarded_load(src.buffer, region_index(src, v, sdims), ctx, str(dst.buffer.dtype))
        return guarded_store(dst.buffer, value, region_index(dst, v, ddims), ctx)

    every_thread = is_thread_local(dst.buffer)
    return loop_nest(extents, body, annotations={} if every_thread else PARALLEL, ctx=ctx)


SHARED_SCOPES = ("shared", "shared.dyn", "local.fragment")  # fragments not in registers
VECTOR_BYTES = 16


def cp_async_commit() -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("int32", "tw_cp_async_commit"))


def cp_async_wait(groups: int) -> tirx.Stmt:
    """Wait until at most ``groups`` committed cp.async groups are in flight."""
    return tirx.Evaluate(tirx.call_extern("int32", f"tw_cp_async_wait<{groups}>"))


def _vector_copy(src: Region, dst: Region, sdims, ddims, ctx: RuleContext):
    """A global -> shared or shared -> global copy in 16-byte chunks, or None when the regions
    do not allow it: both innermost dimensions contiguous, the chunk count whole, and every
    chunk 16-byte aligned on both sides (tensor bases are taken to be 16-byte aligned, as
    torch allocates). Into shared memory on sm_80+ each chunk is a ``cp.async.cg`` (committed
    and waited for here; T.Pipelined moves the wait), else a 128-bit load and store. A chunk
    outside the source tensor is zero-filled; one outside the destination is skipped."""
    loading = scope(src.buffer) == "global" and scope(dst.buffer) in SHARED_SCOPES
    storing = scope(src.buffer) in SHARED_SCOPES and scope(dst.buffer) == "global"
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
    inner, row, start = (_const(e) for e in (tile.extents[tile_dims[-1]],
                                              tile.buffer.shape[-1], tile.starts[-1]))
    if None in (inner, row, start) or inner % vec or row % vec or start % vec:
        return None
    if not ctx.can_prove(tirx.floormod(as_expr(tensor.buffer.shape[-1]), vec) == 0) or \
            not ctx.can_prove(tirx.floormod(as_expr(tensor.starts[-1]), vec) == 0):
        return None
    arch = ctx.options
    use_async = loading and arch is not None and arch.sm >= 80
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
    return tirx.SeqStmt([nest, cp_async_commit(), cp_async_wait(0)]) if use_async else nest


def _copy_from_registers(src: Region, dst: Region, ctx: RuleContext):
    """Each thread writes its accumulator registers to their (row, column) in ``dst``; the two
    registers of one row pair (adjacent columns) as one 2-element store where ``dst``'s rows
    are contiguous and of even length (``tw::store_pair``)."""
    tx, threads = thread_var(ctx)
    r = tirx.Var("r", "int32")
    count, dims = mma_acc_registers(src.buffer, threads), non_unit(dst)
    dtype = str(dst.buffer.dtype)
    paired = dtype in ("float16", "bfloat16", "float32") and len(dims) == 2 and \
        dims[-1] == len(dst.buffer.shape) - 1 and \
        ctx.can_prove(tirx.floormod(as_expr(dst.buffer.shape[-1]), 2) == 0) and \
        ctx.can_prove(tirx.floormod(as_expr(dst.starts[-1]), 2) == 0)
    first = r * 2 if paired else r
    row, col = mma_acc_element(src.buffer, first, threads, tx)
    index = region_index(dst, [row, col], dims)

    def value(reg):
        return cast(tirx.BufferLoad(src.buffer, register_index(src.buffer, reg)), dtype)

    if not paired:
        store = guarded_store(dst.buffer, value(r), index, ctx)
        return tirx.For(r, 0, count, tirx.ForKind.UNROLLED, store,
                        annotations={OWN_ELEMENTS: 1})
    # the pair starts at an even column of an even-length row: in bounds when its first is
    store = tirx.Evaluate(tirx.call_extern(
        "int32", "tw::store_pair", tirx.address_of(tirx.BufferLoad(dst.buffer, index)),
        tirx.BufferLoad(src.buffer, register_index(src.buffer, first)),
        tirx.BufferLoad(src.buffer, register_index(src.buffer, first + 1))))
    inside = in_bounds(dst.buffer, index, ctx)
    store = store if inside is None else tirx.IfThenElse(inside, store, None)
    return tirx.For(r, 0, count // 2, tirx.ForKind.UNROLLED, store,
                    annotations={OWN_ELEMENTS: 1})


@register_lowering("fill")
def lower_fill(call: TileOpCall, ctx: RuleContext):
    dst = call.operands["dst"]
    value = cast(call.operands["value"], str(dst.buffer.dtype))
    if scope(dst.buffer) == MMA_ACC:
        _, threads = thread_var(ctx)
        r = tirx.Var("r", "int32")
        return tirx.For(r, 0, mma_acc_registers(dst.buffer, threads), tirx.ForKind.UNROLLED,
                        tirx.BufferStore(dst.buffer, value, register_index(dst.buffer, r)))
    if rows.is_rows(dst.buffer):
        return rows.every_register(dst.buffer, thread_var(ctx)[1],
                                   lambda s: tirx.BufferStore(dst.buffer, value, [s]))
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
    problem = mma_policy_error(call, ctx.options, thread_var(ctx)[1])
    if problem is not None:
        raise UnsupportedOpError(problem)
    for variant, fits in gemm_variants():
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
    return _mma_not_asked(call, arch) or _mma_shape_misfit(call, threads)


def _mma_not_asked(call: TileOpCall, arch) -> str | None:
    """Why the gemm does not ask for tensor cores (arch, dtypes, operand memory), or None."""
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
    return None


def _mma_shape_misfit(call: TileOpCall, threads: int) -> str | None:
    """Why the tile shape or the warps do not fit ``mma.sync.m16n8k16``, or None."""
    a, c = call.operands["A"], call.operands["C"]
    adims, cdims = non_unit(a), non_unit(c)
    m, n = _const(c.extents[cdims[0]]), _const(c.extents[cdims[1]])
    k = _const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    if None in (m, n, k) or m % 16 or n % 8 or k % 16:
        return f"tile {m}x{n}x{k} is not a multiple of the 16x8x16 instruction"
    if (m // 16) * (n // 8) % (threads // WARP):
        return f"{(m // 16) * (n // 8)} 16x8 output tiles do not split evenly over " \
               f"{threads // WARP} warps"
    return None


def mma_policy_error(call: TileOpCall, arch, threads: int) -> str | None:
    """Why a gemm that asks for tensor cores cannot have them, or None. A gemm asks for them
    when it reads float16/bfloat16 from shared memory or fragments into a float32 accumulator on
    sm_80+; its tile must then be a multiple of the 16x8x16 instruction and its 16x8 output
    tiles must split evenly over the warps. Other gemms take the thread gemm quietly."""
    if _mma_not_asked(call, arch) is not None:
        return None
    misfit = _mma_shape_misfit(call, threads)
    if misfit is None:
        return None
    a, c = call.operands["A"], call.operands["C"]
    cdims, adims = non_unit(c), non_unit(a)
    m, n = (_const(c.extents[d]) for d in cdims)
    k = _const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    what = (f"T.gemm of {a.buffer.dtype} into a float32 accumulator on backend 'cuda' "
            f"({arch.name}) uses the tensor-core instruction mma.sync m16n8k16")
    if misfit.startswith("tile "):
        return (f"{what}, but its tile M x N x K = {m} x {n} x {k} is not a multiple of the "
                f"instruction shape 16 x 8 x 16: make block M and K multiples of 16 and "
                f"block N a multiple of 8")
    if "split evenly" not in misfit:
        return f"{what}, but {misfit}"
    tiles, warps = (m // 16) * (n // 8), threads // WARP
    fits = [w * WARP for w in range(1, tiles + 1) if tiles % w == 0 and w * WARP <= 1024][-4:]
    return (f"{what}, but threads={threads} gives {warps} warps and the {m} x {n} "
            f"accumulator has {tiles} output tiles of 16 x 8 ({m // 16} x {n // 8}), which do "
            f"not split evenly over {warps} warps: use threads in "
            f"{{{', '.join(map(str, fits))}}} or a tile with a multiple of {warps} 16 x 8 tiles")


def lower_gemm_mma(call: TileOpCall, ctx: RuleContext):
    """One call of ``tw_gemm_mma`` (include/tw_mma.h) by every thread of the block: a warp
    grid over C, each warp loading A/B fragments with ``ldmatrix`` from the operands' shared
    layouts (swizzled or row-major) and issuing ``mma.sync`` over its warp tile."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    cdims, adims = non_unit(c), non_unit(a)
    m, n = _const(c.extents[cdims[0]]), _const(c.extents[cdims[1]])
    k = _const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    _, threads = thread_var(ctx)
    flags = ", ".join("true" if call.attrs[f] else "false" for f in ("transpose_A",
                                                                     "transpose_B"))
    in_registers = scope(c.buffer) == MMA_ACC
    grid = acc_grid(c.buffer, threads) if in_registers else \
        warp_grid(m, n, threads // WARP, str(call.attrs["policy"]))
    if grid is None:
        raise KernelError(f"the {m}x{n} gemm tile has no grid of {threads // WARP} warps with "
                          "whole 16x8 tiles per warp; use a power-of-two number of warps")
    layouts = ", ".join(_operand_layout(r) for r in (a, b))
    name = (f"tw_gemm_mma{'_rf' if in_registers else ''}<{m}, {n}, {k}, {flags}, {threads}, "
            f"{grid[0]}, {grid[1]}, {layouts}>")

    def ptr(region):
        return tirx.address_of(tirx.BufferLoad(region.buffer, [as_expr(s) for s in region.starts]))

    c_args = [ptr(c)] if in_registers else [ptr(c), as_expr(_leading_dim(c))]
    gemm = tirx.Evaluate(tirx.call_extern("int32", name, ptr(a), ptr(b), *c_args))
    if not call.attrs["clear_accum"]:
        return gemm
    zero = lower_fill(_fill_call(c), ctx)
    return tirx.SeqStmt([zero, gemm] if in_registers else [zero, sync(), gemm])


def _operand_layout(region: Region) -> str:
    """The C++ layout type (include/tw_mma.h) of a gemm operand tile in shared memory."""
    swizzled = swizzle.layout_of(region.buffer)
    if swizzled is not None:
        if not all(_const(s) == 0 for s in region.starts):
            raise KernelError(f"gemm operand {region.buffer.name} is swizzled but the gemm "
                              "reads only part of it")
        return f"tw::swizzled<{int(region.buffer.shape[-2])}, {swizzled[0]}, {swizzled[1]}>"
    ld = _leading_dim(region)
    # ldmatrix reads 16-byte rows: row starts and the first column must be 16-byte aligned
    aligned = (ld * 2) % 16 == 0 and _const(region.starts[-1]) is not None and \
        _const(region.starts[-1]) % 8 == 0
    return f"tw::rowmajor<{ld}, {'true' if aligned else 'false'}>"


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


def gemm_variants() -> tuple:
    """(lowering, why it does not fit) of each gemm variant, the preferred first (read at
    call time: wgmma.py imports this module, whichever of the two is imported first)."""
    return ((wgmma.lower_gemm_wgmma, wgmma.misfit), (lower_gemm_mma, mma_misfit),
            (lower_gemm_threads, lambda call, ctx: None))


def _const(e) -> int | None:
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _make_reduce_rule(kind: str):
    def lower_reduce(call: TileOpCall, ctx: RuleContext):
        src, dst = call.operands["src"], call.operands["dst"]
        axis, clear = call.attrs["dim"], call.attrs["clear"]
        if scope(src.buffer) == MMA_ACC:
            return _reduce_registers(kind, src, dst, clear, ctx)
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


def _reduce_registers(kind: str, src: Region, dst: Region, clear: bool, ctx: RuleContext):
    """A row reduction of an ``MMA_ACC`` fragment whose warps own whole rows: each thread
    combines its registers of each of its rows, the four lanes sharing a row (lane / 4) combine
    with XOR shuffles, and the first of them writes the row's result."""
    tx, threads = thread_var(ctx)
    m, n = (int(e.value) for e in src.buffer.shape)
    wm, _ = acc_grid(src.buffer, threads)
    dtype = str(dst.buffer.dtype)
    identity, combine, merge = reduce_parts(kind, dtype)
    tiles_m, tiles_n = m // wm // 16, n // 8
    part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
    lane = tirx.floormod(tx, WARP)
    stmts = [tirx.AllocBuffer(part)]
    for mi in range(tiles_m):
        for half in range(2):  # rows lane / 4 and lane / 4 + 8 of the 16-row tile
            row = tirx.floordiv(tx, WARP) * (m // wm) + mi * 16 + half * 8 + \
                tirx.floordiv(lane, 4)
            stmts.append(tirx.BufferStore(part, identity, [0]))
            for ni in range(tiles_n):
                for e in range(2):
                    r = (mi * tiles_n + ni) * 4 + half * 2 + e
                    x = cast(tirx.BufferLoad(src.buffer, register_index(
                        src.buffer, tirx.const(r, "int32"))), dtype)
                    stmts.append(tirx.BufferStore(
                        part, combine(tirx.BufferLoad(part, [0]), x), [0]))
            stmts += butterfly(part, merge, 4)
            in_rows = rows.is_rows(dst.buffer)  # every lane of the row keeps the result
            index = [tirx.const(mi * 2 + half, "int32")] if in_rows else \
                [as_expr(dst.starts[0]) + row]
            result = tirx.BufferLoad(part, [0])
            if not clear:
                result = merge(tirx.BufferLoad(dst.buffer, index), result)
            store = tirx.BufferStore(dst.buffer, result, index)
            stmts.append(store if in_rows else
                         tirx.IfThenElse(tirx.floormod(lane, 4) == 0, store, None))
    # each row's result is read and written by its one writer lane: no barrier between rows
    return tirx.For(tirx.Var("rows", "int32"), 0, 1, tirx.ForKind.UNROLLED,
                    tirx.SeqStmt(stmts), annotations={OWN_ELEMENTS: 1})


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
