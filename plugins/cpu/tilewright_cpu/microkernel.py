"""GEMM on the CPU: ``C += op(A) @ op(B)`` as a register-blocked micro-kernel sized for the host.

Register blocking. When C's tile has constant extents it is cut into ``mr x nr`` blocks (plus
shorter and narrower blocks at the lower and right edges). Each block's accumulator lives in a
small buffer that is loaded from C (or zeroed, with ``clear_accum``) before the k loop and stored
back after it; its rows are unrolled and its columns vectorised, so LLVM keeps it in vector
registers. ``nr`` is a multiple of the host's vector width (8 float32 lanes with AVX2, 16 with
AVX-512) and :func:`choose_blocking` picks ``(mr, nr)`` for the tile's shape among the pairs
whose accumulators, ``nr / lanes`` vectors of B and one broadcast element of A fit the host's
vector registers, with a cost model of a core that issues two vector FMAs and two loads per
cycle and waits five cycles for an FMA's result; the edge blocks are part of the cost.

Cache blocking. The column blocks are the outer loop. When there are enough row blocks to repay
it, op(B)'s ``kc x nr`` column panel is first copied into a contiguous buffer in the accumulator
type (transposed when ``transpose_B``), so that it stays in L1 while the row blocks of A stream
past it; read in place, a panel of a power-of-two-wide tile maps onto a few cache sets and is
evicted. ``kc`` is the depth whose panel fills half of L1; a deeper K is processed in chunks of
``kc``. An A whose dtype is not the accumulator's (float16 ...) is converted once per chunk into
a buffer of the accumulator type rather than at every use.

A tile with a symbolic extent falls back to the plain i-k-j loop nest, whose innermost loop
walks a row of B and of C and is vectorised by the loop phase.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tilewright import sparse as sp
from tilewright.ir import TileOpCall, matrix_dims
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import PARALLEL, as_expr
from tvm import tirx

from .blocking import Blocking, choose_blocking, column_vectors

LINE_BYTES = 64

def _const(x):
    """The value of an integer extent, or None when it is symbolic."""
    if isinstance(x, int):
        return x
    return int(x.value) if isinstance(x, tirx.IntImm) else None


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
        self.ad, self.bd, self.cd = (matrix_dims(r.extents) for r in (self.a, self.b, self.c))
        self.m, self.n = self.c.extents[self.cd[0]], self.c.extents[self.cd[1]]
        self.k = self.a.extents[self.ad[0]] if self.ta else self.a.extents[self.ad[1]]
        self.acc = str(self.c.buffer.dtype)
        self.acc_bits = tvm.DataType(self.acc).bits

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


def _row_loop(cols: int, lanes: int, body_fn) -> tirx.Stmt:
    """``for c in cols: body_fn(c)``, vectorised when ``cols`` is a multiple of the vector
    width and unrolled otherwise."""
    c = tirx.Var("c", "int32")
    kind = tirx.ForKind.VECTORIZED if cols % lanes == 0 else tirx.ForKind.UNROLLED
    return tirx.For(c, 0, as_expr(cols), kind, body_fn(c))


def _copy_loops(rows: int, cols: int, lanes: int, body_fn) -> tirx.Stmt:
    """A serial ``rows x cols`` loop nest whose inner loop is vectorised when it can be."""
    r, c = tirx.Var("r", "int32"), tirx.Var("c", "int32")
    vector = cols % lanes == 0
    inner = tirx.For(c, 0, cols, tirx.ForKind.VECTORIZED if vector else tirx.ForKind.SERIAL,
                     body_fn(r, c))
    return tirx.For(r, 0, rows, tirx.ForKind.SERIAL, inner)


@dataclass
class _Chunk:
    """One K chunk: its first k, its depth, and accessors of op(A) (row, k within the chunk)
    and of op(B) (k within the chunk, column)."""

    k0: object
    depth: int | object
    a_at: object
    b_at: object


def _micro(g: _Gemm, blk: Blocking, chunk: _Chunk, i0, j0, rows: int, cols: int,
           zero: bool) -> tirx.Stmt:
    """``C[i0:i0+rows, j0:j0+cols] += op(A) @ op(B)`` over one K chunk through a register
    accumulator; ``chunk.b_at(k, c)`` reads op(B) at column ``j0 + c``."""
    # One buffer per row and vector register (per row when the block is not a whole number
    # of vectors), of scope "global" rather than "local": TVM makes a constant-size global
    # allocation of at most 1 KiB a stack alloca, which LLVM promotes to registers, and a
    # larger one or a "local" one a workspace allocation (a heap pointer it cannot). A row
    # several vectors wide in one buffer is a vector of a width that is not a power of two
    # for nr = 3 * lanes, which LLVM splits into scalars and reassembles at every k (3 GFLOP/s
    # instead of 32 on AVX2).
    width = blk.lanes if cols % blk.lanes == 0 else cols
    accs = [(r, v * width, tirx.decl_buffer((width,), g.acc, f"C_acc{r}_{v}", scope="global"))
            for r in range(rows) for v in range(cols // width)]

    def each(body_fn) -> list:
        """``body_fn(acc, row, column in the block, lane)`` for every accumulator's lanes."""
        return [_row_loop(width, blk.lanes, lambda c, r=r, v=v, a=a: body_fn(a, r, v + c, c))
                for r, v, a in accs]

    if zero:
        init = each(lambda a, r, col, c: tirx.BufferStore(a, tirx.const(0, g.acc), [c]))
    else:
        init = each(lambda a, r, col, c: tirx.BufferStore(a, g.c_at(i0 + r, j0 + col), [c]))
    kk = tirx.Var("k", "int32")
    update = each(lambda a, r, col, c: tirx.BufferStore(
        a, tirx.BufferLoad(a, [c]) + chunk.a_at(i0 + r, kk) * chunk.b_at(kk, col), [c]))
    k_loop = tirx.For(kk, 0, as_expr(chunk.depth), tirx.ForKind.SERIAL, _seq(update))
    store = each(lambda a, r, col, c: tirx.BufferStore(
        g.c.buffer, tirx.BufferLoad(a, [c]), g.c_index(i0 + r, j0 + col)))
    return tirx.SeqStmt([*(tirx.AllocBuffer(a) for _, _, a in accs), *init, k_loop, *store])


def _prefetch_panel(g: _Gemm, k0, depth: int, j0, nr: int, shares: int):
    """``share(s)``: prefetches of the ``s``-th of ``shares`` parts of the cache lines of
    op(B)'s ``depth x nr`` panel at ``(k0, j0)``; a prefetch never faults, so the last part
    may reach past the panel."""
    elt = max(1, tvm.DataType(str(g.b.buffer.dtype)).bits // 8)
    rows, row_elems = (nr, depth) if g.tb else (depth, nr)
    per_line = max(1, LINE_BYTES // elt)
    lines_per_row = -(-row_elems // per_line)
    count = -(-rows * lines_per_row // shares)

    def share(s):
        p = tirx.Var("p", "int32")
        q = s * count + p
        r, col = tirx.floordiv(q, lines_per_row), tirx.floormod(q, lines_per_row) * per_line
        index = _index(g.b, g.bd, j0 + r, k0 + col) if g.tb else \
            _index(g.b, g.bd, k0 + r, j0 + col)
        hint = tirx.call_llvm_intrin("void", "llvm.prefetch.p0", tirx.address_of(
            tirx.BufferLoad(g.b.buffer, index)), tirx.const(0, "int32"), tirx.const(3, "int32"),
            tirx.const(1, "int32"))
        return tirx.For(p, 0, count, tirx.ForKind.SERIAL, tirx.Evaluate(hint))

    return share


def _row_blocks(g: _Gemm, blk: Blocking, chunk: _Chunk, m: int, j0, cols: int,
                zero: bool, prefetch=None) -> list:
    """Micro-kernels over all rows of C for the column block at ``j0``; before each full one,
    ``prefetch(row block)`` when given."""
    stmts = []
    rows = blk.rows_for(column_vectors(cols, blk.lanes))
    if m >= rows:
        io = tirx.Var("io", "int32")
        micro = _micro(g, blk, chunk, io * rows, j0, rows, cols, zero)
        if prefetch is not None:
            micro = tirx.SeqStmt([prefetch(io), micro])
        stmts.append(tirx.For(io, 0, as_expr(m // rows), tirx.ForKind.SERIAL, micro))
    if m % rows:
        stmts.append(_micro(g, blk, chunk, as_expr(m - m % rows), j0, m % rows, cols, zero))
    return stmts


def _seq(stmts: list) -> tirx.Stmt:
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _chunk_body(g: _Gemm, blk: Blocking, k0, depth, m: int, n: int, zero: bool) -> tirx.Stmt:
    """Every column and row block of C over the K chunk ``[k0, k0 + depth)``."""
    stmts = []
    a_at = lambda i, kk: g.a_at(i, k0 + kk)  # noqa: E731
    if str(g.a.buffer.dtype) != g.acc and _const(depth) is not None:
        # op(A) converted once, laid out as A is so the copy reads it contiguously
        shape = (depth, m) if g.ta else (m, depth)
        conv = tirx.decl_buffer(shape, g.acc, "A_acc", scope="global")
        if g.ta:
            fill = _copy_loops(depth, m, blk.lanes, lambda kk, i: tirx.BufferStore(
                conv, g.a_at(i, k0 + kk), [kk, i]))
            a_at = lambda i, kk: tirx.BufferLoad(conv, [kk, i])  # noqa: E731
        else:
            fill = _copy_loops(m, depth, blk.lanes, lambda i, kk: tirx.BufferStore(
                conv, g.a_at(i, k0 + kk), [i, kk]))
            a_at = lambda i, kk: tirx.BufferLoad(conv, [i, kk])  # noqa: E731
        stmts += [tirx.AllocBuffer(conv), fill]
    if n >= blk.nr:
        jo = tirx.Var("jo", "int32")
        j0 = jo * blk.nr
        if m >= 2 * blk.mr and _const(depth) is not None:
            # op(B)'s depth x nr column panel, copied contiguously (and converted to the
            # accumulator type) once, then read by every row block from L1.
            panel = tirx.decl_buffer((_const(depth), blk.nr), g.acc, "B_panel", scope="global")
            pack = _copy_loops(_const(depth), blk.nr, blk.lanes, lambda kk, c: tirx.BufferStore(
                panel, g.b_at(k0 + kk, j0 + c), [kk, c]))
            chunk = _Chunk(k0, depth, a_at, lambda kk, c: tirx.BufferLoad(panel, [kk, c]))
            # while the row blocks run, the next panel (the next chunk's first after the
            # last) comes into cache: its rows are far apart in a wide B and stall the pack
            last = jo == n // blk.nr - 1
            prefetch = _prefetch_panel(
                g, tirx.Select(last, k0 + depth, k0), _const(depth),
                tirx.Select(last, tirx.const(0, "int32"), j0 + blk.nr), blk.nr,
                m // blk.rows_for(blk.nr // blk.lanes))
            body = [pack, *_row_blocks(g, blk, chunk, m, j0, blk.nr, zero, prefetch)]
            stmts.append(tirx.AllocBuffer(panel))
        else:
            chunk = _Chunk(k0, depth, a_at, lambda kk, c: g.b_at(k0 + kk, j0 + c))
            body = _row_blocks(g, blk, chunk, m, j0, blk.nr, zero)
        stmts.append(tirx.For(jo, 0, as_expr(n // blk.nr), tirx.ForKind.SERIAL, _seq(body)))
    if n % blk.nr:
        j0 = as_expr(n - n % blk.nr)
        chunk = _Chunk(k0, depth, a_at, lambda kk, c: g.b_at(k0 + kk, j0 + c))
        stmts.extend(_row_blocks(g, blk, chunk, m, j0, n % blk.nr, zero))
    return _seq(stmts)


def _blocked(g: _Gemm, m: int, n: int) -> tirx.Stmt:
    blk = choose_blocking(m, n, g.acc_bits)
    k = _const(g.k)
    if k is None or k <= blk.kc:
        return _chunk_body(g, blk, tirx.const(0, "int32"), g.k, m, n, g.clear)
    stmts = []
    if g.clear:  # the first chunk cannot zero C: later chunks accumulate onto it
        stmts.append(_copy_loops(m, n, blk.lanes, lambda i, j: tirx.BufferStore(
            g.c.buffer, tirx.const(0, g.acc), g.c_index(i, j))))
    kb = tirx.Var("kb", "int32")
    stmts.append(tirx.For(kb, 0, k // blk.kc, tirx.ForKind.SERIAL,
                          _chunk_body(g, blk, kb * blk.kc, blk.kc, m, n, False)))
    if k % blk.kc:
        stmts.append(_chunk_body(g, blk, tirx.const(k - k % blk.kc, "int32"), k % blk.kc,
                                 m, n, False))
    return _seq(stmts)


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


def gemm_sp_loops(call: TileOpCall, ctx: RuleContext) -> tirx.Stmt:
    """``T.gemm_sp`` as an i-k-j nest over the stored columns of A: each stored value meets
    the row of op(B) its metadata names (:func:`tilewright.sparse.dense_column`); the j
    loop walks a row of B and of C and is vectorised by the loop phase."""
    a, e, b, c = (call.operands[x] for x in "AEBC")
    ta, te, tb = (call.attrs[f"transpose_{x}"] for x in "AEB")
    ad, ed, bd, cd = (matrix_dims(r.extents) for r in (a, e, b, c))
    dtype, meta, acc = str(a.buffer.dtype), str(e.buffer.dtype), str(c.buffer.dtype)
    m, n = c.extents[cd[0]], c.extents[cd[1]]
    stored = a.extents[ad[0]] if ta else a.extents[ad[1]]
    i, kk, j = (tirx.Var(v, "int32") for v in ("i", "k", "j"))

    def load(region, dims, r, col, transposed, to):
        value = tirx.BufferLoad(region.buffer, _index(region, dims, col, r) if transposed else
                                _index(region, dims, r, col))
        return value if str(region.buffer.dtype) == to else tirx.Cast(to, value)

    word = load(e, ed, i, sp.meta_column(kk, dtype, meta), te, "int32")
    row = sp.dense_column(word, kk, dtype, meta)
    c_index = _index(c, cd, i, j)
    update = tirx.BufferStore(c.buffer, tirx.BufferLoad(c.buffer, c_index) +
                              load(a, ad, i, kk, ta, acc) * load(b, bd, row, j, tb, acc), c_index)
    nest = tirx.For(i, 0, as_expr(m), tirx.ForKind.SERIAL, tirx.For(
        kk, 0, as_expr(stored), tirx.ForKind.SERIAL,
        tirx.For(j, 0, as_expr(n), tirx.ForKind.SERIAL, update, annotations=PARALLEL)))
    if not call.attrs["clear_accum"]:
        return nest
    i2, j2 = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    zero = tirx.For(i2, 0, as_expr(m), tirx.ForKind.SERIAL, tirx.For(
        j2, 0, as_expr(n), tirx.ForKind.SERIAL,
        tirx.BufferStore(c.buffer, tirx.const(0, acc), _index(c, cd, i2, j2)),
        annotations=PARALLEL))
    return tirx.SeqStmt([zero, nest])
