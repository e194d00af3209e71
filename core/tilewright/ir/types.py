"""The language's name of a TIR value's type, and its lanes."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx


def value_dtype(value) -> str:
    """The dtype of the TIR value ``value`` by the language's name: ``"handle"`` for an
    address (a ``T.ptr``, whose TVM type is a pointer and prints ``T.handle``), else its
    scalar type's name."""
    return "handle" if isinstance(value.ty, tvm.ir.PointerType) else str(value.ty)


def vector_values(node) -> list[str]:
    """The vector dtypes (``float32x2`` ...) of the values ``node`` (a statement or an
    expression) builds, in order: lanes gathered (``T.float32x2(a, b)``, a ``Shuffle``), one
    value repeated (``Broadcast``), a ramp of indices, a call with a vector result (a
    reinterpretation as ``float32x2``). Calls without a value (``void``) have none."""
    found = []

    def visit(e):
        if isinstance(e.ty, tvm.ir.PrimType) and tvm.runtime.DataType(str(e.ty)).lanes > 1:
            found.append(str(e.ty))

    tvm_ffi.structural_walk(node, [(t, visit) for t in (tirx.Shuffle, tirx.Broadcast,
                                                         tirx.Ramp, tvm.ir.Call)])
    return found
