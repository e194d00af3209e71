"""Live ranges of on-chip buffers and first-fit placement that lets dead buffers share space.

Program points are the leaf statements of the kernel in program order (a tile op, a
``T.Parallel`` nest, a store, a ``T.SimdVF`` vector function: its tiles live across all of
it, since its instructions are not ordered through UB), the conditions of branches and the
bounds of loops (which read tiles on the scalar unit). A buffer is live from its first use
to its last; a use inside a serial or pipelined loop makes it live for the whole outermost
such loop around the use (the next iteration may read what this one left). Buffers whose
live ranges overlap never share bytes; the others may.
"""

from __future__ import annotations

from tvm import tirx

from ..facts.keys import SIMD_VF_KEY
from .buffers import buffers_in


def live_ranges(body, buffers: set) -> dict:
    """buffer -> (first point, last point) for the ``buffers`` that ``body`` uses."""
    ranges: dict = {}
    clock = [0]

    def use(found, lo, hi):
        for buf in found & buffers:
            old = ranges.get(buf)
            ranges[buf] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    def visit(stmt, loop_start):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, loop_start)
            return
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key != SIMD_VF_KEY:
            visit(stmt.body, loop_start)
            return
        if isinstance(stmt, tirx.IfThenElse):  # the condition reads its tiles first
            clock[0] += 1
            use(buffers_in(stmt.condition), clock[0], clock[0])
            visit(stmt.then_case, loop_start)
            if stmt.else_case is not None:
                visit(stmt.else_case, loop_start)
            return
        if isinstance(stmt, tirx.For) and \
                str(stmt.annotations.get("tw.loop", "")) != "parallel" and \
                stmt.kind != tirx.ForKind.THREAD_BINDING:
            outer = loop_start is None
            clock[0] += 1  # its bounds are read first (a trip count from a tile)
            start = clock[0]
            use(buffers_in(stmt.min) | buffers_in(stmt.extent), start, start)
            visit(stmt.body, start if outer else loop_start)
            if outer:  # everything used in the loop lives across all of it
                used = buffers_in(stmt)
                use(used, start, clock[0])
            return
        if isinstance(stmt, tirx.For):  # the block or vid binding, or a T.Parallel nest
            if stmt.kind == tirx.ForKind.THREAD_BINDING:
                visit(stmt.body, loop_start)
                return
        if isinstance(stmt, tirx.AllocBuffer):
            return
        clock[0] += 1
        use(buffers_in(stmt), clock[0], clock[0])

    visit(body, None)
    return ranges


def first_fit(items, align: int) -> dict:
    """Offsets for ``items`` = [(key, bytes, (start, end) or None for always live, fixed
    offset or None)], lowest first: a buffer never overlaps one whose range meets its own."""
    placed: list[tuple[int, int, tuple | None]] = []
    out = {}

    def meets(r1, r2):
        return r1 is None or r2 is None or not (r1[1] < r2[0] or r2[1] < r1[0])

    order = sorted(range(len(items)), key=lambda i: (items[i][3] is None,
                                                     items[i][2][0] if items[i][2] else -1,
                                                     -items[i][1], i))
    for key, size, rng, fixed in (items[i] for i in order):
        if fixed is not None:
            offset = fixed
        else:
            offset = 0
            busy = sorted((o, o + s) for o, s, r in placed if meets(r, rng))
            for lo, hi in busy:
                if offset + size <= lo:
                    break
                offset = max(offset, -(-hi // align) * align)
        placed.append((offset, size, rng))
        out[key] = offset
    return out
