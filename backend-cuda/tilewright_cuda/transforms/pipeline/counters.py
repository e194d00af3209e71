"""Loop-carried stage counters: in a loop the pipeline made (annotated ``keys.COUNTED``), each
``floormod(i + c, S)`` and ``floordiv(i + c, S)`` of its variable ``i`` (``c`` fixed over the
loop, ``S`` a constant that is not a power of two) becomes a register the loop carries::

    stage[0] = (min + c) % S; round[0] = (min + c) / S      # once, before the loop
    for i in range(min, min + n):
        ... stage[0] ... round[0] & 1 ...                    # version, barrier parity
        if stage[0] == S - 1: stage[0] = 0; round[0] += 1
        else: stage[0] += 1

so ptxas, which computes ``i % 3`` by a multiply-high by a magic number and a few shifts and
multiply-adds on the FMA pipe, gets an add and a compare. The pipeline transforms keep writing
versions and phases as ``floormod``/``floordiv`` of the iteration count, the form the shared-
memory analyses (``insert_sync``, ``place_memory``'s lifetimes) read; this pass runs after them.
A persistent kernel's count ``base + i`` starts its counters once per tile. Powers of two are
left alone: they compile to masks and shifts already.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import prim_func_pass
from tilewright.transform.walk import rebuild_for
from tvm import tirx

from ... import keys
from ...analysis.ir import const, loads_in, seq, uses

DIVISIONS = (tirx.FloorMod, tirx.FloorDiv, tirx.Mod, tirx.Div)
REMAINDERS = (tirx.FloorMod, tirx.Mod)


class Ring:
    """The stage ``(i + c) % S`` and round ``(i + c) / S`` of one offset ``c`` and stage count
    ``S`` in a counted loop, each a one-element register buffer."""

    def __init__(self, loop, offset, stages: int, kind, name: str):
        self.loop, self.offset, self.stages, self.kind = loop, offset, stages, kind
        dtype = loop.loop_var.ty
        self.stage = tirx.decl_buffer((1,), dtype, f"{name}_stage", scope="local")
        self.round = tirx.decl_buffer((1,), dtype, f"{name}_round", scope="local")
        self.rounded = False  # whether the round is used

    def matches(self, offset, stages: int, kind) -> bool:
        return (stages == self.stages and kind is self.kind and
                tvm_ffi.structural_equal(offset, self.offset))

    def load(self, remainder: bool):
        if not remainder:
            self.rounded = True
        return tirx.BufferLoad(self.stage if remainder else self.round, [self._zero()])

    def _zero(self):
        return tirx.const(0, self.loop.loop_var.ty)

    def _store(self, buf, value):
        return tirx.BufferStore(buf, value, [self._zero()])

    def start(self) -> list:
        """The counters' allocations and first values, before the loop."""
        first = self.loop.min + self.offset
        rem, div = (tirx.floormod, tirx.floordiv) if self.kind is tirx.FloorMod else \
            (tirx.truncmod, tirx.truncdiv)
        out = [tirx.AllocBuffer(self.stage), self._store(self.stage, rem(first, self.stages))]
        if self.rounded:
            out += [tirx.AllocBuffer(self.round), self._store(self.round, div(first, self.stages))]
        return out

    def advance(self) -> tirx.Stmt:
        """The counters' step, at the end of an iteration."""
        stage = self.load(True)
        wrap = [self._store(self.stage, self._zero())]
        if self.rounded:
            wrap.append(self._store(self.round, tirx.BufferLoad(self.round, [self._zero()]) + 1))
        return tirx.IfThenElse(stage == self.stages - 1, seq(wrap),
                               self._store(self.stage, stage + 1))


def _defined_in(body) -> list:
    """The variables ``body`` binds (loops, binds, lets)."""
    found = []
    tvm_ffi.structural_walk(body, [
        (tirx.For, lambda s: found.append(s.loop_var)),
        (tirx.Bind, lambda s: found.append(s.var)),
        (tirx.LetStmt, lambda s: found.append(s.var)),
        (tirx.Let, lambda e: found.append(e.var))])
    return found


def _count(loop, analyzer) -> tirx.Stmt:
    """``loop`` with its divisions of the iteration count by non-powers of two carried."""
    i, inner = loop.loop_var, _defined_in(loop.body)
    rings: list[Ring] = []

    def visit(e):
        stages = const(e.b)
        if stages is None or stages < 2 or stages & (stages - 1) == 0 or not uses(e.a, i):
            return e
        offset = analyzer.simplify(e.a - i)
        if uses(offset, i) or loads_in(offset) or any(uses(offset, v) for v in inner):
            return e  # not the count plus something fixed over the loop
        kind = tirx.FloorMod if isinstance(e, (tirx.FloorMod, tirx.FloorDiv)) else tirx.Mod
        if kind is tirx.Mod and not analyzer.can_prove(loop.min + offset >= 0):
            return e  # truncating below zero: the counters step as floor division does
        ring = next((r for r in rings if r.matches(offset, stages, kind)), None)
        if ring is None:
            ring = Ring(loop, offset, stages, kind, f"{i.name}{len(rings) or ''}")
            rings.append(ring)
        return ring.load(isinstance(e, REMAINDERS))

    body = tvm_ffi.structural_map(loop.body, (DIVISIONS, visit))
    annotations = {k: v for k, v in loop.annotations.items() if str(k) != keys.COUNTED}
    if not rings:
        return rebuild_for(loop, annotations=annotations)
    new = rebuild_for(loop, body=seq([body, *(r.advance() for r in rings)]),
                      annotations=annotations)
    return tirx.SeqStmt([*(s for r in rings for s in r.start()), new])


def carry_stages():
    """Every counted loop's stage and phase arithmetic on loop-carried counters."""

    def run(func):
        analyzer = tvm.sym.Analyzer()

        def visit(loop):
            if keys.COUNTED not in loop.annotations:
                return loop
            return _count(loop, analyzer)

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, visit)))

    return prim_func_pass("CUDACarryStages", run)
