"""``T.sync_grid()`` on a backend that runs a grid's blocks one after another: phases.

A barrier of the whole grid means: every block finishes the statements before it before any
block starts the statements after it. A backend that runs the blocks in sequence (the CPU,
the interpreter) gets that by running the kernel as consecutive launches, one a phase, each
for every block: :func:`split_grid_syncs` cuts each ``T.Kernel`` at the barriers of its body
(a barrier inside a loop or a branch has no such reading and is refused at its line).

A phase sees the block's state the earlier phases left: the storage the kernel allocates
(``T.alloc_shared`` / ``T.alloc_fragment`` / ``T.alloc_local`` / ``T.alloc_var``) is saved
to a workspace of every block at the end of a phase that uses it and loaded back at the start
of a later phase that uses it (only storage two phases use; each phase allocates its own), and
a name bound before a barrier (``tile = bx * 4``) is bound again in each later phase using it.
A name bound to a value read from memory, or per-thread storage of thread-level code, would
need each thread's copy kept: refused at its line.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import KernelError, span_location
from ..ir import SYNC_GRID, THREAD_BINDING, decode, tile_ops_in
from .threads import KERNEL_THREADS_KEY, is_per_thread
from .walk import prim_func_pass, rebuild_for, replace_buffers

GRID_OPS = (SYNC_GRID.name,)  # declared by a backend that runs this pass


def _is_sync(stmt) -> bool:
    call = decode(stmt) if isinstance(stmt, tirx.Evaluate) else None
    return call is not None and call.name == SYNC_GRID.name


def _items(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _seq(items: list):
    return items[0] if len(items) == 1 else tirx.SeqStmt(items)


def _buffers_used(node) -> set:
    found = set()
    tvm_ffi.structural_walk(node, [
        (tvm.ir.TensorLoad, lambda ld: found.add(ld.source)),
        (tirx.BufferStore, lambda st: found.add(st.buffer)),
        (tirx.AllocBuffer, lambda a: found.add(a.buffer))])
    return found


def _vars_used(node) -> set:
    found = set()
    tvm_ffi.structural_walk(node, (tirx.Var, found.add))
    return found


def _nested_sync(stmt):
    """The first grid barrier under ``stmt`` (a loop's or a branch's body), or None."""
    return next((c for c in tile_ops_in(stmt) if c.name == SYNC_GRID.name), None)


class _Kernel:
    """One ``T.Kernel`` loop nest: the block loops and the body's top-level statements."""

    def __init__(self, loop):
        self.loops = [loop]
        while isinstance(self.loops[-1].body, tirx.For) and \
                self.loops[-1].body.thread_binding is not None and \
                str(self.loops[-1].body.thread_binding.thread_tag).startswith("blockIdx"):
            self.loops.append(self.loops[-1].body)
        self.items = _items(self.loops[-1].body)

    def phases(self) -> list[list]:
        phases, current = [], []
        for item in self.items:
            if _is_sync(item):
                phases.append(current)
                current = []
                continue
            nested = _nested_sync(item)
            if nested is not None:
                raise KernelError("T.sync_grid inside a loop or a branch: this backend runs the "
                                  "grid's blocks one after another, so it runs the kernel in "
                                  "phases cut at barriers of the kernel's body; put it between "
                                  "the body's statements", span_location(nested.span))
            current.append(item)
        phases.append(current)
        return phases

    def blocks(self) -> int:
        extents = [loop.extent for loop in self.loops]
        if not all(isinstance(e, tirx.IntImm) for e in extents):
            raise KernelError("T.sync_grid with a grid of run-time size keeps the blocks' "
                              "storage between phases in a workspace of every block, which "
                              "needs a constant grid", span_location(self.loops[0].span))
        return math.prod(int(e.value) for e in extents)

    def block_index(self, loop_vars) -> tirx.PrimExpr:
        """The block's number in the grid (the innermost block loop fastest): its row of
        the workspaces."""
        index, stride = tirx.const(0, "int32"), 1
        for var, loop in zip(reversed(loop_vars), reversed(self.loops)):
            index = index + var * stride
            stride = stride * loop.extent
        return index

    def launch(self, body, loop_vars):
        """The block loops around ``body``, with ``loop_vars`` as their variables."""
        for loop, var in zip(reversed(self.loops), reversed(loop_vars)):
            body = rebuild_for(loop, loop_var=var, body=body, thread_binding=tirx.IterVar(
                loop.thread_binding.dom, var, loop.thread_binding.iter_type,
                loop.thread_binding.thread_tag) if loop.thread_binding is not None else None)
        return body


def _copy_loops(shape, make):
    """A serial loop nest over ``shape`` around ``make(indices)``."""
    indices = [tirx.Var(f"i{k}", "int32") for k in range(len(shape))]
    stmt = make(indices)
    for var, extent in reversed(list(zip(indices, shape))):
        stmt = tirx.For(var, 0, extent, tirx.ForKind.SERIAL, stmt)
    return stmt


def _split(kernel: _Kernel) -> tuple[list, list]:
    """(the workspaces, the phase launches) of a kernel with barriers of its body."""
    allocs, binds, indices, bodies = {}, {}, {}, []
    for k, phase in enumerate(kernel.phases()):
        body = []
        for item in phase:
            call = decode(item) if isinstance(item, tirx.Evaluate) else None
            if isinstance(item, tirx.AllocBuffer):
                allocs[item.buffer] = item  # allocated again by each phase using it
            elif call is not None and call.name == THREAD_BINDING.name:
                indices[call.operands["dst"].buffer] = item  # read again by each phase
            else:
                if isinstance(item, tirx.Bind):
                    binds[item.var] = (k, item)
                body.append(item)
        bodies.append(body)
    used = [_buffers_used(_seq(b)) if b else set() for b in bodies]
    variables = [_vars_used(_seq(b)) if b else set() for b in bodies]
    workspaces, saved = [], {}
    for buf, item in allocs.items():
        if buf in indices or sum(buf in u for u in used) < 2:
            continue
        if indices and is_per_thread(buf):
            raise KernelError(f"{buf.name}, a thread's storage, is used on both sides of "
                              "T.sync_grid: this backend runs the kernel in phases and would "
                              "have to keep every thread's copy; keep the value in shared or "
                              "global memory", span_location(item.span))
        if any(not isinstance(d, tirx.IntImm) for d in buf.shape):
            raise KernelError(f"{buf.name} of run-time shape is used on both sides of "
                              "T.sync_grid", span_location(item.span))
        saved[buf] = tirx.decl_buffer((kernel.blocks(), *buf.shape), buf.dtype,
                                      f"{buf.name}_blocks", scope="global")
        workspaces.append(tirx.AllocBuffer(saved[buf], span=item.span))
    for var, (where, item) in binds.items():
        # a name bound to a value read from memory keeps the value of its line
        if not any(var in v for v in variables[where + 1:]) or \
                not _buffers_used(item.value) - set(indices):
            continue
        if indices and (_buffers_used(item.value) & ({*indices} | {
                b for b in allocs if is_per_thread(b)})):
            raise KernelError(f"{var.name}, a thread's value, is used on both sides of "
                              "T.sync_grid: this backend runs the kernel in phases and would "
                              "have to keep every thread's copy; keep the value in shared or "
                              "global memory", span_location(item.span))
        saved[var] = tirx.decl_buffer((kernel.blocks(),), var.ty.dtype, f"{var.name}_blocks",
                                      scope="global")
        workspaces.append(tirx.AllocBuffer(saved[var], span=item.span))
    launches = []
    for k, body in enumerate(bodies):
        if body:
            launches.append(_phase(kernel, k, body, used, variables, allocs, binds, indices,
                                   saved))
    return workspaces, launches


def _phase(kernel, k, body, used, variables, allocs, binds, indices, saved):
    """Phase ``k``'s launch: its storage allocated, the thread indices and the names bound
    before it that it reads made again, the storage an earlier phase left loaded from the
    workspaces, and what a later phase reads saved at its end."""
    loop_vars = [tirx.Var(loop.loop_var.name, loop.loop_var.ty) for loop in kernel.loops]
    block = kernel.block_index(loop_vars)
    renames = dict(zip((loop.loop_var for loop in kernel.loops), loop_vars))
    mine = [buf for buf in allocs if buf in used[k]]
    fresh = {buf: tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope=buf.scope())
             for buf in mine}
    head = [tirx.AllocBuffer(fresh[buf], span=allocs[buf].span) for buf in mine]
    head += [item for buf, item in indices.items() if buf in used[k]]
    tail = []
    for var, (where, item) in binds.items():
        if where < k and var in variables[k]:
            renames[var] = tirx.Var(var.name, var.ty)
            value = tirx.BufferLoad(saved[var], [block]) if var in saved else item.value
            head.append(tirx.Bind(renames[var], value, span=item.span))
        elif where == k and var in saved:  # the value read here, for the later phases
            tail.append(tirx.BufferStore(saved[var], var, [block], span=item.span))
    for buf in mine:
        if buf not in saved:
            continue
        workspace = saved[buf]
        if any(buf in u for u in used[:k]):
            head.append(_copy_loops(buf.shape, lambda ix, b=buf, w=workspace: tirx.BufferStore(
                b, tirx.BufferLoad(w, [block, *ix]), ix)))
        if any(buf in u for u in used[k + 1:]):
            tail.append(_copy_loops(buf.shape, lambda ix, b=buf, w=workspace: tirx.BufferStore(
                w, tirx.BufferLoad(b, ix), [block, *ix])))
    stmt = replace_buffers(_seq([*head, *body, *tail]), fresh, renames)
    return kernel.launch(stmt, loop_vars)


def _split_function(func):
    items, changed = [], False
    for item in _items(func.body):
        if isinstance(item, tirx.For) and item.annotations and \
                KERNEL_THREADS_KEY in item.annotations and _nested_sync(item) is not None:
            workspaces, launches = _split(_Kernel(item))
            items += [*workspaces, *launches]
            changed = True
        else:
            items.append(item)
    return func.with_body(_seq(items)) if changed else func


def split_grid_syncs(name: str = "SplitGridSyncs"):
    """The pass: each ``T.Kernel`` with ``T.sync_grid()`` barriers as consecutive launches."""
    return prim_func_pass(name, _split_function)
