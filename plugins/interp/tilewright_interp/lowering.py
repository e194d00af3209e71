"""The interpreter's rule table: one function per tile op, executing it on NumPy arrays.

Where a compiling backend lowers a tile op to loops, the interpreter runs it directly: the
generated code calls ``RULES[op](block, **operands, **attrs)`` with :class:`~.runtime.Region`
operands. ``block`` is the block index, for messages. These functions are the semantics the CPU
backend is cross-checked against, so they are written for clarity, not speed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tilewright import sparse as sp
from tilewright.ir import (
    ATOMIC_KINDS,
    PDL_SYNC,
    PDL_TRIGGER,
    REDUCE_KINDS,
    SCAN_OPS,
    matrix_dims,
    transpose_dims,
)

from .runtime import Region, converted

RULES: dict[str, Callable] = {}


def register_lowering(name: str):
    """``@register_lowering("copy")`` adds the rule of tile op ``copy``."""

    def wrap(fn):
        RULES[name] = fn
        return fn

    return wrap


@register_lowering("copy")
def run_copy(block, src: Region, dst: Region, **_attrs):
    values = src.read()
    if values.size != np.prod(dst.extents):
        raise ValueError(f"T.copy: {src.extents} elements do not fit {dst.extents}")
    dst.write(values)  # converted to dst's dtype by the write


@register_lowering("transpose")
def run_transpose(block, src: Region, dst: Region):
    """The source's last two dimensions swapped (``ir.transpose_dims``: leading dimensions of
    extent 1 left out), converted to the destination's dtype by the write."""
    kept = [src.extents[d] for d in transpose_dims(src.extents)]
    dst.write(np.swapaxes(src.read().reshape(kept), -1, -2))


@register_lowering(PDL_TRIGGER.name)
@register_lowering(PDL_SYNC.name)
def run_pdl(block):
    """Kernels run one after another: nothing to order."""


@register_lowering("fill")
def run_fill(block, dst: Region, value):
    dst.write(np.full(dst.extents, value, dtype=dst.array.dtype))


def _matrix(region: Region) -> np.ndarray:
    """A gemm operand's values as a matrix: its two dimensions (``matrix_dims``), so that a
    stage of a [stages, M, K] buffer is [M, K] and a one-wide tile keeps its unit dimension."""
    rows, cols = (region.extents[d] for d in matrix_dims(region.extents))
    return region.read().reshape(rows, cols)


@register_lowering("gemm")
def run_gemm(block, A: Region, B: Region, C: Region, transpose_A=False, transpose_B=False,
             clear_accum=False, **_attrs):
    acc = C.array.dtype
    a, b = _matrix(A).astype(acc), _matrix(B).astype(acc)
    a, b = (a.T if transpose_A else a), (b.T if transpose_B else b)
    product = a @ b
    C.write(product if clear_accum else C.read() + product)


@register_lowering("gemm_sp")
def run_gemm_sp(block, A: Region, E: Region, B: Region, C: Region, transpose_A=False,
                transpose_E=False, transpose_B=False, clear_accum=False, **_attrs):
    acc = C.array.dtype
    values, meta = _matrix(A), _matrix(E)
    values, meta = (values.T if transpose_A else values), (meta.T if transpose_E else meta)
    g = sp.SPARSE_GROUPS[A.dtype]
    kk = np.arange(values.shape[1])
    words = meta.astype(np.int64)[:, sp.meta_column(kk, A.dtype, E.dtype)]
    columns = sp.dense_column(words, kk, A.dtype, E.dtype)
    a = np.zeros((values.shape[0], values.shape[1] * g.group // g.kept), dtype=acc)
    np.put_along_axis(a, columns, values.astype(acc), axis=1)
    b = _matrix(B).astype(acc)
    product = a @ (b.T if transpose_B else b)
    C.write(product if clear_accum else C.read() + product)


# the comparing kinds ignore a NaN element (np.fmax / np.fmin: IEEE 754's maxNum / minNum) or,
# with nan_propagate, give NaN (np.maximum / np.minimum): ir.NAN_REDUCE_KINDS
_REDUCE = {
    "sum": (np.sum, np.add),
    "max": (np.fmax.reduce, np.fmax),
    "min": (np.fmin.reduce, np.fmin),
    "abssum": (lambda x, axis: np.sum(np.abs(x), axis=axis), np.add),
    "absmax": (lambda x, axis: np.fmax.reduce(np.abs(x), axis=axis), np.fmax),
    "bitand": (np.bitwise_and.reduce, np.bitwise_and),
    "bitor": (np.bitwise_or.reduce, np.bitwise_or),
    "bitxor": (np.bitwise_xor.reduce, np.bitwise_xor),
}


_PROPAGATE = {
    "max": (np.max, np.maximum),
    "min": (np.min, np.minimum),
    "absmax": (lambda x, axis: np.max(np.abs(x), axis=axis), np.maximum),
}


def _make_reduce(kind: str):
    def run_reduce(block, src: Region, dst: Region, dim=-1, clear=True, nan_propagate=False):
        reduce, combine = (_PROPAGATE if nan_propagate else _REDUCE)[kind]
        acc = dst.array.dtype
        out = reduce(converted(src.read(), acc), axis=dim).reshape(dst.extents)
        dst.write(out if clear else combine(dst.read(), out))

    run_reduce.__name__ = f"run_reduce_{kind}"
    return run_reduce


for _kind in REDUCE_KINDS:
    register_lowering(f"reduce_{_kind}")(_make_reduce(_kind))


_SCAN = {"cumsum": np.add, "cummax": np.maximum}


def _make_scan(name: str):
    combine = _SCAN[name]

    def run_scan(block, src: Region, dst: Region, dim=0, reverse=False):
        x = converted(src.read(), dst.array.dtype)
        if reverse:
            x = np.flip(x, axis=dim)
        out = combine.accumulate(x, axis=dim, dtype=dst.array.dtype)
        dst.write(np.flip(out, axis=dim) if reverse else out)

    run_scan.__name__ = f"run_{name}"
    return run_scan


for _name in SCAN_OPS:
    register_lowering(_name)(_make_scan(_name))


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum, "or": np.bitwise_or,
           "and": np.bitwise_and, "xor": np.bitwise_xor}


def _make_atomic(kind: str):
    combine = _ATOMIC[kind]

    def run_atomic(block, dst: Region, src, memory_order="relaxed", element=False,
                   use_tma=False):
        # blocks run one at a time, so a read-modify-write is atomic (and in order)
        value = src.read().reshape(dst.extents) if isinstance(src, Region) else src
        wide = np.float32 if dst.array.dtype == np.float16 else dst.array.dtype
        dst.write(combine(dst.read().astype(wide), np.asarray(value, dtype=wide)))

    run_atomic.__name__ = f"run_atomic_{kind}"
    return run_atomic


for _kind in ATOMIC_KINDS:
    register_lowering(f"atomic_{_kind}")(_make_atomic(_kind))


@register_lowering("atomic_store")
def run_atomic_store(block, dst: Region, src, memory_order="seq_cst", element=True):
    # blocks run one at a time: a store is whole and in order
    dst.write(np.asarray(src, dtype=dst.array.dtype))


def atomic_prev(kind: str, array, index, value, dtype: str):
    """``T.atomic_<kind>(A[i], v, return_prev=True)``: update one element, return the old."""
    old = array[index]
    region = Region(array, index, (1,) * len(index), dtype)
    region.write(_ATOMIC[kind](np.float32(old) if array.dtype == np.float16 else old, value))
    return old


@register_lowering("print_tile")
def run_print_tile(block, buf: Region, msg=""):
    head = f"[block {tuple(block)}] {msg}{': ' if msg else ''}{buf.name} shape {buf.extents} " \
           f"{buf.dtype}"
    print(f"{head}\n{np.array2string(buf.read(), threshold=256, edgeitems=4)}", flush=True)


@register_lowering("print_value")
def run_print_value(block, value, msg=""):
    print(f"[block {tuple(block)}] {msg}{': ' if msg else ''}{value}", flush=True)


@register_lowering("device_assert")
def run_device_assert(block, cond, msg=""):
    if not cond:
        raise RuntimeError(f"{msg} (block {tuple(block)})")
