"""A kernel of several ``with T.Kernel`` blocks run one after another (split-KV decoding then
its combine, fused MoE): each block becomes a function of its own, lowered by every later
phase and printed as its own ``__global__`` kernel, launched in order on one stream.

Each block's function takes the kernel's parameters, then the ``T.alloc_global`` workspaces
(buffers the blocks share, allocated by the launcher for the call) as tensor parameters, and
carries ``keys.SEQUENCE``: its place in the sequence and how many parameters are the
kernel's. A kernel of one block and no workspace is left alone.
"""

from __future__ import annotations

import json

import tvm
from tilewright.errors import KernelError, span_location
from tilewright.transform import prim_func_pass
from tilewright.transform.sequence import is_block, is_workspace, split_blocks, top_level
from tvm import tirx

from .. import keys
from ..analysis.ir import unknown_at_launch


def check_sequence():
    """Refuses, at its line, a statement between or around the blocks of a kernel sequence
    that is neither a ``T.alloc_global`` nor a buffer declaration (the host runs nothing of
    the kernel but its launches), and a ``T.alloc_global`` whose shape reads a symbol that the
    launcher, which allocates it, cannot find when the kernel is called
    (``analysis.ir.launch_symbols``: the whole extent of a tensor argument or an integer
    scalar argument)."""

    def run(func):
        stmts = top_level(func)
        if sum(map(is_block, stmts)) < 2 and not any(map(is_workspace, stmts)):
            return func
        for stmt in stmts:
            if not (is_block(stmt) or is_workspace(stmt) or isinstance(stmt, tirx.DeclBuffer)):
                raise KernelError("the CUDA backend launches the 'with T.Kernel' blocks of a "
                                  "kernel one after another and runs nothing between them on "
                                  "the host; move this statement into a block",
                                  span_location(stmt.span))
            missing = unknown_at_launch(stmt.buffer.shape, func.params) \
                if is_workspace(stmt) else []
            if missing:
                raise KernelError(
                    f"the T.alloc_global workspace {stmt.buffer.name!r} of shape "
                    f"{tuple(stmt.buffer.shape)} is allocated when the kernel is called, but "
                    f"{', '.join(missing)} is neither the whole extent of a tensor argument nor "
                    "an integer scalar argument, so its size is unknown then: give a tensor "
                    "argument that extent or pass it as a scalar argument",
                    span_location(stmt.span))
        return func

    return prim_func_pass("CUDACheckKernelSequence", run)


def block_function(func: tirx.PrimFunc, index: int, block, decls: list,
                   workspaces: list) -> tirx.PrimFunc:
    """The function of the ``index``-th block: the kernel's parameters and then the
    workspaces, the buffer declarations of the kernel's top level, the block."""
    body = tirx.SeqStmt([*decls, block]) if decls else block
    name = f"{func.attrs['global_symbol']}_{index}"
    sequence = json.dumps({"index": index, "params": len(func.params)})
    attrs = {**dict(func.attrs), "global_symbol": name, keys.SEQUENCE: sequence}
    return tirx.PrimFunc([*func.params, *workspaces], body, func.ret_type,
                         tvm.ir.make_node("ir.DictAttrs", **attrs), span=func.span)


def split_kernels():
    """The module's kernel as one function per ``with T.Kernel`` block, in launch order."""
    return split_blocks(block_function, "CUDASplitKernels")
