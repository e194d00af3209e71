"""The ``bind_threads`` phase: the block's program runs on ``threads`` threads, wrapped in
one ``threadIdx.x`` loop (``T.use_swizzle`` remaps the block indices here), and each ``T.ws``
role becomes a nested ``threadIdx.x`` loop over the role's threads, so rules and distribution
spread tile ops over the role only. First, a tile op under an ``if`` on the dialect's thread
index (``T.get_thread_binding``) is refused at the ``if``."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode
from tilewright.transform import prim_func_pass, rebuild_for
from tvm import tirx

from .. import keys, ops
from ..analysis.ir import block_loops, find_thread, loads_in, substitute, threads_of, uses
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


def refuse_thread_conditioned_tile_ops():
    """A tile op (or ``T.Parallel`` loop) under an ``if`` on ``T.get_thread_binding``'s
    index is an error at the ``if``'s line: tile ops are spread over every thread of the
    block (or role), so the threads the condition leaves out would skip their share of it and
    the barriers inside it. Thread-dependent code is scalar code; a warpgroup-aligned range of
    threads is a ``T.ws`` role."""

    def run(func):
        indices = [call.operands["dst"].buffer for call in _tile_calls(func.body)
                   if call.name == ops.THREAD_BINDING.name]
        if not indices:
            return func
        derived: list = []  # variables bound to values computed from the index

        def reads_index(expr) -> bool:
            return any(b.same_as(i) for b in loads_in(expr) for i in indices) or \
                any(uses(expr, v) for v in derived)

        refused = []  # (the op, the if): raised after the walk (FFI callbacks wrap errors)

        def visit(stmt):
            if isinstance(stmt, tirx.Bind) and reads_index(stmt.value):
                derived.append(stmt.var)
            elif isinstance(stmt, tirx.IfThenElse) and reads_index(stmt.condition):
                bad = _first_block_op(stmt)
                if bad is not None:
                    refused.append((bad, stmt))

        tvm_ffi.structural_walk(func.body, [(tirx.Bind, visit), (tirx.IfThenElse, visit)],
                                order="pre")
        if refused:
            bad, stmt = refused[0]
            raise KernelError(
                f"{bad} under a condition on the thread index (T.get_thread_binding): a tile "
                "op is spread over every thread of the block, not only over those the "
                "condition selects; write the thread-dependent part as scalar code, or give "
                "those threads a T.ws role", span_location(stmt.span))
        return func

    return prim_func_pass("CUDARefuseThreadConditionedTileOps", run)


def _tile_calls(node) -> list:
    found = []
    tvm_ffi.structural_walk(node, (tirx.Evaluate, lambda s: found.append(decode(s))))
    return [c for c in found if c is not None]


def _first_block_op(node) -> str | None:
    """How the user wrote the first tile op of the block inside ``node``, or None."""
    found = []

    def visit(stmt):
        if isinstance(stmt, tirx.For) and str(stmt.annotations.get(keys.LOOP, "")) == \
                "parallel":
            found.append("a T.Parallel loop")
        elif isinstance(stmt, tirx.Evaluate):
            call = decode(stmt)
            if call is not None and call.name not in ops.PER_THREAD:
                found.append(f"T.{call.name}")

    tvm_ffi.structural_walk(node, [(tirx.For, visit), (tirx.Evaluate, visit)], order="pre")
    return found[0] if found else None
