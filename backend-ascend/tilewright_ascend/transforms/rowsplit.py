"""Row split of a split kernel's vector program over the two vector cores of a group.

When every vector tile has the same number of rows R (even) and every use of a tile works
row by row, vector core ``vid`` takes rows ``[vid * R/2, (vid + 1) * R/2)``: the tiles get
R/2 rows, a ``T.Parallel`` nest over the rows runs R/2 iterations with its row index offset
by ``vid * R/2`` wherever it is not the row of a tile (global indices, masks), tile ops on
whole tiles take the halves, and the global side of a copy (a tensor or a workspace) moves by
``vid * R/2`` rows. Reductions along the last axis stay per row. Anything else (a tile op
on part of a tile's rows, a reduction down the rows, a scalar statement, a tile with another
row count) keeps the whole program on AIV0.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import REDUCE_OPS, Region, decode, make_call
from tvm import tirx

from ..facts import ops

_PER_ROW = {"copy", "fill", *REDUCE_OPS}


class _NoSplit(Exception):
    pass


def split_rows(stmts: list, buffers: list, vid):
    """(rewritten statements, {tile: new shape}), or None when the program does not split by
    rows."""
    if not buffers:
        return None
    rows = {int(b.shape[0]) for b in buffers}
    if len(rows) != 1 or rows.pop() % 2:
        return None
    full = int(buffers[0].shape[0])
    splitter = _Rows(set(buffers), full, vid)
    try:
        out = [splitter.stmt(s) for s in stmts]
    except _NoSplit:
        return None
    return out, {b: [full // 2, *[int(x) for x in b.shape[1:]]] for b in buffers}


def _is_int(e, value) -> bool:
    return isinstance(e, (int, tirx.IntImm)) and int(getattr(e, "value", e)) == value


class _Rows:
    def __init__(self, tiles: set, rows: int, vid):
        self.tiles, self.rows, self.half = tiles, rows, rows // 2
        self.offset = vid * tirx.IntImm("int32", self.half)

    def stmt(self, s):
        call = decode(s.then_case if isinstance(s, tirx.IfThenElse) else s)
        if call is not None and call.name in ops.SYNC_OPS:
            return s
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([self.stmt(x) for x in s.seq])
        if isinstance(s, tirx.For) and str(s.annotations.get("tw.loop", "")) == "parallel":
            return self.parallel(s)
        if isinstance(s, tirx.For) and s.kind != tirx.ForKind.THREAD_BINDING:
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, self.stmt(s.body),
                            annotations=s.annotations, span=s.span)
        call = decode(s)
        if call is None:
            raise _NoSplit
        return self.tile_op(call)

    def region(self, r: Region, is_copy: bool) -> Region:
        starts, ext = list(r.starts), list(r.extents)
        if r.buffer in self.tiles:
            if not (_is_int(starts[0], 0) and _is_int(ext[0], self.rows)):
                raise _NoSplit
            ext[0] = self.half
        elif str(r.buffer.scope()) == "global" and is_copy:
            row = next((d for d, e in enumerate(ext) if _is_int(e, self.rows)), None)
            if row is None:
                raise _NoSplit
            starts[row] = starts[row] + self.offset
            ext[row] = self.half
        else:
            raise _NoSplit
        return Region(r.buffer, tuple(starts), tuple(ext))

    def tile_op(self, call):
        name = call.name
        if name not in _PER_ROW and not name.startswith("ascend.tile."):
            raise _NoSplit
        if name in REDUCE_OPS:
            ndim = len(call.operands["src"].buffer.shape)
            if ndim < 2 or call.attrs["dim"] not in (-1, ndim - 1):
                raise _NoSplit
        operands = {k: self.region(v, name == "copy") if isinstance(v, Region) else v
                    for k, v in call.operands.items()}
        return make_call(name, operands, call.attrs, span=call.span)

    def parallel(self, loop):
        if not _is_int(loop.extent, self.rows) or not _is_int(loop.min, 0):
            raise _NoSplit
        var = tirx.Var(str(loop.loop_var.name), loop.loop_var.ty)
        shifted = var + self.offset
        body = tvm_ffi.structural_map(loop.body, (tirx.Var, lambda v: shifted
                                                  if v.same_as(loop.loop_var) else v))

        other_rows = []  # a tile read or written at another row (raising inside the map
        # would cross TVM's C++ and arrive as a bare RuntimeError, not as _NoSplit)

        def row_index(indices):
            first = indices[0]
            if not (isinstance(first, tirx.Add) and first.a.same_as(var) and
                    first.b.same_as(self.offset)):
                other_rows.append(first)
                return list(indices)
            return [var, *list(indices)[1:]]

        def load(x):
            if x.source not in self.tiles:
                return x
            return tirx.BufferLoad(x.source, row_index(x.indices))

        def store(x):
            if x.buffer not in self.tiles:
                return x
            return tirx.BufferStore(x.buffer, x.value, row_index(x.indices))

        body = tvm_ffi.structural_map(body, (tvm.ir.TensorLoad, load))
        body = tvm_ffi.structural_map(body, (tirx.BufferStore, store))
        if other_rows:
            raise _NoSplit
        return tirx.For(var, 0, self.half, loop.kind, body, annotations=loop.annotations,
                        span=loop.span)
