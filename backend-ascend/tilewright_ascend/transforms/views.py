"""Views of tiles (``T.reshape``, ``T.view``) as accesses of the tile itself.

A view is a buffer declared over the bytes of another (``tirx.DeclBuffer`` whose data is the
other's): the same UB storage with another shape or an element type of the same width, as
``LocalTensor::ReinterpretCast`` sees it. The pass rewrites every element access of a view of an
on-chip tile as an access of the tile: the view's row-major position is the tile's, a load of
another element type is the tile's element reinterpreted (``T.reinterpret``), a store
reinterprets the value back. Later passes and the codegen then know one buffer per storage.

A tile op takes a view only when it is the tile seen whole (same shape and element type);
another shape would give the op a region that is not a rectangle of the tile, which is refused
at the op's line. Views of GM tensors (``T.Tensor(shape, dtype, A.data)``) are left alone.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region, tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import sym, tirx

from ..facts.dtypes import dtype_bytes


def tile_views(func) -> dict:
    """view buffer -> (tile, span): every view of an on-chip tile in ``func``, each resolved
    to the tile whose storage it sees (a view of a view sees the first view's tile)."""
    direct = {}

    def visit(decl):
        data = decl.data
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and \
                data.op.name == "tirx.buffer_data":
            direct[decl.buffer] = (data.args[0], decl.span)

    tvm_ffi.structural_walk(func.body, (tirx.DeclBuffer, visit))
    views = {}
    for view, (base, span) in direct.items():
        while base in direct:
            base = direct[base][0]
        if str(base.scope()) in ("global", ""):
            continue
        if dtype_bytes(view.dtype) != dtype_bytes(base.dtype):
            raise KernelError(f"view {view.name!r} sees tile {base.name!r} of {base.dtype} as "
                              f"{view.dtype}: backend 'ascend' views a tile only as an element "
                              "type of the same width (LocalTensor::ReinterpretCast keeps the "
                              "element positions)", span_location(span))
        views[view] = (base, span)
    return views


def _same_shape(view, tile) -> bool:
    return tvm_ffi.structural_equal(list(view.shape), list(tile.shape))


def _whole(view, tile) -> bool:
    """Whether ``view`` is ``tile`` seen whole: the same shape and element type."""
    return str(view.dtype) == str(tile.dtype) and _same_shape(view, tile)


def _strides(shape) -> list:
    return [math.prod(shape[k + 1:]) if shape[k + 1:] else 1 for k in range(len(shape))]


def tile_indices(view, tile, indices, analyzer: sym.Analyzer) -> list:
    """The indices into ``tile`` of the element at ``indices`` of ``view`` (row-major)."""
    if _same_shape(view, tile):
        return list(indices)
    linear = sum((i * s for i, s in zip(indices, _strides(list(view.shape)))),
                 tirx.const(0, "int32"))
    shape = list(tile.shape)
    out = [tirx.floordiv(linear, s) if k == 0 else
           tirx.floormod(tirx.floordiv(linear, s), shape[k])
           for k, s in enumerate(_strides(shape))]
    return [analyzer.simplify(e) for e in out]


def _check_tile_ops(func, views) -> None:
    for call in tile_ops_in(func):
        for operand in call.operands.values():
            if isinstance(operand, Region) and operand.buffer in views:
                tile = views[operand.buffer][0]
                if not _whole(operand.buffer, tile):
                    raise KernelError(
                        f"T.{call.name} of view {operand.buffer.name!r} "
                        f"{tuple(operand.buffer.shape)} {operand.buffer.dtype}: backend "
                        f"'ascend' takes a view of tile {tile.name!r} {tuple(tile.shape)} "
                        f"{tile.dtype} in element accesses only; give T.{call.name} the tile "
                        "itself", span_location(call.span))


def fold(func):
    """``func`` with every view of a tile folded into accesses of the tile."""
    views = tile_views(func)
    if not views:
        return func
    _check_tile_ops(func, views)
    analyzer = sym.Analyzer()

    def load(x):
        if x.source not in views:
            return x
        tile = views[x.source][0]
        value = tirx.BufferLoad(tile, tile_indices(x.source, tile, x.indices, analyzer))
        return value if str(tile.dtype) == str(x.source.dtype) else \
            tirx.reinterpret(str(x.source.dtype), value)

    def store(s):
        if s.buffer not in views:
            return s
        tile = views[s.buffer][0]
        value = s.value if str(tile.dtype) == str(s.buffer.dtype) else \
            tirx.reinterpret(str(tile.dtype), s.value)
        return tirx.BufferStore(tile, value, tile_indices(s.buffer, tile, s.indices, analyzer),
                                span=s.span)

    def seq(s):
        kept = [c for c in s.seq if not (isinstance(c, tirx.DeclBuffer) and c.buffer in views)]
        if len(kept) == len(s.seq):
            return s
        return tirx.SeqStmt(kept) if len(kept) > 1 else kept[0]

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.TensorLoad, load),
                                              (tirx.BufferStore, store), (tirx.SeqStmt, seq)])
    return func.with_body(body)


def fold_views():
    return prim_func_pass("AscendFoldViews", fold)
