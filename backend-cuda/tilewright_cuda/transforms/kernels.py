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
from tvm import tirx

from .. import keys
from ..analysis.ir import unknown_at_launch


def _top_level(func: tirx.PrimFunc) -> list:
    return list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]


def _is_block(stmt) -> bool:
    return isinstance(stmt, tirx.For) and keys.THREADS in stmt.annotations


def _is_workspace(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()) == "global"


def check_sequence():
    """Refuses, at its line, a statement between or around the blocks of a kernel sequence
    that is neither a ``T.alloc_global`` nor a buffer declaration (the host runs nothing of
    the kernel but its launches), and a ``T.alloc_global`` whose shape reads a symbol that the
    launcher, which allocates it, cannot find when the kernel is called
    (``analysis.ir.launch_symbols``: the whole extent of a tensor argument or an integer
    scalar argument)."""

    def run(func):
        stmts = _top_level(func)
        if sum(map(_is_block, stmts)) < 2 and not any(map(_is_workspace, stmts)):
            return func
        for stmt in stmts:
            if not (_is_block(stmt) or _is_workspace(stmt) or isinstance(stmt, tirx.DeclBuffer)):
                raise KernelError("the CUDA backend launches the 'with T.Kernel' blocks of a "
                                  "kernel one after another and runs nothing between them on "
                                  "the host; move this statement into a block",
                                  span_location(stmt.span))
            missing = unknown_at_launch(stmt.buffer.shape, func.params) \
                if _is_workspace(stmt) else []
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

    def run(mod, ctx):
        out = {}
        for gvar, func in mod.functions.items():
            stmts = _top_level(func)
            blocks = [s for s in stmts if _is_block(s)]
            workspaces = [s.buffer for s in stmts if _is_workspace(s)]
            if len(blocks) < 2 and not workspaces:
                out[gvar] = func
                continue
            decls = [s for s in stmts if isinstance(s, tirx.DeclBuffer)]
            for index, block in enumerate(blocks):
                part = block_function(func, index, block, decls, workspaces)
                out[tvm.ir.GlobalVar(str(part.attrs["global_symbol"]))] = part
        return tvm.IRModule(out, attrs=mod.attrs)

    return tvm.transform.module_pass(run, opt_level=0, name="CUDASplitKernels")
