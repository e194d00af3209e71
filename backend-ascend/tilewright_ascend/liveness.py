"""Live ranges of on-chip buffers and first-fit placement that lets dead buffers share space.

Program points are the leaf statements of the kernel in program order (a tile op, a
``T.Parallel`` nest, a store). A buffer is live from its first use to its last; a use inside a
serial or pipelined loop makes it live for the whole outermost such loop around the use (the
next iteration may read what this one left). Buffers whose live ranges overlap never share
bytes; the others may.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx


def _names(stmt) -> set[str]:
    found = set()

    def add(b):
        if isinstance(b, tirx.Buffer):
            found.add(str(b.name))

    tvm_ffi.structural_walk(stmt, (tirx.Buffer, add))
    return found


def live_ranges(body, names: set[str]) -> dict[str, tuple[int, int]]:
    """name -> (first point, last point) for the buffers in ``names`` that ``body`` uses."""
    ranges: dict[str, tuple[int, int]] = {}
    clock = [0]

    def use(found, lo, hi):
        for name in found & names:
            old = ranges.get(name)
            ranges[name] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    def visit(stmt, loop_start):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, loop_start)
            return
        if isinstance(stmt, tirx.AttrStmt):
            visit(stmt.body, loop_start)
            return
        if isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, loop_start)
            if stmt.else_case is not None:
                visit(stmt.else_case, loop_start)
            return
        if isinstance(stmt, tirx.For) and \
                str(stmt.annotations.get("tw.loop", "")) != "parallel" and \
                stmt.kind != tirx.ForKind.THREAD_BINDING:
            outer = loop_start is None
            start = clock[0]
            visit(stmt.body, start if outer else loop_start)
            if outer:  # everything used in the loop lives across all of it
                used = _names(stmt.body)
                use(used, start, clock[0])
            return
        if isinstance(stmt, tirx.For):  # the block or vid binding, or a T.Parallel nest
            if stmt.kind == tirx.ForKind.THREAD_BINDING:
                visit(stmt.body, loop_start)
                return
        if isinstance(stmt, tirx.AllocBuffer):
            return
        clock[0] += 1
        use(_names(stmt), clock[0], clock[0])

    visit(body, None)
    return ranges


def first_fit(items, align: int) -> dict[str, int]:
    """Offsets for ``items`` = [(name, bytes, (start, end) or None for always live, fixed
    offset or None)], lowest first: a buffer never overlaps one whose range meets its own."""
    placed: list[tuple[int, int, tuple | None]] = []
    out = {}

    def meets(r1, r2):
        return r1 is None or r2 is None or not (r1[1] < r2[0] or r2[1] < r1[0])

    order = sorted(items, key=lambda it: (it[3] is None, it[2][0] if it[2] else -1, -it[1]))
    for name, size, rng, fixed in order:
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
        out[name] = offset
    return out
