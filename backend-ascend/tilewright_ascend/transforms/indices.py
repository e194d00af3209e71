"""Index conditions on the vector unit: a comparison of loop indices in a select's condition
(a causal mask ``i >= j``, ``j < n``, ``j % 2 == 0``, ``k * bn + j < S``) computed on float32
index tiles, so that Compare/Compares and Select take it like a comparison of tile data.

Each loop variable of the ``T.Parallel`` nest that the comparison reads is a float32 tile of
its extent from CreateVecIndex (数据填充/CreateVecIndex.md: firstValue + k; a row operand for
the rows' variable of a 2-D nest, a column operand for the columns'); the index arithmetic
around it is vector arithmetic on those tiles (Add, Sub, Mul, Max, Min, Adds with a scalar of
the kernel), a floor division or modulo by a power of two ``x - floor(x * 2**-s) * 2**s``
(Muls, a float32 Cast CAST_FLOOR).

Only where exact: float32 holds every integer of magnitude below 2**24, so each value the
index side computes (each node of it, within the ranges of the nest's variables, the loops
around it and the kernel's block indices) must provably stay below that; the other side of a
comparison, free of the nest's variables, is a scalar converted to float32, which keeps the
comparison's result (rounding is monotone and leaves an integer below 2**24 as it is). A
division or modulo by anything but a power of two (float32 division rounds), or an index
that may reach 2**24, raises :class:`.tile_exprs.Unvectorizable`: the nest stays on the scalar
unit, the reason in the source.
"""

from __future__ import annotations

import tvm
from tilewright.ir import make_call
from tvm import sym, tirx

from ..facts.ops import VIDX
from .tile_exprs import INTEGERS, Unvectorizable, cast_to, loads, uses_any

# float32 holds every integer of magnitude below this exactly
EXACT_LIMIT = 2 ** 24
_ARITHMETIC = {"Add": tirx.Add, "Sub": tirx.Sub, "Mul": tirx.Mul, "Max": tirx.Max,
               "Min": tirx.Min}
# floor division and modulo, and C's truncating ones (the same for a non-negative dividend)
_DIVISIONS = {"FloorDiv": "div", "FloorMod": "mod", "Div": "div", "Mod": "mod"}


def index_comparison(a, b) -> bool:
    """Whether ``a`` vs ``b`` compares integer index expressions (no tile data read)."""
    return str(a.ty) in INTEGERS and not loads(a) and not loads(b)


class IndexLowering:
    """Index values of the vector lowering (mixed into its lowering class, which provides
    ``temp``, ``value_of`` and ``ranges``: the variables around the nest with their ranges)."""

    def index_value(self, e, variables, extents, ops):
        """The integer index expression ``e`` as a float32 value: ("s", expr) when it reads
        no variable of the nest, else the value of its float32 form on index tiles."""
        if not uses_any(e, variables):
            return ("s", cast_to(e, "float32"))
        analyzer = sym.Analyzer()
        for var, lo, extent in [*self.ranges, *((v, 0, n) for v, n in zip(variables, extents))]:
            analyzer.bind(var, tvm.ir.Range.from_min_extent(lo, extent))
        tiles: dict = {}
        wide = self._as_float(e, variables, extents, ops, analyzer, tiles)
        return self.value_of(wide, variables, extents, ops, None)

    def _as_float(self, e, variables, extents, ops, analyzer, tiles):
        bound = analyzer.const_int_bound(e)
        if bound.min_value <= -EXACT_LIMIT or bound.max_value >= EXACT_LIMIT:
            raise Unvectorizable(f"the index {e} may reach 2**24, past which float32 (the "
                                 "type A2's Compare orders indices in) is not exact")
        if isinstance(e, tirx.IntImm):
            return tirx.const(float(e.value), "float32")
        if not uses_any(e, variables):  # a scalar of the kernel
            return cast_to(e, "float32")
        kind = type(e).__name__
        if isinstance(e, tirx.Var):
            k = next(n for n, v in enumerate(variables) if v.same_as(e))
            if k not in tiles:
                tile = self.temp([extents[k]], "float32", ops, holds=f"the loop index {e.name}")
                ops.append(make_call(VIDX.name, {"dst": tile,
                                                 "first": tirx.const(0.0, "float32")}))
                tiles[k] = tile.buffer
            return tirx.BufferLoad(tiles[k], [e])
        if kind in _ARITHMETIC:
            return _ARITHMETIC[kind](
                self._as_float(e.a, variables, extents, ops, analyzer, tiles),
                self._as_float(e.b, variables, extents, ops, analyzer, tiles))
        if kind == "Cast" and str(e.value.ty) in INTEGERS:
            return self._as_float(e.value, variables, extents, ops, analyzer, tiles)
        if kind in _DIVISIONS:
            c = e.b.value if isinstance(e.b, tirx.IntImm) else 0
            if c <= 0 or c & (c - 1):
                raise Unvectorizable(f"the index {e} divides by {e.b}: float32 division is "
                                     "exact by powers of two only")
            if kind in ("Div", "Mod") and not analyzer.can_prove(e.a >= 0):
                raise Unvectorizable(f"the index {e} truncates a dividend that may be negative")
            x = self._as_float(e.a, variables, extents, ops, analyzer, tiles)
            quotient = tirx.floor(x * tirx.const(1.0 / c, "float32"))
            if _DIVISIONS[kind] == "div":
                return quotient
            return x - quotient * tirx.const(float(c), "float32")
        raise Unvectorizable(f"the index {e} has no exact vector form ({kind})")
