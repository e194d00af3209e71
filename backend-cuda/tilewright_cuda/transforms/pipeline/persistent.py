"""A persistent kernel's tile loop (``T.Persistent``: a serial loop over the tiles a block
walks) around a pipelined loop, for the producer warpgroup that walks the tiles itself and for
the in-order loads that start a block's next tile before its last one is stored, and the
running count of the pipelined loop's iterations over the tiles each role keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx

from ...analysis.ir import flat, loads_in, seq, substitute, touches, uses


@dataclass
class TileLoop:
    """The serial loop over tiles that holds a persistent kernel's pipelined loop (T.Persistent:
    ``for wave: if wave * workers + block < tiles: <binds> <before> <loop> <after>``)."""

    loop: Any
    guard: Any  # the condition around its body, or None
    before: list  # the tile's statements before the pipelined loop
    after: list

    @staticmethod
    def find(items: list, loop):
        """(index in ``items``, None) when ``loop`` is one of them; (index, _TileLoop) when it
        is directly in a serial loop that is; else None."""
        for k, s in enumerate(items):
            if s.same_as(loop):
                return k, None
            if not isinstance(s, tirx.For) or s.kind != tirx.ForKind.SERIAL:
                continue
            body, guard = s.body, None
            if isinstance(body, tirx.IfThenElse) and body.else_case is None:
                body, guard = body.then_case, body.condition
            inner = flat([body])
            at = next((i for i, t in enumerate(inner) if t.same_as(loop)), None)
            if at is not None:
                return k, TileLoop(s, guard, inner[:at], inner[at + 1:])
        return None

    def independent(self, tx, tiles) -> bool:
        """The producer can walk the tiles by itself: the guard is the same for every thread
        and reads no memory, and the tiles' other code leaves the pipelined tiles alone (the
        producer fills them for the next tile meanwhile)."""
        if self.guard is not None and (uses(self.guard, tx) or loads_in(self.guard)):
            return False
        return not any(touches(s, tiles) for s in self.before + self.after)

    def rebuild(self, body: list, var=None):
        inner = seq(body) if self.guard is None else tirx.IfThenElse(self.guard, seq(body), None)
        stmt = tirx.For(self.loop.loop_var, self.loop.min, self.loop.extent, self.loop.kind,
                        inner, annotations=self.loop.annotations, span=self.loop.span)
        if var is None:
            return stmt
        return substitute(stmt, {self.loop.loop_var: var})

    def for_producer(self, body: list, pure) -> tirx.Stmt:
        """The tile loop around ``body`` for the producer: the tile's binds it can compute
        itself first, all under variables of its own."""
        binds = [s for s in self.before if pure(s)]
        fresh = {s.var: tirx.Var(f"{s.var.name}_load", s.var.ty) for s in binds}
        own = [tirx.Bind(fresh[s.var], substitute(s.value, fresh), span=s.span) for s in binds]
        var = tirx.Var(f"{self.loop.loop_var.name}_load", self.loop.loop_var.ty)
        return self.rebuild([*own, *(substitute(s, fresh) for s in body)], var)


    def for_round(self, body: list, pure, wave, name: str) -> tirx.Stmt:
        """``body`` for round ``wave`` of the tile loop (an expression of its variable, or a
        constant), under that round's guard and bounds: the tile's binds it can compute by
        itself (``pure``) first, under variables of their own (suffix ``name``)."""
        binds = [s for s in self.before if pure(s)]
        fresh = {s.var: tirx.Var(f"{s.var.name}_{name}", s.var.ty) for s in binds}
        mapping = {self.loop.loop_var: wave, **fresh}
        own = [tirx.Bind(fresh[s.var], substitute(s.value, mapping), span=s.span)
               for s in binds]
        held = wave < self.loop.min + self.loop.extent
        if self.guard is not None:
            held = tirx.all(held, substitute(self.guard, mapping))
        return tirx.IfThenElse(held, seq([*own, *(substitute(s, mapping) for s in body)]), None)

    def values(self, pure) -> dict:
        """Each of the tile's binds ``pure`` accepts, its variable to its value with the binds
        before it substituted: an expression of the tile loop's variable and what the tile
        loop is under (the block indices)."""
        out = {}
        for s in self.before:
            if pure(s):
                out[s.var] = substitute(s.value, out)
        return out

    def invariant(self, expr) -> bool:
        """``expr`` is the same in every round (uses neither the tile loop's variable nor a
        value bound per tile)."""
        return not uses(expr, self.loop.loop_var) and not any(
            uses(expr, s.var) for s in self.before if isinstance(s, tirx.Bind))


class Counter:
    """A role's running count of the pipelined loop's iterations over the tiles (a register)."""

    def __init__(self, name: str):
        self.buf = tirx.decl_buffer((1,), "int32", name, scope="local")

    @staticmethod
    def of(tiles, name: str):
        """(counter, the variable its value is bound to per tile), or (None, 0) without tiles."""
        if tiles is None:
            return None, tirx.const(0, "int32")
        return Counter(name), tirx.Var(f"{name}_base", "int32")

    def start(self) -> tirx.Stmt:
        return tirx.SeqStmt([tirx.AllocBuffer(self.buf), tirx.BufferStore(
            self.buf, tirx.const(0, "int32"), [tirx.const(0, "int32")])])

    def bind(self, var) -> tirx.Stmt:
        return tirx.Bind(var, tirx.BufferLoad(self.buf, [tirx.const(0, "int32")]))

    def add(self, base, n) -> tirx.Stmt:
        return tirx.BufferStore(self.buf, base + n, [tirx.const(0, "int32")])
