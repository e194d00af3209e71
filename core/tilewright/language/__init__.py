"""``import tilewright.language as T``: the portable tile language."""

from .buffer import TileBuffer
from .dtypes import DTYPES as _DTYPES
from .dtypes import DType
from .frames import Kernel, Parallel, Pipelined, serial, unroll
from .kernel import (
    Buffer,
    Macro,
    Tensor,
    alloc_fragment,
    alloc_local,
    alloc_shared,
    const,
    dynamic,
    empty,
    macro,
    prim_func,
    symbolic,
)
from .math import cast, ceildiv, exp, exp2, if_then_else, infinity, max, min
from .tileops import REDUCE_OPS as _REDUCE_OPS
from .tileops import GemmWarpPolicy, clear, copy, fill, gemm

globals().update(_DTYPES)
globals().update(_REDUCE_OPS)

__all__ = [
    "Buffer", "DType", "GemmWarpPolicy", "Kernel", "Macro", "Parallel", "Pipelined", "Tensor", "TileBuffer",
    "alloc_fragment", "alloc_local", "alloc_shared", "cast", "ceildiv", "clear", "const", "copy",
    "dynamic", "empty", "exp", "exp2", "fill", "gemm", "if_then_else", "infinity", "macro",
    "max", "min", "prim_func", "serial", "symbolic", "unroll", *_DTYPES, *_REDUCE_OPS,
]
