"""Data types: ``T.float16`` and friends are strings that can also build constants."""

from __future__ import annotations

import difflib
import re
import struct
from dataclasses import dataclass

from tvm import tirx

from ..errors import kernel_error

_CANONICAL = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
    "float4_e2m1fn", "int4", "uint4", "handle",
)
# dtypes narrower than a byte: a tensor parameter of one is passed packed, 8 // bits values a
# byte along its last dimension (low bits first), as TileLang passes them: int4 in torch.int8,
# float4_e2m1fn in torch.float4_e2m1fn_x2. A kernel holds one value a byte: int4 values in
# int8 buffers (STORAGE), float4_e2m1fn values in float4_e2m1fn buffers that each backend holds
# one code a byte (uint8 at the call)
SUB_BYTE = ("int4", "float4_e2m1fn")
# the dtype a buffer of each dtype holds its values in: int4 values in int8; a tensor of
# pointers (``T.ptr``, TileLang's table of ``data_ptr()`` values) holds them as int64, as
# torch passes them
STORAGE = {"int4": "int8", "handle": "int64"}
# the torch dtype of a caller's tensor where it is not the dtype's own name
TORCH = {**STORAGE, "float4_e2m1fn": "float4_e2m1fn_x2"}
# "tfloat32" is float32 storage (TileLang multiplies it in TF32 on tensor cores; backends
# without TF32 multiply in float32, which is at least as precise)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
            "uint": "uint32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
            "tfloat32": "float32", "float8_e4m3": "float8_e4m3fn", "e4m3_float8": "float8_e4m3fn",
            "e5m2_float8": "float8_e5m2", "ptr": "handle",
            "float4_e2m1fn_x2": "float4_e2m1fn"}  # torch's name of packed float4 tensors
# Python spellings of TileLang's aliases: ``T.float``, ``T.half`` ...
ALIAS_NAMES = ("float", "half", "double", "int", "uint", "tfloat32", "float8_e4m3", "ptr")


# vector dtypes, TileLang's ``T.float32x2`` ...: ``<scalar>x<lanes>``, a value of ``lanes``
# elements held as one (a register pair, a 64- to 256-bit access), of these element dtypes and
# at most MAX_VECTOR_BITS in all (TileLang's widest access, T.ldg256)
_VECTOR = re.compile(r"(?P<scalar>[a-z0-9_]+?)x(?P<lanes>[0-9]+)")
VECTOR_LANES = ("float16", "bfloat16", "float32", "int8", "uint8", "int16", "uint16", "int32",
                "uint32")
VECTOR_WIDTHS = (2, 4, 8, 16, 32)
MAX_VECTOR_BITS = 256


def _vector_bits(scalar: str, lanes: int) -> int:
    """The bits of ``lanes`` values of the numeric dtype ``scalar`` (the digits of its name's
    first part: float8_e4m3fn is 8)."""
    return int("".join(c for c in scalar.split("_")[0] if c.isdigit())) * lanes


class DType(str):
    """A dtype name, as TileLang's ``T.dtype``: ``T.dtype(x)`` accepts a name, an alias
    (``"half"``) or a torch dtype and gives the canonical name; calling a dtype makes a
    constant or a cast (``T.float16(1.0)``); :meth:`as_torch` gives the torch dtype."""

    def __new__(cls, value="float32"):
        return super().__new__(cls, value if type(value) is DType else normalize_dtype(value))

    @property
    def bits(self) -> int:
        """Bits of one value (of one lane for a vector dtype, as TVM's ``DataType.bits``)."""
        if self == "bool":
            return 8
        if self == "handle":
            return 64
        return _vector_bits(self.scalar, 1)

    @property
    def lanes(self) -> int:
        """The number of values a value of the dtype holds (``T.float32x2``: 2)."""
        vector = _VECTOR.fullmatch(self)
        return int(vector["lanes"]) if vector else 1

    @property
    def scalar(self) -> str:
        """The dtype of one lane (``float32`` of ``float32x2``; the dtype itself otherwise)."""
        return self.rsplit("x", 1)[0] if self.lanes > 1 else str(self)

    @property
    def itemsize(self) -> int:
        """Bytes a value takes in a kernel's buffers (one for a dtype narrower than a byte)."""
        return max(1, self.bits // 8)

    def as_torch(self):
        """The torch dtype of the same name (``torch.float16`` for ``T.float16``); for a dtype
        narrower than a byte, the one its packed tensors have (``torch.int8`` for int4,
        ``torch.float4_e2m1fn_x2`` for float4_e2m1fn); for ``T.ptr``, ``torch.int64``."""
        import torch

        return getattr(torch, TORCH.get(str(self), str(self)))

    def __call__(self, value=None, *more):
        if self.lanes > 1 and value is not None:
            # a vector: T.float32x2(a, b) of its lanes' values, T.float32x2(x) of one repeated
            values = [value, *more]
            lanes = [tirx.const(v, self.scalar) if isinstance(v, (bool, int, float)) else
                     v if str(v.ty) == self.scalar else tirx.Cast(self.scalar, v)
                     for v in values]
            if len(values) == 1:
                return tirx.Broadcast(lanes[0], self.lanes)
            if len(values) != self.lanes:
                raise kernel_error(f"T.{self}(...) takes one value or {self.lanes} (one a "
                                   f"lane), got {len(values)}")
            return tirx.Shuffle(lanes, [tirx.const(k, "int32") for k in range(self.lanes)])
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
    vector = _VECTOR.fullmatch(name)
    if vector and vector["scalar"] in VECTOR_LANES and int(vector["lanes"]) in VECTOR_WIDTHS \
            and _vector_bits(vector["scalar"], int(vector["lanes"])) <= MAX_VECTOR_BITS:
        return name
    if vector:
        raise kernel_error(f"unknown dtype {name!r}: a vector dtype is <element>x<lanes> of "
                           f"{', '.join(VECTOR_LANES)} with {', '.join(map(str, VECTOR_WIDTHS))} "
                           f"lanes, {MAX_VECTOR_BITS} bits at most")
    close = difflib.get_close_matches(name, _CANONICAL, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise kernel_error(f"unknown dtype {name!r}{hint} (valid: {', '.join(_CANONICAL)})")


def storage_dtype(dtype: str) -> str:
    """The dtype a buffer of ``dtype`` holds its values in: int4 values one a byte in int8,
    pointers in int64."""
    return STORAGE.get(dtype, dtype)


@dataclass(frozen=True)
class FloatFormat:
    """A floating format narrower than 16 bits: ``sign | exponent (exp_bits) | mantissa
    (man_bits)``, ``bits`` in all. A conversion to it rounds to nearest, ties to even."""

    bits: int
    exp_bits: int
    man_bits: int
    saturate: bool  # no infinities: a magnitude above the largest finite value gives it
    max_code: int  # the largest finite magnitude's code (sign bit clear)
    # the magnitude code of NaN; None where the format has no NaN: NaN converts to the
    # positive largest finite value there (CUDA's __nv_cvt_float_to_fp4 and PTX's
    # cvt.rn.satfinite.e2m1x2 do so)
    nan_code: int | None

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)

    def value(self, code: int) -> float:
        """The value of ``code`` (NaN for the NaN codes, +-inf for the infinities)."""
        sign = -1.0 if code & self.sign_bit else 1.0
        mag = code & (self.sign_bit - 1)
        exponent, mantissa = mag >> self.man_bits, mag & ((1 << self.man_bits) - 1)
        if not self.saturate and exponent == (1 << self.exp_bits) - 1:  # IEEE-like
            return float("nan") if mantissa else sign * float("inf")
        if mag == self.nan_code:
            return float("nan")
        if exponent == 0:
            return sign * mantissa * 2.0 ** (1 - self.bias - self.man_bits)
        return sign * (1 + mantissa / (1 << self.man_bits)) * 2.0 ** (exponent - self.bias)

    @property
    def max_value(self) -> float:
        return self.value(self.max_code)


@dataclass(frozen=True)
class ScaleFormat:
    """An unsigned format of an exponent only, the OCP MX scale ``float8_e8m0fnu``: code ``c``
    is ``2 ** (c - bias)`` (code 0 is 2^-127: there is no zero, no sign, no infinity) and
    ``nan_code`` is NaN.

    A conversion to it is torch's (``c10::detail::fp8e8m0fnu_from_fp32_value``): float32's
    biased exponent field, the sign ignored, plus one where the mantissa bits it drops are
    above half, or exactly half under a normal float32's implicit one (a tie rounds up; under a
    subnormal's implicit zero it rounds down); NaN and +-inf give NaN, and so does an exponent
    that rounds past the largest code. TileLang's CUDA rounds up instead (``cudaRoundPosInf``);
    the language keeps torch's rule on every backend (:meth:`encode` is the reference)."""

    bits: int
    bias: int
    nan_code: int

    @property
    def max_code(self) -> int:
        return self.nan_code - 1

    def value(self, code: int) -> float:
        """The value of ``code`` (NaN for the NaN code)."""
        return float("nan") if code == self.nan_code else 2.0 ** (code - self.bias)

    @property
    def max_value(self) -> float:
        return self.value(self.max_code)

    def encode(self, x: float) -> int:
        """The code of the float32 value ``x`` (the rule above, on its float32 bits; a Python
        float beyond float32's range is its infinity: NaN)."""
        try:
            bits = struct.unpack("<I", struct.pack("<f", x))[0]
        except OverflowError:
            return self.nan_code
        exponent = (bits >> 23) & 0xFF
        if exponent == 0xFF:
            return self.nan_code
        guard, rest = (bits >> 22) & 1, bits & 0x3FFFFF
        return exponent + (guard and (rest != 0 or exponent > 0))


# the narrow floating formats, their facts in one place: the CPU backend's conversions (integer
# code) and the interpreter's rounding read them; CUDA's headers implement the same
FLOAT_FORMATS = {
    "float8_e4m3fn": FloatFormat(8, 4, 3, True, 0x7E, 0x7F),
    "float8_e5m2": FloatFormat(8, 5, 2, False, 0x7B, 0x7F),
    "float8_e8m0fnu": ScaleFormat(8, 127, 0xFF),
    "float4_e2m1fn": FloatFormat(4, 2, 1, True, 0x7, None),
}
# the formats without a sign: a conversion to one drops the sign, one from it is positive
UNSIGNED_FORMATS = frozenset(n for n, f in FLOAT_FORMATS.items() if isinstance(f, ScaleFormat))


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


# TileLang's vector dtype names (T.float32x2 ... T.uint8x64)
VECTOR_NAMES = tuple(f"{scalar}x{lanes}" for lanes in VECTOR_WIDTHS for scalar in VECTOR_LANES
                     if _vector_bits(scalar, lanes) <= MAX_VECTOR_BITS)
DTYPES = {name: DType(name) for name in _CANONICAL + ALIAS_NAMES + VECTOR_NAMES}
