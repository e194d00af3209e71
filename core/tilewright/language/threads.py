"""Thread-level programming: ``tx = T.get_thread_binding(0)`` names the calling thread.

A tile program describes what a block does; code that reads the thread index (directly, or
through a per-thread variable computed from it: ``T.alloc_local`` / ``T.alloc_var``
storage, a value bound to a name) is run by each of the block's threads for itself, as in
TileLang: ``if tx == 0: s[0] = 0``, ``acc[0] += A[k] * B[tx, k]``, ``T.atomic_add(s[tx],
acc[0])``. CUDA runs it on its threads; the CPU and the interpreter run such code once per
thread, thread after thread, each statement for every thread before the next one
(:mod:`tilewright.transform.threads`), which is the order the CUDA backend's barriers give.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import kernel_error
from ..ir import THREAD_BINDING, make_call
from . import builder as B
from .buffer import TileBuffer, as_int, declare, region_of, resolve

# the kernel frame's record of T.get_thread_binding's variables: [(buffer, dimension)]
THREAD_VARS = "thread_vars"
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def _kernel_builder(what: str):
    builder = B.require_kernel(what)
    if builder.enclosing("parallel") is not None:
        raise kernel_error(f"{what} cannot be used inside a T.Parallel loop: its iterations "
                           "are not threads; read the index before the loop")
    return builder


def get_thread_binding(dim: int = 0):
    """``tx = T.get_thread_binding()``: the calling thread's index along dimension ``dim``
    (0, 1, 2: ``threadIdx.x/y/z``) of ``T.Kernel``'s ``threads``, an int32 value of each
    thread. The code that reads it, directly or through per-thread storage computed from it,
    runs once per thread. Tile ops stay the block's: a tile op under a condition on this
    index runs once for the threads that take the branch (the CPU and the interpreter), or
    is spread over the block's threads (CUDA), so thread-dependent code should be scalar
    code. ``T.atomic_add/max/min`` of one element is such code: each thread makes its own."""
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= 2:
        raise kernel_error(f"T.get_thread_binding takes a thread dimension 0, 1 or 2, got "
                           f"{dim!r}")
    builder = _kernel_builder("T.get_thread_binding")
    threads = tuple(builder.threads)
    if threads[dim] == 1 and dim > 0:
        raise kernel_error(f"T.get_thread_binding({dim}): the kernel has threads="
                           f"{threads[:dim + 1]} (a single thread along dimension {dim})")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(f"thread_{'xyz'[dim]}_{n}", (1,), "int32", "local.var")
    builder.enclosing("kernel").info.setdefault(THREAD_VARS, []).append((buf, dim))
    builder.emit(tirx.AllocBuffer(buf, span=B.here()))
    region = resolve(region_of(TileBuffer(buf), "T.get_thread_binding"), None,
                     "T.get_thread_binding")
    builder.emit(make_call(THREAD_BINDING.name, {"dst": region},
                           {"dim": dim, "threads": ",".join(map(str, threads))},
                           span=B.here()))
    return tirx.BufferLoad(buf, [tirx.const(0, "int32")])


def thread_binding(start, stop, thread: str = "threadIdx.x"):
    """``tx = T.thread_binding(0, threads, thread="threadIdx.x")`` in a ``T.Kernel`` body:
    TileLang's way of naming a thread index the kernel already has, the same as
    ``T.get_thread_binding(0)`` (``threadIdx.y``: 1, ``threadIdx.z``: 2). The range must be
    the kernel's whole extent along that dimension (a new thread loop is not a tile
    program's)."""
    if thread not in THREAD_TAGS:
        raise kernel_error(f"T.thread_binding names a thread index of the kernel "
                           f"({', '.join(THREAD_TAGS)}), got thread={thread!r}")
    dim = THREAD_TAGS.index(thread)
    threads = tuple(_kernel_builder("T.thread_binding").threads)
    if as_int(start) != 0 or as_int(stop) != threads[dim]:
        raise kernel_error(f"T.thread_binding({start}, {stop}, thread={thread!r}): the kernel "
                           f"has {threads[dim]} threads along {thread} (threads={threads}); "
                           f"the range must be 0..{threads[dim]}")
    return get_thread_binding(dim)
