"""Element types: their Ascend C names, sizes and integer ranges."""

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


# the integer types: (bits, signed)
INTEGERS = {"int8": (8, True), "int16": (16, True), "int32": (32, True), "int64": (64, True),
            "uint8": (8, False), "uint16": (16, False), "uint32": (32, False),
            "uint64": (64, False)}


def int_range(dtype) -> tuple[int, int] | None:
    """The values of the integer type ``dtype`` (None for other types)."""
    if str(dtype) not in INTEGERS:
        return None
    bits, signed = INTEGERS[str(dtype)]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def wrapping_ctype(dtype) -> str | None:
    """The unsigned C type in which C++ computes ``dtype``'s ``+``, ``-``, ``*`` and ``<<`` modulo
    2**bits: a signed result that leaves its type is undefined in C++ and the types narrower than
    ``int`` compute as ``int`` ([expr.pre], [conv.prom]); None where ``dtype``'s own arithmetic
    wraps (uint32, uint64) or ``dtype`` is no integer."""
    if str(dtype) not in INTEGERS or str(dtype) in ("uint32", "uint64"):
        return None
    return "uint64_t" if INTEGERS[str(dtype)][0] == 64 else "uint32_t"


def rounded_back(dtype) -> bool:
    """Whether C++ may compute an arithmetic result of ``dtype`` in a wider type, so that the
    printer casts it back to ``dtype`` after each operator: the integers narrower than ``int``
    compute as ``int`` ([conv.prom]), and a ``half`` result may be held in float ([expr.pre]:
    excess precision, which only a cast or an assignment removes)."""
    return str(dtype) in ("int8", "uint8", "int16", "uint16", "float16")


def dtype_bytes(dtype) -> int:
    dtype = str(dtype)
    bits = int("".join(c for c in dtype if c.isdigit()) or 8)
    return 1 if dtype == "bool" else max(1, bits // 8)
