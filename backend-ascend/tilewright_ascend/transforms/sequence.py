"""A kernel of several ``with T.Kernel`` blocks run one after another (the ``kernel_sequence``
feature): each block becomes a function of its own, lowered by every later phase and written
as its own ``__global__`` kernel; the host launches them in order on one stream, so every
block of a launch has finished (and its GM writes are visible) before the next launch starts.
On A2 that is the correct and simplest cross-block barrier: SyncAll
(impl/basic_api/dav_c220/kernel_operator_sync_impl.h) needs every block of the grid resident
at once and a GM workspace of its own, which a grid larger than the AI cores cannot give.

Each block's function takes the kernel's parameters, then the ``T.alloc_global`` workspaces
(buffers the blocks share, allocated by the executor for the call) as tensor parameters, and
carries :data:`..facts.keys.SEQUENCE_KEY`: its place in the launch order and the number of
workspaces. A kernel of one block
and no workspace is left alone.
"""

from __future__ import annotations

import tvm
from tilewright.errors import KernelError, span_location
from tilewright.transform.sequence import is_block, is_workspace, split_blocks, top_level
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..facts.keys import SEQUENCE_KEY


def _block_function(func: tirx.PrimFunc, index: int, block, decls: list,
                    workspaces: list) -> tirx.PrimFunc:
    body = tirx.SeqStmt([*decls, block]) if decls else block
    attrs = {**dict(func.attrs), "global_symbol": f"{func.attrs['global_symbol']}_{index}",
             SEQUENCE_KEY: [index, len(workspaces)]}
    return tirx.PrimFunc([*func.params, *workspaces], body, func.ret_type,
                         tvm.ir.make_node("ir.DictAttrs", **attrs), span=func.span)


def check_sequence():
    """Refuses, at its line, a statement between the blocks of a kernel sequence other than a
    ``T.alloc_global`` or a buffer declaration (the host runs nothing of the kernel but its
    launches), and a ``T.alloc_global`` whose shape is not static (the executor allocates it
    from the kernel's description)."""

    def run(func):
        stmts = top_level(func)
        if sum(map(is_block, stmts)) < 2 and not any(map(is_workspace, stmts)):
            return func
        for stmt in stmts:
            if not (is_block(stmt) or is_workspace(stmt) or
                    isinstance(stmt, tirx.DeclBuffer)):
                raise KernelError("backend 'ascend' launches the 'with T.Kernel' blocks of a "
                                  "kernel one after another and runs nothing between them on "
                                  "the host; move this statement into a block",
                                  span_location(stmt.span))
            if is_workspace(stmt) and \
                    any(not isinstance(d, tirx.IntImm) for d in stmt.buffer.shape):
                first = next(s for s in stmts if is_block(s))
                raise KernelError(f"the T.alloc_global workspace {stmt.buffer.name!r} has "
                                  f"shape {tuple(stmt.buffer.shape)}; backend 'ascend' "
                                  "allocates workspaces of static shape only",
                                  span_location(stmt.span or first.span))
        return func

    return prim_func_pass("AscendCheckSequence", run)


def split_sequence():
    """The module's kernel as one function per ``with T.Kernel`` block, in launch order
    (after :func:`check_sequence`)."""
    return split_blocks(_block_function, "AscendSplitSequence")
