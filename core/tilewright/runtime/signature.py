"""A compiled kernel's signature: parameter names, shapes, dtypes, outputs, and where each
shape symbol is read from.

Stored as JSON in cache entries and exported bundles (no pickle), and read back with
:meth:`KernelSignature.from_json`, which checks every field -- types, names, dtypes, ranges,
and that each shape expression parses in the grammar of :mod:`tilewright.runtime.expr` over
the kernel's own symbols -- so a tampered file is refused before anything uses it. Needs only
the standard library (``from_func``, which reads a TVM program, lives in
:mod:`tilewright.jit.signature`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .expr import ExprError, parse

DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "bfloat16", "float32", "float64",
                    "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn",
                    "handle"})  # handle: a T.ptr scalar parameter, an address
INDEX_DTYPES = ("int32", "int64")
PACKED_BITS = (0, 4)
# the dtype of a packed tensor's parameter (its values' holder in the kernel): (the torch
# dtype of the caller's packed tensor, the torch dtype of the tensor of one value a byte the
# compiled kernel takes, whether a value is signed). int4 is held in int8, float4_e2m1fn as its
# codes (uint8 at the call)
PACKED = {"int8": ("int8", "int8", True),
          "float4_e2m1fn": ("float4_e2m1fn_x2", "uint8", False)}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,255}$")
_MAX_PARAMS = 1024
_MAX_RANK = 16


class SignatureError(ValueError):
    """A signature read from a file is malformed; the message names the field."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple  # ints, symbol names, or expression strings over symbols
    dtype: str
    is_output: bool = False
    kind: str = "tensor"  # tensor | scalar
    # the byte alignment the generated code assumes of the tensor's data
    align: int = 64
    # the integer type the kernel indexes the tensor with (and holds its shape symbols in)
    index_dtype: str = "int32"
    # whether the kernel may write the tensor (False only when it provably only reads it)
    written: bool = True
    # whether the kernel provably writes every element of this output without reading it
    # first: the output is then allocated without a zero fill
    covered: bool = False
    # a tensor of values narrower than a byte (int4, float4_e2m1fn: 4), held one a byte in the
    # kernel (``dtype``: int8 for int4) and passed packed, ``8 // packed_bits`` values a byte
    # along the last dimension, low bits first (:data:`PACKED`); ``shape`` is the kernel's
    # (unpacked) shape; 0: not packed
    packed_bits: int = 0
    # a T.StridedTensor's strides, one an axis in elements (ints, symbol names, or expression
    # strings over symbols), which the argument's must be; () for a contiguous tensor, which
    # the kernel indexes row-major (a non-contiguous argument is passed as a copy). A packed
    # tensor's count its values: the last is 1, the others twice the packed tensor's
    strides: tuple = ()

    @property
    def host_dtype(self) -> str:
        """The torch dtype name of the tensor a caller passes or gets back."""
        return PACKED[self.dtype][0] if self.packed_bits else self.dtype

    @property
    def held_dtype(self) -> str:
        """The torch dtype name of the tensor the compiled kernel takes (one value a byte)."""
        return PACKED[self.dtype][1] if self.packed_bits else self.dtype

    @property
    def per_byte(self) -> int:
        """How many values one byte of the caller's tensor holds."""
        return 8 // self.packed_bits if self.packed_bits else 1

    @property
    def host_shape(self) -> tuple:
        """The shape of the tensor a caller passes: ``shape`` with the last dimension divided
        by :attr:`per_byte` for a packed tensor (static dimensions only; a symbolic one is
        written as the expression it is)."""
        if not self.packed_bits:
            return self.shape
        last = self.shape[-1]
        last = last // self.per_byte if isinstance(last, int) else f"({last}) // {self.per_byte}"
        return (*self.shape[:-1], last)

    @property
    def host_strides(self) -> tuple | None:
        """The strides of the tensor a caller passes, when a ``T.StridedTensor`` declares
        them all as constants (a packed tensor's counted in bytes); else None: a contiguous
        tensor, or strides that symbols give."""
        if not self.strides or not all(isinstance(s, int) for s in self.strides):
            return None
        if not self.packed_bits:
            return self.strides
        return (*(s // self.per_byte for s in self.strides[:-1]), self.strides[-1])


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[ParamSpec, ...]
    symbols: tuple[tuple[str, int, int], ...]  # (symbol, input position, dim)
    # T.assume conditions over the scalar parameters and shape symbols, checked at each call
    assumptions: tuple[str, ...] = ()
    # the symbols a T.StridedTensor's stride gives and no dimension does:
    # (symbol, input position, axis)
    stride_symbols: tuple[tuple[str, int, int], ...] = ()

    @property
    def inputs(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if not p.is_output)

    @property
    def outputs(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.is_output)

    @property
    def strided(self) -> bool:
        """Whether a parameter is a ``T.StridedTensor``."""
        return any(p.strides for p in self.params)

    def to_json(self) -> dict:
        data = asdict(self)
        # a kernel without T.assume or strided tensors keeps its description's bytes
        if not self.assumptions:
            del data["assumptions"]
        if not self.stride_symbols:
            del data["stride_symbols"]
        for param in data["params"]:
            if not param["strides"]:
                del param["strides"]
        return data

    @staticmethod
    def from_json(data) -> KernelSignature:
        """The signature ``data`` describes; :class:`SignatureError` if any field is wrong."""
        _expect(isinstance(data, dict), "the signature is not an object")
        name = data.get("name")
        _expect(isinstance(name, str) and _NAME.match(name), f"kernel name {name!r}")
        raw = data.get("params")
        _expect(isinstance(raw, list) and len(raw) <= _MAX_PARAMS, "params is not a list")
        params = tuple(_param(i, p) for i, p in enumerate(raw))
        names = [p.name for p in params]
        _expect(len(set(names)) == len(names), "parameter names repeat")
        symbols = data.get("symbols")
        _expect(isinstance(symbols, list), "symbols is not a list")
        inputs = [p for p in params if not p.is_output]
        checked = _symbol_sources(symbols, inputs, "shape", "dimension")
        strided = _symbol_sources(data.get("stride_symbols", []), inputs, "strides", "stride")
        # the whole-dimension and whole-stride symbols, and those solved from a dimension
        # linear in them
        known = {s for s, _, _ in checked + strided}
        known |= _solved(params, known)
        for p in params:
            for what, values in (("shape", p.shape), ("strides", p.strides)):
                for d in values:
                    if isinstance(d, str):
                        try:
                            parse(d, known)
                        except ExprError as exc:
                            raise SignatureError(f"{what} of {p.name!r}: {exc}") from None
        assumptions = data.get("assumptions", [])
        _expect(isinstance(assumptions, list) and len(assumptions) <= _MAX_PARAMS and
                all(isinstance(a, str) for a in assumptions), "assumptions")
        scalars = {p.name for p in params if p.kind == "scalar"}
        for text in assumptions:
            try:
                parse(text, known | scalars)
            except ExprError as exc:
                raise SignatureError(f"assumption {text!r}: {exc}") from None
        return KernelSignature(name, params, tuple(checked), tuple(assumptions),
                               tuple(strided))


def _symbol_sources(entries, inputs, field: str, item: str) -> list:
    """Checked ``(symbol, input position, axis)`` entries: the symbol is the whole ``field``
    entry (shape or strides) of that input at that axis."""
    _expect(isinstance(entries, list), f"the symbols of {field} are not a list")
    checked = []
    for entry in entries:
        _expect(isinstance(entry, list | tuple) and len(entry) == 3, f"symbol {entry!r}")
        sym, pos, axis = entry
        _expect(isinstance(sym, str) and sym.isidentifier(), f"symbol name {sym!r}")
        _expect(_is_int(pos) and 0 <= pos < len(inputs), f"symbol {sym!r}: input {pos!r}")
        values = getattr(inputs[pos], field)
        _expect(_is_int(axis) and 0 <= axis < len(values) and values[axis] == sym,
                f"symbol {sym!r}: {item} {axis!r}")
        checked.append((sym, pos, axis))
    return checked


def _solved(params, known: set) -> set:
    """The symbols read only inside an input's dimension expression (solved from it when
    the kernel is called; an output's shape gives no symbol)."""
    names = set()
    for p in params:
        if p.is_output:
            continue
        for d in p.shape:
            if isinstance(d, str) and not d.isidentifier():
                names.update(re.findall(r"[A-Za-z_]\w*", d))
    return names - known - {"min", "max", "truncdiv", "truncmod", "and", "or", "not", "if",
                            "else"}


def _expect(ok, what: str) -> None:
    if not ok:
        raise SignatureError(f"malformed signature: {what}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _param(index: int, p) -> ParamSpec:
    _expect(isinstance(p, dict), f"param {index} is not an object")
    name = p.get("name")
    _expect(isinstance(name, str) and _NAME.match(name), f"param {index} name {name!r}")
    kind = p.get("kind", "tensor")
    _expect(kind in ("tensor", "scalar"), f"param {name!r} kind {kind!r}")
    dtype = p.get("dtype")
    _expect(dtype in DTYPES, f"param {name!r} dtype {dtype!r}")
    shape = p.get("shape")
    _expect(isinstance(shape, list | tuple) and len(shape) <= _MAX_RANK and
            all(_is_int(d) and 0 <= d < 1 << 62 or isinstance(d, str) and len(d) <= 2000
                for d in shape), f"param {name!r} shape {shape!r}")
    _expect(kind == "tensor" or not shape, f"scalar param {name!r} has a shape")
    flags = {k: p.get(k, default) for k, default in
             (("is_output", False), ("written", True), ("covered", False))}
    for k, v in flags.items():
        _expect(isinstance(v, bool), f"param {name!r} {k} {v!r}")
    _expect(kind == "tensor" or not flags["is_output"], f"scalar param {name!r} is an output")
    _expect(flags["is_output"] or not flags["covered"], f"input {name!r} is marked covered")
    align = p.get("align", 64)
    _expect(_is_int(align) and 0 < align <= 4096 and align & (align - 1) == 0,
            f"param {name!r} align {align!r}")
    index_dtype = p.get("index_dtype", "int32")
    _expect(index_dtype in INDEX_DTYPES, f"param {name!r} index_dtype {index_dtype!r}")
    packed_bits = p.get("packed_bits", 0)
    _expect(packed_bits in PACKED_BITS and (not packed_bits or kind == "tensor" and shape and
                                            dtype in PACKED),
            f"param {name!r} packed_bits {packed_bits!r}")
    _expect(dtype != "float4_e2m1fn" or packed_bits, f"param {name!r} of dtype {dtype} is "
            "not packed")
    strides = p.get("strides", [])
    _expect(isinstance(strides, list | tuple) and (not strides or len(strides) == len(shape))
            and all(_is_int(d) and 0 <= d < 1 << 62 or isinstance(d, str) and len(d) <= 2000
                    for d in strides) and (not strides or not flags["is_output"]),
            f"param {name!r} strides {strides!r}")
    return ParamSpec(name, tuple(shape), dtype, flags["is_output"], kind, align, index_dtype,
                     flags["written"], flags["covered"], packed_bits, tuple(strides))


__all__ = ["DTYPES", "PACKED", "KernelSignature", "ParamSpec", "SignatureError"]
