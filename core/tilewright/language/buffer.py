"""Buffers as kernel code sees them: indexing loads, stores, slices and region starts."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import sym, tirx

from ..errors import kernel_error
from ..ir import Region
from . import builder as B
from .dtypes import normalize_dtype, storage_dtype

_ANALYZER = sym.Analyzer()


def as_int(value):
    """``value`` as a Python int when it is a constant, else unchanged."""
    if isinstance(value, tirx.IntImm):
        return int(value.value)
    return value


def dtype_of(value) -> str | None:
    """The dtype of a PrimExpr as a string; None for Python values."""
    if hasattr(value, "asobject"):  # `a == b` on expressions: a deferred comparison
        value = value.asobject()
    ty = getattr(value, "ty", None)
    return None if ty is None else str(ty)


def to_expr(value, dtype: str | None = None):
    """Convert a Python scalar or a buffer element to a PrimExpr (of ``dtype`` if given)."""
    if isinstance(value, VarHandle):
        value = value.load()
    elif hasattr(value, "asobject"):  # `a == b` on expressions: a deferred comparison
        value = value.asobject()
    elif isinstance(value, TileBuffer):
        raise kernel_error(f"buffer {value.name!r} used where a scalar was expected; index it")
    elif isinstance(value, BufferSlice):
        value.not_a_value()
    elif type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()  # a numpy scalar: its Python value (np.int64 passed as int32)
    if isinstance(value, bool):
        return tirx.const(value, dtype or "bool")
    if isinstance(value, int):
        return tirx.const(value, dtype or "int32")
    if isinstance(value, float):
        return tirx.const(value, dtype or "float32")
    if not isinstance(value, tvm.ir.Expr):
        raise kernel_error(f"expected a value (a number, an element or an expression), got "
                           f"{type(value).__name__} {value!r:.40}")
    if dtype is not None and dtype_of(value) not in (None, dtype):
        return tirx.Cast(dtype, value)
    return value


@dataclass(frozen=True)
class BufferSlice:
    """``A[0:64, k:k+32]`` or ``A[b, 0:64, :]``: a region; a point index has extent 1."""

    buffer: tirx.Buffer
    starts: tuple
    extents: tuple

    def not_a_value(self, *_):
        """Arithmetic on a region: refused at the user's line (Python's TypeError named no
        line and no buffer)."""
        raise kernel_error(
            f"the region {self.text()} is not a value: arithmetic and math take elements "
            f"({self.buffer.name}[i]) or vector values (T.float32x4(...), T.ldg128(...)); "
            "loop over the region with T.Parallel, or move it with T.copy")

    def text(self) -> str:
        """The region as the kernel wrote it: ``A[0:4]``, ``A[i, 0:64]``."""
        dims = [str(start) if as_int(extent) == 1 else
                f"{start}:{_ANALYZER.simplify(to_expr(start) + to_expr(extent))}"
                for start, extent in zip(self.starts, self.extents)]
        return f"{self.buffer.name}[{', '.join(dims)}]"

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = not_a_value
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = not_a_value
    __pow__ = __rpow__ = __neg__ = __abs__ = __invert__ = not_a_value
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = not_a_value
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = not_a_value
    __lt__ = __le__ = __gt__ = __ge__ = not_a_value


class TileBuffer:
    """A kernel buffer: ``A[i, j]`` loads, ``A[i, j] = v`` stores, ``A[0:64, :]`` slices."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: tirx.Buffer):
        self.buffer = buffer

    @property
    def name(self) -> str:
        return str(self.buffer.name)

    @property
    def shape(self) -> tuple:
        return tuple(as_int(s) for s in self.buffer.shape)

    @property
    def dtype(self) -> str:
        return str(self.buffer.dtype)

    @property
    def scope(self) -> str:
        return str(self.buffer.scope())

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    @property
    def data(self):
        """The buffer's memory, for ``T.Tensor(shape, dtype, buf.data)`` views."""
        return self.buffer.data

    def renamed(self, buffer: tirx.Buffer) -> TileBuffer:
        """This handle over ``buffer``: its allocation declared again under the name of the
        variable the kernel assigns it to."""
        return type(self)(buffer)

    def __repr__(self) -> str:
        return (f"TileBuffer({self.name}, shape={self.shape}, dtype={self.dtype}, "
                f"scope={self.scope})")

    def _key(self, key) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.ndim:
            raise kernel_error(f"buffer {self.name!r} has {self.ndim} dimension(s) but was "
                               f"indexed with {len(key)}")
        return key

    def __getitem__(self, key):
        key = self._key(key)
        if len(key) == self.ndim and not any(isinstance(k, slice) for k in key):
            return tirx.BufferLoad(self.buffer, [index_expr(k, self.name) for k in key])
        starts, extents = [], []
        for dim, k in enumerate(key + (slice(None),) * (self.ndim - len(key))):
            if isinstance(k, slice):
                if k.step not in (None, 1):
                    raise kernel_error(f"slices of {self.name!r} must have step 1")
                start = 0 if k.start is None else _start(k.start, self.name)
                stop = self.shape[dim] if k.stop is None else k.stop
                starts.append(start)
                extents.append(stop - start if isinstance(stop, int) and isinstance(start, int)
                               else as_int(_ANALYZER.simplify(to_expr(stop) - to_expr(start))))
            else:
                starts.append(_start(k, self.name))
                extents.append(1)
        return BufferSlice(self.buffer, tuple(starts), tuple(extents))

    def __setitem__(self, key, value) -> None:
        key = self._key(key)
        if len(key) != self.ndim or any(isinstance(k, slice) for k in key):
            value = value.load() if isinstance(value, VarHandle) else value
            if isinstance(value, BufferSlice):  # TVM script's vector load: A[i, 0:4]
                value = _slice_vector(value, self.name)
            lanes = _lanes(value)
            if lanes > 1:
                self._store_lanes(self[key], value, lanes)
                return
            raise kernel_error(f"store to {self.name!r} needs one index per dimension "
                               f"({self.ndim}); use T.fill or T.copy for regions")
        builder = B.require_kernel(f"storing to {self.name!r}")
        if builder.enclosing("parallel", "serial", "pipelined", "kernel") is None:
            raise kernel_error(f"store to {self.name!r} outside the kernel body")
        store = tirx.BufferStore(self.buffer, to_expr(value, self.dtype),
                                 [index_expr(k, self.name) for k in key], span=B.here())
        builder.emit(store)

    def _store_lanes(self, region: BufferSlice, value, lanes: int) -> None:
        """``y[i:i + n] = v`` of a vector ``v`` of ``n`` lanes: lane ``k`` into element ``i + k``
        along the last dimension (converted to the buffer's dtype), the vector computed once."""
        sizes = [as_int(e) for e in region.extents]
        if any(e != 1 for e in sizes[:-1]) or sizes[-1] != lanes:
            raise kernel_error(f"store of a {value.ty} value ({lanes} lanes) to "
                               f"{self.name!r}{list(sizes)}: it fills {lanes} consecutive "
                               "elements along the last dimension")
        builder = B.require_kernel(f"storing to {self.name!r}")
        span = B.here()
        vector = tirx.Var("lanes", str(value.ty))
        stores = [tirx.Bind(vector, value, span=span)]
        first = [to_expr(s) for s in region.starts]
        for k in range(lanes):
            lane = to_expr(tirx.Shuffle([vector], [tirx.const(k, "int32")]), self.dtype)
            index = [*first[:-1], first[-1] + k] if k else first
            stores.append(tirx.BufferStore(self.buffer, lane, index, span=span))
        builder.emit(B.seq(stores))


def _slice_vector(region: BufferSlice, target: str):
    """The vector of a slice along the last dimension (``A[i, 0:4]``, a ``float32x4``) that a
    store into a slice (``B[i, 4:8] = A[i, 0:4]``) takes, as TVM script's ``b = A[i, 0:4]``
    is a vector load; any other region is an error naming the store."""
    sizes = [as_int(e) for e in region.extents]
    name = str(region.buffer.name)
    if any(e != 1 for e in sizes[:-1]) or not isinstance(sizes[-1], int) or sizes[-1] < 2:
        raise kernel_error(f"store of the region {name}{list(sizes)} into {target!r}: a "
                           "region is stored as a vector only when it is consecutive elements "
                           "along the last dimension (A[i, 0:4]); use T.copy for regions")
    first = [to_expr(s) for s in region.starts]
    loads = [tirx.BufferLoad(region.buffer, [*first[:-1], first[-1] + k] if k else first)
             for k in range(sizes[-1])]
    return tirx.Shuffle(loads, [tirx.const(k, "int32") for k in range(sizes[-1])])


def _lanes(value) -> int:
    """The lanes of a vector value (``T.float32x2`` ...); 1 for anything else."""
    if not isinstance(value, tvm.ir.Expr):
        return 1
    return tvm.runtime.DataType(str(value.ty)).lanes


def index_expr(value, name: str):
    """``value`` as an index of the buffer ``name``: an integer expression, else an error at
    the user's line (a float index reached LLVM or NVRTC: "Expected buffer index to be an
    integer")."""
    expr = to_expr(value)
    dtype = dtype_of(expr)
    if dtype is not None and not dtype.startswith(("int", "uint")):
        raise kernel_error(f"an index of {name!r} is {dtype} ({expr}): indices are integers; "
                           "convert it with T.cast(..., 'int32') or compute it with // and %")
    return expr


def _start(value, name: str):
    """A region start: a Python int as it is, anything else (a ``T.alloc_var``) as an integer
    expression."""
    return value if isinstance(value, int) and not isinstance(value, bool) else \
        index_expr(value, name)


def _binary(name: str, reflected: bool = False):
    def op(self, other):
        a, b = self.load(), to_expr(other, self.dtype) if dtype_of(other) is None else \
            to_expr(other)
        return getattr(b, name)(a) if reflected else getattr(a, name)(b)

    return op


class VarHandle(TileBuffer):
    """``x = T.alloc_var(dtype)``: a mutable scalar. Reading ``x`` loads it; ``x = v`` and
    ``x += v`` store into it."""

    __slots__ = ()

    def load(self):
        return tirx.BufferLoad(self.buffer, [tirx.const(0, "int32")])

    @property
    def ty(self):
        return self.load().ty

    def store(self, value) -> None:
        self[0] = value

    def __iadd__(self, other):
        self.store(self.load() + to_expr(other, self.dtype))
        return self

    def __isub__(self, other):
        self.store(self.load() - to_expr(other, self.dtype))
        return self

    def __imul__(self, other):
        self.store(self.load() * to_expr(other, self.dtype))
        return self

    def __neg__(self):
        return tirx.const(0, self.dtype) - self.load()

    def __bool__(self):
        raise kernel_error(f"the value of {self.name!r} is only known when the kernel runs; "
                           "use it in an 'if' on the kernel side, not in Python logic")

    def __getitem__(self, key):
        return self.load() if key in (0, (0,)) else super().__getitem__(key)

    def __tvm_ffi_object__(self):
        """Passed to TVM (``expr < x``, an index, a call's argument), ``x`` is its value: TVM's
        own operators do not return NotImplemented, so the reflected ones here never run."""
        return self.load()


for _name in ("__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__",
              "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
    setattr(VarHandle, _name, _binary(_name))
VarHandle.__hash__ = TileBuffer.__hash__  # `x == 1` builds a comparison; identity hashes
for _name, _base in (("__radd__", "__add__"), ("__rsub__", "__sub__"), ("__rmul__", "__mul__"),
                     ("__rtruediv__", "__truediv__")):
    setattr(VarHandle, _name, _binary(_base, reflected=True))


class IterationVar(VarHandle):
    """``x = T.alloc_var(dtype)`` inside a ``T.Parallel`` loop: a scalar of each iteration (a
    thread's register on a GPU), held as one element per iteration of the enclosing parallel
    loops, ``index`` being the iteration's element."""

    __slots__ = ("index",)

    def __init__(self, buffer: tirx.Buffer, index: tuple):
        super().__init__(buffer)
        self.index = index

    def load(self):
        return tirx.BufferLoad(self.buffer, list(self.index))

    def store(self, value) -> None:
        B.require_kernel(f"storing to {self.name!r}").emit(tirx.BufferStore(
            self.buffer, to_expr(value, self.dtype), list(self.index), span=B.here()))

    def __getitem__(self, key):
        if key in (0, (0,)):
            return self.load()
        raise kernel_error(f"{self.name!r} is a scalar (T.alloc_var); index it with 0 or not "
                           "at all")


def unwrap(value):
    return value.buffer if isinstance(value, TileBuffer) else value


def region_of(value, what: str):
    """A region reference: (buffer, starts, extents with None where to be inferred)."""
    if getattr(value, "is_reducer", False):
        raise kernel_error(f"{what}: {value.name!r} is a reducer; it can only be used with "
                           "T.reducer_init, T.reducer_update and T.finalize_reducer")
    if isinstance(value, TileBuffer):
        return value.buffer, tuple(0 for _ in value.shape), tuple(value.shape)
    if isinstance(value, BufferSlice):
        return value.buffer, value.starts, value.extents
    if isinstance(value, tvm.ir.TensorLoad):
        return value.source, tuple(value.indices), tuple(None for _ in value.indices)
    raise kernel_error(f"{what} expects a buffer, a buffer slice or a buffer element, "
                       f"got {type(value).__name__}")


def shape_str(extents) -> str:
    trailing = "," if len(extents) == 1 else ""
    return "(" + ", ".join(str(as_int(e)) for e in extents) + trailing + ")"


def squeeze(extents) -> list:
    return [e for e in extents if not (isinstance(as_int(e), int) and as_int(e) == 1)]


def resolve(ref, like: tuple | None, what: str) -> Region:
    """Fill the inferred extents of ``ref`` from ``like``, the shape of the other side: taken
    as it is when its rank is the number of extents to fill (a (64, 1) tile stays a column),
    with unit dimensions in front when it has fewer (a (64, 1) tile into a 3-D tensor fills
    ``(1, 64, 1)``, as TileLang pads extents on the left), or without leading unit dimensions
    when it has more (one stage ``(1, 16, 1)`` of a ``(2, 16, 1)`` tile fills a column of 16
    rows), else without its unit dimensions and right-aligned."""
    buffer, starts, extents = ref
    if all(e is not None for e in extents):
        return Region(buffer, tuple(starts), tuple(as_int(e) for e in extents))
    missing = [i for i, e in enumerate(extents) if e is None]
    if like is None:
        filled = [1 if e is None else e for e in extents]
        return Region(buffer, tuple(starts), tuple(filled))
    target = list(like)
    while len(target) > len(missing) and isinstance(as_int(target[0]), int) and \
            as_int(target[0]) == 1:
        target.pop(0)
    if len(target) > len(missing):
        target = squeeze(like) or [1]
    if len(target) > len(missing):
        raise kernel_error(f"{what}: a region of rank {len(missing)} starting in "
                           f"{buffer.name!r} cannot hold a tile of shape {shape_str(like)}")
    target = [1] * (len(missing) - len(target)) + target
    filled = list(extents)
    for i, e in zip(missing, target):
        filled[i] = e
    return Region(buffer, tuple(starts), tuple(as_int(e) for e in filled))


def declare(name: str, shape, dtype, scope: str, strides=None) -> tirx.Buffer:
    """A buffer of ``shape`` and ``dtype`` in ``scope``; with ``strides`` (a
    ``T.StridedTensor``'s, in elements), its elements lie that far apart, and the code assumes
    no more alignment of its data than one element's."""
    dims = []
    for s in (shape if isinstance(shape, (tuple, list)) else (shape,)):
        s = as_int(s)
        if isinstance(s, int) and s <= 0:
            raise kernel_error(f"buffer {name!r} has a non-positive dimension {s}")
        dims.append(s)
    dtype = storage_dtype(normalize_dtype(dtype))
    if strides is None:
        return tirx.decl_buffer(dims, dtype, name, scope=scope)
    item = max(1, tvm.runtime.DataType(dtype).bits // 8)
    return tirx.decl_buffer(dims, dtype, name, scope=scope, strides=list(strides),
                            data_alignment=item)
