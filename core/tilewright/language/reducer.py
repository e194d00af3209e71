"""``T.alloc_reducer``: a reduction handle that collects contributions from anywhere in the
kernel and is merged once by ``T.finalize_reducer``.

A reducer is a fragment whose scope names its operation (``local.reducer.<op>``), so every
backend knows how its per-thread partials combine. Reading it or storing to it directly are
compile-time errors: use ``reducer_update`` and ``finalize_reducer``.

TileLang's spellings work too: ``T.fill(acc, v)`` / ``T.clear(acc)`` start an epoch (``v``
must be the identity of the operation, or any value for ``max``/``min``, which every thread's
partial may hold without changing the result); ``acc[i] += x`` updates a ``sum`` reducer; and
``T.finalize_reducer(acc)`` without a destination makes ``acc`` readable by ``T.copy(acc,
dst)``, which merges the partials into ``dst``.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from ..errors import kernel_error
from . import builder as B
from .buffer import TileBuffer, declare, to_expr
from .dtypes import is_float
from .kernel import _alloc
from .math import infinity
from .tileops import copy, fill, schedule_hints

OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")


class ReducerBuffer(TileBuffer):
    """The handle ``T.alloc_reducer`` returns; ``acc[i]`` names an element to update."""

    __slots__ = ()

    @property
    def op(self) -> str:
        return self.scope.rsplit(".", 1)[-1]

    @property
    def is_reducer(self) -> bool:
        """True until ``T.finalize_reducer(acc)`` makes it readable by ``T.copy``."""
        builder = B.maybe_current()
        return builder is None or not any(self.buffer.same_as(b) for b in builder.finalized)

    def fill(self, value) -> None:
        fill_reducer(self, value)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not self.is_reducer:  # finalized: its merged values (TileLang reads them so)
            return merged(self)[key]
        return _ReducerElement(self, key)

    def __setitem__(self, key, value):
        key = key if isinstance(key, tuple) else (key,)
        if isinstance(value, _Contribution) and value.element.reducer.buffer.same_as(
                self.buffer) and tvm_ffi.structural_equal(
                    [to_expr(k) for k in value.element.index], [to_expr(k) for k in key]):
            reducer_update(value.element, value.value)
            return
        raise kernel_error(f"{self.name!r} is a reducer: update it with T.reducer_update (or "
                           "acc[i] += x for a sum reducer), not by assignment")


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

    def __getattr__(self, name):
        raise kernel_error(f"{self.reducer.name!r} is a reducer and cannot be read before "
                           "T.finalize_reducer")


class _Contribution:
    """``acc[i] += x`` on its way to ``acc.__setitem__``."""

    __slots__ = ("element", "value")

    def __init__(self, element: _ReducerElement, value):
        self.element, self.value = element, value


def alloc_reducer(shape, dtype, op: str = "sum", replication=None) -> ReducerBuffer:
    """A reduction handle of ``shape`` combining contributions with ``op``."""
    if op not in OPS:
        raise kernel_error(f"T.alloc_reducer op must be one of {', '.join(OPS)}, got {op!r}")
    buf = _alloc(shape, dtype, f"local.reducer.{op}", "T.alloc_reducer").buffer
    if op.startswith("bit") and is_float(str(buf.dtype)):
        raise kernel_error(f"T.alloc_reducer op {op!r} needs an integer dtype, got {buf.dtype}")
    return ReducerBuffer(buf)


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


def reducer_init(acc):
    """Start a reduction epoch: every element becomes the identity of the operation."""
    acc = _check(acc, "T.reducer_init")
    fill(TileBuffer(acc.buffer), _identity(acc.op, acc.dtype))


def fill_reducer(acc: ReducerBuffer, value) -> None:
    """``T.fill(acc, value)`` / ``T.clear(acc)``: start an epoch at ``value``, which must not
    depend on how many partials the backend keeps (the identity; any value for max/min)."""
    value = to_expr(value, acc.dtype)
    identity = _identity(acc.op, acc.dtype)
    if acc.op not in ("max", "min") and not (
            isinstance(value, (tirx.IntImm, tirx.FloatImm)) and
            tvm_ffi.structural_equal(value, identity)):
        raise kernel_error(f"T.fill of the {acc.op} reducer {acc.name!r} must use its identity "
                           f"{identity}: each thread's partial starts there, so another value "
                           "would be counted once per partial")
    builder = B.current("T.fill")
    builder.finalized[:] = [b for b in builder.finalized if not b.same_as(acc.buffer)]
    kernel = builder.enclosing("kernel")
    if kernel is not None:  # a new epoch: its merged values are read from a new copy
        merged_reducers = kernel.info.get("merged_reducers", {})
        for b in [b for b in merged_reducers if b.same_as(acc.buffer)]:
            del merged_reducers[b]
    fill(TileBuffer(acc.buffer), value)


def merged(acc: ReducerBuffer) -> TileBuffer:
    """The merged values of finalized reducer ``acc``, for reading its elements: a fragment
    ``T.copy(acc, ...)`` fills where the first element is read (the merge TileLang's
    ``T.finalize_reducer`` makes in place; a reducer's partials are merged by a copy here)."""
    builder = B.require_kernel(f"reading reducer {acc.name!r}")
    kernel = builder.enclosing("kernel")
    cache = kernel.info.setdefault("merged_reducers", {})
    found = next((m for b, m in cache.items() if b.same_as(acc.buffer)), None)
    if found is None:
        buf = declare(f"{acc.name}_merged", tuple(acc.buffer.shape), str(acc.buffer.dtype),
                      "local.fragment")
        kernel.stmts.insert(0, tirx.AllocBuffer(buf, span=B.here()))
        found = cache[acc.buffer] = TileBuffer(buf)
        # the copy goes before the loop nest the read stands in (a T.Parallel loop's
        # iterations read the merged values; the copy is the block's)
        outer = next((k for k, f in enumerate(builder.frames) if f.kind == "parallel"),
                     len(builder.frames))
        inner = builder.frames[outer:]
        del builder.frames[outer:]
        try:
            copy(TileBuffer(acc.buffer), found)
        finally:
            builder.frames.extend(inner)
    return found


def reducer_update(element, value):
    """Contribute ``value`` to one element: ``T.reducer_update(acc[i], x)``."""
    if not isinstance(element, _ReducerElement):
        raise kernel_error("T.reducer_update takes an element of a reducer, like acc[i]")
    acc = element.reducer
    B.require_kernel("T.reducer_update")
    load = tirx.BufferLoad(acc.buffer, [to_expr(i) for i in element.index])
    TileBuffer.__setitem__(acc, element.index, _combine(acc.op, load,
                                                       to_expr(value, acc.dtype)))


def finalize_reducer(acc, dst=None, batch: int = 1, annotations=None):
    """Merge the contributions and write the result to ``dst``; without ``dst`` (TileLang's
    form), ``T.copy(acc, dst)`` does that later. TileLang's ``batch`` (outputs per all-reduce
    call) and ``annotations`` schedule its CUDA merge: accepted, they change no result."""
    acc = _check(acc, "T.finalize_reducer")
    schedule_hints("finalize_reducer", batch, annotations)
    if dst is None:
        B.require_kernel("T.finalize_reducer").finalized.append(acc.buffer)
        return
    copy(TileBuffer(acc.buffer), dst)
