"""Tile selects on the vector unit: ``c ? x : y`` in a ``T.Parallel`` nest as Compare/Compares
into a uint8 bit mask and Select (A2's 比较与选择 instructions; what they take is
:data:`..facts.instructions.COMPARE_MODES`)."""

from __future__ import annotations

import math

from tilewright.ir import make_call
from tvm import tirx

from ..facts.arch import ALIGN
from ..facts.instructions import COMPARISONS, SELECT_DTYPES, compare_count, compare_takes
from ..facts.ops import VCMP, VCMPS, VDUP, VSEL, VSELS, VUN
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
_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


class SelectLowering:
    """The select family of the vector lowering (mixed into its lowering class, which provides
    ``temp``, ``value_of``, ``result_tile``, ``convert`` and ``broadcast``)."""

    def select(self, e, variables, extents, ops, target):
        """``c ? x : y`` over tiles: Compare (Compares with a scalar) into a uint8 bit mask,
        then Select between two tiles (VSEL_TENSOR_TENSOR_MODE) or a tile and a scalar false
        arm (VSEL_TENSOR_SCALAR_MODE); what the instructions cannot take
        (:data:`..facts.instructions.COMPARE_MODES`) is Unvectorizable."""
        cond, yes, no = (e.condition, e.true_value, e.false_value) \
            if type(e).__name__ == "Select" else e.args
        dtype = str(e.ty)
        if math_name(cond) == "isnan":  # x != x
            cond = tirx.NE(cond.args[0], cond.args[0])
        mode = COMPARISONS.get(type(cond).__name__)
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
        if mode is None or not compare_takes(cond.a.ty, mode):
            raise Unvectorizable(f"the condition {cond} is not a comparison A2's Compare takes "
                                 "(float16 and float32, int32 ==)")
        left = self.value_of(cond.a, variables, extents, ops, None)
        right = self.value_of(cond.b, variables, extents, ops, None)
        if left[0] == "s":
            left, right, mode = right, left, _SWAPPED[mode]
        if left[0] == "s":
            raise Unvectorizable(f"the condition {cond} reads no tile")
        arms = [self.value_of(x, variables, extents, ops, None) for x in (yes, no)]
        tiles = [v for v in (left, right, *arms) if v[0] == "t"]
        dims = tiles[0][2] if all(v[2] == tiles[0][2] for v in tiles) else \
            tuple(range(len(variables)))
        left, right = (self._full(v, dims, extents, ops) for v in (left, right))
        yes_v, no_v = (self._full(v, dims, extents, ops) for v in arms)
        if yes_v[0] == "s":  # Select's scalar is its false arm
            tile = self.temp([extents[d] for d in dims], dtype, ops)
            ops.append(make_call(VDUP.name, {"dst": tile, "value": cast_to(yes_v[1], dtype)}))
            yes_v = ("t", tile, dims)
        out = self.result_tile(dims, extents, dtype, ops, target)
        regions = [out, left[1], yes_v[1], *(v[1] for v in (right, no_v) if v[0] == "t")]
        rows = math.prod(extents[d] for d in dims[:-1]) if dims else 1
        cols = extents[dims[-1]] if dims else 1
        cdtype = str(left[1].buffer.dtype)
        if rows == 1 or all(contiguous(r) for r in regions):
            slot, mask_bytes = 0, compare_count(rows * cols, cdtype) // 8
        else:  # one Compare and one Select per row, each row's bits from a 32-byte slot
            slot = -(-compare_count(cols, cdtype) // 8 // ALIGN) * ALIGN
            mask_bytes = rows * slot
        mask = self.temp([-(-mask_bytes // ALIGN) * ALIGN], "uint8", ops)
        sources = [self._readable(v, slot, rows, cols, extents, ops) for v in (left, right)]
        if right[0] == "s":
            ops.append(make_call(VCMPS.name, {"dst": mask, "src": sources[0][1],
                                              "scalar": cast_to(right[1], cdtype)},
                                 {"op": mode, "slot": slot}))
        else:
            ops.append(make_call(VCMP.name, {"dst": mask, "src0": sources[0][1],
                                             "src1": sources[1][1]},
                                 {"op": mode, "slot": slot}))
        if no_v[0] == "s":
            ops.append(make_call(VSELS.name, {"dst": out, "mask": mask, "src": yes_v[1],
                                              "scalar": cast_to(no_v[1], dtype)}, {"slot": slot}))
        else:
            ops.append(make_call(VSEL.name, {"dst": out, "mask": mask, "src0": yes_v[1],
                                             "src1": no_v[1]}, {"slot": slot}))
        return ("t", out, dims)

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

    def _readable(self, value, slot, rows, cols, extents, ops):
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
        dims = [extents[d] for d in value[2]]
        stride = (padded_shape([1, cols], dtype) or [1, cols])[-1]
        tile = self.temp(dims, dtype, ops, reach(stride))
        ops.append(make_call(VUN.name, {"dst": tile, "src": region}, {"op": "copy"}))
        return ("t", tile, value[2])


def guard_as_selects(guard, body):
    """``body`` (element stores) under ``guard`` as unguarded stores ``x[k] = guard ? v :
    x[k]``, when ``guard`` is one comparison of tile data that no store of ``body`` changes;
    None otherwise."""
    stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    if type(guard).__name__ not in COMPARISONS or not loads(guard) or \
            not all(isinstance(s, tirx.BufferStore) for s in stores):
        return None
    read = {x.source for x in loads(guard)}
    if any(s.buffer in read for s in stores):
        return None
    return seq([tirx.BufferStore(s.buffer, tirx.Select(guard, s.value, tirx.BufferLoad(
        s.buffer, list(s.indices))), list(s.indices), span=s.span) for s in stores])
