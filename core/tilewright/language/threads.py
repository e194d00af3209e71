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

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import kernel_error
from ..ir import THREAD_ALLREDUCE, THREAD_BINDING, decode, make_call
from . import builder as B
from .buffer import TileBuffer, as_int, declare, region_of, resolve, to_expr
from .frames import BLOCK_AXES, Kernel, index_value

# the kernel frame's record of T.get_thread_binding's variables: [(buffer, dimension)]
THREAD_VARS = "thread_vars"
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def thread_builder(what: str):
    """The kernel's builder for thread-level code ``what`` (refused outside a ``T.Kernel``
    and inside a ``T.Parallel`` loop)."""
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
    builder = thread_builder("T.get_thread_binding")
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


def get_thread_extent(dim: int = 0):
    """``T.get_thread_extent(0)``: the number of threads along dimension ``dim`` of the
    enclosing ``T.Kernel``'s ``threads`` (CUDA's ``blockDim``), an int32 constant."""
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= 2:
        raise kernel_error(f"T.get_thread_extent takes a thread dimension 0, 1 or 2, got "
                           f"{dim!r}")
    return tirx.const(B.require_kernel("T.get_thread_extent").threads[dim], "int32")


def get_thread_bindings():
    """``tx, ty, tz = T.get_thread_bindings()``: the calling thread's index along each of the
    three thread dimensions (``T.get_thread_binding(d)``); a dimension of one thread is the
    constant 0."""
    threads = tuple(thread_builder("T.get_thread_bindings").threads)
    return [get_thread_binding(d) if d == 0 or threads[d] > 1 else tirx.const(0, "int32")
            for d in range(3)]


def get_thread_extents():
    """``T.get_thread_extents()``: the number of threads along each of the three thread
    dimensions of the enclosing ``T.Kernel`` (CUDA's ``blockDim``), int32 constants."""
    return [get_thread_extent(d) for d in range(3)]


def thread_binding(start, stop=None, thread: str = "threadIdx.x", *, annotations=None):
    """TVM script's thread loops and TileLang's thread index:

    - in a ``T.Kernel`` body, ``tx = T.thread_binding(0, threads, thread="threadIdx.x")``
      names a thread index the kernel already has, the same as ``T.get_thread_binding(0)``
      (``threadIdx.y``: 1, ``threadIdx.z``: 2); the range must be the kernel's whole extent
      along that dimension;
    - without one, ``for bx in T.thread_binding(n, thread="blockIdx.x"):`` with
      ``for tx in T.thread_binding(128, thread="threadIdx.x"):`` inside it (TVM script's form,
      ``T.thread_binding(start, stop, thread)`` too, from 0) is a kernel: the outermost such
      loop opens it, each loop sets the extent of its block or thread dimension, and the body
      is the block's program with ``tx`` the calling thread's index (as after
      ``T.get_thread_binding``): ``with T.Kernel(n, threads=128) as bx`` written as loops."""
    if stop is None:
        start, stop = 0, start
    builder = B.current("T.thread_binding")
    kernel = builder.enclosing("kernel")
    if kernel is None or isinstance(kernel.info["kernel"], _ScriptKernel):
        return _LaunchLoop(start, stop, thread, annotations)
    if thread not in THREAD_TAGS:
        raise kernel_error(f"T.thread_binding names a thread index of the kernel "
                           f"({', '.join(THREAD_TAGS)}), got thread={thread!r}")
    dim = THREAD_TAGS.index(thread)
    threads = tuple(thread_builder("T.thread_binding").threads)
    if as_int(start) != 0 or as_int(stop) != threads[dim]:
        raise kernel_error(f"T.thread_binding({start}, {stop}, thread={thread!r}): the kernel "
                           f"has {threads[dim]} threads along {thread} (threads={threads}); "
                           f"the range must be 0..{threads[dim]}")
    return get_thread_binding(dim)


class _ScriptKernel(Kernel):
    """The kernel a TVM-script thread loop opens: its grid and threads are the extents of
    the loops inside it, set as each loop opens (one block and one thread until then)."""

    opened_by_loop = True

    def __init__(self):
        super().__init__(1, threads=1)
        self.set: dict[str, int] = {}  # the loops' tags and extents

    def take(self, tag: str, extent):
        """Set the extent along ``tag``; the index variable of the loop."""
        if tag in self.set:
            if as_int(extent) != self.set[tag]:
                raise kernel_error(f"T.thread_binding(..., thread={tag!r}) of extent {extent}: "
                                   f"this kernel's {tag} loops have extent {self.set[tag]}")
        elif tag in BLOCK_AXES:
            axis = BLOCK_AXES.index(tag)
            grid = list(self.grid) + [1] * (axis + 1 - len(self.grid))
            grid[axis] = extent
            self.grid = tuple(grid)
            self.vars = self.vars + tuple(tirx.Var(n, "int32") for n in
                                          ("bx", "by", "bz")[len(self.vars):len(grid)])
            self.set[tag] = as_int(extent)
        else:
            if not isinstance(as_int(extent), int) or as_int(extent) <= 0:
                raise kernel_error(f"T.thread_binding(..., thread={tag!r}): a thread extent "
                                   f"must be a positive constant, got {extent}")
            threads = list(self.threads)
            threads[THREAD_TAGS.index(tag)] = as_int(extent)
            self.threads = B.current("T.thread_binding").threads = tuple(threads)
            self.set[tag] = as_int(extent)
        if tag in BLOCK_AXES:
            return self.vars[BLOCK_AXES.index(tag)]
        return get_thread_binding(THREAD_TAGS.index(tag))

    def finish(self, body):
        """``body`` with its thread indices' records naming the kernel's final threads (a
        ``threadIdx.y`` loop inside a ``threadIdx.x`` one sets them after the first)."""
        threads = ",".join(map(str, self.threads))

        def restate(stmt):
            call = decode(stmt)
            if call is None or call.name != THREAD_BINDING.name or \
                    call.attrs["threads"] == threads:
                return stmt
            return make_call(THREAD_BINDING.name, call.operands,
                             {**call.attrs, "threads": threads}, span=stmt.span)

        return tvm_ffi.structural_map(body, (tirx.Evaluate, restate))


class _LaunchLoop:
    """``for v in T.thread_binding(n, thread=tag)`` outside a ``T.Kernel``: see
    :func:`thread_binding`."""

    def __init__(self, start, stop, thread, annotations):
        if thread not in THREAD_TAGS + BLOCK_AXES:
            raise kernel_error(f"T.thread_binding loops bind blockIdx.x/y/z or threadIdx.x/y/z, "
                               f"got thread={thread!r}")
        if as_int(start) != 0:
            raise kernel_error(f"T.thread_binding({start}, {stop}, thread={thread!r}): a thread "
                               "loop starts at 0")
        self.extent = index_value(stop, f"a T.thread_binding extent ({thread})")
        self.thread = thread

    def check_jump(self, kind: str) -> None:
        """A ``break`` out of the loop is refused: its iterations are the kernel's blocks or
        threads, which all run the body, so none ends the others (and the loop that opens
        the kernel would be left with the kernel unfinished). A ``continue`` ends the
        iteration's body, as it would in each block or thread."""
        if kind == "break":
            raise kernel_error(f"'break' out of a T.thread_binding loop ({self.thread}): its "
                               "iterations are the kernel's blocks or threads, which all run "
                               "the body, so none can end the others; guard the body with an "
                               "'if' instead")

    def __iter__(self):
        builder = B.current("T.thread_binding")
        frame = builder.enclosing("kernel")
        if frame is not None:  # a loop inside the kernel an outer one opened
            yield frame.info["kernel"].take(self.thread, self.extent)
            return
        kernel = _ScriptKernel()
        kernel.__enter__()
        try:
            yield kernel.take(self.thread, self.extent)
        except BaseException as exc:
            kernel.__exit__(type(exc), exc, exc.__traceback__)
            raise
        kernel.__exit__(None, None, None)


# -- TVM's thread allreduce (TileLang's hand-written GEMV reductions) ---------------------------
class comm_reducer:  # noqa: N801 - TVM's name
    """``T.comm_reducer(lambda x, y: x + y, [identity])``: how :func:`tvm_thread_allreduce`
    combines values: a sum, ``T.max`` or ``T.min`` of the two arguments."""

    KINDS = {tirx.Add: "sum", tirx.Max: "max", tirx.Min: "min"}

    def __init__(self, fcombine, identity):
        x, y = tirx.Var("x", "float32"), tirx.Var("y", "float32")
        combined = fcombine(x, y)
        kind = self.KINDS.get(type(combined))
        if kind is None or not {combined.a.same_as(x), combined.b.same_as(x)} == {True, False}:
            raise kernel_error("T.comm_reducer combines two values with x + y, T.max(x, y) or "
                        f"T.min(x, y); got {combined}")
        self.kind, self.identity = kind, identity


class attr:  # noqa: N801 - TVM's name
    """``with T.attr(T.comm_reducer(...), "reduce_scope", ...):``, TVM's scope of a
    :func:`tvm_thread_allreduce` (the only attribute the language has)."""

    def __init__(self, node, key, value=None):
        if key != "reduce_scope" or not isinstance(node, comm_reducer):
            raise kernel_error(f"T.attr: the language has the 'reduce_scope' of a "
                               f"T.comm_reducer around T.tvm_thread_allreduce only, got key "
                               f"{key!r}")
        self.reducer = node

    def __enter__(self):
        self._frame = thread_builder("T.attr").open("reduce_scope", reducer=self.reducer)
        return self

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.attr")
        body = builder.close(self._frame)
        if exc_type is None:
            builder.emit(body)
        return False


class _AllReduce:
    """What :func:`tvm_thread_allreduce` makes, for :func:`evaluate` to emit."""

    def __init__(self, operands: dict, attrs: dict):
        self.operands, self.attrs = operands, attrs


def _thread_dim(builder, value) -> int | None:
    """The thread dimension a T.get_thread_binding / T.thread_binding value names (also
    through the variable ``kr = T.thread_binding(...)`` binds it to), or None."""
    if isinstance(value, tirx.Var):
        value = next((s.value for f in builder.frames for s in f.stmts
                      if isinstance(s, tirx.Bind) and s.var.same_as(value)), None)
    if isinstance(value, tvm.ir.TensorLoad):
        bindings = builder.enclosing("kernel").info.get(THREAD_VARS, ())
        return next((dim for buf, dim in bindings if buf.same_as(value.source)), None)
    return None


def tvm_thread_allreduce(count, value, cond, dst, *threads, dtype="handle"):
    """``T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0], kr))`` inside
    ``with T.attr(T.comm_reducer(...), "reduce_scope", ...)``: the threads that differ only
    in the thread index ``kr`` (one of T.Kernel's thread dimensions, from T.thread_binding)
    combine their ``value``; each gets the result in ``out[0]``, a one-element local array.
    Every thread of the block must reach it. CUDA combines the values with shuffles within
    each warp and, for a group spanning warps, through shared memory at the block's barrier;
    the CPU and the interpreter combine each group's values in thread order."""
    builder = thread_builder("T.tvm_thread_allreduce")
    scope = builder.enclosing("reduce_scope")
    if scope is None:
        raise kernel_error("T.tvm_thread_allreduce must be inside 'with T.attr("
                           "T.comm_reducer(...), \"reduce_scope\", ...)', which says how "
                           "values are combined")
    if as_int(count) != 1 or not (cond is True or as_int(cond) == 1):
        raise kernel_error(f"T.tvm_thread_allreduce reduces one value under the condition "
                           f"True, got count {count} and condition {cond}")
    dims = [_thread_dim(builder, t) for t in threads]
    if len(dims) != 1 or dims[0] is None:
        raise kernel_error("T.tvm_thread_allreduce takes one thread index, from "
                           "T.thread_binding or T.get_thread_binding, to reduce along")
    if not isinstance(dst, tvm.ir.TensorLoad) or [as_int(d) for d in dst.source.shape] != [1] \
            or not str(dst.source.scope()).startswith("local"):
        raise kernel_error("T.tvm_thread_allreduce writes its result to a one-element local array "
                    "(T.alloc_local((1,), dtype)), as out[0]")
    threads_of = tuple(builder.threads)
    region = resolve(region_of(TileBuffer(dst.source), "T.tvm_thread_allreduce"), None,
                     "T.tvm_thread_allreduce")
    return _AllReduce({"value": to_expr(value), "dst": region},
                      {"combiner": scope.info["reducer"].kind, "dim": dims[0],
                       "threads": ",".join(map(str, threads_of))})


def evaluate(value):
    """``T.evaluate(T.tvm_thread_allreduce(...))``: emit the reduction (the only value the
    language evaluates as a statement)."""
    if not isinstance(value, _AllReduce):
        raise kernel_error(f"T.evaluate takes T.tvm_thread_allreduce(...), got "
                           f"{type(value).__name__}")
    thread_builder("T.evaluate").emit(make_call(THREAD_ALLREDUCE.name, value.operands,
                                                 value.attrs, span=B.here()))


# -- TileLang's warp reductions: the value combined over the calling thread's warp --------------
WARP = 32
WARP_REDUCE_KINDS = ("sum", "max", "min", "bitand", "bitor")


def _warp_reduce(kind: str, value):
    name = f"T.warp_reduce_{kind}"
    builder = thread_builder(name)
    threads = tuple(builder.threads)
    if threads[0] % WARP == 0 or threads[1] == threads[2] == 1:
        width = WARP  # in a 1-D block the last warp may be partial (48 threads: 32 and 16)
    else:
        raise kernel_error(f"{name}: the block's threads={threads} split warps across "
                           f"threadIdx.y; give threadIdx.x a multiple of {WARP} threads")
    value = to_expr(value)
    dtype = str(value.ty)
    if kind.startswith("bit") and not dtype.startswith(("int", "uint")):
        raise kernel_error(f"{name} combines integers; the value is {dtype}")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(f"warp_{kind}_{n}", (1,), dtype, "local")
    builder.emit(tirx.AllocBuffer(buf, span=B.here()))
    region = resolve(region_of(TileBuffer(buf), name), None, name)
    builder.emit(make_call(THREAD_ALLREDUCE.name, {"value": value, "dst": region},
                           {"combiner": kind, "dim": 0,
                            "threads": ",".join(map(str, threads)), "width": width},
                           span=B.here()))
    return tirx.BufferLoad(buf, [tirx.const(0, "int32")])


def _make_warp_reduce(kind: str):
    def warp_reduce(value):
        return _warp_reduce(kind, value)

    warp_reduce.__name__ = f"warp_reduce_{kind}"
    warp_reduce.__qualname__ = f"T.{warp_reduce.__name__}"
    warp_reduce.__doc__ = (
        f"``T.warp_reduce_{kind}(value)`` in thread-level code: the {kind} of ``value`` over "
        "the calling thread's warp (32 consecutive threads along threadIdx.x; the last warp "
        "of a 1-D block whose size is not a multiple of 32 has fewer), which each of them "
        "gets; every thread of the warp must reach it (CUDA: XOR shuffles; the CPU and the "
        "interpreter combine the warp's values in thread order)")
    return warp_reduce


WARP_REDUCE_OPS = {f"warp_reduce_{k}": _make_warp_reduce(k) for k in WARP_REDUCE_KINDS}

