"""TMA multicast (pass config ``cuda.tma_multicast``): in a TMA-fed loop (warp-specialised, or
issued in order by one thread, ``tma.TmaPlan.in_order``; its only T.Pipelined loop), a tile that
two neighbouring blocks (blockIdx.x 2c and 2c + 1) load from the same place -- the B tile of a
GEMM whose rasterisation pairs blocks of one column -- is loaded once for both: the two blocks
form a cluster, each loads half of the tile's TMA boxes and multicasts them into both blocks'
shared memory. That halves the L2 traffic of the shared tile. Opt-in: on an H200 the bench
GEMM (128x256 tiles) and FlashAttention kernels ran no faster with it on the warp-specialised
schedule (backend-cuda/bench/RESULTS.md); the in-order GEMM's form is the ``_mc`` rows'."""

from __future__ import annotations

import tvm_ffi
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
    def plan(loop_plan, func_body) -> Multicast | None:
        """The multicast form of ``loop_plan``'s producers, or None when no tile is shared by
        the pairs, or that cannot be shown: the grid must be static with an even x extent,
        every coordinate a function of the block indices plus one of the loop variable.
        ``loop_plan``: the loop's ``tma.TmaPlan``."""
        blocks = _block_loops(func_body)
        x = blocks.get("blockIdx.x") if blocks is not None else None
        if x is None or int(x.extent.value) % CLUSTER or keys.CLUSTER in x.annotations:
            return None
        stmts, shared = list(loop_plan.stmts), 0
        for p in loop_plan.producers:
            loads = tma_loads(stmts[p])
            if len(loads) < CLUSTER or len(loads) % CLUSTER or not all(
                    _same_in_pairs(list(c.args[4:]), blocks, loop_plan.loop.loop_var,
                                   loop_plan.analyzer) for c in loads):
                continue
            stmts[p] = _multicast(stmts[p], loads)
            shared += 1
        return Multicast(stmts, x) if shared else None

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


MAX_BLOCKS_CHECKED = 1 << 20


def _same_in_pairs(coords: list, blocks: dict, loop_var, analyzer) -> bool:
    """Every coordinate is the same for blockIdx.x 2c and 2c + 1 at every step of the loop:
    its change with the loop variable does not depend on the blocks (shown symbolically), and
    at 0 it is equal for every pair of the grid (evaluated)."""
    names = [(s.loop_var, tag.split(".")[1]) for tag, s in blocks.items()]
    block_vars = [v for v, _ in names]
    try:
        first = [substitute(c, {loop_var: tirx.const(0, "int32")}) for c in coords]
        for c, c0 in zip(coords, first):
            step = analyzer.simplify(c - c0)
            if any(uses(step, v) for v in block_vars):
                return False
        source = ", ".join(py_expr(c, names, truncating=False) for c in first)
    except NotPython:
        return False
    at = eval(compile(f"lambda x, y, z: ({source},)", "<coords>", "eval"),
              {"min": min, "max": max})
    gx, gy, gz = (int(blocks[f"blockIdx.{a}"].extent.value) if f"blockIdx.{a}" in blocks else 1
                  for a in "xyz")
    if gx * gy * gz > MAX_BLOCKS_CHECKED:
        return False
    return all(at(x, y, z) == at(x + 1, y, z)
               for z in range(gz) for y in range(gy) for x in range(0, gx, CLUSTER))
