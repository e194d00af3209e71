"""Tile selects on the vector unit: ``c ? x : y`` in a ``T.Parallel`` nest as Compare/Compares
into a uint8 bit mask and Select (A2's 比较与选择 instructions; what they take is
:data:`..facts.instructions.COMPARE_MODES`)."""

from __future__ import annotations

import math

from tilewright.ir import Region, make_call
from tvm import tirx

from ..facts.arch import ALIGN
from ..facts.instructions import COMPARISONS, SELECT_DTYPES, compare_count, compare_takes
from ..facts.ops import VCMP, VCMPS, VDUP, VMASK, VMASKNOT, VSEL, VSELS, VUN
from .indices import IndexLowering, index_comparison
from .tile_exprs import (
    Unvectorizable,
    cast_to,
    contiguous,
    ints,
    loads,
    padded_shape,
    seq,
    whole_tile,
)
from .vecmath import math_name

# a comparison with its operands swapped (s < x is x > s)
# the TIR nodes joining two conditions (``and``, ``&``, ``or``, ``|``) -> the tree's node
_JOINS = {"And": "and", "BitwiseAnd": "and", "Or": "or", "BitwiseOr": "or"}
_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


class SelectLowering(IndexLowering):
    """The select family of the vector lowering (mixed into its lowering class, which provides
    ``temp``, ``value_of``, ``result_tile``, ``convert``, ``broadcast`` and ``ranges``)."""

    def select(self, e, variables, extents, ops, target):
        """``c ? x : y`` over tiles: each comparison of ``c`` a Compare (Compares with a scalar)
        into a uint8 bit mask, the masks of ``c``'s and/or/not joined by And/Or/Not on their
        uint16 lanes (逻辑计算/And.md, Or.md, Not.md), then Select between two tiles
        (VSEL_TENSOR_TENSOR_MODE) or a tile and a scalar false arm (VSEL_TENSOR_SCALAR_MODE).
        One instruction each covers the operands when they are contiguous ranges or whole
        tiles whose rows are padded alike (:meth:`padded_alike`), else one per row. What the
        instructions cannot take (:func:`condition_tree`) is Unvectorizable."""
        cond, yes, no = (e.condition, e.true_value, e.false_value) \
            if type(e).__name__ == "Select" else e.args
        dtype = str(e.ty)
        if not self.selects:
            raise Unvectorizable(f"{e}: this architecture's selects run on the scalar unit")
        if dtype == "bfloat16":  # A2 selects float32; bfloat16 -> float32 -> bfloat16 is exact
            wide = tirx.Select(cond, cast_to(yes, "float32"), cast_to(no, "float32"))
            inner = self.value_of(wide, variables, extents, ops, None)
            out = self.result_tile(inner[2], extents, dtype, ops, target)
            self.convert(out, inner[1], ops)
            return ("t", out, inner[2])
        if dtype not in SELECT_DTYPES:
            raise Unvectorizable(f"{e} selects {dtype}; A2's Select takes float16 and float32")
        tree = condition_tree(cond)
        if tree is None:
            raise Unvectorizable(f"the condition {cond} is not comparisons A2's Compare takes "
                                 "(float16 and float32, int32 ==) joined by and/or/not")
        leaves = []  # [mode, tile value, tile or scalar value] per comparison
        for mode, a, b in comparisons(tree):
            if index_comparison(a, b):  # loop indices: float32 index tiles (.indices)
                left, right = (self.index_value(x, variables, extents, ops) for x in (a, b))
            else:
                left = self.value_of(a, variables, extents, ops, None)
                right = self.value_of(b, variables, extents, ops, None)
            if left[0] == "s":
                left, right, mode = right, left, _SWAPPED[mode]
            if left[0] == "s":
                raise Unvectorizable(f"the comparison {a} vs {b} of {cond} reads no tile")
            leaves.append([mode, left, right])
        arms = [self.value_of(x, variables, extents, ops, None) for x in (yes, no)]
        tiles = [v for v in (*(x for leaf in leaves for x in leaf[1:]), *arms) if v[0] == "t"]
        dims = tiles[0][2] if all(v[2] == tiles[0][2] for v in tiles) else \
            tuple(range(len(variables)))
        for leaf in leaves:
            leaf[1:] = [self._full(v, dims, extents, ops) for v in leaf[1:]]
        yes_v, no_v = (self._full(v, dims, extents, ops) for v in arms)
        if yes_v[0] == "s":  # Select's scalar is its false arm
            tile = self.temp([extents[d] for d in dims], dtype, ops)
            ops.append(make_call(VDUP.name, {"dst": tile, "value": cast_to(yes_v[1], dtype)}))
            yes_v = ("t", tile, dims)
        result = self.result_tile(dims, extents, dtype, ops, target)
        values = [("t", result, dims), yes_v, no_v, *(v for leaf in leaves for v in leaf[1:])]
        compared = {str(leaf[1][1].buffer.dtype) for leaf in leaves}
        rows = math.prod(extents[d] for d in dims[:-1]) if dims else 1
        cols = extents[dims[-1]] if dims else 1
        padded = self.padded_alike(values)
        if padded is not None:  # whole tiles, padding and all: one range
            values, rows, cols = padded, 1, math.prod(ints(padded[0][1].extents))
        if rows == 1 or all(contiguous(v[1]) for v in values if v[0] == "t"):
            cols, rows = rows * cols, 1
            slot, mask_bytes = 0, max(compare_count(cols, d) for d in compared) // 8
        else:  # one Compare and one Select per row, each row's bits from a 32-byte slot
            slot = max(-(-compare_count(cols, d) // 8 // ALIGN) * ALIGN for d in compared)
            mask_bytes = rows * slot
        out, yes_v, no_v, *rest = values
        rest = iter(rest)
        masks = iter([self._compare(leaf[0], next(rest), next(rest), (slot, rows, cols),
                                    mask_bytes, ops) for leaf in leaves])
        mask = self._join(tree, masks, mask_bytes, ops)
        if no_v[0] == "s":
            ops.append(make_call(VSELS.name, {"dst": out[1], "mask": mask, "src": yes_v[1],
                                              "scalar": cast_to(no_v[1], dtype)}, {"slot": slot}))
        else:
            ops.append(make_call(VSEL.name, {"dst": out[1], "mask": mask, "src0": yes_v[1],
                                             "src1": no_v[1]}, {"slot": slot}))
        return ("t", result, dims)

    def padded_alike(self, values):
        """``values`` (("t", region, dims) or ("s", expr), the written one first) with each tile
        region widened to its whole allocation, padding and all, when every tile region is a
        whole tile, the tiles have one shape, their rows are padded and the written one's
        padding is this pass's (nothing reads it): an instruction then runs once over the
        range, computing padding that is never read; None otherwise."""
        tiles = [v[1] for v in values if v[0] == "t"]
        shapes = {tuple(ints(r.buffer.shape) or ()) for r in tiles}
        if len(shapes) != 1 or not all(whole_tile(r) for r in tiles) or \
                all(contiguous(r) for r in tiles) or tiles[0].buffer not in self.padded:
            return None
        shape = tuple(tirx.IntImm("int32", n) for n in shapes.pop())
        return [v if v[0] == "s" else ("t", Region(v[1].buffer, v[1].starts, shape), v[2])
                for v in values]

    def _compare(self, mode, left, right, layout, mask_bytes, ops):
        """A fresh bit mask of ``left mode right`` (Compare, or Compares with a scalar)."""
        slot, rows, cols = layout
        mask = self.temp([-(-mask_bytes // ALIGN) * ALIGN], "uint8", ops)
        cdtype = str(left[1].buffer.dtype)
        sources = [self._readable(v, slot, rows, cols, ops) for v in (left, right)]
        if right[0] == "s":
            ops.append(make_call(VCMPS.name, {"dst": mask, "src": sources[0][1],
                                              "scalar": cast_to(right[1], cdtype)},
                                 {"op": mode, "slot": slot}))
        else:
            ops.append(make_call(VCMP.name, {"dst": mask, "src0": sources[0][1],
                                             "src1": sources[1][1]},
                                 {"op": mode, "slot": slot}))
        return mask

    def _join(self, tree, masks, mask_bytes, ops):
        """The mask of ``tree`` from the masks of its comparisons (``masks``, in the order of
        :func:`comparisons`), joined by And/Or/Not over every byte of the masks."""
        if tree[0] == "cmp":
            return next(masks)
        parts = [self._join(t, masks, mask_bytes, ops) for t in tree[1:]]
        mask = self.temp([-(-mask_bytes // ALIGN) * ALIGN], "uint8", ops)
        if tree[0] == "not":
            ops.append(make_call(VMASKNOT.name, {"dst": mask, "src": parts[0]}))
        else:
            ops.append(make_call(VMASK.name, {"dst": mask, "src0": parts[0], "src1": parts[1]},
                                 {"op": tree[0]}))
        return mask

    def _full(self, value, dims, extents, ops):
        """A tile value over ``dims``: a scalar as it is, a tile of fewer dimensions (a row,
        a column, one element) broadcast into a temporary."""
        if value[0] == "s" or value[2] == dims:
            return value
        if len(dims) > 2:
            raise Unvectorizable(f"a select broadcasts in a {len(dims)}-D nest")
        dtype = str(value[1].buffer.dtype)
        tile = self.temp([extents[d] for d in dims], dtype, ops)
        ops.append(make_call(VDUP.name, {"dst": tile, "value": tirx.const(0, dtype)}))
        self.broadcast("add", tile, tile, value, ops)
        return ("t", tile, dims)

    def _readable(self, value, slot, rows, cols, ops):
        """A Compare source: ``value``'s tile where it is a whole tile whose allocation holds
        what Compare reads (whole repeats from the start of the range, or of each row when
        ``slot``), else a copy into a temporary that does."""
        if value[0] == "s":
            return value
        region = value[1]
        dtype = str(region.buffer.dtype)

        def reach(stride):
            return (rows - 1) * stride + compare_count(cols, dtype) if slot else \
                compare_count(rows * cols, dtype)

        shape = ints(region.buffer.shape)
        if whole_tile(region) and math.prod(shape) >= reach(shape[-1]):
            return value
        stride = (padded_shape([1, cols], dtype) or [1, cols])[-1]
        tile = self.temp(ints(region.extents), dtype, ops, reach(stride))
        ops.append(make_call(VUN.name, {"dst": tile, "src": region}, {"op": "copy"}))
        return ("t", tile, value[2])

def guard_as_selects(guard, body):
    """``body`` (element stores) under ``guard`` as unguarded stores ``x[k] = guard ? v :
    x[k]``, when ``guard`` is comparisons of tile data or of loop indices
    (:func:`condition_tree`) that no store of ``body`` changes; None otherwise."""
    stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    if condition_tree(guard) is None or \
            not all(isinstance(s, tirx.BufferStore) for s in stores):
        return None
    read = {x.source for x in loads(guard)}
    if any(s.buffer in read for s in stores):
        return None
    return seq([tirx.BufferStore(s.buffer, tirx.Select(guard, s.value, tirx.BufferLoad(
        s.buffer, list(s.indices))), list(s.indices), span=s.span) for s in stores])


def condition_tree(cond):
    """``cond`` as a tree of what A2 computes into bit masks: ``("cmp", mode, a, b)`` for a
    comparison Compare takes (:data:`..facts.instructions.COMPARE_MODES`; a comparison of
    integer loop indices, compared on float32 index tiles: :mod:`.indices`; ``T.isnan(x)`` is
    ``x != x``; the language writes ``T.isinf`` and ``T.isfinite`` with it and ``|x| == inf``),
    ``("and", l, r)``, ``("or", l, r)`` and ``("not", t)`` for ``and``/``&``, ``or``/``|`` and
    ``not``; None for anything else."""
    kind = type(cond).__name__
    if kind in _JOINS:
        parts = [condition_tree(cond.a), condition_tree(cond.b)]
        return None if None in parts else (_JOINS[kind], *parts)
    if kind == "Not":
        inner = condition_tree(cond.a)
        return None if inner is None else ("not", inner)
    if math_name(cond) == "isnan":
        cond = tirx.NE(cond.args[0], cond.args[0])
        kind = "NE"
    mode = COMPARISONS.get(kind)
    if mode is None or not (compare_takes(cond.a.ty, mode) or index_comparison(cond.a, cond.b)):
        return None
    return ("cmp", mode, cond.a, cond.b)


def comparisons(tree) -> list:
    """The comparisons of a :func:`condition_tree`, (mode, a, b) left to right."""
    if tree[0] == "cmp":
        return [tree[1:]]
    return [c for t in tree[1:] for c in comparisons(t)]
