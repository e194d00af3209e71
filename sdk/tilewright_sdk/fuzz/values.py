"""What the program builder's parts share: the dtypes drawn, their ranges and unit roundoffs,
and the expressions and tiles a program is made of."""

from __future__ import annotations

from dataclasses import dataclass

INT_DTYPES = ("int8", "int16", "int32", "uint8", "int64", "uint16", "uint32")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
LIMITS = {"int8": 127, "int16": 32767, "int32": 2**31 - 1, "int64": 2**63 - 1, "uint8": 255,
          "uint16": 2**16 - 1, "uint32": 2**32 - 1}
LOWEST = {"int8": -128, "int16": -32768, "int32": -2**31, "int64": -2**63, "uint8": 0,
          "uint16": 0, "uint32": 0}
ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
FLOAT_MAX = 1e4  # magnitudes stay far below float16's 65504


@dataclass(frozen=True)
class Expr:
    """Source text of a scalar expression at element ``[i, j]`` of a tile, the interval of its
    values, a bound of its absolute rounding error, and whether it is exact (the same bits on
    every correct backend: loads, constants, indices and what only selects among them)."""

    text: str
    lo: float
    hi: float
    err: float = 0.0
    exact: bool = True
    features: frozenset = frozenset()

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Tile:
    name: str
    kind: str  # "2d" (bm, bn), "row" (bm,) indexed by i, "col" (bn,) indexed by j, "scalar"
    lo: float
    hi: float
    err: float
    dtype: str

    def at(self) -> str:
        return {"2d": f"{self.name}[i, j]", "row": f"{self.name}[i]",
                "col": f"{self.name}[j]", "scalar": f"{self.name}[0]"}[self.kind]
