"""``T.alloc_reducer``: a reduction handle that collects contributions from anywhere in the
kernel and is merged once by ``T.finalize_reducer``.

A reducer is a fragment whose scope names its operation (``local.reducer.<op>``), so every
backend knows how its per-thread partials combine. Reading it, storing to it, clearing it or
copying from it directly are compile-time errors: use ``reducer_update`` and
``finalize_reducer``.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import kernel_error
from . import builder as B
from .buffer import TileBuffer, to_expr
from .dtypes import is_float
from .kernel import _alloc
from .math import infinity
from .tileops import copy, fill

OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")


class ReducerBuffer(TileBuffer):
    """The handle ``T.alloc_reducer`` returns; ``acc[i]`` names an element to update."""

    __slots__ = ()
    is_reducer = True

    @property
    def op(self) -> str:
        return self.scope.rsplit(".", 1)[-1]

    def __getitem__(self, key):
        return _ReducerElement(self, key if isinstance(key, tuple) else (key,))

    def __setitem__(self, key, value):
        raise kernel_error(f"{self.name!r} is a reducer: update it with T.reducer_update, not "
                           "by assignment")


class _ReducerElement:
    __slots__ = ("reducer", "index")

    def __init__(self, reducer, index):
        self.reducer, self.index = reducer, index

    def __getattr__(self, name):
        raise kernel_error(f"{self.reducer.name!r} is a reducer and cannot be read before "
                           "T.finalize_reducer")


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


def reducer_update(element, value):
    """Contribute ``value`` to one element: ``T.reducer_update(acc[i], x)``."""
    if not isinstance(element, _ReducerElement):
        raise kernel_error("T.reducer_update takes an element of a reducer, like acc[i]")
    acc = element.reducer
    B.require_kernel("T.reducer_update")
    load = tirx.BufferLoad(acc.buffer, [to_expr(i) for i in element.index])
    TileBuffer.__setitem__(acc, element.index, _combine(acc.op, load,
                                                       to_expr(value, acc.dtype)))


def finalize_reducer(acc, dst):
    """Merge the contributions and write the result to ``dst``."""
    acc = _check(acc, "T.finalize_reducer")
    copy(TileBuffer(acc.buffer), dst)
