"""GEMM on the CPU: ``C += op(A) @ op(B)`` as a register-blocked micro-kernel.

When C's tile has constant extents, C is cut into ``MR x NR`` blocks (plus shorter and
narrower blocks at the lower and right edges). Each block's accumulator lives in a small
buffer that is loaded from C (or zeroed, with ``clear_accum``) before the k loop and stored
back after it. The block's rows are unrolled and its columns vectorised, so LLVM keeps the
accumulator in vector registers: with ``MR = 6`` and ``NR = 16`` that is 12 of the 16 AVX2
registers, leaving room for two rows of B and one broadcast element of A.

The column blocks are the outer loop. When there are enough row blocks to repay it, op(B)'s
``K x NR`` column panel is first copied into a contiguous buffer (converted to the
accumulator type, transposed when ``transpose_B``), so that it stays in L1 while the row
blocks of A stream past it; read in place, a panel of a power-of-two-wide tile maps onto a
few cache sets and is evicted.

A tile with a symbolic extent falls back to the plain i-k-j loop nest, whose innermost loop
walks a row of B and of C and is vectorised by the loop phase.
"""

from __future__ import annotations

from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import PARALLEL, as_expr
from tvm import tirx

MR = 6
NR = 16
LANES = 8
PACK_MIN_ROWS = 2 * MR


def _const(x):
    """The value of an integer extent, or None when it is symbolic."""
    if isinstance(x, int):
        return x
    return int(x.value) if isinstance(x, tirx.IntImm) else None


def _matrix_dims(region):
    dims = [d for d, e in enumerate(region.extents)
            if not (isinstance(e, tirx.IntImm) and int(e.value) == 1 or e == 1)]
    return dims if len(dims) == 2 else [len(region.extents) - 2, len(region.extents) - 1]


def _index(region, dims, r, c):
    index = [as_expr(s) for s in region.starts]
    index[dims[0]] = index[dims[0]] + r
    index[dims[1]] = index[dims[1]] + c
    return index


class _Gemm:
    """The operands of one ``gemm`` call and element accessors in C's coordinates."""

    def __init__(self, call: TileOpCall):
        self.a, self.b, self.c = (call.operands[x] for x in "ABC")
        self.ta, self.tb = call.attrs["transpose_A"], call.attrs["transpose_B"]
        self.clear = call.attrs["clear_accum"]
        self.ad, self.bd, self.cd = (_matrix_dims(r) for r in (self.a, self.b, self.c))
        self.m, self.n = self.c.extents[self.cd[0]], self.c.extents[self.cd[1]]
        self.k = self.a.extents[self.ad[0]] if self.ta else self.a.extents[self.ad[1]]
        self.acc = str(self.c.buffer.dtype)

    def _load(self, region, dims, r, col):
        value = tirx.BufferLoad(region.buffer, _index(region, dims, r, col))
        return value if str(region.buffer.dtype) == self.acc else tirx.Cast(self.acc, value)

    def a_at(self, i, kk):
        return self._load(self.a, self.ad, kk, i) if self.ta else self._load(self.a, self.ad, i, kk)

    def b_at(self, kk, j):
        return self._load(self.b, self.bd, j, kk) if self.tb else self._load(self.b, self.bd, kk, j)

    def c_index(self, i, j):
        return _index(self.c, self.cd, i, j)

    def c_at(self, i, j):
        return tirx.BufferLoad(self.c.buffer, self.c_index(i, j))


def _tile_loops(rows, cols: int, body_fn, rows_kind=tirx.ForKind.UNROLLED) -> tirx.Stmt:
    """``for r in rows (unrolled unless told): for c in cols: body``; the column loop is
    vectorised when ``cols`` is a multiple of the vector width and unrolled otherwise."""
    r, c = tirx.Var("r", "int32"), tirx.Var("c", "int32")
    inner = tirx.For(c, 0, as_expr(cols),
                     tirx.ForKind.VECTORIZED if cols % LANES == 0 else tirx.ForKind.UNROLLED,
                     body_fn(r, c))
    return tirx.For(r, 0, as_expr(rows), rows_kind, inner)


def _micro(g: _Gemm, i0, j0, rows: int, cols: int, b_at) -> tirx.Stmt:
    """``C[i0:i0+rows, j0:j0+cols] += op(A) @ op(B)`` through a register accumulator;
    ``b_at(k, c)`` reads op(B) at column ``j0 + c``."""
    # "global" rather than "local": a constant-size global allocation under 1 KiB becomes a
    # stack alloca that LLVM promotes to registers, while TVM lowers a "local" one to a
    # workspace allocation (a heap pointer LLVM cannot promote).
    acc = tirx.decl_buffer((rows, cols), g.acc, "C_acc", scope="global")
    if g.clear:
        init = _tile_loops(rows, cols, lambda r, c: tirx.BufferStore(
            acc, tirx.const(0, g.acc), [r, c]))
    else:
        init = _tile_loops(rows, cols, lambda r, c: tirx.BufferStore(
            acc, g.c_at(i0 + r, j0 + c), [r, c]))
    kk = tirx.Var("k", "int32")
    update = _tile_loops(rows, cols, lambda r, c: tirx.BufferStore(
        acc, tirx.BufferLoad(acc, [r, c]) + g.a_at(i0 + r, kk) * b_at(kk, c), [r, c]))
    k_loop = tirx.For(kk, 0, as_expr(g.k), tirx.ForKind.SERIAL, update)
    store = _tile_loops(rows, cols, lambda r, c: tirx.BufferStore(
        g.c.buffer, tirx.BufferLoad(acc, [r, c]), g.c_index(i0 + r, j0 + c)))
    return tirx.SeqStmt([tirx.AllocBuffer(acc), init, k_loop, store])


def _row_blocks(g: _Gemm, m: int, j0, cols: int, b_at) -> list:
    """Micro-kernels over all rows of C for the column block at ``j0``."""
    stmts = []
    if m >= MR:
        io = tirx.Var("io", "int32")
        stmts.append(tirx.For(io, 0, as_expr(m // MR), tirx.ForKind.SERIAL,
                              _micro(g, io * MR, j0, MR, cols, b_at)))
    if m % MR:
        stmts.append(_micro(g, as_expr(m - m % MR), j0, m % MR, cols, b_at))
    return stmts


def _blocked(g: _Gemm, m: int, n: int) -> tirx.Stmt:
    stmts = []
    if n >= NR:
        jo = tirx.Var("jo", "int32")
        j0 = jo * NR
        if m >= PACK_MIN_ROWS and _const(g.k) is not None:
            # op(B)'s K x NR column panel, copied contiguously (and converted to the
            # accumulator type) once, then read by every row block from L1.
            panel = tirx.decl_buffer((_const(g.k), NR), g.acc, "B_panel", scope="global")
            pack = _tile_loops(_const(g.k), NR, lambda kk, c: tirx.BufferStore(
                panel, g.b_at(kk, j0 + c), [kk, c]), rows_kind=tirx.ForKind.SERIAL)
            body = [pack, *_row_blocks(g, m, j0, NR,
                                       lambda kk, c: tirx.BufferLoad(panel, [kk, c]))]
            stmts.append(tirx.AllocBuffer(panel))
        else:
            body = _row_blocks(g, m, j0, NR, lambda kk, c: g.b_at(kk, j0 + c))
        stmts.append(tirx.For(jo, 0, as_expr(n // NR), tirx.ForKind.SERIAL, _seq(body)))
    if n % NR:
        j0 = as_expr(n - n % NR)
        stmts.extend(_row_blocks(g, m, j0, n % NR, lambda kk, c: g.b_at(kk, j0 + c)))
    return _seq(stmts)


def _seq(stmts: list) -> tirx.Stmt:
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _loop_nest(g: _Gemm) -> tirx.Stmt:
    """The i-k-j nest for symbolic extents; the j loops are left to the loop phase."""
    i, kk, j = (tirx.Var(v, "int32") for v in ("i", "k", "j"))
    c_index = g.c_index(i, j)
    update = tirx.BufferStore(g.c.buffer, g.c_at(i, j) + g.a_at(i, kk) * g.b_at(kk, j), c_index)
    nest = tirx.For(i, 0, as_expr(g.m), tirx.ForKind.SERIAL, tirx.For(
        kk, 0, as_expr(g.k), tirx.ForKind.SERIAL,
        tirx.For(j, 0, as_expr(g.n), tirx.ForKind.SERIAL, update, annotations=PARALLEL)))
    if not g.clear:
        return nest
    i2, j2 = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    zero = tirx.For(i2, 0, as_expr(g.m), tirx.ForKind.SERIAL, tirx.For(
        j2, 0, as_expr(g.n), tirx.ForKind.SERIAL,
        tirx.BufferStore(g.c.buffer, tirx.const(0, g.acc), g.c_index(i2, j2)),
        annotations=PARALLEL))
    return tirx.SeqStmt([zero, nest])


def gemm_loops(call: TileOpCall, ctx: RuleContext) -> tirx.Stmt:
    g = _Gemm(call)
    m, n = _const(g.m), _const(g.n)
    if m is None or n is None or m == 0 or n == 0:
        return _loop_nest(g)
    return _blocked(g, m, n)
