"""Row vectors in registers: a 1-D float32 fragment of M rows that only goes with register
accumulators whose warps own whole 16-row strips (``(warps x 1)`` warp grid, the layout of
``mma.sync`` ``ROWS_MARK`` and wgmma ``WGMMA_ACC`` accumulators) lives in each thread's
registers, one per row the thread holds in that layout: register ``s`` is row
``warp * M / warps + (s // 2) * 16 + (s % 2) * 8 + lane / 4`` (the four lanes of a row keep
the same value). Row statistics (FlashAttention's max, sum, rescale) then need neither shared
memory nor block barriers: reductions shuffle within the four lanes and leave the result in
all of them, ``T.Parallel`` nests over the vector run on each thread's own rows.

infer_layout picks them (:func:`candidates`); the lowering of fill, copy and row reductions and
passes.distribute read the layout from here.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from . import lowering as lw  # lowering imports this module: use its names at call time

MMA_ROWS = "local.mma_rows"


def registers(buffer, threads: int) -> int:
    """Registers per thread of a row vector: two per 16-row tile of its warp's strip."""
    return 2 * (int(buffer.shape[0].value) // (threads // lw.WARP) // 16)


def row(buffer, s, threads: int, tx):
    """The row register ``s`` of thread ``tx`` holds."""
    m = int(buffer.shape[0].value)
    lane = tirx.floormod(tx, lw.WARP)
    return tirx.floordiv(tx, lw.WARP) * (m // (threads // lw.WARP)) + \
        tirx.floordiv(s, 2) * 16 + tirx.floormod(s, 2) * 8 + tirx.floordiv(lane, 4)


def of_accumulator(acc, r):
    """The row-vector register holding the row of accumulator register ``r`` (a ``(warps x
    1)`` grid: register ``r`` is element ``r % 4`` of 16x8 tile ``r // 4``)."""
    tiles_n = int(acc.shape[1].value) // 8
    return tirx.floordiv(tirx.floordiv(r, 4), tiles_n) * 2 + tirx.floordiv(tirx.floormod(r, 4), 2)


def is_rows(buffer) -> bool:
    return str(buffer.scope()) == MMA_ROWS


def every_register(buffer, threads: int, body) -> tirx.Stmt:
    """``body(s)`` for each register of the row vector, unrolled."""
    s = tirx.Var("s", "int32")
    return tirx.For(s, 0, registers(buffer, threads), tirx.ForKind.UNROLLED, body(s))


# -- selection (infer_layout) -----------------------------------------------------------------
def candidates(func, accumulators: dict, threads: int, parallel_nests) -> set:
    """1-D float32 fragments of M rows, M a multiple of 16 rows per warp, whose every use is:
    filled whole; copied whole from or to another such vector; the destination of a whole row
    reduction of a chosen accumulator (``accumulators``: buffer -> rows owned by warps) with a
    ``(warps x 1)`` grid; indexed ``[i]`` in a 1-D ``T.Parallel`` nest over its M rows that
    touches nothing but such vectors and thread-local scalars; or read ``[i]`` in a 2-D nest
    that runs on a chosen accumulator's registers (``[i, j]``)."""
    from tilewright.ir import tile_ops_in

    warps = threads // lw.WARP
    strip = {acc for acc, rows in accumulators.items() if rows and _strip_grid(acc, threads)}
    vecs = []
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: vecs.append(a.buffer) if
                                        str(a.buffer.scope()) == "local.fragment" and
                                        str(a.buffer.dtype) == "float32" and
                                        len(a.buffer.shape) == 1 and
                                        isinstance(a.buffer.shape[0], tirx.IntImm) and
                                        int(a.buffer.shape[0].value) % (16 * warps) == 0
                                        else None))
    if not vecs or not strip:
        return set()
    ok = {v: True for v in vecs}
    uses = {v: 0 for v in vecs}
    together = []  # groups of vectors that must all be chosen or none

    def mark(buf, fine=False):
        if buf in ok:
            uses[buf] += 1
            if not fine:
                ok[buf] = False

    from .passes import _full
    for call in tile_ops_in(func):
        for op in call.schema.operands:
            region = call.operands[op.name]
            if op.kind == "expr" or not hasattr(region, "buffer") or region.buffer not in ok:
                continue
            buf, fine = region.buffer, _full(region)
            if call.name == "copy":
                other = call.operands["dst" if op.name == "src" else "src"].buffer
                fine = fine and other in ok and _full(call.operands["dst"]) and \
                    _full(call.operands["src"])
                together.append({buf, other})
            elif call.name == "reduce" or call.name.startswith("reduce_"):
                src = call.operands["src"]
                fine = fine and op.name == "dst" and src.buffer in strip and \
                    int(call.attrs["dim"]) in (1, -1) and \
                    int(src.buffer.shape[0].value) == int(buf.shape[0].value)
            else:
                fine = fine and call.name == "fill" and op.name == "dst"
            mark(buf, fine)
    for loops, _ in parallel_nests(func.body):
        nest = loops[0]
        seen, accs, others = [], [], []

        def visit(node, loops=loops, seen=seen, accs=accs, others=others):
            buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
            if buf in ok:
                index = list(node.indices)
                fine = len(index) == 1 and isinstance(index[0], tirx.Var) and \
                    index[0].same_as(loops[0].loop_var) and _covers(loops[0], buf) and \
                    (len(loops) == 1 or isinstance(node, tvm.ir.TensorLoad))
                seen.append((buf, fine))
            elif buf in strip:
                accs.append(buf)
            elif str(buf.scope()) not in ("local", "local.var"):
                others.append(buf)

        tvm_ffi.structural_walk(nest, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
        if not seen:
            continue
        shape_ok = len(loops) == 1 and not accs and not others or \
            len(loops) == 2 and len(accs) > 0 and all(
                int(a.shape[0].value) == int(loops[0].extent.value) for a in accs)
        for buf, fine in seen:
            mark(buf, fine and shape_ok)
        if len(loops) == 1:
            together.append({buf for buf, _ in seen})
    counted = {v: 0 for v in vecs}

    def count(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if buf in counted:
            counted[buf] += 1

    tvm_ffi.structural_walk(func.body, [(tvm.ir.TensorLoad, count), (tirx.BufferStore, count)])
    chosen = {v for v in vecs if ok[v] and counted[v] <= uses[v]}
    changed = True
    while changed:  # a vector goes only with the vectors it meets
        changed = False
        for group in together:
            if not group <= chosen and group & chosen:
                chosen -= group
                changed = True
    return chosen


def _strip_grid(acc, threads: int) -> bool:
    marked = tirx.decl_buffer(acc.shape, acc.dtype, acc.name, scope=lw.MMA_ACC,
                              data_alignment=lw.ROWS_MARK)
    grid = lw.acc_grid(marked, threads)
    return grid == (threads // lw.WARP, 1)


def _covers(loop, buf) -> bool:
    return isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0 and \
        isinstance(loop.extent, tirx.IntImm) and \
        int(loop.extent.value) == int(buf.shape[0].value)
