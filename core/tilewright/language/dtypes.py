"""Data types: ``T.float16`` and friends are strings that can also build constants."""

from __future__ import annotations

import difflib

from tvm import tirx

from ..errors import kernel_error

_CANONICAL = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "int4", "uint4",
    "handle",
)
# dtypes narrower than a byte and the dtype that holds one of their values in a kernel's
# tiles: a tensor parameter of such a dtype is passed packed, 8 // bits values a byte along its
# last dimension (low bits first), as TileLang passes int4 tensors in torch.int8
SUB_BYTE = {"int4": "int8"}
# the dtype a buffer of each dtype holds its values in: a tensor of pointers (``T.ptr``,
# TileLang's table of ``data_ptr()`` values) holds them as int64, as torch passes them
STORAGE = {**SUB_BYTE, "handle": "int64"}
# "tfloat32" is float32 storage (TileLang multiplies it in TF32 on tensor cores; backends
# without TF32 multiply in float32, which is at least as precise)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
            "uint": "uint32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
            "tfloat32": "float32", "float8_e4m3": "float8_e4m3fn", "e4m3_float8": "float8_e4m3fn",
            "e5m2_float8": "float8_e5m2", "ptr": "handle"}
# Python spellings of TileLang's aliases: ``T.float``, ``T.half`` ...
ALIAS_NAMES = ("float", "half", "double", "int", "uint", "tfloat32", "float8_e4m3", "ptr")


class DType(str):
    """A dtype name, as TileLang's ``T.dtype``: ``T.dtype(x)`` accepts a name, an alias
    (``"half"``) or a torch dtype and gives the canonical name; calling a dtype makes a
    constant or a cast (``T.float16(1.0)``); :meth:`as_torch` gives the torch dtype."""

    def __new__(cls, value="float32"):
        return super().__new__(cls, value if type(value) is DType else normalize_dtype(value))

    @property
    def bits(self) -> int:
        if self == "bool":
            return 8
        if self == "handle":
            return 64
        return int("".join(c for c in self.split("_")[0] if c.isdigit()))

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    def as_torch(self):
        """The torch dtype of the same name (``torch.float16`` for ``T.float16``); for a dtype
        narrower than a byte, the one its packed tensors have (``torch.int8`` for int4); for
    ``T.ptr``, ``torch.int64``."""
        import torch

        return getattr(torch, STORAGE.get(str(self), str(self)))

    def __call__(self, value=None):
        if value is None:
            return tirx.Var("v", str(self))
        if isinstance(value, (bool, int, float)):
            return tirx.const(value, str(self))
        return tirx.Cast(str(self), value)


def normalize_dtype(dtype) -> str:
    """The canonical name of ``dtype`` (a string, :class:`DType` or torch dtype).

    An unknown name raises a KernelError at the user's line listing close matches.
    """
    name = getattr(dtype, "dtype", None) if not isinstance(dtype, str) else dtype
    if name is None:
        name = str(dtype)
    name = str(name).removeprefix("torch.")
    name = _ALIASES.get(name, name)
    if name in _CANONICAL:
        return name
    close = difflib.get_close_matches(name, _CANONICAL, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise kernel_error(f"unknown dtype {name!r}{hint} (valid: {', '.join(_CANONICAL)})")


def storage_dtype(dtype: str) -> str:
    """The dtype a buffer of ``dtype`` holds its values in: int4 values one a byte in int8,
    pointers in int64."""
    return STORAGE.get(dtype, dtype)


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


DTYPES = {name: DType(name) for name in _CANONICAL + ALIAS_NAMES}
