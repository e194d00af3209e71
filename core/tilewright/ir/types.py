"""The language's name of a TIR value's type."""

from __future__ import annotations

import tvm


def value_dtype(value) -> str:
    """The dtype of the TIR value ``value`` by the language's name: ``"handle"`` for an
    address (a ``T.ptr``, whose TVM type is a pointer and prints ``T.handle``), else its
    scalar type's name."""
    return "handle" if isinstance(value.ty, tvm.ir.PointerType) else str(value.ty)
