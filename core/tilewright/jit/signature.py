"""A compiled kernel's signature: parameter names, shapes, dtypes, outputs, and where each
shape symbol is read from. Stored as JSON next to cached kernels (no pickle)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tvm import tirx

from ..errors import ArgumentError, TilewrightError


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple  # ints, symbol names, or expression strings over symbols
    dtype: str
    is_output: bool = False
    kind: str = "tensor"  # tensor | scalar


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[ParamSpec, ...]
    symbols: tuple[tuple[str, int, int], ...]  # (symbol, input position, dim)

    @property
    def inputs(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if not p.is_output)

    @property
    def outputs(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.is_output)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> KernelSignature:
        params = tuple(ParamSpec(p["name"], tuple(p["shape"]), p["dtype"], p["is_output"],
                                 p["kind"]) for p in data["params"])
        return KernelSignature(data["name"], params, tuple(tuple(s) for s in data["symbols"]))

    @staticmethod
    def from_func(func: tirx.PrimFunc, out_idx) -> KernelSignature:
        n = len(func.params)
        outputs = set()
        for i in out_idx or ():
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise TilewrightError(f"out_idx {i} is out of range for {n} parameters")
            outputs.add(j)
        params = []
        for i, p in enumerate(func.params):
            if tirx.buffer.is_buffer_var(p):  # `tirx.Buffer` is an alias of every Var
                shape = tuple(_dim(s) for s in p.shape)
                params.append(ParamSpec(str(p.name), shape, str(p.dtype), i in outputs))
            else:
                if i in outputs:
                    raise TilewrightError(f"out_idx names scalar parameter {p.name!r}")
                params.append(ParamSpec(str(p.name), (), str(p.ty), False, "scalar"))
        _check_symbols_readable(func)
        symbols, seen = [], set()
        inputs = [p for p in params if not p.is_output]
        for pos, p in enumerate(inputs):
            for dim, s in enumerate(p.shape):
                if isinstance(s, str) and s.isidentifier() and s not in seen:
                    seen.add(s)
                    symbols.append((s, pos, dim))
        name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
            else "main"
        return KernelSignature(name, tuple(params), tuple(symbols))


def _dim(extent):
    if isinstance(extent, tirx.IntImm):
        return int(extent.value)
    if isinstance(extent, tirx.Var):
        return str(extent.name)
    return str(extent)


def _check_symbols_readable(func: tirx.PrimFunc) -> None:
    """Every shape symbol must be a whole dimension of some parameter, else no argument gives
    its value: a TypeError naming the symbol, as for a symbol used only by outputs."""
    import tvm_ffi

    whole = {str(p.name) for p in func.params if not tirx.buffer.is_buffer_var(p)}
    for p in func.params:
        if tirx.buffer.is_buffer_var(p):
            whole.update(str(s.name) for s in p.shape if isinstance(s, tirx.Var))
    for p in func.params:
        if not tirx.buffer.is_buffer_var(p):
            continue
        for extent in p.shape:
            used: list = []
            tvm_ffi.structural_walk(extent, (tirx.Var, used.append))
            for name in (str(v.name) for v in used):
                if name not in whole:
                    raise ArgumentError(
                        f"the shape of {str(p.name)!r} is {_shape_text(p.shape)}: symbol "
                        f"{name!r} is never a whole dimension of a parameter, so no argument "
                        f"gives its value; add a parameter with {name!r} as one of its "
                        "dimensions")


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(_dim(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"
