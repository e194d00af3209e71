"""Element types: their Ascend C names and sizes."""

from __future__ import annotations

from tilewright.errors import KernelError

CTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int32": "int32_t",
          "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "int64": "int64_t",
          "uint32": "uint32_t", "uint16": "uint16_t", "bool": "bool", "float64": "double"}


def ctype(dtype) -> str:
    """The Ascend C name of ``dtype``."""
    dtype = str(dtype)
    if dtype not in CTYPES:
        raise KernelError(f"dtype {dtype} has no Ascend C type in this backend")
    return CTYPES[dtype]


def promoted(dtype) -> bool:
    """Whether C++ computes on ``dtype`` as ``int`` (the integer promotion of the types narrower
    than ``int``: [conv.prom]), so that a result of its arithmetic may leave the type."""
    return str(dtype) in ("int8", "uint8", "int16", "uint16")


def dtype_bytes(dtype) -> int:
    dtype = str(dtype)
    bits = int("".join(c for c in dtype if c.isdigit()) or 8)
    return 1 if dtype == "bool" else max(1, bits // 8)
