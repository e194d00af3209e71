"""``T.gemm``: variants tried in order, each with a predicate (analysis.gemm_fit) that says why
it does not fit; the first that fits lowers the gemm.

1. ``wgmma.mma_async`` (sm_90a, include/tw_wgmma.h; the form of the dtypes,
   ``gemm_fit.WGMMA_FORMS``: m64nNk16 for float16/bfloat16, m64nNk32 for int8 into int32
   and float8_e4m3fn/float8_e5m2 into float32, SASS ``HGMMA``/``IGMMA``/``QGMMA``): both
   operands read from swizzled shared tiles through matrix descriptors, or 16-bit A from
   registers (the register-A form ``tw_gemm_wgmma_rs``: the k16 steps' m64k16 A fragments,
   which the wgmma accumulator layout holds); C a register accumulator in the wgmma D layout;
2. ``ldmatrix`` + ``mma.sync`` over warp tiles (include/tw_mma.h; the form the architecture
   takes for the dtypes, ``gemm_fit.mma_form``: m16n8k16 for float16/bfloat16, m16n8k32 for
   int8 into int32 on sm_80+ and float8_e4m3fn/float8_e5m2 into float32 on sm_89+; before
   sm_89 float8 takes two m16n8k16 .f16 per k32 step on the fragments widened to float16,
   the ``_widened`` functions of include/tw_mma_widen.h, SASS ``HMMA.16816.F32``);
3. ``mma.sync`` with op(A)'s 2..15 rows padded to 16 by zero registers, C in shared memory
   (``tw_gemm_mma_rows``; ``gemm_fit.mma_rows_misfit`` states the rule: a decode GEMV of a
   few tokens; one row keeps the thread gemm);
4. C's elements spread over the threads, each dot product in a register.

A gemm that asks for tensor cores but cannot have them is an error (``mma_policy_error``).
A gemm left in flight (``wg_wait`` other than 0: ``T.wgmma_gemm`` of the CUDA dialect, -1,
retired by the user's ``T.wait_wgmma``) takes variant 1 or is an error; its group is followed
by ``wgmma.wait_group wg_wait`` (none for -1) instead of ``wait_group 0``.

``T.gemm_sp`` (A 2:4 sparse: kept values and metadata, ``tilewright.sparse``) takes
``wgmma.mma_async.sp`` m64nNk32 on sm_90a (``gemm_fit.SPARSE_WGMMA_FORMS``, SASS
``HGMMA.SP``; the values read as the dense form's A, each warp's metadata register from the
metadata rows), else ``mma.sp::ordered_metadata`` m16n8k32 over warp tiles for
float16/bfloat16 into a register accumulator (``gemm_fit.SPARSE_MMA_FORMS``), else the thread
gemm, each stored value meeting the row of B its metadata names.
"""

from __future__ import annotations

from tilewright import sparse as sp
from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.ir import Region, TileOpCall, matrix_dims
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import as_expr, loop_nest, non_unit, region_index
from tvm import tirx

from .. import intrinsics, layout
from ..analysis import gemm_fit
from ..analysis.ir import const, full
from ..keys import PERSISTENT, WARP, WARPGROUP
from .common import cast, fill_call, thread_var
from .fill import lower_fill
from .table import register


@register("gemm")
def lower_gemm(call: TileOpCall, ctx: RuleContext):
    """The first variant whose predicate holds (the module docstring)."""
    arch, threads = ctx.options.arch, thread_var(ctx)[1]
    problem = gemm_fit.mma_policy_error(call, arch, threads)
    if problem is not None:
        raise UnsupportedOpError(problem)
    wait = int(call.attrs["wg_wait"])
    if wait != 0:  # T.wgmma_gemm (-1: the user waits) or T.gemm(wg_wait=N)
        problem = gemm_fit.wgmma_misfit(call, arch, threads)
        if problem is not None:
            raise KernelError(f"T.wgmma_gemm (a gemm left in flight, wg_wait={wait}) is one "
                              f"asynchronous wgmma group, but {problem}; use T.gemm")
        return lower_gemm_wgmma(call, ctx, wait)
    for variant, misfit in VARIANTS:
        if misfit(call, arch, threads) is None:
            return variant(call, ctx)
    raise AssertionError("the thread gemm fits every gemm")


def _wgmma_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    problem = gemm_fit.wgmma_misfit(call, arch, threads)
    if problem is not None and layout.is_register_a(call.operands["A"].buffer):
        raise KernelError(f"T.gemm reads {call.operands['A'].buffer.name!r} from registers as "
                          f"wgmma's A, but {problem}")
    return problem


def lower_gemm_wgmma(call: TileOpCall, ctx: RuleContext, wait: int = 0):
    """Each warpgroup issues the wgmma steps of its 64 rows as one group, then waits until
    ``wait`` groups are in flight (-1: no wait, ``T.wgmma_gemm``); the operands' writers fence
    their shared stores to the async proxy first (a barrier of the block or role). With A
    in registers only B's writers need that fence (``transforms.sync.drop_redundant_fences``
    removes it where nothing wrote B since an earlier one). A T.gemm_sp passes its metadata
    rows last (``tw_gemm_wgmma_sp``: A holds the kept values, K counts dense columns). A
    ``clear_accum`` known only at run time (``T.wgmma_gemm``'s) is passed as the scale-d
    predicate of each N chunk's first wgmma (0: D = A B); a constant one zeroes C first, or,
    in a persistent kernel's loop over tiles (``T.Persistent``), is scale-d 0 too: there
    ptxas serialises every wgmma of a warp-specialised kernel that zeroes the accumulator in
    code (C7520, "WG.AR in divergent path": the fp8 block-scale kernel's product fragment,
    each wgmma waited for alone), where elsewhere it folds the zeros into the wgmma."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    tx, _ = thread_var(ctx)
    n, k = const(c.extents[1]), gemm_fit.dense_k(call)
    width_b, _ = layout.swizzle_of(b.buffer)
    b_mn = not call.attrs["transpose_B"]
    ty = gemm_fit.wgmma_form(call).code
    nc = gemm_fit.wgmma_chunk(n, width_b // layout.SWIZZLE_DTYPES[str(b.buffer.dtype)])
    rows_b = const(b.buffer.shape[-2])
    extra = []
    if layout.is_register_a(a.buffer):
        form, operands = "tw_gemm_wgmma_rs", (rows_b, width_b)
        a_arg = tirx.address_of(_origin(a))
    else:
        width_a, _ = layout.swizzle_of(a.buffer)
        form, operands = "tw_gemm_wgmma", (const(a.buffer.shape[-2]), width_a, rows_b, width_b)
        if call.name == "gemm_sp":
            e = call.operands["E"]
            form = "tw_gemm_wgmma_sp"
            operands = (*operands, gemm_fit.leading_dim(e) * e.buffer.dtype.bits // 8)
            extra = [_ptr(e)]
        a_arg = intrinsics.shared_addr(_origin(a))
    name = intrinsics.WgmmaGemm(form, n, k, nc, ty, b_mn, operands).name
    clear = call.attrs["clear_accum"]
    if not isinstance(clear, bool):  # known at run time: the first k step's scale-d
        extra.append(tirx.Select(clear, tirx.const(0, "int32"), tirx.const(1, "int32")))
    elif clear and any(PERSISTENT in loop.annotations for loop in ctx.loops):
        extra.append(tirx.const(0, "int32"))
        clear = False  # ... by scale-d, not by zeroing code
    gemm = tirx.Evaluate(tirx.call_extern(
        "void", name, a_arg, intrinsics.shared_addr(_origin(b)),
        tirx.address_of(_origin(c)), tirx.floordiv(tx, WARPGROUP), *extra))
    stmts = [intrinsics.fence_proxy_async(), intrinsics.sync(), gemm]
    if wait >= 0:
        stmts.append(intrinsics.wgmma_wait(wait))
    if clear is True:
        stmts.insert(0, lower_fill(fill_call(c), ctx))
    return tirx.SeqStmt(stmts)


def _origin(region: Region):
    """The first element of an operand: a swizzled tile read in part starts on a swizzle atom
    (``gemm_fit.atom_misfit``), where its swizzled address is the unswizzled one the
    descriptors (include/tw_wgmma.h) count from."""
    return tirx.BufferLoad(region.buffer, [tirx.const(const(s), "int32") if const(s) is not None
                                           else s for s in region.starts])


def lower_gemm_mma(call: TileOpCall, ctx: RuleContext):
    """One call of ``tw_gemm_mma`` (include/tw_mma.h) by every thread of the block: a warp
    grid over C, each warp loading A/B fragments with ``ldmatrix`` from the operands' shared
    layouts (swizzled or row-major) and issuing ``mma.sync`` over its warp tile."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    cdims, adims = non_unit(c), non_unit(a)
    m, n = const(c.extents[cdims[0]]), const(c.extents[cdims[1]])
    k = const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    _, threads = thread_var(ctx)
    flags = ", ".join("true" if call.attrs[f] else "false" for f in ("transpose_A",
                                                                     "transpose_B"))
    in_registers = layout.is_accumulator(c.buffer)
    grid = layout.grid(c.buffer, threads) if in_registers else \
        layout.warp_grid(m, n, threads // WARP, str(call.attrs["policy"]))
    if grid is None:
        raise KernelError(f"the {m}x{n} gemm tile has no grid of {threads // WARP} warps with "
                          "whole 16x8 tiles per warp; use a power-of-two number of warps")
    layouts = ", ".join(_operand_layout(r) for r in (a, b))
    name = (f"tw_gemm_mma{'_rf' if in_registers else ''}{_widened(call, ctx)}<{m}, {n}, {k}, "
            f"{flags}, {threads}, {grid[0]}, {grid[1]}, {layouts}>")

    c_args = [_ptr(c)] if in_registers else [_ptr(c), as_expr(gemm_fit.leading_dim(c))]
    gemm = tirx.Evaluate(tirx.call_extern("int32", name, _ptr(a), _ptr(b), *c_args))
    if not call.attrs["clear_accum"]:
        return gemm
    zero = lower_fill(fill_call(c), ctx)
    return tirx.SeqStmt([zero, gemm] if in_registers else [zero, intrinsics.sync(), gemm])


def lower_gemm_mma_rows(call: TileOpCall, ctx: RuleContext):
    """One call of ``tw_gemm_mma_rows`` (include/tw_mma.h) by every thread of the block: the
    warps split N; each pads A's rows to 16 with zero registers, loads B's fragments as
    ``mma.sync`` does and reads and stores only C's rows."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    cdims = non_unit(c)
    m, n = const(c.extents[cdims[0]]), const(c.extents[cdims[1]])
    _, threads = thread_var(ctx)
    flags = ", ".join("true" if call.attrs[f] else "false" for f in ("transpose_A",
                                                                     "transpose_B"))
    layouts = ", ".join(_operand_layout(r) for r in (a, b))
    name = (f"tw_gemm_mma_rows{_widened(call, ctx)}<{m}, {n}, {gemm_fit.dense_k(call)}, "
            f"{flags}, {threads}, {layouts}>")
    gemm = tirx.Evaluate(tirx.call_extern("int32", name, _ptr(a), _ptr(b), _ptr(c),
                                          as_expr(gemm_fit.leading_dim(c))))
    if not call.attrs["clear_accum"]:
        return gemm
    return tirx.SeqStmt([lower_fill(fill_call(c), ctx), intrinsics.sync(), gemm])


def _widened(call: TileOpCall, ctx: RuleContext) -> str:
    """The suffix of the mma.sync gemm functions of the architecture's form: ``_widened``
    (include/tw_mma_widen.h) for float8 widened to float16, else none."""
    return "" if gemm_fit.mma_form(call, ctx.options.arch).widened is None else "_widened"


def _ptr(region: Region):
    return tirx.address_of(tirx.BufferLoad(region.buffer, [as_expr(s) for s in region.starts]))


def _operand_layout(region: Region) -> str:
    """The C++ layout type (include/tw_mma.h) of a gemm operand tile in shared memory."""
    swizzled = layout.swizzle_of(region.buffer)
    if swizzled is not None:
        part = None if full(region) else gemm_fit.atom_misfit(region, region.buffer.name)
        if part is not None:
            raise KernelError(f"the gemm cannot read its swizzled operand: {part}")
        size = layout.SWIZZLE_DTYPES[str(region.buffer.dtype)]
        return (f"tw::swizzled<{int(region.buffer.shape[-2])}, {swizzled[0]}, {swizzled[1]}"
                f"{'' if size == 2 else f', {size}'}>")
    ld = gemm_fit.leading_dim(region)
    # ldmatrix reads 16-byte rows: row starts and the first column must be 16-byte aligned
    size = region.buffer.dtype.bits // 8
    start = const(region.starts[-1])
    aligned = (ld * size) % 16 == 0 and start is not None and (start * size) % 16 == 0
    return f"tw::rowmajor<{ld}, {'true' if aligned else 'false'}>"


def _matrix_dims(call: TileOpCall, names: str) -> list:
    """The two dimensions of each named operand (``tilewright.ir.matrix_dims``)."""
    dims = [matrix_dims(call.operands[x].extents) for x in names]
    if None in dims:
        raise KernelError(f"T.{call.name} needs 2-D tiles for {', '.join(names)}")
    return dims


def _thread_gemm(call: TileOpCall, ctx: RuleContext, depth, term):
    """C's (i, j) elements spread over the threads, each summing ``term(i, j, r)`` over
    ``r < depth`` in a register."""
    c = call.operands["C"]
    cdims, = _matrix_dims(call, "C")
    dtype = str(c.buffer.dtype)
    acc = tirx.decl_buffer((1,), dtype, "gemm_acc", scope="local")

    def body(v):
        i, j = v
        r = tirx.Var("kk", "int32")
        c_idx = region_index(c, [i, j], cdims)
        init = tirx.const(0, dtype) if call.attrs["clear_accum"] else \
            tirx.BufferLoad(c.buffer, c_idx)
        return tirx.SeqStmt([
            tirx.AllocBuffer(acc),
            tirx.BufferStore(acc, init, [0]),
            tirx.For(r, 0, as_expr(depth), tirx.ForKind.SERIAL, tirx.BufferStore(
                acc, tirx.BufferLoad(acc, [0]) + term(i, j, r), [0])),
            tirx.BufferStore(c.buffer, tirx.BufferLoad(acc, [0]), c_idx),
        ])

    return loop_nest([c.extents[cdims[0]], c.extents[cdims[1]]], body, ctx=ctx)


def _element(region: Region, dims, row, col, transposed: bool, dtype: str):
    index = region_index(region, [col, row] if transposed else [row, col], dims)
    return cast(tirx.BufferLoad(region.buffer, index), dtype)


def lower_gemm_threads(call: TileOpCall, ctx: RuleContext):
    """C += op(A) @ op(B): the (i, j) elements of C are spread over the threads; each thread
    accumulates its dot products in a register."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    ta, tb = call.attrs["transpose_A"], call.attrs["transpose_B"]
    adims, bdims, _ = _matrix_dims(call, "ABC")
    dtype = str(c.buffer.dtype)

    def term(i, j, r):
        return _element(a, adims, i, r, ta, dtype) * _element(b, bdims, r, j, tb, dtype)

    return _thread_gemm(call, ctx, a.extents[adims[0]] if ta else a.extents[adims[1]], term)


@register("gemm_sp")
def lower_gemm_sp(call: TileOpCall, ctx: RuleContext):
    """``wgmma.mma_async.sp`` when it fits (sm_90a, C in the wgmma accumulator layout), else
    ``mma.sp`` over warp tiles when it fits and C is a register accumulator, else the thread
    gemm over the stored values."""
    arch, threads = ctx.options.arch, thread_var(ctx)[1]
    problem = gemm_fit.mma_policy_error(call, arch, threads)
    if problem is not None:
        raise UnsupportedOpError(problem)
    if gemm_fit.wgmma_misfit(call, arch, threads) is None:
        return lower_gemm_wgmma(call, ctx)
    if gemm_fit.mma_misfit(call, arch, threads) is None and \
            layout.is_accumulator(call.operands["C"].buffer):
        return lower_gemm_sp_mma(call, ctx)
    return lower_gemm_sp_threads(call, ctx)


def lower_gemm_sp_mma(call: TileOpCall, ctx: RuleContext):
    """One call of ``tw_gemm_mma_sp_rf`` (include/tw_mma.h) by every thread of the block: each
    warp loads the values' fragments with ``ldmatrix``, B's as for ``mma.sync``, and 32 bits of
    metadata per row pair, and issues ``mma.sp`` over its warp tile of C's registers."""
    a, e, b, c = (call.operands[k] for k in "AEBC")
    cdims = non_unit(c)
    m, n = const(c.extents[cdims[0]]), const(c.extents[cdims[1]])
    _, threads = thread_var(ctx)
    grid = layout.grid(c.buffer, threads)
    row_bytes = gemm_fit.leading_dim(e) * e.buffer.dtype.bits // 8
    trans_b = "true" if call.attrs["transpose_B"] else "false"
    name = (f"tw_gemm_mma_sp_rf<{m}, {n}, {gemm_fit.dense_k(call)}, {trans_b}, {threads}, "
            f"{grid[0]}, {grid[1]}, {_operand_layout(a)}, {_operand_layout(b)}, {row_bytes}>")
    gemm = tirx.Evaluate(tirx.call_extern("int32", name, *(_ptr(r) for r in (a, e, b, c))))
    if not call.attrs["clear_accum"]:
        return gemm
    return tirx.SeqStmt([lower_fill(fill_call(c), ctx), gemm])


def lower_gemm_sp_threads(call: TileOpCall, ctx: RuleContext):
    """C += decompress(A, E) @ op(B) with C's elements spread over the threads: each stored
    value of A's row meets the row of op(B) its metadata names."""
    a, e, b, c = (call.operands[k] for k in "AEBC")
    ta, te, tb = (call.attrs[f"transpose_{x}"] for x in "AEB")
    adims, edims, bdims, _ = _matrix_dims(call, "AEBC")
    dtype, meta, acc = str(a.buffer.dtype), str(e.buffer.dtype), str(c.buffer.dtype)

    def term(i, j, r):
        word = _element(e, edims, i, sp.meta_column(r, dtype, meta), te, "int32")
        row = sp.dense_column(word, r, dtype, meta)
        return _element(a, adims, i, r, ta, acc) * _element(b, bdims, row, j, tb, acc)

    return _thread_gemm(call, ctx, a.extents[adims[0]] if ta else a.extents[adims[1]], term)


# (lowering, why it does not fit) of each variant, the preferred first
VARIANTS = ((lower_gemm_wgmma, _wgmma_misfit),
            (lower_gemm_mma, gemm_fit.mma_misfit),
            (lower_gemm_mma_rows, gemm_fit.mma_rows_misfit),
            (lower_gemm_threads, lambda call, arch, threads: None))
