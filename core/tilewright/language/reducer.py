"""``T.alloc_reducer``: a reduction handle that collects contributions from anywhere in the
kernel and is merged once by ``T.finalize_reducer``.

A reducer is a fragment whose scope names its operation (``local.reducer.<op>``), so every
backend knows how its per-thread partials combine. Its life is one epoch:

    acc = T.alloc_reducer((M,), "float32", op="sum")
    T.reducer_init(acc)                    # or T.reducer_init(acc, init)
    for i, k in T.Parallel(M, K):
        T.reducer_update(acc[i], x[i, k])  # each logical iteration contributes once
    T.finalize_reducer(acc, dst)           # dst holds the merged result

``init`` is a logical starting value: the result is as if ``init`` were one more contribution
to every output, combined once however many partials a backend keeps. It is evaluated where
``T.reducer_init`` stands (later stores to what it reads do not change it) and combined into
``dst`` by the finalize. The epoch may sit inside serial loops and branches (it then reopens
at every iteration), and the rules are checked as the kernel is traced, each at the offending
line: one ``T.reducer_init`` per reducer, outside any ``T.Parallel`` loop; updates between it
and the finalize, inside ``T.Parallel`` loops, by ``T.reducer_update`` only; one finalize, in
the loop iteration and branch the epoch opened in (or an ``if`` nested there), into an
ordinary buffer; the reducer is never read, stored to, filled or copied; an epoch that opens
is finalized, and a reducer that is allocated is opened.

TileLang's older spelling (its deprecated reducer, still accepted by TileLang on a reducer
that no ``T.reducer_init`` opens) works too: ``T.fill(acc, v)`` / ``T.clear(acc)`` open the
epoch (``v`` must be the identity of the operation, or any value for ``max``/``min``, which
every thread's partial may hold without changing the result); ``acc[i] += x``, ``acc[i] =
T.max(acc[i], x)`` or ``T.reducer_update`` update it; ``T.finalize_reducer(acc)`` without a
destination makes ``acc`` readable, by ``T.copy(acc, dst)`` or by its elements, which hold the
merged values. One epoch does not mix the two spellings.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import tirx

from ..errors import SourceLocation, kernel_error, user_location
from ..ir.schema import writes_memory
from . import builder as B
from .buffer import BufferSlice, TileBuffer, declare, dtype_of, region_of, resolve, to_expr
from .dtypes import is_float
from .frames import Parallel
from .kernel import _alloc, alloc_fragment, alloc_var
from .math import infinity
from .snapshots import reads_memory
from .tileops import check_batch, copy, fill, schedule_hints

OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")

# the kernel frame's info key: the Epoch of every reducer the kernel allocates
EPOCHS = "reducer_epochs"
INIT, OLDER_FORM = "T.reducer_init", "T.fill / T.clear"


@dataclass(eq=False)
class Epoch:
    """What tracing has seen of one reducer: where it was allocated, what opened its epoch
    (``T.reducer_init``, or ``T.fill`` / ``T.clear`` in TileLang's older form) where and in
    which frames, the starting value, and where the finalize closed it."""

    buffer: tirx.Buffer
    allocated: SourceLocation | None
    opener: str = ""
    opened: SourceLocation | None = None
    frames: tuple = ()
    seed: object = None
    closed: SourceLocation | None = None
    merged: TileBuffer | None = None  # the older form's merged values, once read

    @property
    def older_form(self) -> bool:
        return self.opener == OLDER_FORM

    def open(self, opener: str, builder) -> None:
        self.opener, self.opened, self.frames = opener, user_location(), tuple(builder.frames)
        self.seed, self.closed, self.merged = None, None, None


def _line(location: SourceLocation | None) -> str:
    return f"line {location.line}" if location is not None else "an earlier line"


def _epochs(builder) -> list | None:
    kernel = builder.enclosing("kernel") if builder is not None else None
    return None if kernel is None else kernel.info.get(EPOCHS)


def find_epoch(acc) -> Epoch | None:
    """The epoch of reducer ``acc`` in the kernel being traced; None outside a kernel."""
    for epoch in _epochs(B.maybe_current()) or ():
        if epoch.buffer.same_as(acc.buffer):
            return epoch
    return None


def _epoch(acc, what: str) -> Epoch:
    B.require_kernel(what)
    epoch = find_epoch(acc)
    if epoch is None:
        raise kernel_error(f"{what}: reducer {acc.name!r} was allocated in another "
                           "'with T.Kernel' block; a reducer lives in the block that "
                           "allocates it")
    return epoch


class ReducerBuffer(TileBuffer):
    """The handle ``T.alloc_reducer`` returns; ``acc[i]`` names an element to update."""

    __slots__ = ()

    @property
    def op(self) -> str:
        return self.scope.rsplit(".", 1)[-1]

    @property
    def is_reducer(self) -> bool:
        """True until ``T.finalize_reducer(acc)`` (the older form, in place) makes it readable
        by ``T.copy`` and by its elements."""
        epoch = find_epoch(self)
        return epoch is None or not (epoch.older_form and epoch.closed is not None)

    def renamed(self, buffer: tirx.Buffer) -> ReducerBuffer:
        epoch = find_epoch(self)
        if epoch is not None:  # the epoch follows its reducer under the new name
            epoch.buffer = buffer
        return ReducerBuffer(buffer)

    def fill(self, value) -> None:
        fill_reducer(self, value)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not self.is_reducer:  # finalized in place: its merged values (TileLang reads them)
            return merged(self)[key]
        return _ReducerElement(self, key)

    def __setitem__(self, key, value):
        key = key if isinstance(key, tuple) else (key,)
        epoch = _epoch(self, f"storing to reducer {self.name!r}")
        if isinstance(value, _Contribution) and value.element.reducer.buffer.same_as(
                self.buffer) and tvm_ffi.structural_equal(
                    [to_expr(k) for k in value.element.index], [to_expr(k) for k in key]):
            if epoch.opener == INIT:
                raise kernel_error(
                    f"illegal store to reducer {self.name!r}: the epoch T.reducer_init opened "
                    f"at {_line(epoch.opened)} takes contributions by T.reducer_update("
                    f"{self.name}[...], x) only (acc[i] += x and acc[i] = T.max(acc[i], x) "
                    "belong to TileLang's older form, opened by T.fill / T.clear)")
            reducer_update(value.element, value.value)
            return
        raise kernel_error(f"illegal store to reducer {self.name!r}: update it with "
                           "T.reducer_update (or acc[i] += x for a sum reducer), not by "
                           "assignment")


class _ReducerElement:
    __slots__ = ("reducer", "index")

    def __init__(self, reducer, index):
        self.reducer, self.index = reducer, index

    def __iadd__(self, value):
        if self.reducer.op != "sum":
            raise kernel_error(f"'+=' updates a sum reducer; {self.reducer.name!r} is a "
                               f"{self.reducer.op} reducer: use T.reducer_update")
        return _Contribution(self, value)

    def __add__(self, value):  # acc[i] = acc[i] + x
        return self.__iadd__(value)

    __radd__ = __add__

    def reducer_combine(self, op: str, value):
        """``T.max(acc[i], x)`` / ``T.min(acc[i], x)`` (:func:`.math.max`): a contribution,
        when the reducer combines with ``op``."""
        if self.reducer.op != op:
            raise kernel_error(f"T.{op} of an element of the {self.reducer.op} reducer "
                               f"{self.reducer.name!r}: a {op} reducer combines so; use "
                               "T.reducer_update")
        return _Contribution(self, value)

    def __getattr__(self, attr):
        raise _read_error(self.reducer)


def _read_error(reducer):
    """Reading an element of ``reducer`` (its value, in an expression): before the finalize
    it has none, after ``T.finalize_reducer(acc, dst)`` the destination holds the result."""
    name = reducer.name
    epoch = find_epoch(reducer)
    if epoch is not None and epoch.closed is not None:
        return kernel_error(f"illegal read of reducer {name!r} after T.finalize_reducer "
                            f"({_line(epoch.closed)}): read the finalize's destination")
    return kernel_error(f"illegal read of reducer {name!r}: a reducer has no value before "
                        f"T.finalize_reducer; read the destination of "
                        f"T.finalize_reducer({name}, dst)")


def _reading(self, *_):
    raise _read_error(self.reducer)


# an element in an expression other than its update (acc[i] + x, T.max(acc[i], x)) is read
for _name in ("__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__lt__",
              "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__or__", "__xor__",
              "__bool__", "__float__", "__int__"):
    setattr(_ReducerElement, _name, _reading)


class _Contribution:
    """``acc[i] += x`` on its way to ``acc.__setitem__``."""

    __slots__ = ("element", "value")

    def __init__(self, element: _ReducerElement, value):
        self.element, self.value = element, value

    def __getattr__(self, attr):  # used as a value, not stored back: a read of the element
        raise _read_error(self.element.reducer)


def alloc_reducer(shape, dtype, op: str = "sum", replication=None) -> ReducerBuffer:
    """A reduction handle of ``shape`` combining contributions with ``op`` (TileLang's
    ``replication`` places its CUDA partials; every backend here chooses its own)."""
    if op not in OPS:
        raise kernel_error(f"T.alloc_reducer op must be one of {', '.join(OPS)}, got {op!r}")
    buf = _alloc(shape, dtype, f"local.reducer.{op}", "T.alloc_reducer").buffer
    if op.startswith("bit") and is_float(str(buf.dtype)):
        raise kernel_error(f"T.alloc_reducer op {op!r} needs an integer dtype, got {buf.dtype}")
    kernel = B.current("T.alloc_reducer").enclosing("kernel")
    if EPOCHS not in kernel.info:
        kernel.info[EPOCHS] = []
        kernel.info.setdefault(B.KERNEL_CHECKS, []).append(
            lambda: _check_epochs_closed(kernel.info[EPOCHS]))
    kernel.info[EPOCHS].append(Epoch(buf, user_location()))
    return ReducerBuffer(buf)


def _check_epochs_closed(epochs: list) -> None:
    """At the end of the kernel: every reducer was opened, every epoch
    ``T.reducer_init`` opened was finalized."""
    for epoch in epochs:
        name = str(epoch.buffer.name)
        if not epoch.opener:
            raise kernel_error(f"reducer {name!r} is allocated but never initialized: open its "
                               f"epoch with T.reducer_init({name}) and close it with "
                               f"T.finalize_reducer({name}, dst)", epoch.allocated)
        if epoch.opener == INIT and epoch.closed is None:
            raise kernel_error(f"reducer {name!r} is initialized but never finalized: close "
                               f"its epoch with T.finalize_reducer({name}, dst), once",
                               epoch.opened)


def _identity(op: str, dtype: str):
    if op in ("sum", "bitor", "bitxor"):
        return tirx.const(0, dtype)
    if op == "bitand":
        return tirx.const(-1, dtype)
    lowest = -infinity(dtype) if is_float(dtype) else tirx.min_value(dtype)
    highest = infinity(dtype) if is_float(dtype) else tirx.max_value(dtype)
    return lowest if op == "max" else highest


def _combine(op: str, a, b):
    return {"sum": lambda: a + b, "max": lambda: tirx.Max(a, b), "min": lambda: tirx.Min(a, b),
            "bitand": lambda: a & b, "bitor": lambda: a | b, "bitxor": lambda: a ^ b}[op]()


def _check(acc, what: str) -> ReducerBuffer:
    if not isinstance(acc, ReducerBuffer):
        raise kernel_error(f"{what} needs a buffer from T.alloc_reducer")
    return acc


def _starting_value(acc: ReducerBuffer, init):
    """``init`` of ``T.reducer_init`` as an expression of the reducer's dtype: a Python
    number converts, an expression must already have that dtype (as in TileLang)."""
    if isinstance(init, (bool, int, float)):
        return tirx.const(init, acc.dtype)
    value = to_expr(init)
    if dtype_of(value) is None:
        raise kernel_error(f"T.reducer_init of reducer {acc.name!r}: the starting value must be "
                           f"a number or a scalar expression, got {type(init).__name__}")
    if dtype_of(value) != acc.dtype:
        raise kernel_error(f"T.reducer_init: the starting value's dtype {dtype_of(value)} does "
                           f"not match reducer {acc.name!r} of dtype {acc.dtype}; convert it "
                           f"(T.cast(value, {acc.dtype!r})) or pass a Python number")
    return value


def reducer_init(acc, init=None):
    """Open the reducer's epoch: every partial starts at the identity of the operation, and
    ``init``, when given, is combined once into every output by ``T.finalize_reducer``; its
    value is the one it has here."""
    acc = _check(acc, "T.reducer_init")
    builder = B.require_kernel("T.reducer_init")
    epoch = _epoch(acc, "T.reducer_init")
    if builder.enclosing("parallel") is not None:
        raise kernel_error(f"T.reducer_init of reducer {acc.name!r} inside a T.Parallel loop: "
                           "an epoch opens for the whole block; open it before the loop")
    if epoch.opener:
        raise kernel_error(f"double T.reducer_init on reducer {acc.name!r}: {epoch.opener} "
                           f"opened its epoch at {_line(epoch.opened)}, and a reducer has "
                           "exactly one (allocate another reducer for another reduction)")
    seed = None if init is None else _starting_value(acc, init)
    epoch.open(INIT, builder)
    if seed is not None and (reads_memory(seed) or writes_memory(seed)):
        # its value at this line: kept in a scalar of the block until the finalize
        seed = alloc_var(acc.dtype, init=seed, name=f"{acc.name}_init").load()
    epoch.seed = seed
    fill(TileBuffer(acc.buffer), _identity(acc.op, acc.dtype))


def fill_reducer(acc: ReducerBuffer, value) -> None:
    """``T.fill(acc, value)`` / ``T.clear(acc)``: open an epoch of TileLang's older form at
    ``value``, which must not depend on how many partials the backend keeps (the identity;
    any value for max/min)."""
    epoch = _epoch(acc, "T.fill")
    if epoch.opener == INIT:
        raise kernel_error(f"illegal store to reducer {acc.name!r}: T.fill / T.clear write its "
                           f"partials, but T.reducer_init opened its epoch at "
                           f"{_line(epoch.opened)}; the epoch starts there (give a starting "
                           "value as T.reducer_init(acc, init))")
    value = to_expr(value, acc.dtype)
    identity = _identity(acc.op, acc.dtype)
    if acc.op not in ("max", "min") and not (
            isinstance(value, (tirx.IntImm, tirx.FloatImm)) and
            tvm_ffi.structural_equal(value, identity)):
        raise kernel_error(f"T.fill of the {acc.op} reducer {acc.name!r} must use its identity "
                           f"{identity}: each thread's partial starts there, so another value "
                           "would be counted once per partial")
    epoch.open(OLDER_FORM, B.current("T.fill"))  # a new epoch: merged values read anew
    fill(TileBuffer(acc.buffer), value)


def merged(acc: ReducerBuffer) -> TileBuffer:
    """The merged values of reducer ``acc`` finalized in place, for reading its elements: a
    fragment ``T.copy(acc, ...)`` fills where the first element is read (the merge TileLang's
    ``T.finalize_reducer(acc)`` makes in place; a reducer's partials are merged by a copy
    here)."""
    builder = B.require_kernel(f"reading reducer {acc.name!r}")
    epoch = _epoch(acc, f"reading reducer {acc.name!r}")
    if epoch.merged is None:
        kernel = builder.enclosing("kernel")
        buf = declare(f"{acc.name}_merged", tuple(acc.buffer.shape), str(acc.buffer.dtype),
                      "local.fragment")
        kernel.stmts.insert(0, tirx.AllocBuffer(buf, span=B.here()))
        epoch.merged = TileBuffer(buf)
        # the copy goes before the loop nest the read stands in (a T.Parallel loop's
        # iterations read the merged values; the copy is the block's)
        outer = next((k for k, f in enumerate(builder.frames) if f.kind == "parallel"),
                     len(builder.frames))
        inner = builder.frames[outer:]
        del builder.frames[outer:]
        try:
            copy(TileBuffer(acc.buffer), epoch.merged)
        finally:
            builder.frames.extend(inner)
    return epoch.merged


def reducer_update(element, value):
    """Contribute ``value`` to one element: ``T.reducer_update(acc[i], x)``."""
    if not isinstance(element, _ReducerElement):
        raise kernel_error("T.reducer_update takes an element of a reducer, like acc[i]")
    acc = element.reducer
    builder = B.require_kernel("T.reducer_update")
    epoch = _epoch(acc, "T.reducer_update")
    if not epoch.opener:
        raise kernel_error(f"T.reducer_update on reducer {acc.name!r} before T.reducer_init: "
                           f"open its epoch first, T.reducer_init({acc.name})")
    if epoch.opener == INIT:
        if epoch.closed is not None:
            raise kernel_error(f"T.reducer_update on reducer {acc.name!r} after "
                               f"T.finalize_reducer ({_line(epoch.closed)}) closed its epoch")
        if builder.enclosing("parallel") is None:
            raise kernel_error(f"T.reducer_update on reducer {acc.name!r} outside any "
                               "T.Parallel loop: each logical iteration of a T.Parallel loop "
                               "contributes once, but a contribution of the whole block has "
                               "no such count; wrap the update in a T.Parallel loop")
    load = tirx.BufferLoad(acc.buffer, [to_expr(i) for i in element.index])
    TileBuffer.__setitem__(acc, element.index, _combine(acc.op, load,
                                                       to_expr(value, acc.dtype)))


def _in_scope(epoch: Epoch, frames: list) -> bool:
    """Whether a finalize in ``frames`` closes the epoch in the loop iteration and branch it
    opened in: the opener's frames, then only branches (a finalize an ``if`` skips leaves the
    partials unread; one in another loop would merge merged values again)."""
    opened = epoch.frames
    return len(frames) >= len(opened) and all(a is b for a, b in zip(frames, opened)) and \
        all(f.kind == "if" for f in frames[len(opened):])


def _reducer_ref(value) -> bool:
    buffer = value.buffer if isinstance(value, (TileBuffer, BufferSlice)) else \
        getattr(value, "source", None)
    return buffer is not None and str(buffer.scope()).startswith("local.reducer")


def finalize_reducer(acc, dst=None, batch: int = 1, annotations=None):
    """Merge the contributions (and the starting value of ``T.reducer_init``) and write the
    result to ``dst``, closing the epoch; without ``dst`` (TileLang's older form),
    ``T.copy(acc, dst)`` does that later. TileLang's ``batch`` (outputs per all-reduce call,
    which must divide the reducer's elements) and ``annotations`` schedule its CUDA merge:
    checked, they change no result."""
    acc = _check(acc, "T.finalize_reducer")
    schedule_hints("finalize_reducer", batch, annotations)
    check_batch("finalize_reducer", batch, acc.shape)
    builder = B.require_kernel("T.finalize_reducer")
    epoch = _epoch(acc, "T.finalize_reducer")
    if not epoch.opener:
        raise kernel_error(f"T.finalize_reducer on reducer {acc.name!r} before "
                           f"T.reducer_init: nothing opened its epoch")
    if epoch.older_form:
        if dst is not None:
            raise kernel_error(
                f"illegal T.finalize_reducer({acc.name}, dst): {OLDER_FORM} opened the epoch "
                f"of reducer {acc.name!r} at {_line(epoch.opened)}, TileLang's older form, "
                f"which finalizes in place (T.finalize_reducer({acc.name}) and then T.copy("
                f"{acc.name}, dst)); or open the epoch with T.reducer_init({acc.name})")
        epoch.closed = user_location()
        return
    if dst is None:
        raise kernel_error(f"T.finalize_reducer({acc.name}) without a destination finalizes "
                           f"TileLang's older form in place; T.reducer_init opened the epoch of "
                           f"reducer {acc.name!r} at {_line(epoch.opened)}: pass the "
                           f"destination, T.finalize_reducer({acc.name}, dst)")
    if epoch.closed is not None:
        raise kernel_error(f"double T.finalize_reducer on reducer {acc.name!r}: its epoch "
                           f"closed at {_line(epoch.closed)}")
    if _reducer_ref(dst):
        raise kernel_error(f"T.finalize_reducer destination of reducer {acc.name!r} must be an "
                           "ordinary fragment, not a reducer")
    if not _in_scope(epoch, builder.frames):
        raise kernel_error(f"T.finalize_reducer on reducer {acc.name!r} is not in the scope of "
                           f"its T.reducer_init ({_line(epoch.opened)}): the epoch closes in "
                           "the loop iteration and branch it opened in, or in an if nested "
                           "there")
    what = "T.finalize_reducer destination"
    target = resolve(region_of(dst, what), tuple(acc.shape), what)
    if epoch.seed is not None and str(target.buffer.dtype) != acc.dtype:
        # the starting value combines before the conversion to the destination's dtype
        staged = alloc_fragment(tuple(acc.shape), acc.dtype, name=f"{acc.name}_seeded")
        copy(TileBuffer(acc.buffer), staged)
        _combine_seed(acc, epoch.seed, resolve(region_of(staged, what), None, what))
        copy(staged, dst)
    else:
        copy(TileBuffer(acc.buffer), dst)
        if epoch.seed is not None:
            _combine_seed(acc, epoch.seed, target)
    epoch.closed = user_location()


def _combine_seed(acc: ReducerBuffer, seed, target) -> None:
    """Every element of region ``target`` (the merged values) combined with ``seed``."""
    out = TileBuffer(target.buffer)
    for index in Parallel(*target.extents).run():
        index = index if isinstance(index, tuple) else (index,)
        at = tuple(to_expr(s) + i for s, i in zip(target.starts, index))
        out[at] = _combine(acc.op, tirx.BufferLoad(target.buffer, list(at)), seed)
