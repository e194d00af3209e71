"""GEMM on the CPU: ``C += op(A) @ op(B)`` as a loop nest LLVM can vectorise.

The nest is i-k-j: the innermost loop walks a row of B and of C, contiguous in memory, and
is vectorised; A's element is broadcast.
"""

from __future__ import annotations

from tvm import tirx

from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext


def _expr(x):
    return tirx.const(x, "int32") if isinstance(x, int) else x


def _matrix_dims(region):
    dims = [d for d, e in enumerate(region.extents)
            if not (isinstance(e, tirx.IntImm) and int(e.value) == 1 or e == 1)]
    return dims if len(dims) == 2 else [len(region.extents) - 2, len(region.extents) - 1]


def _index(region, dims, r, c):
    index = [_expr(s) for s in region.starts]
    index[dims[0]] = index[dims[0]] + r
    index[dims[1]] = index[dims[1]] + c
    return index


def gemm_loops(call: TileOpCall, ctx: RuleContext) -> tirx.Stmt:
    a, b, c = call.operands["A"], call.operands["B"], call.operands["C"]
    ta, tb = call.attrs["transpose_A"], call.attrs["transpose_B"]
    ad, bd, cd = _matrix_dims(a), _matrix_dims(b), _matrix_dims(c)
    m, n = c.extents[cd[0]], c.extents[cd[1]]
    k = a.extents[ad[0]] if ta else a.extents[ad[1]]
    acc = str(c.buffer.dtype)
    i, kk, j = (tirx.Var(v, "int32") for v in ("i", "k", "j"))

    def load(region, dims, r, col):
        value = tirx.BufferLoad(region.buffer, _index(region, dims, r, col))
        return value if str(region.buffer.dtype) == acc else tirx.Cast(acc, value)

    a_val = load(a, ad, kk, i) if ta else load(a, ad, i, kk)
    b_val = load(b, bd, j, kk) if tb else load(b, bd, kk, j)
    c_index = _index(c, cd, i, j)
    update = tirx.BufferStore(c.buffer, tirx.BufferLoad(c.buffer, c_index) + a_val * b_val,
                              c_index)
    inner = tirx.For(j, 0, _expr(n), tirx.ForKind.SERIAL, update,
                     annotations={"tw.loop": "parallel"})
    nest = tirx.For(i, 0, _expr(m), tirx.ForKind.SERIAL,
                    tirx.For(kk, 0, _expr(k), tirx.ForKind.SERIAL, inner))
    if not call.attrs["clear_accum"]:
        return nest
    i2, j2 = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    zero = tirx.For(i2, 0, _expr(m), tirx.ForKind.SERIAL, tirx.For(
        j2, 0, _expr(n), tirx.ForKind.SERIAL,
        tirx.BufferStore(c.buffer, tirx.const(0, acc), _index(c, cd, i2, j2)),
        annotations={"tw.loop": "parallel"}))
    return tirx.SeqStmt([zero, nest])
