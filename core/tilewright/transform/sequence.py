"""Kernel sequences: a kernel of several ``with T.Kernel`` blocks run one after another, with
``T.alloc_global`` workspaces the blocks share. The shape of such a kernel, and the split of
it into one function per block, are the same for every backend; what a block's function
carries (its attributes) and what a backend refuses between blocks are the backend's."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import tirx

THREADS = "tw.threads"  # T.Kernel's threads, on the outermost loop of its block


def top_level(func: tirx.PrimFunc) -> list:
    """The statements at the top of ``func``'s body."""
    return list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]


def is_block(stmt) -> bool:
    """Whether ``stmt`` is a ``with T.Kernel`` block."""
    return isinstance(stmt, tirx.For) and THREADS in stmt.annotations


def is_workspace(stmt) -> bool:
    """Whether ``stmt`` allocates a ``T.alloc_global`` workspace."""
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()) == "global"


def kernel_blocks(func: tirx.PrimFunc) -> list[tirx.For]:
    """The ``with T.Kernel`` blocks at the top of ``func``, in launch order."""
    return [s for s in top_level(func) if is_block(s)]


def split_blocks(block_function: Callable, name: str):
    """A module pass: each kernel of several blocks (or with a workspace) becomes one function
    per block, in launch order; ``block_function(func, index, block, decls, workspaces)``
    builds the ``index``-th (``decls``: the kernel's top-level buffer declarations). A kernel
    of one block and no workspace is left alone."""

    def run(mod, ctx):
        out = {}
        for gvar, func in mod.functions.items():
            stmts = top_level(func)
            blocks = [s for s in stmts if is_block(s)]
            workspaces = [s.buffer for s in stmts if is_workspace(s)]
            if len(blocks) < 2 and not workspaces:
                out[gvar] = func
                continue
            decls = [s for s in stmts if isinstance(s, tirx.DeclBuffer)]
            for index, block in enumerate(blocks):
                part = block_function(func, index, block, decls, workspaces)
                out[tvm.ir.GlobalVar(str(part.attrs["global_symbol"]))] = part
        return tvm.IRModule(out, attrs=mod.attrs)

    return tvm.transform.module_pass(run, opt_level=0, name=name)
