"""The ``bind_threads`` phase: the block's program runs on ``threads`` threads, wrapped in
one ``threadIdx.x`` loop (``T.use_swizzle`` remaps the block indices here), and each ``T.ws``
role becomes a nested ``threadIdx.x`` loop over the role's threads, so rules and distribution
spread tile ops over the role only."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import prim_func_pass, rebuild_for
from tvm import tirx

from .. import keys
from ..analysis.ir import block_loops, find_thread, substitute, threads_of
from ..keys import WARPGROUP


def bind_threads():
    """The block's program runs on ``threads`` threads: wrap it in a ``threadIdx.x`` loop.
    (A 2-D or 3-D ``threads`` is flattened; the language exposes no thread index.)"""

    def run(func):
        loops, inner = block_loops(func)
        threads = threads_of(func)
        loops, inner = _rasterise(loops, inner)
        tx = tirx.Var("tx", "int32")
        iv = tirx.IterVar(tvm.ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, keys.THREAD_TAG)
        body = tirx.For(tx, 0, threads, tirx.ForKind.THREAD_BINDING, inner, thread_binding=iv)
        for loop in reversed(loops):
            body = rebuild_for(loop, body=body)
        return func.with_body(body)

    return prim_func_pass("CUDABindThreads", run)


def _rasterise(loops, inner):
    """``T.use_swizzle(panel, order)``: the launch's block ``(x, y)`` (linear ``x + y gx``)
    runs the program of another block, so that consecutive blocks walk a panel of ``panel``
    rows (``order="row"``; columns for ``"col"``) column by column, every other panel
    backwards: the blocks in flight together share their A rows and B columns in L2. A
    bijection of the grid (the last panel may be narrower); a 1-D grid is left alone."""
    if not loops or keys.SWIZZLE not in loops[0].annotations or len(loops) < 2:
        return loops, inner
    panel, order = loops[0].annotations[keys.SWIZZLE]
    panel, order = int(panel), str(order)
    bx, by = loops[0].loop_var, loops[1].loop_var
    gx, gy = loops[0].extent, loops[1].extent
    lx, ly = tirx.Var("bx_launch", "int32"), tirx.Var("by_launch", "int32")
    linear = lx + ly * gx
    fdiv, fmod = tirx.floordiv, tirx.floormod
    if order == "row":  # panels of `panel` rows, each walked down its columns
        per = gx * panel
        index = fdiv(linear, per)
        offset = fmod(linear, per)
        stride = tirx.min(tirx.const(panel, "int32"), gy - index * panel)
        col = fdiv(offset, stride)
        new_x = tirx.Select(fmod(index, 2) == 1, gx - 1 - col, col)
        new_y = fmod(offset, stride) + index * panel
    else:  # panels of `panel` columns, each walked along its rows
        per = gy * panel
        index = fdiv(linear, per)
        offset = fmod(linear, per)
        stride = tirx.min(tirx.const(panel, "int32"), gx - index * panel)
        row = fdiv(offset, stride)
        new_y = tirx.Select(fmod(index, 2) == 1, gy - 1 - row, row)
        new_x = fmod(offset, stride) + index * panel
    inner = substitute(inner, {bx: new_x, by: new_y})
    annotations = {k: v for k, v in loops[0].annotations.items() if str(k) != keys.SWIZZLE}
    loops = [rebuild_for(loops[0], loop_var=lx, annotations=annotations,
                         thread_binding=tirx.IterVar(loops[0].thread_binding.dom, lx,
                                                     tirx.IterVar.ThreadIndex,
                                                     loops[0].thread_binding.thread_tag)),
             rebuild_for(loops[1], loop_var=ly,
                         thread_binding=tirx.IterVar(loops[1].thread_binding.dom, ly,
                                                     tirx.IterVar.ThreadIndex,
                                                     loops[1].thread_binding.thread_tag)),
             *loops[2:]]
    return loops, inner


def bind_roles():
    """``T.ws`` regions become nested ``threadIdx.x`` loops over the role's threads."""

    def run(func):
        tx_loop = find_thread(func)
        threads = int(tx_loop.extent.value)

        def visit(stmt):
            if str(stmt.attr_key) != keys.WS:
                return stmt
            groups = [int(g) for g in str(stmt.value.value).split(",")]
            lo, n = groups[0] * WARPGROUP, len(groups) * WARPGROUP
            if lo + n > threads:
                raise KernelError(f"T.ws({', '.join(map(str, groups))}) needs threads up to "
                                  f"{lo + n}; the kernel has {threads}",
                                  span_location(stmt.span))
            var = tirx.Var(f"tx_ws{groups[0]}", "int32")
            iv = tirx.IterVar(tvm.ir.Range(0, n), var, tirx.IterVar.ThreadIndex,
                              keys.THREAD_TAG)
            return tirx.For(var, 0, n, tirx.ForKind.THREAD_BINDING, stmt.body,
                            thread_binding=iv, annotations={keys.ROLE: lo}, span=stmt.span)

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AttrStmt, visit)))

    return prim_func_pass("CUDABindRoles", run)
