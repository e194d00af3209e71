"""Allocations of a kernel and the bytes each buffer needs in its memory."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from ..facts.arch import CUBE_SCOPES
from ..facts.dtypes import dtype_bytes
from ..facts.layout import padded_bytes


def allocations(node) -> list:
    """The ``AllocBuffer`` statements of ``node`` (a PrimFunc or a statement), in order."""
    body = node.body if isinstance(node, tirx.PrimFunc) else node
    found = []
    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, found.append), order="pre")
    return found


def buffer_bytes(buf) -> int:
    """Bytes of a buffer; cube-memory tiles count whole fractals (:mod:`..facts.layout`)."""
    if str(buf.scope()) in CUBE_SCOPES:
        return padded_bytes(buf)
    return math.prod(int(s) for s in buf.shape) * dtype_bytes(buf.dtype)


def buffers_in(node) -> set:
    """Every buffer ``node`` refers to."""
    found = set()

    def add(b):
        if isinstance(b, tirx.Buffer):
            found.add(b)

    tvm_ffi.structural_walk(node, (tirx.Buffer, add))
    return found


def loads_and_stores(node) -> tuple[list, list]:
    """The buffers of the scalar loads and of the stores in ``node`` (with repetitions)."""
    loads, stores = [], []
    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, lambda x: loads.append(x.source)),
                                   (tirx.BufferStore, lambda x: stores.append(x.buffer))])
    return loads, stores


def flat_index(buffer, indices):
    """The element offset of ``indices`` in ``buffer`` (row-major)."""
    offset, stride = tirx.const(0, "int32"), 1
    for index, dim in reversed(list(zip(indices, buffer.shape))):
        offset = offset + index * stride
        stride = stride * (dim.value if isinstance(dim, tirx.IntImm) else dim)
    return offset
