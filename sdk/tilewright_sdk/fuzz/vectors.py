"""The program builder's vector values (:class:`VectorDraws`): values of 2, 4 or 8 lanes of the
program's dtype (``T.float32x2(a, b)``, ``T.int8x4(c)``), combined lane by lane, stored into a
slice of a tile or read back lane by lane with ``T.extract_lane``. Each lane is computed as the
scalar operation would be, so a lane's interval and error are the scalar's."""

from __future__ import annotations

import re

from hypothesis import strategies as st

from .values import Expr

# the element types of vectors (the language's <element>x<lanes>: 8- to 32-bit integers,
# 16- and 32-bit floats)
VECTOR_ELEMENTS = ("int8", "int16", "int32", "uint8", "uint16", "uint32", "float16",
                   "bfloat16", "float32")
VECTOR_BITS = 128  # the widest vector of a backend without the feature wide_vectors
VECTOR_OPS = ("+", "-", "*", "max", "min")


def lane_values(op: str, a: Expr, b: Expr) -> tuple:
    """The interval of ``a op b``."""
    if op in ("max", "min"):
        f = max if op == "max" else min
        return f(a.lo, b.lo), f(a.hi, b.hi)
    corners = {"+": (a.lo + b.lo, a.hi + b.hi), "-": (a.lo - b.hi, a.hi - b.lo),
               "*": (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)}[op]
    return min(corners), max(corners)


class VectorDraws:
    """The vector values of :class:`~tilewright_sdk.fuzz.program._Builder` (a part of it)."""

    def lanes(self) -> list:
        """The lane counts of the vectors of the program's dtype this backend computes (of at
        most 128 bits, 256 with ``wide_vectors``); none where vectors are avoided."""
        if not self.allowed("vector") or self.dtype not in VECTOR_ELEMENTS:
            return []
        bits = int(re.search(r"\d+", self.dtype).group())
        return [n for n in (2, 4, 8) if n * bits <= (2 * VECTOR_BITS if self.wide_vectors
                                                      else VECTOR_BITS)]

    def vector(self, n: int, values: list) -> str:
        """An ``n``-lane value of ``values`` (one a lane, or one for every lane)."""
        return f"T.{self.dtype}x{n}({', '.join(values)})"

    def lane_op(self, op: str, a: Expr, b: Expr, text_a: str, text_b: str) -> Expr:
        """``a op b`` lane by lane, written ``text_a op text_b``: its interval and error (a float
        lane rounds as the scalar operation does); an Expr of empty text where it could leave
        the dtype (``Expr.text`` is then '')."""
        lo, hi = lane_values(op, a, b)
        if not self.fits(lo, hi):
            return Expr("", lo, hi)
        text = f"T.{op}({text_a}, {text_b})" if op in ("max", "min") else \
            f"({text_a} {op} {text_b})"
        if op in ("max", "min"):
            return Expr(text, lo, hi, max(a.err, b.err), a.exact and b.exact)
        err = a.err * b.mag + b.err * a.mag if op == "*" else a.err + b.err
        return self.rounded(text, lo, hi, err, a, b)

    def lane_expr(self, a: Expr, depth: int, feats) -> Expr:
        """``T.extract_lane`` of a lane-wise operation: lane ``k`` of ``T.float32x2(a, b) op w``
        (``a, b`` repeated to 4 or 8 lanes), ``w`` a constant broadcast to every lane or the
        lanes the other way round (``b, a``)."""
        n = self.draw(st.sampled_from(self.lanes()))
        b = self.expr(depth - 1)
        op = self.draw(st.sampled_from(VECTOR_OPS))
        k = self.draw(st.integers(0, n - 1))
        x, y = (a, b) if k % 2 == 0 else (b, a)
        if self.draw(st.booleans()):
            y = self.const(self.draw(st.sampled_from((0.5, -1.5, 2.0) if self.floating else
                                                     (1, 2, 3) if self.unsigned else (-2, 1, 3))))
            other = self.vector(n, [y.text])
        else:
            other = self.vector(n, [b.text, a.text] * (n // 2))
        lane = self.lane_op(op, x, y, self.vector(n, [a.text, b.text] * (n // 2)), other)
        if not lane.text:
            return a
        return Expr(f"T.extract_lane({lane.text}, {k})", lane.lo, lane.hi, lane.err, lane.exact,
                    frozenset(feats | b.features | {"vector", "vector_lanes", f"vector_x{n}"}))

    def vector_map(self) -> None:
        """A tile computed by vectors: each iteration of ``T.Parallel(bm, bn // n)`` names an
        ``n``-lane value of ``n`` consecutive elements of a row of a tile (``v =
        T.float32x2(t[i, 2 * j], t[i, 2 * j + 1])``), combines it lane by lane with another
        tile's lanes, a constant broadcast to every lane or one constant a lane, and stores
        the result into the new tile's slice (``u[i, 2 * j:2 * j + 2] = ...``) or, named, lane
        by lane (``T.extract_lane``)."""
        lanes = [n for n in self.lanes() if self.bn % n == 0]
        if not lanes:
            return
        n = self.draw(st.sampled_from(lanes))
        a = self.draw(st.sampled_from(self.squares()))

        def lanes_of(tile) -> str:
            return self.vector(n, [f"{tile.name}[i, {n} * j + {k}]" for k in range(n)])

        kind = self.draw(st.sampled_from(("tile", "broadcast", "constants")))
        consts = (0.5, -1.5, 2.0, 3.0) if self.floating else \
            (1, 2, 3, 0) if self.unsigned else (-2, 1, 3, 0)
        if kind == "tile":
            b = self.draw(st.sampled_from(self.squares()))
            other = lanes_of(b)
            y = Expr("", b.lo, b.hi, b.err, b.err == 0.0)
        else:
            cs = [self.const(self.draw(st.sampled_from(consts)))
                  for _ in range(1 if kind == "broadcast" else n)]
            other = self.vector(n, [c.text for c in cs])
            y = Expr("", min(c.lo for c in cs), max(c.hi for c in cs))
        v = self.fresh("v")
        x = Expr(v, a.lo, a.hi, a.err, a.err == 0.0)
        lane = self.lane_op(self.draw(st.sampled_from(VECTOR_OPS)), x, y, v, other)
        if not lane.text:
            return
        out = self.tile("2d", lane.lo, lane.hi, lane.err)
        lines = [f"for i, j in T.Parallel({self.bm}, {self.bn // n}):", f"    {v} = {lanes_of(a)}"]
        if self.draw(st.booleans()):
            lines.append(f"    {out.name}[i, {n} * j:{n} * j + {n}] = {lane.text}")
            store = "slice"
        else:
            w = self.fresh("w")
            lines += [f"    {w} = {lane.text}", *(
                f"    {out.name}[i, {n} * j + {k}] = T.extract_lane({w}, {k})" for k in range(n))]
            store = "extract"
        self.body += lines
        self.features |= {"vector", "vector_map", f"vector_x{n}", f"vector_{kind}",
                          f"vector_store_{store}"}
