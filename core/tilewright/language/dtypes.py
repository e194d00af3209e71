"""Data types: ``T.float16`` and friends are strings that can also build constants."""

from __future__ import annotations

import difflib

from tvm import tirx

from ..errors import kernel_error

_CANONICAL = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
            "bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "e4m3_float8":
            "float8_e4m3fn", "e5m2_float8": "float8_e5m2"}


class DType(str):
    """A dtype name; calling it makes a constant or a cast: ``T.float16(1.0)``."""

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


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


DTYPES = {name: DType(name) for name in _CANONICAL}
