"""Kernel frames and loops: ``T.Kernel``, ``T.Parallel``, ``T.Pipelined``, ``T.serial``.

Each loop kind is a :class:`LoopSpec`. The rewritten ``for`` statement iterates
``spec.run()``, which opens a frame, yields the symbolic loop variables once (the body runs
once and emits its statements into the frame), then closes the frame into IR ``For`` loops.
"""

from __future__ import annotations

import difflib

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import KernelError, kernel_error, span_location
from ..ir import NAMED_BARRIER, SYNC_GRID, make_call
from ..ir.schema import writes_memory
from . import builder as B
from .buffer import BufferSlice, TileBuffer, VarHandle, as_int, dtype_of, to_expr
from .debug import device_assert
from .math import arith, bitwise, if_then_else, keeping_effects, refuse_float_operands
from .tileops import atomics_as_statements

LOOP_KIND_KEY = "tw.loop"
# a loop frame's info key: why the loop's iterations must run in order (see LoopSpec.run)
IN_ORDER = "in_order"
BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def index_value(value, what: str):
    """``value`` (an extent, a grid dimension) as an int or an integer expression; anything
    else is a KernelError naming ``what``."""
    value = as_int(value)
    if isinstance(value, float):
        raise kernel_error(f"{what} must be an integer, got {value}")
    expr = to_expr(value)
    if not dtype_of(expr).startswith(("int", "uint")):
        raise kernel_error(f"{what} must be an integer expression, got dtype {dtype_of(expr)}")
    return value


class Kernel:
    """``with T.Kernel(gx, gy, threads=128) as (bx, by):`` — the program of one block.

    ``T.Kernel(threads=n)``, without a grid dimension, is one block, as in TileLang: the
    launch is the grid ``(1,)`` and ``as`` binds an empty tuple (no block index to name;
    ``T.get_block_binding(0)`` is 0 and ``T.get_block_extent(0)`` 1, as CUDA has them)."""

    opened_by_loop = False  # a kernel a TVM-script thread loop opens (language.threads)

    # TileLang 0.1.15's keyword besides threads and prelude: a hint the target decides here
    HINTS = ("is_cpu",)
    KEYWORDS = ("threads", "prelude")  # a dialect's kernel adds its own (cluster_dims ...)

    def __init__(self, *grid, threads=128, prelude=None, **options):
        unknown = sorted(set(options) - set(self.HINTS))
        if unknown:  # `thread=256` ran with 128 threads, silently
            close = difflib.get_close_matches(unknown[0], [*self.KEYWORDS, *self.HINTS], n=1)
            raise kernel_error(f"T.{type(self).__name__} got an unexpected keyword argument "
                               f"{unknown[0]!r}" + (f"; did you mean {close[0]!r}?" if close
                                                    else ""))
        if len(grid) > 3:
            raise kernel_error(f"T.Kernel takes 0 to 3 grid dimensions, got {len(grid)}")
        self.grid = tuple(index_value(g, "a T.Kernel grid dimension") for g in grid) or (1,)
        if any(isinstance(g, int) and g <= 0 for g in self.grid):  # TVM divided by it
            raise kernel_error(f"T.Kernel grid dimensions must be positive, got {tuple(grid)}")
        self.gridless = not grid  # ``as`` binds no block index
        threads = threads if isinstance(threads, (tuple, list)) else (threads,)
        self.threads = tuple(int(t) for t in threads) + (1,) * (3 - len(threads))
        if any(t <= 0 for t in self.threads):
            raise kernel_error(f"T.Kernel threads must be positive, got {threads}")
        self.options = options
        self.vars = tuple(tirx.Var(n, "int32") for n in ("bx", "by", "bz")[: len(self.grid)])
        self._frame = None

    def __enter__(self):
        builder = B.current("T.Kernel")
        if builder.in_kernel():
            raise kernel_error("'with T.Kernel(...)' blocks cannot be nested; write them one "
                               "after the other (each is a launch, in order)")
        if builder.source_kernel:
            raise kernel_error("a function with T.CUDASourceCodeKernel has no other kernel "
                               "launch: write one function per launch")
        builder.kernel_seen = True
        builder.threads = self.threads
        builder.kernel_annotations = {}  # each block's own (T.use_swizzle, layouts ...)
        self._span = B.here()
        self._frame = builder.open("kernel", kernel=self)
        return () if self.gridless else self.vars

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.Kernel")
        body = builder.close(self._frame)
        if exc_type is not None:
            return False
        body = self.finish(body)
        for check in self._frame.info.get(B.KERNEL_CHECKS, ()):
            check()
        annotations = {"tw.threads": list(self.threads), **builder.kernel_annotations}
        for axis in reversed(range(len(self.grid))):
            var, extent = self.vars[axis], to_expr(self.grid[axis])
            iv = tirx.IterVar(tvm.ir.Range(0, extent), var, tirx.IterVar.ThreadIndex,
                              BLOCK_AXES[axis])
            body = tirx.For(var, 0, extent, tirx.ForKind.THREAD_BINDING, body, thread_binding=iv,
                            annotations=annotations if axis == 0 else None, span=self._span)
        builder.emit(body)
        return False


    def finish(self, body):
        """The block's program as built (a kernel whose launch is known only at its end
        restates it here)."""
        return body


class LoopSpec:
    """A loop nest to build: one ``For`` per extent, with a kind and annotations."""

    kind_name = "serial"
    for_kind = tirx.ForKind.SERIAL
    step, offset = 1, 0  # a T.serial / T.unroll loop of another step: see serial

    def __init__(self, extents, starts=None, annotations=None):
        # a constant extent below zero runs no iteration, as Python's range(5, 2) (a loop of
        # negative extent crashed TVM's unrolling on CUDA)
        self.extents = tuple(max(e, 0) if isinstance(e, int) else e for e in (
            index_value(e, f"a T.{self.kind_name} extent") for e in extents))
        self.starts = tuple(starts) if starts else (0,) * len(self.extents)
        self.annotations = annotations or {}

    def check(self, builder) -> None:
        if builder.enclosing("kernel") is None:
            raise kernel_error(f"T.{self.kind_name} loops must be inside 'with T.Kernel(...)'")

    def run(self, names=(), finish=None):
        """Open the loop's frame, yield its variables (the body is traced once), then emit the
        loop; ``finish`` (a function of the traced body) may rewrite the body first."""
        builder = B.current(f"T.{self.kind_name}")
        self.check(builder)
        span = B.here()
        if len(names) != len(self.extents):
            names = "ijklmn"[: len(self.extents)] if len(self.extents) > 1 else ("i",)
        loop_vars = [tirx.Var(n, "int32") for n in names]
        frame = builder.open(self.kind_name, loop_vars=loop_vars, starts=self.starts,
                             extents=self.extents)
        # a loop of step s counts its iterations; the body sees start + s * iteration
        values = [v if self.step == 1 else to_expr(self.offset) + v * self.step
                  for v in loop_vars]
        yield values[0] if len(values) == 1 else tuple(values)
        barriers = frame.info.get(BARRIERS)
        if barriers:  # a T.Parallel loop a barrier cuts: one loop before it, one after
            _emit_cut(builder, frame, barriers, lambda part, vs: self._loop(
                frame, vs, part, span), loop_vars)
            return
        body = builder.close(frame)
        if finish is not None:
            body = finish(body)
        builder.emit(self._loop(frame, loop_vars, body, span))

    def _loop(self, frame, loop_vars, body, span):
        """The loop nest over ``loop_vars`` around ``body``."""
        # a body that must see its iterations in order (IN_ORDER: it draws random numbers from
        # one generator) makes a T.Parallel loop of a one-thread block a serial loop
        kind, for_kind = ("serial", tirx.ForKind.SERIAL) if frame.info.get(IN_ORDER) \
            else (self.kind_name, self.for_kind)
        if for_kind == tirx.ForKind.UNROLLED and not all(
                isinstance(as_int(e), int) for e in self.extents):
            # a trip count known only when the kernel runs: a loop, not unrolled
            kind, for_kind = "serial", tirx.ForKind.SERIAL
        annotations = {LOOP_KIND_KEY: kind, **self.annotations}
        for var, start, extent in reversed(list(zip(loop_vars, self.starts, self.extents))):
            body = tirx.For(var, to_expr(start), to_expr(extent), for_kind, body,
                            annotations=annotations, span=span)
        return body


BARRIERS = "barriers"  # a T.Parallel frame's info: the barriers standing in its body


def _emit_cut(builder, frame, barriers: list, loop, loop_vars) -> None:
    """Emit the loop of ``frame`` cut at each of ``barriers`` (statements of its body): the
    statements between two barriers as one loop (``loop(body, vars)``, fresh variables after
    the first), the barriers between the loops. Every iteration's statements before a barrier
    run before any after it, which is what a barrier in a data-parallel loop means; a value
    named before the barrier is not one the loops after it can read (keep it in a tile)."""
    builder.close(frame)
    parts, current = [], []
    for stmt in frame.stmts:
        if any(stmt.same_as(b) for b in barriers):
            parts.append((current, stmt))
            current = []
        else:
            current.append(stmt)
    parts.append((current, None))
    named = []
    for n, (stmts, barrier) in enumerate(parts):
        body = B.seq(stmts)
        used = set()
        tvm_ffi.structural_walk(body, (tirx.Var, used.add))
        late = [v for v in named if v in used]
        if late:
            raise kernel_error(f"{late[0].name!r} is named before a barrier inside a T.Parallel "
                               "loop and read after it: the barrier cuts the loop in two, so "
                               "keep the value in a tile indexed by the loop's variables",
                               span_location(barrier.span if barrier is not None else
                                             parts[n - 1][1].span))
        tvm_ffi.structural_walk(body, (tirx.Bind, lambda s: named.append(s.var)))
        fresh = loop_vars if n == 0 else [tirx.Var(v.name, v.ty) for v in loop_vars]
        if n:
            mapping = dict(zip(loop_vars, fresh))
            body = tvm_ffi.structural_map(body, (tirx.Var, lambda v, m=mapping: m.get(v, v)))
        if stmts:
            builder.emit(loop(body, fresh))
        if barrier is not None:
            builder.emit(barrier)


class Parallel(LoopSpec):
    """``for i, j in T.Parallel(M, N)``: iterations are independent (threads, vector lanes)."""

    kind_name = "parallel"

    def run(self, names=()):
        builder = B.current("T.Parallel")
        outer = builder.enclosing("parallel") is None
        before = len(builder.frames[-1].stmts)
        yield from super().run(names)
        for nest in builder.frames[-1].stmts[before:]:  # one nest, or those a barrier cut
            if outer and isinstance(nest, tirx.For) and \
                    str(nest.annotations[LOOP_KIND_KEY]) == "parallel":
                check_races(nest)  # the whole nest once, at its outermost T.Parallel

    def __init__(self, *extents, coalesced_width=None):
        super().__init__(extents, annotations={"tw.coalesced_width": coalesced_width}
                         if coalesced_width else None)


class parallel(Parallel):  # noqa: N801 - TileLang's (TVM script's) name
    """``for i in T.parallel(n)`` or ``T.parallel(start, stop)``: a ``T.Parallel`` loop of one
    dimension, as TileLang treats TVM's parallel loop."""

    def __init__(self, start, stop=None):
        start, stop = _start_stop(start, stop)
        extent = stop - start if isinstance(start, int) and isinstance(stop, int) else \
            to_expr(stop) - to_expr(start)
        LoopSpec.__init__(self, (extent,), (start,))


class vectorized(parallel):  # noqa: N801 - the language's name
    """``for i in T.vectorized(n)``: independent iterations a backend may run as vector lanes;
    a ``T.Parallel`` loop of one dimension (the CPU backend vectorises it where it can)."""


def _start_stop(start, stop):
    if stop is None:
        return 0, start
    return start, stop


class Pipelined(LoopSpec):
    """``for k in T.Pipelined(n, num_stages=3)``: a serial loop whose copies are pipelined."""

    kind_name = "pipelined"

    def __init__(self, start, stop=None, num_stages=0, order=None, stage=None, sync=None,
                 group=None):
        stages = as_int(num_stages)
        if not isinstance(stages, int) or isinstance(stages, bool) or stages < 0:
            raise kernel_error(f"T.Pipelined's num_stages must be an int >= 0 (0: not "
                               f"pipelined), got {num_stages!r}")
        start, stop = _start_stop(start, stop)
        annotations = {"tw.num_stages": stages}
        if order is not None:
            annotations["tw.order"] = [int(o) for o in order]
        if stage is not None:
            annotations["tw.stage"] = [int(s) for s in stage]
        if group is not None:  # order= and stage= then index these groups of statements
            annotations["tw.group"] = [[int(s) for s in g] for g in group]
        super().__init__((to_expr(stop) - to_expr(start) if not (isinstance(start, int) and
                          isinstance(stop, int)) else stop - start,), (start,), annotations)

    def check(self, builder) -> None:
        super().check(builder)
        if builder.enclosing("pipelined") is not None:
            raise kernel_error("T.Pipelined cannot be nested inside another T.Pipelined loop")
        if builder.enclosing("parallel") is not None:
            raise kernel_error("T.Pipelined cannot be nested inside a T.Parallel loop")


class serial(LoopSpec):  # noqa: N801 - the language's name
    """``for k in T.serial(n)`` or ``T.serial(start, stop)``: a sequential loop."""

    kind_name = "serial"

    def __init__(self, start, stop=None, step=None, annotations=None):
        step = 1 if step is None else as_int(step)
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise kernel_error(f"T.{self.kind_name}'s step must be a positive int, got {step!r}")
        start, stop = _start_stop(start, stop)
        extent = stop - start if isinstance(start, int) and isinstance(stop, int) else \
            to_expr(stop) - to_expr(start)
        if step != 1:  # iterations start, start + step, ... below stop
            self.step, self.offset = step, start
            extent, start = -(-extent // step) if isinstance(extent, int) else \
                tirx.floordiv(extent + step - 1, step), 0
        super().__init__((extent,), (start,), annotations)


class unroll(serial):  # noqa: N801 - the language's name
    """``for k in T.unroll(n)``, ``T.unroll(start, stop, step)``: a sequential loop the
    backend unrolls (TileLang's ``unroll_factor`` and ``explicit`` are hints; a trip count
    known only when the kernel runs is a plain loop)."""

    kind_name = "unroll"
    for_kind = tirx.ForKind.UNROLLED

    def __init__(self, start, stop=None, step=None, explicit=False, unroll_factor=None,
                 annotations=None):
        if unroll_factor is not None and (not isinstance(unroll_factor, int) or
                                          unroll_factor < 1):
            raise kernel_error(f"T.unroll's unroll_factor must be a positive int, got "
                               f"{unroll_factor!r}")
        super().__init__(start, stop, step, annotations)


# -- helpers the rewritten kernel code calls through `__tw__` -------------------------------
def truth(cond):
    """A condition of ``if``, ``while``, ``and`` / ``or`` / ``not`` or ``x if c else y``: a
    Python value as it is (Python's truth); a run-time value (an expression, a ``T.alloc_var``
    scalar) as a bool expression, non-zero being true as in C (``if v:`` of an int32 variable
    stopped in TVM, "Not of int32"; ``not v`` was Python's False); a constant folded to Python's
    bool. A buffer is true, as any Python object (TileLang's kernels test an optional one:
    ``if bias:``); a region is no value, refused at the user's line."""
    if isinstance(cond, TileBuffer) and not isinstance(cond, VarHandle):
        return True
    if not isinstance(cond, (VarHandle, BufferSlice)) and dtype_of(cond) is None:
        return cond
    cond = to_expr(cond)  # a region raises: it is no value
    if isinstance(cond, (tirx.IntImm, tirx.FloatImm)):
        return bool(cond.value)
    dtype = dtype_of(cond)
    return cond if dtype == "bool" else tirx.NE(cond, tirx.const(0, dtype))


def _as_bool(value):
    """A condition from :func:`truth` as a bool expression (a Python value's truth a constant)."""
    return tirx.const(bool(value), "bool") if dtype_of(value) is None else value


class _Branch:
    def __init__(self, cond):
        self.cond = cond
        self.value = None
        self._then = None
        self._span = None

    def then(self):
        return _BranchFrame(self, "then")

    def otherwise(self):
        return _BranchFrame(self, "else")


class _BranchFrame:
    def __init__(self, branch: _Branch, which: str):
        self.branch, self.which = branch, which

    def __enter__(self):
        builder = B.current("if")
        if self.which == "then":
            self.branch._span = B.here()
        cond = self.branch.cond
        self.frame = builder.open("if", taken=cond if self.which == "then" else
                                  tirx.Not(to_expr(cond)))
        return None

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("if")
        body = builder.close(self.frame)
        if exc_type is not None:
            return False
        if self.which == "then":
            self.branch._then = tirx.IfThenElse(self.branch.cond, body, None,
                                                span=self.branch._span)
            builder.emit(self.branch._then)
        else:
            stmts = builder.frames[-1].stmts
            stmts[stmts.index(self.branch._then)] = tirx.IfThenElse(
                self.branch.cond, self.branch._then.then_case, body, span=self.branch._span)
        return False


class Helpers:
    """The ``__tw__`` object rewritten kernels call. ``annotate`` (``NAME: ANNOTATION [=
    VALUE]`` in a kernel body) is given by the module that declares parameters
    (``language.kernel``), which builds the one instance."""

    def __init__(self, annotate):
        self.annotate = annotate

    @staticmethod
    def loop(iterable, names=()):
        return iterable.run(names) if isinstance(iterable, LoopSpec) else iterable

    @staticmethod
    def range(*args):
        # `for k in range(n)` inside a kernel is a serial IR loop, as in TileLang
        builder = B.maybe_current()
        if builder is not None and builder.in_kernel():
            return serial(*args)
        return range(*args)

    @staticmethod
    def statement(value):
        """An expression written as a statement (``T.atomic_add(C[0], 1, return_prev=True)``
        with its value left unused): evaluated where it stands when it writes memory, which
        dropping it would lose; anything else is left as Python leaves it."""
        if isinstance(value, tvm.ir.Expr) and writes_memory(value) and \
                not atomics_as_statements(value):
            B.require_kernel("an expression with an effect").emit(
                tirx.Evaluate(value, span=B.here()))
        return value

    @staticmethod
    def branch(cond):
        cond = truth(cond)
        branch = _Branch(cond)
        if dtype_of(cond) is None:
            branch.value = bool(cond)
        return branch

    @staticmethod
    def all_of(value, *thunks):
        for thunk in thunks:
            test = truth(value)
            if dtype_of(test) is None:
                if not test:
                    return value
                value = thunk()
            else:
                value = tirx.And(test, _as_bool(truth(thunk())))
        return value

    @staticmethod
    def any_of(value, *thunks):
        for thunk in thunks:
            test = truth(value)
            if dtype_of(test) is None:
                if test:
                    return value
                value = thunk()
            else:
                value = tirx.Or(test, _as_bool(truth(thunk())))
        return value

    @staticmethod
    def choose(cond, then, otherwise):
        """``then() if cond else otherwise()``: Python's for a Python truth value; for a
        symbolic condition both values, selected by ``T.if_then_else`` (TileLang's meaning)."""
        cond = truth(cond)
        if dtype_of(cond) is None:
            return then() if cond else otherwise()
        return if_then_else(cond, then(), otherwise())

    @staticmethod
    def check(cond, message):
        """``assert cond, message`` in a kernel: Python's assert of a Python value (a
        compile-time check, ``assert K % block_K == 0``); ``T.device_assert`` of a run-time
        one (TVM stopped: "Cannot use and / or / not operator to Expr")."""
        cond = truth(cond)
        if dtype_of(cond) is None:
            if not cond:
                text = message()
                raise AssertionError(*(() if text is None else (text,)))
            return
        builder = B.maybe_current()
        if builder is None or builder.enclosing("kernel") is None:
            raise kernel_error("an 'assert' of a value known only when the kernel runs must "
                               "be inside 'with T.Kernel(...)', where it is T.device_assert "
                               "(a Python value's assert is checked where it stands)")
        text = message()
        device_assert(cond, "" if text is None else str(text))

    @staticmethod
    def not_of(value):
        value = truth(value)
        return not value if dtype_of(value) is None else tirx.Not(value)

    @staticmethod
    def negate(value):
        """``-value``; of an unsigned value, ``0 - value``, which wraps as torch's negation of
        an unsigned tensor does (TVM's own negation multiplies by a constant -1, which an
        unsigned type cannot hold, and stops in TVM)."""
        dtype = dtype_of(value)
        if dtype is not None and dtype.startswith("uint"):
            return arith("-", tirx.const(0, dtype), value)
        return -value

    arith = staticmethod(arith)  # + - * <<: constants of a wrapping type fold wrapped
    bitwise = staticmethod(bitwise)  # & | ^ >> ~: of integers and bools

    @staticmethod
    def floordiv(a, b):
        return _integer_division("//", a, b)

    @staticmethod
    def floormod(a, b):
        return _integer_division("%", a, b)

    @staticmethod
    def is_static(branch) -> bool:
        if branch.value is None and B.maybe_current() is None:
            raise kernel_error("a symbolic condition can only be used inside a kernel")
        return branch.value is not None

    @staticmethod
    def static_condition(cond):
        if dtype_of(cond) is not None and not isinstance(cond, tirx.IntImm):
            raise kernel_error("a 'while' loop with 'break' or 'continue' needs a condition "
                               "known at compile time; with a run-time condition, end the loop "
                               "through its condition")
        return bool(cond.value) if isinstance(cond, tirx.IntImm) else cond

    @staticmethod
    def jump_loop(iterable, names=()):
        return JumpLoop(iterable, names)

    @staticmethod
    def jump(loop: JumpLoop, kind: str) -> None:
        loop.jump(kind)

    @staticmethod
    def python_jump(loop: JumpLoop, kind: str) -> None:
        loop.python_jump(kind)

    @staticmethod
    def while_loop(cond):
        return WhileLoop(cond)

    @staticmethod
    def frame_depth() -> int | None:
        builder = B.maybe_current()
        return len(builder.frames) if builder is not None else None

    @staticmethod
    def returning(depth: int | None) -> None:
        returning(depth)

    @staticmethod
    def single_target(ctx):
        return _Single(ctx) if isinstance(ctx, Kernel) else ctx

    @staticmethod
    def assign(name, current, value):
        if isinstance(current, VarHandle) and not isinstance(value, TileBuffer) and \
                B.maybe_current() is not None:
            current.store(value)
            return current
        builder = B.maybe_current()
        if builder is None:
            return value
        if not isinstance(value, TileBuffer):
            return builder.snapshot(name, value)
        # `A_shared = T.alloc_shared(...)` names the buffer after the variable (a view of a
        # tensor too: `flat = T.Tensor(shape, dtype, A.data)`)
        stmts = builder.frames[-1].stmts
        if not stmts or not isinstance(stmts[-1], (tirx.AllocBuffer, tirx.DeclBuffer)) or \
                not stmts[-1].buffer.same_as(value.buffer):
            if isinstance(current, VarHandle) and not isinstance(value, VarHandle):
                # TileLang stores what is assigned to a T.alloc_var: a whole buffer is no value
                raise kernel_error(
                    f"{name} is a T.alloc_var scalar and {value.buffer.name} a buffer of shape "
                    f"{list(value.buffer.shape)}: '{name} = {value.buffer.name}' stores a "
                    f"value into {name}; store one element ({name} = {value.buffer.name}[i]) "
                    "or bind the buffer to another name")
            return value
        old = value.buffer
        new = tirx.decl_buffer(old.shape, old.dtype, name, scope=old.scope())
        stmts[-1] = tirx.AllocBuffer(new, span=stmts[-1].span) if isinstance(
            stmts[-1], tirx.AllocBuffer) else tirx.DeclBuffer(new, data=stmts[-1].data,
                                                               span=stmts[-1].span)
        return value.renamed(new)


class JumpLoop:
    """A ``for`` loop whose body has ``break`` or ``continue``. Over a Python iterable it is a
    Python loop (:meth:`python`), whose jumps are Python's; a jump under a run-time condition
    there is refused (:meth:`python_jump`), since the loop does not exist at run time.

    Over a ``T.serial`` loop (or ``range`` in a kernel) the jumps are run-time: an ``int32``
    flag allocated before the loop holds 0 (running), 1 (``continue``) or 2 (``break``); each
    jump stores its value (:meth:`jump`), every statement after a statement that may jump runs
    only while the flag is 0, and an iteration runs ``if flag != 2: flag = 0; BODY``, so
    iterations after a ``break`` do nothing. The loop stays an IR ``For`` of its extent
    (backends keep their analyses of serial loops); a loop's ``else`` runs while the flag is
    not 2. Other tile loops (``T.Parallel``, ``T.Pipelined``, ``T.unroll``, ``T.Persistent``)
    with jumps are refused at the loop's line."""

    def __init__(self, iterable, names):
        self.iterable, self.names = iterable, names
        self.symbolic = isinstance(iterable, LoopSpec)
        builder = B.maybe_current()
        self._depth = len(builder.frames) if builder is not None else None
        self.flag = None
        if not self.symbolic:
            return
        kind = iterable.kind_name
        if kind != "serial" or isinstance(iterable, Persistent):
            shown = kind.capitalize() if kind in ("parallel", "pipelined", "persistent") \
                else kind
            raise kernel_error(f"'break' or 'continue' in a T.{shown} loop: only a T.serial "
                               "loop (or range) can end an iteration or the loop early at run "
                               "time; loop with T.serial, or guard the body with an 'if'")
        builder = B.require_kernel("a loop with 'break' or 'continue'")
        if builder.enclosing("parallel") is not None:
            raise kernel_error("a loop with 'break' or 'continue' inside a T.Parallel loop: the "
                               "iterations of the parallel loop would end at different times; "
                               "put the T.serial loop outside the T.Parallel loop")
        n = sum(1 for f in builder.frames for st in f.stmts if isinstance(st, tirx.AllocBuffer))
        self.flag = tirx.decl_buffer((1,), "int32", f"jump_{n}", scope="local.var")
        builder.emit(tirx.AllocBuffer(self.flag, span=B.here()))
        builder.emit(self._store(0))

    def _store(self, value: int):
        return tirx.BufferStore(self.flag, tirx.const(value, "int32"),
                                [tirx.const(0, "int32")], span=B.here())

    def _flag(self):
        return tirx.BufferLoad(self.flag, [tirx.const(0, "int32")])

    def __iter__(self):
        yield from self.iterable.run(self.names, self._finish)

    def python(self):
        return self.iterable

    def jump(self, kind: str) -> None:
        B.current(f"'{kind}'").emit(self._store(JUMPS[kind]))

    def python_jump(self, kind: str) -> None:
        check = getattr(self.iterable, "check_jump", None)
        if check is not None:  # a loop that refuses some jumps (a T.thread_binding loop)
            check(kind)
        builder = B.maybe_current()
        if builder is None or self._depth is None:
            return
        opened = [f.kind for f in builder.frames[self._depth:]]
        if "if" in opened or "while" in opened:
            raise kernel_error(f"'{kind}' under a condition known only at run time, in a loop "
                               "that Python unrolls while tracing (the loop does not exist at "
                               "run time); loop with T.serial instead")

    def not_broken(self):
        """The frame of the loop's ``else`` clause: it runs when no ``break`` ended the loop."""
        return _Branch(self._flag() != JUMPS["break"]).then()

    def _finish(self, body):
        body, _ = _guard_after_jumps(body, self.flag, self._flag() == 0)
        running = tirx.SeqStmt([self._store(0), body])
        return tirx.IfThenElse(self._flag() != JUMPS["break"], running, None, span=body.span)


JUMPS = {"continue": 1, "break": 2}


def returning(depth: int | None) -> None:
    """A ``return`` of a kernel's (or a macro's) body, which opened the frames above ``depth``:
    refused at its line inside any frame but a ``with T.Kernel`` block. The body is traced
    once, so a ``return`` inside a tile loop or a thread loop would leave the loop unbuilt
    (its statements dropped), and one under a run-time condition would drop the statements
    after the branch for every run."""
    builder = B.maybe_current()
    if builder is None or depth is None:
        return
    for frame in builder.frames[depth:]:
        if frame.kind == "kernel" and not frame.info["kernel"].opened_by_loop:
            continue
        if frame.kind == "kernel":
            raise kernel_error("'return' inside a T.thread_binding loop that opens a kernel: "
                               "the loop is the kernel's launch, its iterations blocks and "
                               "threads that all run the body, so none can end the function; "
                               "end the function after the loop")
        if frame.kind in ("if", "while"):
            raise kernel_error("'return' under a condition known only at run time: the kernel "
                               "is traced once, so the statements after it would be dropped "
                               "whatever the condition; guard them with an 'if' instead")
        if frame.kind in ("serial", "parallel", "pipelined", "unroll"):
            shown = frame.kind.capitalize() if frame.kind in ("parallel", "pipelined") \
                else frame.kind
            raise kernel_error(f"'return' inside a T.{shown} loop: the kernel is traced once, "
                               "and a return would leave the loop unbuilt (its statements "
                               "dropped); end the function after the loop")
        raise kernel_error(f"'return' inside a {frame.kind!r} block of the kernel: a return "
                           "stands in the function's body or its 'with T.Kernel' block; end "
                           "the function after the block")


def _guard_after_jumps(stmt, flag, clear):
    """``stmt`` with the statements after each store to ``flag`` (a jump) guarded by
    ``clear``, and whether ``stmt`` may jump."""
    stores = []
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda st: stores.append(st)
                                   if st.buffer.same_as(flag) else None))
    if not stores:
        return stmt, False
    if isinstance(stmt, tirx.BufferStore):
        return stmt, True
    if isinstance(stmt, tirx.IfThenElse):
        then, _ = _guard_after_jumps(stmt.then_case, flag, clear)
        other = stmt.else_case
        if other is not None:
            other, _ = _guard_after_jumps(other, flag, clear)
        return tirx.IfThenElse(stmt.condition, then, other, span=stmt.span), True
    if isinstance(stmt, tirx.SeqStmt):
        seq = list(stmt.seq)
        out = []
        for k, part in enumerate(seq):
            part, jumps = _guard_after_jumps(part, flag, clear)
            out.append(part)
            if jumps and k + 1 < len(seq):
                rest, _ = _guard_after_jumps(B.seq(seq[k + 1:]), flag, clear)
                out.append(tirx.IfThenElse(clear, rest, None, span=seq[k + 1].span))
                break
        return B.seq(out), True
    raise KernelError(f"'break' or 'continue' inside a {type(stmt).__name__} statement of the "
                      "loop, which has no place for the statements after it; move it into an "
                      "'if' of the loop's body", span_location(stmt.span))


class WhileLoop:
    """``while COND:`` in a kernel. A Python condition is a Python loop (:meth:`again`); a
    run-time one (``while start[0] < last:``) is an IR ``while`` loop whose body is traced
    once inside this frame and whose condition is evaluated before every iteration."""

    def __init__(self, cond):
        cond = truth(cond)
        self.cond, self.symbolic, self._first = cond, dtype_of(cond) is not None, True
        if self.symbolic and B.maybe_current() is None:
            raise kernel_error("a 'while' loop with a run-time condition can only be used "
                               "inside a kernel")

    def again(self, thunk) -> bool:
        if self._first:
            self._first = False
            return bool(self.cond)
        value = truth(thunk())
        if dtype_of(value) is not None:
            raise kernel_error("the condition of this 'while' loop was a Python value at "
                               "its first test and is a run-time value now; make it a "
                               "run-time value from the start (a T.alloc_var)")
        return bool(value)

    def __enter__(self):
        builder = B.require_kernel("a 'while' loop with a run-time condition")
        if builder.enclosing("parallel") is not None:
            raise kernel_error("a 'while' loop with a run-time condition cannot be inside a "
                               "T.Parallel loop: its iterations would run different numbers "
                               "of times; use T.serial")
        self._span = B.here()
        self._frame = builder.open("while")
        return None

    def __exit__(self, exc_type, exc, tb):
        body = B.current("while").close(self._frame)
        if exc_type is not None:
            return False
        cond = self.cond  # a bool expression (truth)
        B.current("while").emit(tirx.While(cond, body, span=self._span))
        return False


class _Single:
    """``with T.Kernel(n) as bx`` binds the block index itself rather than a 1-tuple."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def __enter__(self):
        vars_ = self.kernel.__enter__()
        return vars_[0] if len(vars_) == 1 else vars_

    def __exit__(self, *exc):
        return self.kernel.__exit__(*exc)


def _integer_division(op: str, a, b):
    """``a // b`` or ``a % b``; on symbolic values both operands must be integers (TIR's
    floordiv/floormod), a float one gets an error at the user's line."""
    if dtype_of(a) is None and dtype_of(b) is None:
        return a // b if op == "//" else a % b
    refuse_float_operands(op, (a, b), "for floats write " + (
        "T.floor(a / b)" if op == "//" else "a - T.floor(a / b) * b"))
    if as_int(b) == 0:  # TVM's constant folding stops with "Divide by zero"
        raise kernel_error(f"'{a} {op} {b}': division by zero")
    return keeping_effects(a // b if op == "//" else a % b, a, b)



def sync_threads(barrier_id=None, arrive_count=None) -> None:
    """TileLang's block barrier between a block's statements. Every backend already runs a
    block's statements in order, each tile statement complete before the next reads what it
    wrote (the CUDA backend places ``__syncthreads`` where the block's threads share a tile),
    so the barrier adds nothing to the kernel (a backend that honours TileLang's
    ``TL_DISABLE_THREAD_STORAGE_SYNC``, which none does yet, must make it a barrier). It is
    checked where it stands: inside a ``with T.Kernel``, not inside a ``T.Parallel`` loop (the
    iterations of one loop are not ordered among themselves, so a barrier between them has no
    meaning).

    ``T.sync_threads(barrier_id, arrive_count)``: a named barrier of part of the block in
    thread-level code (``T.get_thread_binding``): each calling thread waits until
    ``arrive_count`` threads have arrived at barrier ``barrier_id`` (1-15), and their
    shared-memory accesses before it are visible to each other after it; ``arrive_count`` is a
    multiple of 32 (whole warps) up to the block's threads, and every thread of those warps
    must call it (under ``if tx < 256:``, say). CUDA makes it ``bar.sync id, count``; the CPU
    and the interpreter, which run each statement of thread-level code for every thread
    before the next, need no barrier."""
    builder = B.require_kernel("T.sync_threads")
    if builder.enclosing("parallel") is not None:
        raise kernel_error("T.sync_threads inside a T.Parallel loop: the iterations of one "
                           "parallel loop are unordered; put the barrier between loops")
    if barrier_id is None and arrive_count is None:
        return
    if barrier_id is None or arrive_count is None:
        raise kernel_error("T.sync_threads(barrier_id, arrive_count) needs both: the barrier's "
                           "id and how many threads arrive at it")
    threads = builder.threads[0] * builder.threads[1] * builder.threads[2]
    barrier_id, arrive_count = as_int(barrier_id), as_int(arrive_count)
    if not isinstance(barrier_id, int) or not 1 <= barrier_id <= 15:
        raise kernel_error(f"T.sync_threads: barrier_id must be an integer constant in 1..15, "
                           f"got {barrier_id!r} (id 0 is the whole block's barrier, "
                           "T.sync_threads())")
    if not isinstance(arrive_count, int) or arrive_count <= 0 or arrive_count % 32 or \
            arrive_count > threads:
        raise kernel_error(f"T.sync_threads: arrive_count must be a positive multiple of 32 "
                           f"(whole warps) up to the block's {threads} threads, got "
                           f"{arrive_count!r}")
    builder.emit(make_call(NAMED_BARRIER.name, {},
                           {"barrier_id": barrier_id, "arrive_count": arrive_count},
                           span=B.here()))


def sync_grid() -> None:
    """``T.sync_grid()``: a barrier of the whole grid between two statements of the kernel:
    every block finishes what comes before it before any block goes on, and the global
    memory written before it is read after it (TileLang's persistent kernels: partial results
    of every block, then their combination). CUDA launches the kernel cooperatively (all its
    blocks resident at once); the CPU and the interpreter, which run the blocks one after
    another, run the kernel in phases, each for every block (:mod:`tilewright.transform.
    grid_sync`), so there it must stand in the kernel's body, not in a loop or a branch. In the
    body of a ``T.Parallel`` loop it cuts the loop in two: every iteration before it, then
    every iteration after it (TileLang's test_tilelang_language_cooperative)."""
    builder = B.require_kernel("T.sync_grid")
    barrier = make_call(SYNC_GRID.name, {}, {}, span=B.here())
    _cut_parallel_loop(builder, "T.sync_grid", barrier)
    builder.emit(barrier)


def _cut_parallel_loop(builder, what: str, barrier) -> None:
    """A barrier standing in the body of a ``T.Parallel`` loop cuts the loop there (see
    :func:`_emit_cut`); one deeper in it (under an ``if`` or another loop of its body) is
    refused."""
    parallel = builder.enclosing("parallel")
    if parallel is None:
        return
    if builder.frames[-1] is not parallel:
        raise kernel_error(f"{what} inside a T.Parallel loop stands in the loop's body itself "
                           "(it cuts the loop in two there), not under a branch or an inner "
                           "loop of it")
    parallel.info.setdefault(BARRIERS, []).append(barrier)


def get_block_binding(dim: int = 0):
    """``bx = T.get_block_binding(0)``: the block's index along dimension ``dim`` of the
    enclosing ``T.Kernel``'s grid, the variable ``with T.Kernel(...) as (bx, by)`` gives (a
    macro can read it without being passed it)."""
    return _grid_kernel("T.get_block_binding", dim).vars[dim]


def get_block_bindings():
    """``T.get_block_bindings()``: the block's index along each dimension of the enclosing
    ``T.Kernel``'s grid (as many as the grid has)."""
    return list(B.require_kernel("T.get_block_bindings").enclosing("kernel").info["kernel"].vars)


def _grid_kernel(what: str, dim) -> Kernel:
    """The enclosing ``T.Kernel``, ``dim`` checked to be one of its grid dimensions."""
    kernel = B.require_kernel(what).enclosing("kernel").info["kernel"]
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < len(kernel.grid):
        raise kernel_error(f"{what} takes a grid dimension below {len(kernel.grid)} (the "
                           f"kernel's grid is {len(kernel.grid)}-D), got {dim!r}")
    return kernel


def let(var, value, body=None):
    """TileLang's (TVM script's) ``T.let``: ``v = T.int32(); T.let(v, ko * block_K)`` binds
    the variable ``v`` to the value for the statements after it; ``T.let(v, value, body)`` is
    the expression ``body`` with ``v`` bound."""
    if not isinstance(var, tirx.Var):
        raise kernel_error(f"T.let binds a variable (v = T.int32(), say), got {var!r:.60}")
    value = to_expr(value)
    if str(value.ty) != str(var.ty):
        value = tirx.Cast(str(var.ty), value)
    if body is not None:
        return tirx.Let(var, value, to_expr(body))
    B.require_kernel("T.let").emit(tirx.Bind(var, value, span=B.here()))
    return None


def assume(cond) -> None:
    """``T.assume(cond)``: the kernel may take ``cond`` for true (TileLang's axiom; TVM's
    ``assume``). A condition over the kernel's parameters only (scalars, shape symbols:
    ``T.assume(N % 4 == 0)``) is checked when the kernel is called, as TileLang checks it on
    the host: a call that breaks it raises :class:`~tilewright.errors.AssumptionError`
    naming it. One over values the kernel computes (``T.assume(l + i < N)``) is accepted; the
    backends here do not use it (dropping an assumption changes no result of a kernel whose
    assumptions hold). Inside an ``if`` over parameters it binds the calls that take the
    branch; inside a loop it is accepted unchecked."""
    builder = B.require_kernel("T.assume")
    cond = to_expr(cond)
    if str(cond.ty) != "bool":
        cond = cond != tirx.const(0, str(cond.ty))
    guards = _branches_taken(builder)
    if guards is not None and _over_parameters(builder, cond):
        for guard in reversed(guards):  # under `if g:` it binds the calls where g holds
            cond = tirx.Or(tirx.Not(guard), cond)
        builder.assumptions.append(cond)


def _branches_taken(builder) -> list | None:
    """The conditions of the branches enclosing the current statement inside its kernel, when
    each is over the kernel's parameters; None when a loop encloses it or a branch depends on
    what the kernel computes (an assumption there is accepted, not checked)."""
    guards = []
    for frame in reversed(builder.frames):
        if frame.kind == "kernel":
            return guards
        if frame.kind != "if" or not _over_parameters(builder, frame.info["taken"]):
            return None
        guards.append(frame.info["taken"])
    return guards


def _over_parameters(builder, expr) -> bool:
    """Whether ``expr`` reads only the kernel's scalar parameters and shape symbols."""
    known = set()
    for p in builder.params:
        if tirx.buffer.is_buffer_var(p.buffer):
            known.update(d for d in p.buffer.shape if isinstance(d, tirx.Var))
        else:
            known.add(p.buffer)
    variables, loads = set(), []
    tvm_ffi.structural_walk(expr, [(tirx.Var, variables.add), (tvm.ir.TensorLoad, loads.append)])
    return not loads and bool(variables) and variables <= known


def get_block_extent(dim: int = 0):
    """``T.get_block_extent(0)``: the number of blocks along dimension ``dim`` of the
    enclosing ``T.Kernel``'s grid (CUDA's ``gridDim``)."""
    return to_expr(_grid_kernel("T.get_block_extent", dim).grid[dim])


def get_block_extents():
    """``T.get_block_extents()``: the number of blocks along each dimension of the enclosing
    ``T.Kernel``'s grid (CUDA's ``gridDim``; as many as the grid has)."""
    kernel = B.require_kernel("T.get_block_extents").enclosing("kernel").info["kernel"]
    return [to_expr(extent) for extent in kernel.grid]


class Persistent(LoopSpec):
    """``for bx, by in T.Persistent([m_blocks, n_blocks], num_workers, worker_id)``.

    Each of ``num_workers`` resident blocks walks the tile domain in steps of ``num_workers``;
    2-D domains are visited in panels of ``group_size`` rows so neighbouring tiles share cached
    data. Round ``w`` hands worker ``b`` tile ``w * num_workers + b`` under the guard
    ``tile < tiles``. When the workers divide the tiles (both constants) there are exactly
    ``tiles / num_workers`` rounds, each a tile for every worker ``0 <= b < num_workers``: the
    guard then always holds, and the compiler, knowing the worker index's range (the block
    index of ``T.Kernel(num_workers)``), drops it. Otherwise the rounds are rounded up to a
    multiple of ``group_size``; those past the last tile are empty, skipped by the guard.
    """

    kind_name = "persistent"

    def __init__(self, domain, num_workers, worker_id, group_size: int = 8):
        self.domain = tuple(index_value(d, "a T.Persistent domain extent") for d in domain)
        if not 1 <= len(self.domain) <= 3:
            raise kernel_error("T.Persistent takes a domain of 1 to 3 dimensions")
        self.num_workers = index_value(num_workers, "T.Persistent's worker count")
        self.worker_id = worker_id
        self.group_size = int(group_size)
        total = to_expr(self.domain[0])
        for d in self.domain[1:]:
            total = total * to_expr(d)
        self.total = total
        workers = to_expr(self.num_workers)
        waves = tirx.floordiv(total + workers - 1, workers)
        g = self.group_size
        tiles, count = as_int(total), as_int(self.num_workers)
        if not (isinstance(tiles, int) and isinstance(count, int) and count > 0
                and tiles % count == 0):
            # the rounding adds only empty rounds; it stays because dropping it changes the
            # code of kernels measured with it (a loop bound), for no gain the guard's
            waves = tirx.floordiv(waves + g - 1, g) * g
        super().__init__((waves,), annotations={"tw.persistent": g})

    def run(self, names=()):
        builder = B.current("T.Persistent")
        self.check(builder)
        span = B.here()
        wave = tirx.Var("wave", "int32")
        names = names if len(names) == len(self.domain) else ("bx", "by", "bz")[: len(self.domain)]
        tile_vars = [tirx.Var(n, "int32") for n in names]
        frame = builder.open("serial")
        yield tile_vars[0] if len(tile_vars) == 1 else tuple(tile_vars)
        body = builder.close(frame)
        tile = wave * to_expr(self.num_workers) + to_expr(self.worker_id)
        binds = [tirx.Bind(v, e, span=span) for v, e in zip(tile_vars, self._decode(tile))]
        guarded = tirx.IfThenElse(tile < self.total, tirx.SeqStmt([*binds, body]), None,
                                  span=span)
        builder.emit(tirx.For(wave, 0, to_expr(self.extents[0]), tirx.ForKind.SERIAL, guarded,
                              annotations={LOOP_KIND_KEY: "serial", **self.annotations},
                              span=span))

    def _decode(self, tile) -> list:
        dims = [to_expr(d) for d in self.domain]
        if len(dims) == 2:
            m, n = dims
            per_group = self.group_size * n
            first = tirx.floordiv(tile, per_group) * self.group_size
            rows = tirx.Min(m - first, tirx.const(self.group_size, "int32"))
            within = tirx.floormod(tile, per_group)
            return [first + tirx.floormod(within, rows), tirx.floordiv(within, rows)]
        out, rest = [], tile
        for d in reversed(dims):
            out.append(tirx.floormod(rest, d))
            rest = tirx.floordiv(rest, d)
        return list(reversed(out))


def _vars_in(node) -> set:
    found = set()
    tvm_ffi.structural_walk(node, (tirx.Var, lambda v: found.add(v)))
    return found


def check_races(nest) -> None:
    """Reject a ``T.Parallel`` nest whose iterations depend on each other through a buffer:
    an element written by one iteration and read at another index, or read-modify-written by
    several iterations. A ``T.Parallel`` axis of extent 1 has one iteration, so it cannot
    race (``for i, j in T.Parallel(1, D): acc[j] += x[i, j]``, as in TileLang's layernorm
    backward, accumulates each ``acc[j]`` once). Accesses guarded by ``i < p`` with
    ``p = i ^ c`` (a bitonic sort's compare-and-swap) touch the pair ``{i, p}`` only in the
    iteration ``i`` that is the smaller of the two, so pairs of different iterations are apart
    (see :func:`_pair_guard`)."""
    par_vars, loop_vars, stores, loads = set(), set(), [], []

    def visit_for(loop):
        loop_vars.add(loop.loop_var)
        single = isinstance(loop.extent, tirx.IntImm) and int(loop.extent.value) == 1
        if str(loop.annotations.get(LOOP_KIND_KEY, "")) == "parallel" and not single:
            par_vars.add(loop.loop_var)

    tvm_ffi.structural_walk(nest, [(tirx.For, visit_for)])
    _guarded_accesses(_inline_binds(nest), (), stores, loads)
    for store, store_guards in stores:
        if str(store.buffer.scope()).startswith("local.reducer"):
            continue  # reducers are combined per element by design
        where = span_location(store.span)
        index = list(store.indices)
        reads = [(ld, g) for ld, g in loads if ld.source.same_as(store.buffer)]
        missing = par_vars - _vars_in(index)
        name = store.buffer.name
        text = f"{name}[{', '.join(str(i) for i in index)}]"
        owned = [pair for g in store_guards
                 if (pair := _pair_guard(g, par_vars)) and _in_pair(index, pair)]
        for ld, read_guards in reads:
            if tvm_ffi.structural_equal(list(ld.indices), index) or \
                    _separated(index, list(ld.indices), par_vars, loop_vars) or \
                    _both_in_pair(owned, index, list(ld.indices), read_guards, par_vars,
                                  loop_vars):
                continue
            other = f"{name}[{', '.join(str(i) for i in ld.indices)}]"
            raise KernelError(f"T.Parallel race: iterations write {text} but read {other}, "
                              "which other iterations write; use a separate buffer for the "
                              "result", where)
        if missing and not owned and (reads or (_vars_in(store.value) & missing)):
            loop_names = ", ".join(sorted(str(v.name) for v in missing))
            raise KernelError(f"T.Parallel race: every iteration of {loop_names} writes the same "
                              f"element {text}; reduce with T.reduce_* or T.alloc_reducer, or "
                              "loop over it with T.serial", where)


def _inline_binds(nest):
    """``nest`` with each variable a ``Bind`` in it defines replaced by its value, so that
    ``j = offset + i; buf[j] = ...`` is analysed as the index ``offset + i`` it is."""
    values: dict = {}

    def bind(stmt):
        values[stmt.var] = tvm_ffi.structural_map(
            stmt.value, (tirx.Var, lambda v: values.get(v, v)))

    tvm_ffi.structural_walk(nest, (tirx.Bind, bind), order="pre")
    if not values:
        return nest
    # a binding becomes the evaluation of its value, whose loads are reads of the nest
    nest = tvm_ffi.structural_map(nest, (tirx.Bind, lambda b: tirx.Evaluate(b.value, span=b.span)
                                         if b.var in values else b), order="pre")
    return tvm_ffi.structural_map(nest, (tirx.Var, lambda v: values.get(v, v)))


def _guarded_accesses(node, guards: tuple, stores: list, loads: list) -> None:
    """Collect the stores and loads under ``node``, each with the conditions that must hold
    for it to run: the ``if`` statements around it, and for a load in a condition ``a and b``
    the conjuncts before its own (``i < p and v[i] > v[p]`` reads ``v`` only where ``i < p``)."""

    def expr_loads(expr, where):
        tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda ld: loads.append((ld, where))))

    if isinstance(node, tirx.IfThenElse):
        conjuncts = _conjuncts(node.condition)
        for k, term in enumerate(conjuncts):
            expr_loads(term, guards + tuple(conjuncts[:k]))
        _guarded_accesses(node.then_case, guards + tuple(conjuncts), stores, loads)
        if node.else_case is not None:
            _guarded_accesses(node.else_case, guards, stores, loads)
    elif isinstance(node, tirx.SeqStmt):
        for stmt in node.seq:
            _guarded_accesses(stmt, guards, stores, loads)
    elif isinstance(node, tirx.For):
        expr_loads(node.extent, guards)
        _guarded_accesses(node.body, guards, stores, loads)
    elif isinstance(node, tirx.BufferStore):
        stores.append((node, guards))
        expr_loads(node, guards)
    elif hasattr(node, "body") and isinstance(node.body, tirx.Stmt):
        for field in ("value", "condition"):
            if isinstance(getattr(node, field, None), tvm.ir.Expr):
                expr_loads(getattr(node, field), guards)
        _guarded_accesses(node.body, guards, stores, loads)
    else:
        expr_loads(node, guards)


def _conjuncts(cond) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _pair_guard(cond, par_vars):
    """``(v, p)`` when ``cond`` is ``v < p`` (or ``p > v``) with ``p = v ^ c``, ``v`` a
    parallel variable and ``c`` free of parallel variables: the guard holds in exactly one
    iteration of each pair ``{v, v ^ c}`` (for ``c == 0`` in none), so what that iteration
    does to elements ``v`` and ``p`` no other iteration touches."""
    if isinstance(cond, tirx.LT):
        low, high = cond.a, cond.b
    elif isinstance(cond, tirx.GT):
        low, high = cond.b, cond.a
    else:
        return None
    if not isinstance(low, tirx.Var) or low not in par_vars:
        return None
    if not isinstance(high, tirx.BitwiseXor):
        return None
    a, b = high.a, high.b
    other = b if a.same_as(low) else a if b.same_as(low) else None
    if other is None or _vars_in(other) & par_vars:
        return None
    return low, high


def _in_pair(index, pair) -> bool:
    return any(any(tvm_ffi.structural_equal(i, e) for e in pair) for i in index)


def _both_in_pair(owned, write, read, read_guards, par_vars, loop_vars) -> bool:
    """Whether a write and a read under the same pair guard stay in their iteration's pair:
    the dimensions that differ are each the pair's ``v`` or ``p``, and the other parallel
    variables keep them apart as :func:`_separated` requires."""
    for pair in owned:
        var = pair[0]
        if not any(tvm_ffi.structural_equal(g, cmp) for g in read_guards
                   for cmp in _pair_guards_of(pair)):
            continue
        rest_w, rest_r = [], []
        for w, r in zip(write, read):
            in_w = any(tvm_ffi.structural_equal(w, e) for e in pair)
            in_r = any(tvm_ffi.structural_equal(r, e) for e in pair)
            if in_w and in_r:
                continue
            if in_w != in_r or not tvm_ffi.structural_equal(w, r):
                break
            rest_w.append(w)
            rest_r.append(r)
        else:
            others = par_vars - {var}
            if not others or _separated(rest_w, rest_r, others, loop_vars - {var}):
                return True
    return False


def _pair_guards_of(pair) -> tuple:
    low, high = pair
    return tirx.LT(low, high), tirx.GT(high, low)


def _separated(write, read, par_vars, loop_vars) -> bool:
    """Whether two different iterations of the T.Parallel nest can never meet at these indices:
    for each parallel variable ``v`` some dimension has the same index on both sides, linear in
    ``v`` and free of every other loop variable of the nest (``f[i, j + 1]`` and ``f[i, j]``
    inside ``for i in T.Parallel`` / ``for j in T.serial``: rows of different ``i`` differ)."""
    from tvm.sym.pattern import detect_linear_equation

    for v in par_vars:
        others = loop_vars - {v}
        if not any(tvm_ffi.structural_equal(w, r) and v in _vars_in(w) and
                   not (_vars_in(w) & others) and _linear_in(detect_linear_equation(w, [v]))
                   for w, r in zip(write, read)):
            return False
    return True


def _linear_in(coeffs) -> bool:
    """A ``detect_linear_equation`` result with a non-zero constant coefficient."""
    if not coeffs:
        return False
    coef = coeffs[0]
    return isinstance(coef, tirx.IntImm) and int(coef.value) != 0
