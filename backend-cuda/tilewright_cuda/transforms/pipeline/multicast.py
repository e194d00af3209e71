"""TMA multicast (pass config ``cuda.tma_multicast``): in a TMA-fed loop (warp-specialised, or
issued in order by one thread, ``tma.TmaPlan.in_order``, also in a persistent kernel's tile loop,
``tma.TmaPlan.in_order_tiles``; its only T.Pipelined loop), a tile that
two neighbouring blocks (blockIdx.x 2c and 2c + 1) load from the same place -- the B tile of a
GEMM whose rasterisation pairs blocks of one column -- is loaded once for both: the two blocks
form a cluster, each loads half of the tile's TMA boxes and multicasts them into both blocks'
shared memory. That halves the L2 traffic of the shared tile. Opt-in: on an H200 the bench
GEMM (128x256 tiles) and FlashAttention kernels ran no faster with it on the warp-specialised
schedule (backend-cuda/bench/RESULTS.md); the in-order GEMM's form is the ``_mc`` rows'."""

from __future__ import annotations

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tvm import tirx

from ... import intrinsics, keys
from ...analysis.accesses import tma_loads
from ...analysis.ir import NotPython, py_expr, substitute, uses

CLUSTER = 2  # blocks per cluster when tiles are multicast


class Multicast:
    """The tiles of a TMA-fed loop that the two blocks of a cluster (blockIdx.x 2c and
    2c + 1) load from the same coordinates: each block issues half of such a tile's TMA boxes
    (the first half rank 0, the second rank 1), multicast into both blocks' shared memory, on
    each block's own full barrier (whose byte count is the whole tile's in both). A version is
    free again once the readers of both blocks released it, so the empty barriers count the
    arrivals of both, and a producer stays until both blocks read its last tiles."""

    def __init__(self, stmts: list, block_x):
        self.stmts, self.block_x = stmts, block_x

    @staticmethod
    def plan(loop_plan, func_body, tiles=None, pure=None) -> Multicast | None:
        """The multicast form of ``loop_plan``'s producers, or None when no tile is shared by
        the pairs, or that cannot be shown: the grid must be static with an even x extent,
        every coordinate a function of the block indices plus one of the loop variable.
        ``loop_plan``: the loop's ``tma.TmaPlan``. ``tiles``: the ``persistent.TileLoop`` the
        loop sits in, whose binds ``pure`` accepts are the same expressions of the round and
        the block indices in every thread: the two blocks of a pair then walk their tiles
        together, so a tile is shared when the pair loads it from the same place in every
        round both blocks run, and a pair whose blocks run different rounds (one has a tile
        where the other has none) is refused with a KernelError naming the tile loop."""
        blocks = _block_loops(func_body)
        x = blocks.get("blockIdx.x") if blocks is not None else None
        if x is None or int(x.extent.value) % CLUSTER or keys.CLUSTER in x.annotations:
            return None
        rounds = None
        if tiles is not None:
            rounds = _Rounds.of(tiles, pure)
            if rounds is None:
                return None
        stmts, shared = list(loop_plan.stmts), 0
        for p in loop_plan.producers:
            loads = tma_loads(stmts[p])
            if len(loads) < CLUSTER or len(loads) % CLUSTER or not all(
                    _same_in_pairs(list(c.args[4:]), blocks, loop_plan.loop.loop_var,
                                   loop_plan.analyzer, rounds) for c in loads):
                continue
            stmts[p] = _multicast(stmts[p], loads)
            shared += 1
        if not shared:
            return None
        if rounds is not None:
            rounds.check_pairs(blocks)
        return Multicast(stmts, x)

    @staticmethod
    def drain(n, stages: int, released) -> tirx.Stmt:
        """The producer's last waits: every version it filled was released by both blocks
        (its tiles landed in the other block too), so the block may exit."""
        t = tirx.Var("drain", "int32")
        return tirx.For(t, 0, stages, tirx.ForKind.SERIAL,
                        tirx.IfThenElse(n + t >= stages, released(n + t), None))

    def clustered(self, func_body):
        """``func_body`` launched in clusters of :data:`CLUSTER` blocks along x."""

        def visit(s):
            if not s.loop_var.same_as(self.block_x.loop_var):
                return s
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding,
                            annotations={**s.annotations, keys.CLUSTER: [CLUSTER, 1, 1]},
                            span=s.span)

        return tvm_ffi.structural_map(func_body, (tirx.For, visit))


def _block_loops(func_body) -> dict | None:
    """The blockIdx loops by tag, or None when one has no constant extent."""
    found = {}

    def visit(s):
        tag = str(s.thread_binding.thread_tag) if s.thread_binding is not None else ""
        if tag.startswith("blockIdx."):
            found[tag] = s

    tvm_ffi.structural_walk(func_body, (tirx.For, visit))
    if not all(isinstance(s.extent, tirx.IntImm) for s in found.values()):
        return None
    return found


def _multicast(stmt, loads: list):
    """``stmt`` with load k of ``loads`` issued by rank k * CLUSTER // len(loads) for every
    block of the cluster."""
    rank = tirx.call_extern("int32", "tw_cluster_ctarank")
    mask = tirx.const((1 << CLUSTER) - 1, "int32")

    def visit(e):
        k = next((k for k, c in enumerate(loads) if e.value.same_as(c)), None)
        if k is None:
            return e
        name = intrinsics.named(intrinsics.extern_name(e.value)).multicast
        desc, bar, smem, *coords = e.value.args[1:]
        cast = intrinsics.call(name, desc, bar, smem, mask, *coords)
        return tirx.IfThenElse(rank == k * CLUSTER // len(loads), cast, None)

    return tvm_ffi.structural_map(stmt, (tirx.Evaluate, visit))


MAX_BLOCKS_CHECKED = 1 << 20  # blocks (times rounds) whose coordinates are evaluated


class _Rounds:
    """The rounds of a persistent kernel's tile loop (``persistent.TileLoop``) as the pairs
    see them: its variable and range, its guard and the tile's binds as expressions of the
    round and the block indices."""

    def __init__(self, tiles, values: dict, waves: range):
        self.tiles, self.values, self.waves = tiles, values, waves
        self.var = tiles.loop.loop_var
        guard = tiles.guard if tiles.guard is not None else tirx.const(True, "bool")
        self.guard = substitute(guard, values)

    @staticmethod
    def of(tiles, pure) -> _Rounds | None:
        """The rounds of ``tiles``, or None when their range is not constant."""
        lo, extent = (tiles.loop.min, tiles.loop.extent)
        if not isinstance(lo, tirx.IntImm) or not isinstance(extent, tirx.IntImm):
            return None
        lo = int(lo.value)
        return _Rounds(tiles, tiles.values(pure), range(lo, lo + int(extent.value)))

    def check_pairs(self, blocks: dict) -> None:
        """Raise a KernelError when, in some round, one block of a pair has a tile and the
        other none: their loops would no longer meet at the shared loads and releases."""
        held = _evaluator([self.guard], _names(blocks, self))
        apart = next(((x, w) for x, y, z, w in _pairs(blocks, self)
                      if held(x, y, z, w) != held(x + 1, y, z, w)), None)
        if apart is None:
            return
        x, w = apart
        raise KernelError(
            f"{keys.TMA_MULTICAST}: the two blocks of a cluster (blockIdx.x 2c and 2c + 1) "
            f"must walk this persistent kernel's tile loop together, a tile each in the same "
            f"rounds, to load their shared tiles once for both; in round {w} one of blocks "
            f"{x} and {x + 1} has a tile and the other none. Give T.Persistent an even number "
            f"of workers and of tiles, or leave {keys.TMA_MULTICAST} unset",
            span_location(self.tiles.loop.span))


def _names(blocks: dict, rounds) -> list:
    names = [(s.loop_var, tag.split(".")[1]) for tag, s in blocks.items()]
    return names + ([(rounds.var, "w")] if rounds is not None else [])


def _evaluator(exprs: list, names: list):
    """``exprs`` as one Python function of the block indices ``x, y, z`` and the round ``w``
    (NotPython when one cannot be written so)."""
    source = ", ".join(py_expr(e, names, truncating=False) for e in exprs)
    return eval(compile(f"lambda x, y, z, w: ({source},)", "<coords>", "eval"),
                {"min": min, "max": max})


def _grid(blocks: dict) -> tuple:
    return tuple(int(blocks[f"blockIdx.{a}"].extent.value) if f"blockIdx.{a}" in blocks else 1
                 for a in "xyz")


def _pairs(blocks: dict, rounds):
    """(x, y, z, w) of the first block of every pair, in every round (``w`` 0 without
    rounds)."""
    gx, gy, gz = _grid(blocks)
    waves = rounds.waves if rounds is not None else range(1)
    for w in waves:
        for z in range(gz):
            for y in range(gy):
                for x in range(0, gx, CLUSTER):
                    yield x, y, z, w


def _same_in_pairs(coords: list, blocks: dict, loop_var, analyzer, rounds=None) -> bool:
    """Every coordinate is the same for blockIdx.x 2c and 2c + 1 at every step of the loop:
    its change with the loop variable does not depend on the blocks (shown symbolically), and
    at 0 it is equal for every pair of the grid (evaluated); with ``rounds`` (a persistent
    kernel's tile loop, ``_Rounds``) in every round where both blocks have a tile."""
    if rounds is not None:
        coords = [substitute(c, rounds.values) for c in coords]
    names = _names(blocks, rounds)
    block_vars = [s.loop_var for s in blocks.values()]
    try:
        first = [substitute(c, {loop_var: tirx.const(0, "int32")}) for c in coords]
        for c, c0 in zip(coords, first):
            step = analyzer.simplify(c - c0)
            if any(uses(step, v) for v in block_vars):
                return False
        at = _evaluator(first, names)
        held = _evaluator([rounds.guard], names) if rounds is not None else None
    except NotPython:
        return False
    gx, gy, gz = _grid(blocks)
    if gx * gy * gz * (len(rounds.waves) if rounds is not None else 1) > MAX_BLOCKS_CHECKED:
        return False
    return all(at(x, y, z, w) == at(x + 1, y, z, w) for x, y, z, w in _pairs(blocks, rounds)
               if held is None or held(x, y, z, w)[0] and held(x + 1, y, z, w)[0])
