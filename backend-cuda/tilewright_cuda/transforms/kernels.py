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
from tilewright.ir import value_dtype
from tilewright.transform import prim_func_pass, rebuild_for
from tilewright.transform.sequence import is_block, is_workspace, split_blocks, top_level
from tvm import tirx

from .. import keys
from ..analysis.ir import unknown_at_launch


def _inside_block(block: tirx.For, stmts: list) -> tirx.For:
    """``block`` with ``stmts`` put first inside its ``blockIdx`` loops."""
    if isinstance(block.body, tirx.For) and block.body.kind == tirx.ForKind.THREAD_BINDING:
        return rebuild_for(block, body=_inside_block(block.body, stmts))
    return rebuild_for(block, body=tirx.SeqStmt([*stmts, block.body]))


def pointer_tensors_into_blocks():
    """The tensors a kernel makes of ``T.ptr`` addresses before its ``with T.Kernel`` blocks
    (``A = T.make_tensor(a_ptr, (m, k), dtype)``: an address bound to a name, a buffer
    declared on it) made inside each block instead: the device code reads the address, a
    parameter of the kernel the launcher passes, and declares the tensor there; the host runs
    nothing but the launches."""

    def moved(stmt) -> bool:
        return isinstance(stmt, tirx.DeclBuffer) or \
            isinstance(stmt, tirx.Bind) and value_dtype(stmt.var) == "handle"

    def run(func):
        stmts = top_level(func)
        if not any(isinstance(s, tirx.Bind) and moved(s) for s in stmts):
            return func
        inner = [s for s in stmts if moved(s)]
        body = [_inside_block(s, inner) if is_block(s) else s for s in stmts if not moved(s)]
        return func.with_body(body[0] if len(body) == 1 else tirx.SeqStmt(body))

    return prim_func_pass("CUDAPointerTensorsIntoBlocks", run)


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
