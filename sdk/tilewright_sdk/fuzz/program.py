"""Random valid tile programs over the portable language, as Hypothesis strategies.

A :class:`Program` is a kernel written out as Python source: input tiles loaded with ``T.copy``,
then a few statements (element-wise maps inside ``T.Parallel``, or two nested ones, into
fragments or shared tiles, with index expressions whose intermediate values go negative, maps
guarded by an ``if`` or split by ``if``/``else``, casts through narrower or wider integers and
between integers and floats, reductions of every kind with float32, same-dtype or narrower
accumulators and ``clear=False``, cumulative sums both ways, sums over a run-time ``while`` loop
and over a ``T.Pipelined`` loop loading a shared tile, per-thread ``T.alloc_local`` scalars,
``T.gemm`` of two tiles with either transposed into a float32 or int32 accumulator that is
cleared, filled and accumulated into twice, or discarded by ``clear_accum``, ``T.copy`` of a
tile or of a window of it at an offset into another at another offset, between fragments and
shared tiles, ``T.gemm`` carried by a ``T.Pipelined`` loop of 1 to 3 stages, a Python variable
rebound to a second tile, float16/bfloat16 reductions into the other format, block code
updating a shared, per-thread or global scalar from itself outside ``T.Parallel``, once or in a
``T.serial`` loop, atomics (:mod:`.atomics`: a tile from every block added, maxed, minned or, of
integers, or-ed, and-ed or xor-ed into one output tile, whole or element by element, with or
without a ``memory_order``; atomics returning the previous value in block code, thread-level
code and ``T.Parallel``, named, written inside an expression or left unused, and tickets;
``T.atomic_load`` of inputs and of such an element, ``T.atomic_store`` of the result),
vector values (:mod:`.vectors`: ``T.float32x2(a, b)``, ``T.int8x4(...)`` ..., combined lane by
lane, stored into a slice of a tile or read back with ``T.extract_lane``)), math (``exp``,
``exp2``,
``log``, ``sqrt``, ``rsqrt``, ``sin``, ``cos``, ``sigmoid``, ``tanh``, ``clamp``, ``erf``, ``atan``,
``asinh`` (backend feature ``extended_math``), and ``floor``,
``ceil``, ``round``, ``trunc`` and ``fmod`` of exact values), values rounded through ``float16`` or
``bfloat16`` (integers through them exactly), and the result
copied back, or stored element by element under a bounds guard (reading inputs straight from
global memory too). Integers are signed (8 to 64 bits) or unsigned (8 to 32 bits; cast through
the other signedness, wrapping below zero; sums, differences and products wrapping modulo
``2**bits``; negated, ``~``, ``T.popcount`` / ``T.clz``, ``&``, ``|`` and ``^`` of either sign,
floor divisions by a divisor of either sign, constant or computed, and ``T.truncdiv`` /
``T.truncmod``), 4-bit fields of them are read with ``T.unpack``, signed programs may take an
``int4`` input (passed packed) and float programs a ``float8_e4m3fn`` or ``float8_e5m2`` input
(loaded into a float8 fragment read through a cast, or converted by ``T.copy``); tiles are 1 to
16 rows by 1 to 64 columns (32 and 64: several contiguous elements a thread); floats and
integers are converted to float8 and back (``float8_e4m3fn`` saturating at 448) and float8
fragments are read back through a cast. Tensors may be 3-D (``(depth, M, N)`` over a third grid
axis ``bz``, loaded as 2-D tiles or through a 3-D shared tile at a 3-D offset), and, for
backends with ``dynamic_shapes``, ``M`` and ``N`` may be sizes read from the arguments
(``T.symbolic``/``T.dynamic``). Every expression carries an interval of its values and a bound
of its rounding error, so the generator only writes what is defined (no overflow, no division by
zero, no NaN) and the checker knows how far a correct backend may be from the interpreter;
an output never depends on the order in which blocks, threads and iterations run (see
:mod:`.atomics` for how atomics keep to it).

Features (``floordiv``, ``negative_floordiv``, ``shift``, ``reduce_max`` ...) are recorded per
program for the statistics and can be avoided (:func:`programs`), which is how the fuzzer stays
clear of bugs the conformance suite already knows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from hypothesis import strategies as st

from .atomics import AtomicDraws
from .values import (
    FLOAT_DTYPES,
    FLOAT_MAX,
    INT_DTYPES,
    LIMITS,
    LOWEST,
    ROUNDOFF,
    Expr,
    Tile,
)
from .vectors import VectorDraws

_NARROW_INTS = ("int8", "uint8", "int16", "uint16")  # what a cast may wrap into
_OTHER_SIGN = {"int8": "uint8", "uint8": "int8", "int16": "uint16", "uint16": "int16",
               "int32": "uint32", "uint32": "int32"}
# float8: (unit roundoff, half the spacing of its subnormals, largest finite value, whether a
# larger value saturates to it (float8_e4m3fn, as torch and the interpreter convert) rather
# than overflowing to infinity)
FLOAT8 = {"float8_e4m3fn": (2.0 ** -4, 2.0 ** -10, 448.0, True),
          "float8_e5m2": (2.0 ** -3, 2.0 ** -17, 57344.0, False)}
REDUCE_KINDS = ("sum", "max", "min", "abssum", "absmax", "bitand", "bitor", "bitxor")
BITWISE_REDUCE_KINDS = ("bitand", "bitor", "bitxor")  # of integer programs only
SCAN_KINDS = ("sum", "max")
UNARY_MATH = ("exp2", "log", "rsqrt", "sin", "cos", "round", "ceil", "trunc")
# libm functions of slope at most 1 (backend feature extended_math: not drawn for a backend
# without it)
LIBM_MATH = ("erf", "atan", "asinh")
# integer operations (op drawn -> its feature), drawn since 2026-12-06
INT_OPS = {"neg": "int_neg", "not": "bitwise_not", "popcount": "bit_count",
           "clz": "bit_count", "truncdiv": "truncdiv", "truncmod": "truncdiv"}
# the tile ops of the atomics drawn: a backend that lacks one gets none of it
ATOMIC_OPS = ("atomic_add", "atomic_max", "atomic_min", "atomic_or", "atomic_and",
              "atomic_xor", "atomic_load", "atomic_store")


@dataclass
class Program:
    """A generated kernel: its source, the input value ranges and the output tolerances."""

    dtype: str
    M: int
    N: int
    bm: int
    bn: int
    inputs: list  # (name, low, high)
    outputs: list  # (name, shape, dtype, atol)
    body: list = field(default_factory=list)
    features: set = field(default_factory=set)
    depth: int = 0  # the inputs' and Y's leading dimension (a third grid axis bz), 0: none
    dynamic: tuple = ()  # which of "M", "N" are sizes read from the arguments
    packed: list = field(default_factory=list)  # (name, low, high) of the int4 inputs
    float8: list = field(default_factory=list)  # (name, dtype, low, high) of float8 inputs

    @property
    def packed_shape(self) -> tuple:
        """The shape of an int4 input: its last dimension rounded up to whole bytes."""
        return (*self.shape[:-1], self.N + self.N % 2)

    @property
    def shape(self) -> tuple:
        """The shape of the inputs and of ``Y``."""
        return (self.depth, self.M, self.N) if self.depth else (self.M, self.N)

    def input_specs(self) -> list:
        """(name, shape, dtype, low, high) of each input, in parameter order."""
        return [(n, self.shape, self.dtype, lo, hi) for n, lo, hi in self.inputs] + \
            [(n, self.packed_shape, "int4", lo, hi) for n, lo, hi in self.packed] + \
            [(n, self.shape, dtype, lo, hi) for n, dtype, lo, hi in self.float8]

    def kernel_source(self) -> str:
        sizes = {"M": 'T.symbolic("m")', "N": 'T.dynamic("n")'}
        dims = [str(self.depth)] if self.depth else []
        dims += [d if d in self.dynamic else str(getattr(self, d)) for d in ("M", "N")]
        shape = f"({', '.join(dims)})"
        params = [f"{n}: T.Tensor({shape}, {self.dtype!r})" for n, _, _ in self.inputs]
        int4 = f"({', '.join([*dims[:-1], str(self.packed_shape[-1])])})"
        params += [f"{n}: T.Tensor({int4}, 'int4')" for n, _, _ in self.packed]
        params += [f"{n}: T.Tensor({shape}, {dtype!r})" for n, dtype, _, _ in self.float8]
        params += [f"{n}: T.Tensor({shape if n == 'Y' else out_shape}, {dtype!r})"
                   for n, out_shape, dtype, _ in self.outputs]
        grid = [grid_extent(d, getattr(self, d), b, d in self.dynamic)
                for d, b in (("N", self.bn), ("M", self.bm))]
        axes = "bx, by"
        if self.depth:
            grid.append(str(self.depth))
            axes += ", bz"
        lines = [f"{d} = {sizes[d]}" for d in self.dynamic]
        lines += ["", ""] if lines else []
        lines += ["@T.prim_func", f"def fuzz({', '.join(params)}):",
                  f"    with T.Kernel({', '.join(grid)}, threads=128) as ({axes}):"]
        lines += ["        " + line for line in self.body]
        return "\n".join(lines) + "\n"


def grid_extent(name: str, size: int, block: int, dynamic: bool) -> str:
    """The number of blocks over a dimension: a constant, or ``T.ceildiv`` of a size read
    from the arguments."""
    return f"T.ceildiv({name}, {block})" if dynamic else str(math.ceil(size / block))


class _Builder(AtomicDraws, VectorDraws):
    """The state of one program being drawn."""

    def __init__(self, draw, dtype, M, N, bm, bn, avoid, wide, declared, depth=0,
                 dynamic=(), op_dtypes=None, wide_vectors=True):
        self.draw, self.dtype = draw, dtype
        self.declared = declared
        self.op_dtypes = op_dtypes or {}  # op -> the dtypes the backend takes it for
        self.wide_vectors = wide_vectors  # vectors wider than 128 bits
        self.M, self.N, self.bm, self.bn = M, N, bm, bn
        self.depth = depth
        self.z = "bz, " if depth else ""  # a global index's leading part
        # the sizes as the kernel spells them: a constant or a name read from the arguments
        self.Mt = "M" if "M" in dynamic else str(M)
        self.Nt = "N" if "N" in dynamic else str(N)
        self.avoid = frozenset(avoid)
        self.wide = wide  # a declared dtype integers round-trip through, or None
        self.floating = dtype in FLOAT_DTYPES
        self.unsigned = dtype.startswith("uint")
        self.limit = FLOAT_MAX if self.floating else LIMITS[dtype]
        self.u = ROUNDOFF.get(dtype, 0.0)
        self.tiles: list[Tile] = []
        self.body: list[str] = []
        self.outputs: list = []
        self.features: set = set()
        self.count = 0
        self.globals: list = []  # (name, low, high) of the inputs, read directly when storing
        self.inputs: list = []  # (name, low, high) of every input

    # -- helpers -----------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def squares(self) -> list:
        """The 2-D tiles of the program's dtype (a float8 tile is only read through a
        cast)."""
        return [t for t in self.tiles if t.kind == "2d" and t.dtype == self.dtype]

    def float8(self, a: Expr) -> tuple | None:
        """A float8 dtype ``a`` may be converted to, the interval of the result and a bound
        of its error; None when there is none or the result could overflow. A value off the
        float8 grid rounds to nearest; a computed one could round to either neighbour."""
        kinds = [f for f in FLOAT8 if f in self.declared]
        if not kinds or not self.allowed("float8_cast"):
            return None
        to = self.draw(st.sampled_from(kinds))
        u, sub, top, saturates = FLOAT8[to]
        lo, hi = a.lo - u * abs(a.lo) - sub, a.hi + u * abs(a.hi) + sub
        if not saturates and max(abs(lo), abs(hi)) >= top:
            return None
        lo, hi = max(lo, -top), min(hi, top)
        return to, lo, hi, a.err + 2 * (u * a.mag + sub)

    def deep(self, shape: tuple) -> tuple:
        """The shape of an output each block writes its own part of: one more leading
        dimension, indexed by ``bz``, when the program has a depth."""
        return (self.depth, *shape) if self.depth else shape

    def fits(self, lo, hi) -> bool:
        low = 0 if self.unsigned else -self.limit
        return low <= lo and hi <= self.limit

    def allowed(self, *features) -> bool:
        return not (set(features) & self.avoid)

    def takes(self, op: str, dtype: str) -> bool:
        """Whether the backend takes tile op ``op`` for ``dtype`` (its ``op_dtypes``)."""
        return dtype in self.op_dtypes.get(op, (dtype,))

    def const(self, value) -> Expr:
        """A constant of the program's dtype (``T.float16(0.5)``): an untyped Python number
        would make an int32 or float32 expression where no operand gives it a dtype."""
        return Expr(f"T.{self.dtype}({value!r})", value, value)

    def rounded(self, text, lo, hi, err, a, b=None, features=()) -> Expr:
        """A float result: one more rounding of the result's magnitude."""
        feats = a.features | (b.features if b is not None else frozenset()) | set(features)
        mag = max(abs(lo), abs(hi))
        return Expr(text, lo, hi, err + self.u * mag, False, frozenset(feats))

    # -- leaves ------------------------------------------------------------------------------
    def leaf(self) -> Expr:
        choices = ["tile", "tile", "const", "index"]
        if any(t.kind == "2d" for t in self.tiles):
            choices.append("rotate")
        if self.globals:
            choices += ["global", "global"]
        if self.allowed("unpack"):
            choices.append("unpack")
        kind = self.draw(st.sampled_from(choices))
        if kind == "global":
            return self.global_load()
        if kind == "unpack":
            return self.unpack()
        if kind == "const":
            if self.floating:
                return self.const(self.draw(st.sampled_from((0.5, 1.5, -2.0, 3.0, -0.25))))
            low = 0 if self.unsigned else -7
            return self.const(self.draw(st.integers(low, 7)))
        if kind == "index":
            return self.index()
        if kind == "rotate":
            return self.rotate()
        tile = self.draw(st.sampled_from(self.tiles))
        feats = frozenset({f"{tile.kind}_operand"} if tile.kind != "2d" else ())
        if tile.dtype in FLOAT8 and self.floating:  # every float8 value converts exactly
            return Expr(f"T.cast({tile.at()}, {self.dtype!r})", tile.lo, tile.hi, tile.err,
                        tile.err == 0, feats | {"cast"})
        if tile.dtype != self.dtype:  # a float32 accumulator read in the program's dtype
            err = tile.err + self.u * max(abs(tile.lo), abs(tile.hi))
            return Expr(f"T.cast({tile.at()}, {self.dtype!r})", tile.lo, tile.hi, err, False,
                        feats | {"cast"})
        return Expr(tile.at(), tile.lo, tile.hi, tile.err, tile.err == 0, feats)

    def unpack(self) -> Expr:
        """A 4-bit field (``T.unpack``) of an integer: of a loaded value of an integer program
        (a negative one's high fields are its sign bits), or of an element's flat index cast
        to an integer dtype; field ``k`` or ``j % fields``, unsigned or sign-extended, read in
        the program's dtype."""
        if self.floating:
            ints = [d for d in ("int8", "uint8", "int16", "int32") if d in self.declared]
            if not ints:
                return self.index()
            width = self.draw(st.sampled_from(ints))
            source = f"T.cast(i * {self.bn} + j, {width!r})"
        else:
            width, source = self.dtype, self.leaf().text
        fields = int(width.lstrip("uint")) // 4
        index = str(self.draw(st.integers(0, fields - 1))) if self.draw(st.booleans()) else \
            f"j % {fields}"
        signed = not self.unsigned and self.draw(st.booleans())
        lo, hi = (-8, 7) if signed else (0, 15)
        text = f"T.unpack({source}, {index}, 4{', signed=True' if signed else ''})"
        return Expr(f"T.cast({text}, {self.dtype!r})", lo, hi,
                    features=frozenset({"unpack"} | ({"unpack_signed"} if signed else set())))

    def index(self) -> Expr:
        """A global row or column index, shifted below zero unless the dtype is unsigned."""
        row = self.draw(st.booleans())
        base, size, extent = ("by", self.bm, self.M) if row else ("bx", self.bn, self.N)
        var = "i" if row else "j"
        top = math.ceil(extent / size) * size - 1
        shift = 0 if self.unsigned else self.draw(st.integers(0, 9))
        text = f"{base} * {size} + {var}" + (f" - {shift}" if shift else "")
        cast = f"T.cast({text}, {self.dtype!r})"
        return Expr(cast, -shift, top - shift, features=frozenset({"index_value"}))

    def global_load(self) -> Expr:
        """An input element read from global memory at this element or, under the store's
        bounds guard, at the column ``(c - s) % N`` (negative intermediate values)."""
        name, lo, hi = self.draw(st.sampled_from(self.globals))
        row, col = f"by * {self.bm} + i", f"bx * {self.bn} + j"
        feats = {"global_load"}
        if self.allowed("negative_floordiv", "global_rotated_index") and \
                self.draw(st.booleans()):
            s = self.draw(st.integers(1, 5))
            col = f"({col} - {s}) % {self.Nt}"
            feats |= {"floordiv", "negative_floordiv", "rotated_index", "global_rotated_index"}
        element = self.atomic_load(f"{name}[{self.z}{row}, {col}]")
        return Expr(element, lo, hi, features=frozenset(feats))

    def rotate(self) -> Expr:
        """An element of a loaded tile at a rotated position: ``(i - s) % bm`` has negative
        intermediate values."""
        tile = self.draw(st.sampled_from(self.squares()))
        negative = self.allowed("negative_floordiv") and self.draw(st.booleans())
        if self.draw(st.booleans()):
            s = self.draw(st.integers(1, max(1, self.bm - 1)))
            index = f"(i - {s}) % {self.bm}, j" if negative else f"(i + {s}) % {self.bm}, j"
        else:
            s = self.draw(st.integers(1, max(1, self.bn - 1)))
            index = f"i, (j - {s}) % {self.bn}" if negative else f"i, (j + {s}) % {self.bn}"
        feats = {"rotated_index", "floordiv"} | ({"negative_floordiv"} if negative else set())
        return Expr(f"{tile.name}[{index}]", tile.lo, tile.hi, tile.err, tile.err == 0,
                    frozenset(feats))

    # -- expressions ---------------------------------------------------------------------------
    def expr(self, depth: int) -> Expr:
        if depth <= 0 or self.draw(st.integers(0, 3)) == 0:
            return self.leaf()
        return self.float_op(depth) if self.floating else self.int_op(depth)

    def int_op(self, depth: int) -> Expr:
        a = self.expr(depth - 1)
        op = self.draw(st.sampled_from(("+", "-", "*", "//", "%", ">>", "<<", "&", "|", "^",
                                        "max", "min", "abs", "select", "cast") +
                                       (("clamp",) if self.allowed("clamp") else ()) +
                                       (("lanes",) if self.lanes() else ()) +
                                       tuple(op for op, feature in INT_OPS.items()
                                             if self.allowed(feature))))
        feats = a.features | {op_name(op)}
        if op == "clamp":
            return self.clamp(a, feats)
        if op in INT_OPS:
            return self.int_unary(op, a, depth, feats)
        if op == "lanes":
            return self.lane_expr(a, depth, feats)
        if op in ("//", "%"):
            return self.division(a, op, depth)
        if op == ">>":
            k = self.draw(st.integers(0, 3))
            return Expr(f"({a.text} >> T.{self.dtype}({k}))", math.floor(a.lo / 2 ** k),
                        math.floor(a.hi / 2 ** k), features=frozenset(feats |
                                                                      {"shift"}))
        if op == "<<":
            k = self.draw(st.integers(0, 3))
            if a.lo < 0 or not self.fits(a.lo * 2 ** k, a.hi * 2 ** k):
                return a
            return Expr(f"({a.text} << T.{self.dtype}({k}))", a.lo * 2 ** k, a.hi * 2 ** k,
                        features=frozenset(feats | {"shift"}))
        if op == "abs":
            if self.unsigned or not self.fits(0, a.mag):
                return a
            lo = 0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
            return Expr(f"T.abs({a.text})", lo, a.mag, features=frozenset(feats))
        if op == "cast":
            return self.int_cast(a, feats)
        b = self.expr(depth - 1)
        feats |= b.features
        if op == "select":
            return self.select(a, b, feats)
        if op in ("&", "|", "^"):
            if (a.lo < 0 or b.lo < 0) and self.allowed("bitwise_negative"):
                # two's complement: operands in [-2**k, 2**k) give a result there too
                bound = 1 << max(int(abs(v)).bit_length() for v in (a.lo, a.hi, b.lo, b.hi))
                if not self.fits(-bound, bound - 1):
                    return a
                return Expr(f"({a.text} {op} {b.text})", -bound, bound - 1,
                            features=frozenset(feats | {"bitwise_negative"}))
            if a.lo < 0 or b.lo < 0:
                return a
            bits = max(int(a.hi), int(b.hi), 1).bit_length()
            hi = 2 ** bits - 1 if op != "&" else min(a.hi, b.hi)
            if not self.fits(0, hi):
                return a
            return Expr(f"({a.text} {op} {b.text})", 0, hi, features=frozenset(feats))
        if op in ("max", "min"):
            lo, hi = (max(a.lo, b.lo), max(a.hi, b.hi)) if op == "max" else \
                (min(a.lo, b.lo), min(a.hi, b.hi))
            return Expr(f"T.{op}({a.text}, {b.text})", lo, hi, features=frozenset(feats))
        corners = {"+": (a.lo + b.lo, a.hi + b.hi), "-": (a.lo - b.hi, a.hi - b.lo),
                   "*": tuple(sorted((a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)))}
        c = corners[op]
        lo, hi = min(c), max(c)
        text = f"({a.text} {op} {b.text})"
        if not self.fits(lo, hi):
            return self.wrapped(text, lo, hi, feats) or a
        return Expr(text, lo, hi, features=frozenset(feats))

    def int_unary(self, op: str, a: Expr, depth: int, feats) -> Expr:
        """``-a`` (an unsigned one wrapping), ``~a``, ``T.popcount`` / ``T.clz`` of a 32- or
        64-bit integer (a negative one's two's-complement bits), or ``T.truncdiv`` /
        ``T.truncmod`` (C's ``/`` and ``%``, rounding towards zero) of operands of either
        sign."""
        feats = frozenset(feats | {INT_OPS[op]})
        if op == "neg":
            text = f"(-{a.text})"
            if self.fits(-a.hi, -a.lo):
                return Expr(text, -a.hi, -a.lo, features=feats)
            return self.wrapped(text, -a.hi, -a.lo, feats) or a
        if op == "not":  # -a - 1, or 2**bits - 1 - a of an unsigned a
            lo, hi = (self.limit - a.hi, self.limit - a.lo) if self.unsigned else \
                (-a.hi - 1, -a.lo - 1)
            return Expr(f"(~{a.text})", lo, hi, features=feats)
        if op in ("popcount", "clz"):  # of a narrower integer widened to int32 (its sign)
            if self.dtype in ("int32", "uint32", "int64"):
                return Expr(f"T.{op}({a.text})", 0, int(self.dtype.lstrip("uint")),
                            features=feats)
            if "int32" not in self.declared:
                return a
            return Expr(f"T.cast(T.{op}(T.cast({a.text}, 'int32')), {self.dtype!r})", 0, 32,
                        features=feats | {"cast"})
        if self.draw(st.booleans()) or depth <= 1:  # truncdiv, truncmod
            low = 1 if self.unsigned else -7
            d = self.draw(st.integers(low, 7).filter(lambda v: v != 0))
            dtext, dmag = f"T.{self.dtype}({d})", abs(d)
        else:
            e = self.expr(depth - 2)
            if self.unsigned or not self.fits(-e.mag - 1, e.mag + 1):
                return a
            sign = self.draw(st.sampled_from(("", "-")))
            dtext, dmag = f"({sign}T.abs({e.text}) {sign or '+'} T.{self.dtype}(1))", e.mag + 1
            feats |= e.features
        if op == "truncdiv":  # |a / d| <= |a|, the sign of a * d
            if not self.fits(-a.mag, a.mag) and not self.unsigned:
                return a  # the lowest value divided by -1 overflows
            lo, hi = (0 if self.unsigned else -a.mag), a.mag
        else:  # the sign of a, less than |d| in magnitude
            lo, hi = (-(dmag - 1) if a.lo < 0 else 0), (dmag - 1 if a.hi > 0 else 0)
        return Expr(f"T.{op}({a.text}, {dtext})", lo, hi, features=feats)

    def wrapped(self, text: str, lo: int, hi: int, feats) -> Expr | None:
        """An unsigned sum, difference or product whose exact value ``[lo, hi]`` may leave the
        dtype's range, reduced modulo ``2**bits`` as torch and every backend compute it: the
        interval reduced when it lies within one period, else the whole range; None for a
        signed dtype (overflow is undefined there)."""
        if not self.unsigned or not self.allowed("unsigned_wrap_arith"):
            return None
        size = self.limit + 1
        lo, hi = (lo % size, hi % size) if lo // size == hi // size else (0, self.limit)
        return Expr(text, lo, hi, features=frozenset(feats | {"unsigned_wrap_arith"}))

    def int_cast(self, a: Expr, feats) -> Expr:
        """A cast of an integer and back: through a wider integer dtype, through a narrower
        one (which wraps a value outside its range modulo its size, as C and torch do), or
        through float32 (exact below 2**24)."""
        low = LOWEST[self.dtype]
        kinds = ["wide"] if self.wide is not None else []
        narrow = [n for n in _NARROW_INTS if n in self.declared and
                  LIMITS[n] < self.limit and low <= LOWEST[n]]
        if narrow and self.allowed("narrow_cast"):
            kinds.append("narrow")
        if "float32" in self.declared and self.allowed("int_float_cast") and a.mag < 2 ** 24:
            kinds.append("float")
        if a.mag < 2 ** 24 and any(f in self.declared for f in FLOAT8) and \
                self.allowed("float8_cast"):
            kinds.append("float8")
        # float16 holds every integer up to 2**11, bfloat16 up to 2**8
        halves = [h for h, top in (("float16", 2 ** 11), ("bfloat16", 2 ** 8))
                  if h in self.declared and a.mag <= top and self.allowed("half_cast")]
        kinds += ["half"] if halves else []
        other = _OTHER_SIGN.get(self.dtype)
        if other in self.declared and self.allowed("sign_cast"):
            kinds += ["sign", "sign"]  # wrapping only where a value crosses zero: drawn more
        if not kinds:
            return a
        kind = self.draw(st.sampled_from(kinds))
        if kind == "sign":
            return self.sign_cast(a, other, feats)
        if kind == "half":
            to = self.draw(st.sampled_from(halves))
            return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", a.lo, a.hi,
                        features=frozenset(feats | {"cast", "half_cast", f"cast_{to}"}))
        if kind == "float8":  # an integer rounds to the float8 grid, the same on every backend
            f8 = self.float8(a)
            if f8 is None or not self.fits(math.floor(f8[1]), math.ceil(f8[2])):
                return a
            to, lo, hi, _ = f8
            return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", math.floor(lo),
                        math.ceil(hi), features=frozenset(feats | {"cast", "float8_cast",
                                                                    f"cast_{to}"}))
        if kind == "wide":
            return Expr(f"T.cast(T.cast({a.text}, {self.wide!r}), {self.dtype!r})", a.lo,
                        a.hi, features=frozenset(feats | {"cast"}))
        if kind == "float":
            return Expr(f"T.cast(T.cast({a.text}, 'float32'), {self.dtype!r})", a.lo, a.hi,
                        features=frozenset(feats | {"cast", "int_float_cast"}))
        to = self.draw(st.sampled_from(narrow))
        inside = LOWEST[to] <= a.lo and a.hi <= LIMITS[to]
        lo, hi = (a.lo, a.hi) if inside else (LOWEST[to], LIMITS[to])
        extra = {"cast", "narrow_cast"} | (set() if inside else {"narrow_cast_wrap"})
        return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", lo, hi,
                    features=frozenset(feats | extra))

    def sign_cast(self, a: Expr, other: str, feats) -> Expr:
        """Through the integer dtype of the same width and the other signedness: a signed
        value cast to unsigned (wrapping a negative one modulo 2**bits), ``k`` subtracted
        there (wrapping below zero), and cast back, which is ``a - k``; an unsigned value that
        the signed dtype holds cast there and back."""
        feats = frozenset(feats | {"cast", "sign_cast"})
        if self.unsigned:
            if a.hi > LIMITS[other]:
                return a
            return Expr(f"T.cast(T.cast({a.text}, {other!r}), {self.dtype!r})", a.lo, a.hi,
                        features=feats)
        k = self.draw(st.integers(0, 9))
        if not self.fits(a.lo - k, a.hi - k):
            return a
        wraps = a.lo - k < 0
        return Expr(f"T.cast(T.cast({a.text}, {other!r}) - T.{other}({k}), {self.dtype!r})",
                    a.lo - k, a.hi - k, features=feats | ({"unsigned_wrap"} if wraps else set()))

    def division(self, a: Expr, op: str, depth: int) -> Expr:
        """``a // d`` or ``a % d`` with a divisor that is never zero: a constant of either
        sign or ``T.abs(e) + 1``."""
        negative_ok = self.allowed("negative_floordiv")
        if self.draw(st.booleans()) or depth <= 1:
            low = 1 if self.unsigned or not negative_ok else -7
            d = self.draw(st.integers(low, 7).filter(lambda v: v != 0))
            dlo = dhi = d
            dtext = f"T.{self.dtype}({d})"  # typed: a bare int may make the result int32
        else:
            e = self.expr(depth - 2)
            if self.unsigned or not self.fits(0, e.mag + 1):
                return a
            dtext, dlo, dhi = f"(T.abs({e.text}) + T.{self.dtype}(1))", 1, e.mag + 1
            if self.allowed("negative_divisor") and self.draw(st.booleans()):
                dtext, dlo, dhi = f"(-T.abs({e.text}) - T.{self.dtype}(1))", -e.mag - 1, -1
                a = Expr(a.text, a.lo, a.hi, features=a.features | {"negative_divisor"})
            a = Expr(a.text, a.lo, a.hi, features=a.features | e.features)
        negative = a.lo < 0 or dlo < 0
        if negative and not negative_ok:
            if a.lo < 0:
                if self.unsigned or not self.fits(0, a.mag):
                    return a
                a = Expr(f"T.abs({a.text})", 0, a.mag, features=a.features)
            if dlo < 0:
                return a
            negative = False
        feats = a.features | {"floordiv"} | ({"negative_floordiv"} if negative else set())
        if op == "//":
            values = [a.lo / dlo, a.lo / dhi, a.hi / dlo, a.hi / dhi]
            if not self.fits(math.floor(min(values)), math.floor(max(values))):
                return a  # the lowest value divided by -1 overflows
            lo, hi = math.floor(min(values)) - 1, math.ceil(max(values)) + 1
        else:
            bound = max(abs(dlo), abs(dhi)) - 1
            lo, hi = (-bound if dlo < 0 else 0), (0 if dhi < 0 else bound)
        return Expr(f"({a.text} {op} {dtext})", lo, hi, features=frozenset(feats))

    def condition(self, data: bool = True) -> tuple[str, frozenset]:
        """A comparison of exact values (loads, indices, constants) -- never of computed
        floats, whose rounding may legitimately differ by a unit in the last place; of indices
        and constants only unless ``data``."""
        a = self.leaf() if data else self.index()
        b = self.leaf() if data else self.const(self.draw(st.integers(0, 7)))
        if not (a.exact and b.exact):
            a = self.index()
        op = self.draw(st.sampled_from(("<", "<=", ">", ">=", "==", "!=")))
        return f"{a.text} {op} {b.text}", a.features | b.features | {"compare"}

    def select(self, a: Expr, b: Expr, feats) -> Expr:
        cond, cfeats = self.condition()
        return Expr(f"T.if_then_else({cond}, {a.text}, {b.text})", min(a.lo, b.lo),
                    max(a.hi, b.hi), max(a.err, b.err), a.exact and b.exact,
                    frozenset(feats | cfeats | {"if_then_else"}))

    def float_op(self, depth: int) -> Expr:
        a = self.expr(depth - 1)
        # drawn only when allowed: avoided, the draws are those of before them
        op = self.draw(st.sampled_from(("+", "-", "*", "/", "max", "min", "abs", "neg",
                                        "exp", "sigmoid", "tanh", "sqrt", "floor", "select",
                                        "cast") + tuple(f for f in (*UNARY_MATH, "clamp",
                                                                    *LIBM_MATH)
                                                        if self.allowed(f)) +
                                       (("lanes",) if self.lanes() else ()) +
                                       (("fmod",) if self.allowed("fmod") else ())))
        feats = a.features | {op_name(op)}
        if op == "fmod":
            return self.fmod(a, feats)
        if op == "lanes":
            return self.lane_expr(a, depth, feats)
        if op in UNARY_MATH:
            return self.unary_math(op, a, feats)
        if op in LIBM_MATH:
            return self.libm_math(op, a, feats)
        if op == "clamp":
            return self.clamp(a, feats)
        if op == "abs":
            lo = 0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
            return Expr(f"T.abs({a.text})", lo, a.mag, a.err, a.exact, frozenset(feats))
        if op == "neg":
            return Expr(f"(-{a.text})", -a.hi, -a.lo, a.err, a.exact, frozenset(feats))
        if op == "floor":  # only of exact values: a floor of a rounded value may jump by 1
            if not a.exact:
                return a
            return Expr(f"T.floor({a.text})", math.floor(a.lo), math.floor(a.hi), 0.0, True,
                        frozenset(feats))
        if op == "exp":
            if a.hi > 6 or a.lo < -30:
                return a
            lo, hi = math.exp(a.lo), math.exp(a.hi)
            return self.rounded(f"T.exp({a.text})", lo, hi, hi * a.err * 1.01, a,
                                features=feats)
        if op in ("sigmoid", "tanh"):
            lo, hi = (0.0, 1.0) if op == "sigmoid" else (-1.0, 1.0)
            return self.rounded(f"T.{op}({a.text})", lo, hi, a.err, a, features=feats)
        if op == "sqrt":  # of |a| + 0.25, never below 0.5
            return self.rounded(f"T.sqrt(T.abs({a.text}) + T.{self.dtype}(0.25))", 0.5,
                                math.sqrt(a.mag + 0.25), a.err, a, features=feats)
        if op == "cast":
            return self.float_cast(a, feats)
        b = self.expr(depth - 1)
        feats |= b.features
        if op == "select":
            return self.select(a, b, feats)
        if op in ("max", "min"):
            lo, hi = (max(a.lo, b.lo), max(a.hi, b.hi)) if op == "max" else \
                (min(a.lo, b.lo), min(a.hi, b.hi))
            return Expr(f"T.{op}({a.text}, {b.text})", lo, hi, max(a.err, b.err),
                        a.exact and b.exact, frozenset(feats))
        if op == "/":  # by |b| + 1
            lo, hi = min(a.lo, a.lo / (b.mag + 1)), max(a.hi, a.hi / (b.mag + 1))
            err = a.err + a.mag * b.err
            return self.rounded(f"({a.text} / (T.abs({b.text}) + T.{self.dtype}(1.0)))", lo, hi,
                                err, a, b, feats)
        corners = {"+": (a.lo + b.lo, a.hi + b.hi), "-": (a.lo - b.hi, a.hi - b.lo),
                   "*": (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)}[op]
        lo, hi = min(corners), max(corners)
        if not self.fits(lo, hi):
            return a
        err = a.err + b.err if op != "*" else a.err * b.mag + b.err * a.mag
        return self.rounded(f"({a.text} {op} {b.text})", lo, hi, err, a, b, feats)

    def unary_math(self, op: str, a: Expr, feats) -> Expr:
        """``exp2`` (of at most 6), ``log`` and ``rsqrt`` (of ``|a| + 0.25``), ``sin`` and
        ``cos`` (of at most 64 in magnitude, where float32 keeps the argument's error
        small), and ``round``, ``ceil``, ``trunc`` of exact values (of a rounded value they
        may jump by 1; ``round`` of a half-way value, which the constants make, rounds to
        even)."""
        if op in ("round", "ceil", "trunc"):
            if not a.exact:
                return a
            lo, hi = {"round": (math.floor(a.lo), math.ceil(a.hi)),
                      "ceil": (math.ceil(a.lo), math.ceil(a.hi)),
                      "trunc": (math.trunc(a.lo), math.trunc(a.hi))}[op]
            return Expr(f"T.{op}({a.text})", lo, hi, 0.0, True, frozenset(feats))
        if op == "exp2":
            if a.hi > 6 or a.lo < -30:
                return a
            lo, hi = 2.0 ** a.lo, 2.0 ** a.hi
            return self.rounded(f"T.exp2({a.text})", lo, hi, hi * math.log(2) * a.err * 1.01,
                                a, features=feats)
        shifted = f"T.abs({a.text}) + T.{self.dtype}(0.25)"
        if op == "log":  # the slope is at most 4
            return self.rounded(f"T.log({shifted})", math.log(0.25), math.log(a.mag + 0.25),
                                4 * a.err, a, features=feats)
        if op == "rsqrt":  # the slope is at most 0.5 * 0.25 ** -1.5 = 4
            return self.rounded(f"T.rsqrt({shifted})", 1 / math.sqrt(a.mag + 0.25), 2.0,
                                4 * a.err, a, features=feats)
        if a.mag > 64:  # sin, cos
            return a
        return self.rounded(f"T.{op}({a.text})", -1.0, 1.0, a.err, a, features=feats)

    def libm_math(self, op: str, a: Expr, feats) -> Expr:
        """``erf``, ``atan`` or ``asinh``: increasing, of slope at most 1, so the argument's
        error passes through; the function's own error (a few units in the last place of
        float32 in CUDA's and libm's) is counted as three more roundings."""
        fn = {"erf": math.erf, "atan": math.atan, "asinh": math.asinh}[op]
        lo, hi = fn(a.lo), fn(a.hi)
        return self.rounded(f"T.{op}({a.text})", lo, hi,
                            a.err + 3 * ROUNDOFF["float32"] * max(abs(lo), abs(hi)), a,
                            features=feats | {"extended_math"})

    def fmod(self, a: Expr, feats) -> Expr:
        """``T.fmod(a, c)`` of an exact value by a constant of either sign: the remainder of
        the quotient rounded towards zero, exact in every float format (it is discontinuous:
        of a rounded value, any)."""
        c = self.draw(st.sampled_from((0.75, 1.5, -2.0, 3.0)))
        if not a.exact:  # of a leaf instead: a load, a constant or an index
            a = self.leaf()
            if not a.exact:
                return a
        lo, hi = max(a.lo, -abs(c)) if a.lo < 0 else 0.0, min(a.hi, abs(c)) if a.hi > 0 else 0.0
        return Expr(f"T.fmod({a.text}, {self.const(c).text})", lo, hi, 0.0, True,
                    frozenset(feats))

    def clamp(self, a: Expr, feats) -> Expr:
        """``T.clamp(a, lo, hi)`` between two constants of the program's dtype."""
        if self.floating:
            lo = self.draw(st.sampled_from((-3.0, -1.5, -0.5, 0.0)))
            hi = self.draw(st.sampled_from((0.25, 1.0, 2.5)))
        else:
            low = 0 if self.unsigned else -9
            lo = self.draw(st.integers(low, 3))
            hi = self.draw(st.integers(lo, lo + 12))
        out_lo, out_hi = min(max(a.lo, lo), hi), min(max(a.hi, lo), hi)
        return Expr(f"T.clamp({a.text}, {self.const(lo).text}, {self.const(hi).text})",
                    out_lo, out_hi, a.err, a.exact, frozenset(feats))

    def float_cast(self, a: Expr, feats) -> Expr:
        """A cast of a float and back: through float32, or of an exact value through an
        integer dtype that holds it (truncation toward zero; a rounded value could truncate
        to either side of an integer)."""
        unsigned = ("uint32", "uint16", "uint8") if self.allowed("float_uint_cast") else ()
        ints = [n for n in ("int32", "int16", "int8", *unsigned)
                if n in self.declared and a.mag < LIMITS[n] and
                (a.lo >= 0 or not n.startswith("uint"))]
        if self.allowed("float8_cast") and self.draw(st.integers(0, 2)) == 0:
            f8 = self.float8(a)
            if f8 is not None:
                to, lo, hi, err = f8
                return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", lo, hi, err,
                            a.exact, frozenset(feats | {"cast", "float8_cast", f"cast_{to}"}))
        halves = [h for h in ("float16", "bfloat16") if h in self.declared and
                  h != self.dtype and self.allowed("half_cast")]
        if halves and self.draw(st.integers(0, 2)) == 0:
            return self.half_cast(a, self.draw(st.sampled_from(halves)), feats)
        if not (a.exact and ints and self.allowed("float_int_cast")) or \
                self.draw(st.booleans()):
            return Expr(f"T.cast(T.cast({a.text}, 'float32'), {self.dtype!r})", a.lo, a.hi,
                        a.err, a.exact, frozenset(feats | {"cast"}))
        to = self.draw(st.sampled_from(ints))
        extra = {"cast", "float_int_cast"} | ({"float_uint_cast"} if to in unsigned else set())
        return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", math.trunc(a.lo),
                    math.trunc(a.hi), 0.0, True, frozenset(feats | extra))

    def half_cast(self, a: Expr, to: str, feats) -> Expr:
        """A float rounded to ``float16`` or ``bfloat16`` and read back: one more rounding
        (float16's subnormals are spaced 2**-24 below 2**-14)."""
        u, sub = ROUNDOFF[to], 2.0 ** -25 if to == "float16" else 0.0
        err = a.err + 2 * (u * a.mag + sub)  # a computed value may round either way
        lo, hi = a.lo - u * abs(a.lo) - sub, a.hi + u * abs(a.hi) + sub
        return Expr(f"T.cast(T.cast({a.text}, {to!r}), {self.dtype!r})", lo, hi, err, a.exact,
                    frozenset(feats | {"cast", "half_cast", f"cast_{to}"}))

    # -- statements ---------------------------------------------------------------------------
    def tile(self, kind: str, lo, hi, err, dtype=None, name=None) -> Tile:
        name = name or self.fresh("t")
        shape = {"2d": f"({self.bm}, {self.bn})", "row": f"({self.bm},)",
                 "col": f"({self.bn},)"}[kind]
        dtype = dtype or self.dtype
        self.body.append(f"{name} = T.alloc_fragment({shape}, {dtype!r})")
        tile = Tile(name, kind, lo, hi, err, dtype)
        self.tiles.append(tile)
        return tile

    def loop_head(self) -> list[str]:
        """``for i, j in T.Parallel(bm, bn):``, or the same as two nested T.Parallel loops;
        the statements under it are indented by the returned lines' last indent + 4."""
        if self.allowed("nested_parallel") and self.draw(st.integers(0, 3)) == 0:
            self.features.add("nested_parallel")
            return [f"for i in T.Parallel({self.bm}):", f"    for j in T.Parallel({self.bn}):"]
        return [f"for i, j in T.Parallel({self.bm}, {self.bn}):"]

    def map(self) -> None:
        """A tile computed element-wise: everywhere, under an ``if`` (elsewhere a fill), or
        by ``if``/``else`` of two expressions; into a fragment or a shared tile."""
        e = self.expr(self.draw(st.integers(1, 4)))
        if self.floating and self.allowed("float8_cast") and self.draw(st.integers(0, 5)) == 0:
            f8 = self.float8(e)
            if f8 is not None:
                return self.map_float8(e, *f8)
        forms = ["plain", "plain", "guarded"] + (["if_else"] if self.allowed("if_else") else [])
        form = self.draw(st.sampled_from(forms))
        fill = self.draw(st.sampled_from((0, 1, 2)))
        lo, hi, err = e.lo, e.hi, e.err
        if form == "guarded":
            lo, hi = min(e.lo, fill), max(e.hi, fill)
        if form == "if_else":
            other = self.expr(self.draw(st.integers(1, 3)))
            lo, hi, err = min(lo, other.lo), max(hi, other.hi), max(err, other.err)
            self.features |= other.features | {"if_else"}
        if form != "plain":  # drawn before the new tile exists: it must not read what it writes
            data = self.allowed("data_guard") and self.draw(st.booleans())
            cond, cfeats = self.condition(data)
            self.features |= cfeats | {"guard"} | ({"data_guard"} if data else set())
        reads = e.text + (other.text if form == "if_else" else "") + \
            (cond if form != "plain" else "")
        tile = self.tile("2d", lo, hi, err, name=self.rebound(reads))
        if self.allowed("shared_result") and self.draw(st.integers(0, 3)) == 0:
            self.body[-1] = self.body[-1].replace("T.alloc_fragment", "T.alloc_shared")
            self.features.add("shared_result")
        head = self.loop_head()
        pad = " " * (len(head[-1]) - len(head[-1].lstrip()) + 4)
        store = f"{tile.name}[i, j] = {e.text}"
        if form == "guarded":
            self.body += [f"T.fill({tile.name}, {fill})", *head, f"{pad}if {cond}:",
                          f"{pad}    {store}"]
        elif form == "if_else":
            self.body += [*head, f"{pad}if {cond}:", f"{pad}    {store}", f"{pad}else:",
                          f"{pad}    {tile.name}[i, j] = {other.text}"]
        else:
            self.body += [*head, f"{pad}{store}"]
        self.features |= e.features | {"map"}

    def rebound(self, reads: str) -> str | None:
        """The name of a 2-D tile that the next tile's Python variable is rebound to (the old
        tile is read no more: later expressions see the new one), or None for a fresh name;
        never one that ``reads`` (the new tile's expressions) mentions."""
        if not self.allowed("rebind") or self.draw(st.integers(0, 3)):
            return None
        old = [t for t in self.tiles if t.kind == "2d" and
               not re.search(rf"\b{t.name}\b", reads)]
        if not old:
            return None
        tile = self.draw(st.sampled_from(old))
        self.tiles.remove(tile)
        self.features.add("rebind")
        return tile.name

    def scope(self, tile: Tile) -> str:
        """Where ``tile`` lives: ``shared`` or ``fragment`` (its latest allocation line)."""
        line = next(line for line in reversed(self.body)
                    if line.startswith(f"{tile.name} = T.alloc_"))
        return "shared" if "T.alloc_shared" in line else "fragment"

    def subcopy(self) -> None:
        """A tile filled with a constant, then part of another tile copied into it by
        ``T.copy``: the whole tile, or an ``(h, w)`` window of the source at one offset into
        the destination at another (slices of both); between fragments and shared tiles in
        any direction."""
        if not self.allowed("tile_copy"):
            return
        src = self.draw(st.sampled_from(self.squares()))
        fill = self.draw(st.sampled_from((0, 1, 2)))
        whole = self.draw(st.integers(0, 2)) == 0
        h = self.bm if whole else self.draw(st.integers(1, self.bm))
        w = self.bn if whole else self.draw(st.integers(1, self.bn))
        r0, c0 = self.draw(st.integers(0, self.bm - h)), self.draw(st.integers(0, self.bn - w))
        r1, c1 = self.draw(st.integers(0, self.bm - h)), self.draw(st.integers(0, self.bn - w))
        from_scope = self.scope(src)
        dst = self.tile("2d", min(src.lo, fill), max(src.hi, fill), src.err)
        to_scope = self.draw(st.sampled_from(("fragment", "shared")))
        if to_scope == "shared":
            self.body[-1] = self.body[-1].replace("T.alloc_fragment", "T.alloc_shared")
        if whole:
            self.body.append(f"T.copy({src.name}, {dst.name})")
        else:
            self.body += [f"T.fill({dst.name}, {fill})",
                          f"T.copy({src.name}[{r0}:{r0 + h}, {c0}:{c0 + w}], "
                          f"{dst.name}[{r1}:{r1 + h}, {c1}:{c1 + w}])"]
            self.features.add("tile_copy_window")
        self.features |= {"tile_copy", f"tile_copy_{from_scope}_{to_scope}"}

    def pipelined_gemm(self) -> None:
        """``T.gemm`` carried by a ``T.Pipelined`` loop (1 to 3 stages) over this block's
        column strip: each step loads a ``(bm, bn)`` block of two inputs into shared tiles and
        accumulates ``A^T B`` (a ``(bn, bn)`` result, K = bm) or ``A B^T`` (``(bm, bm)``, K =
        bn) into a cleared or filled accumulator (rows past the inputs' end read as zero); each
        block copies it to its own tile of an output."""
        acc = "float32" if self.floating else "int32" if self.dtype == "int8" else None
        if acc is None or acc not in self.declared or not self.allowed("gemm", "pipelined",
                                                                        "pipelined_gemm") or \
                min(self.bm, self.bn) == 1:
            return
        steps = math.ceil(self.M / self.bm)
        loop = grid_extent("M", self.M, self.bm, self.Mt == "M")
        stages = self.draw(st.integers(1, 3))
        (na, la, ha), (nb, lb, hb) = (self.draw(st.sampled_from(self.inputs)) for _ in "ab")
        ta = self.draw(st.booleans())
        side, k = (self.bn, self.bm) if ta else (self.bm, self.bn)
        start = self.draw(st.sampled_from((0, 1, -2)))
        mag = steps * k * max(abs(la), abs(ha)) * max(abs(lb), abs(hb))
        lo, hi = start - mag, start + mag
        if acc == "int32" and not -2**31 < lo <= hi < 2**31 - 1:
            return
        u = max(self.u, 2.0 ** -11) if self.floating else 0.0
        sa, sb, name, out = (self.fresh(p) for p in ("a", "b", "C", "G"))
        shape = f"({self.bm}, {self.bn})"
        self.body += [f"{sa} = T.alloc_shared({shape}, {self.dtype!r})",
                      f"{sb} = T.alloc_shared({shape}, {self.dtype!r})",
                      f"{name} = T.alloc_fragment(({side}, {side}), {acc!r})",
                      f"T.clear({name})" if start == 0 else f"T.fill({name}, {start})",
                      f"for k in T.Pipelined({loop}, num_stages={stages}):",
                      f"    T.copy({na}[{self.z}k * {self.bm}, bx * {self.bn}], {sa})",
                      f"    T.copy({nb}[{self.z}k * {self.bm}, bx * {self.bn}], {sb})",
                      f"    T.gemm({sa}, {sb}, {name}, transpose_A={ta}, transpose_B={not ta})",
                      f"T.copy({name}, {out}[{self.z}by * {side}, bx * {side}])"]
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        self.outputs.append((out, self.deep((gm * side, gn * side)), acc, 2 * u * mag))
        self.features |= {"pipelined_gemm", "gemm", f"gemm_{acc}", f"pipelined_stages{stages}",
                          "gemm_transpose_A" if ta else "gemm_transpose_B"}

    def map_float8(self, e: Expr, to: str, lo, hi, err) -> None:
        """A fragment of float8 elements: ``e`` converted element by element, read back by
        later expressions through a cast."""
        tile = self.tile("2d", lo, hi, err, to)
        head = self.loop_head()
        pad = " " * (len(head[-1]) - len(head[-1].lstrip()) + 4)
        self.body += [*head, f"{pad}{tile.name}[i, j] = T.cast({e.text}, {to!r})"]
        self.features |= e.features | {"map", "float8_tile", f"tile_{to}"}

    def accumulator(self, e: Expr, times: int) -> Tile | None:
        """A tile filled with zero that ``e`` is added to ``times`` times, or None when the sum
        may not fit the dtype."""
        lo, hi = min(0, times * e.lo), max(0, times * e.hi)
        if not self.fits(lo, hi):
            return None
        tile = self.tile("2d", lo, hi, times * e.err + self.u * times * times * e.mag)
        self.body.append(f"T.fill({tile.name}, 0)")
        return tile

    def tile_3d(self, name: str, tile: Tile) -> None:
        """``tile`` loaded through a 3-D shared tile: the ``(d, bm, bn)`` box of input
        ``name`` at offset ``(bz, by * bm, bx * bn)`` (depths past the input's end read as
        zero), of which one depth is copied element by element into ``tile``."""
        d = self.draw(st.integers(1, 3))
        c = self.draw(st.integers(0, d - 1))
        box = self.fresh("b")
        self.body += [f"{box} = T.alloc_shared(({d}, {self.bm}, {self.bn}), {self.dtype!r})",
                      f"T.copy({name}[bz, by * {self.bm}, bx * {self.bn}], {box})",
                      f"for i, j in T.Parallel({self.bm}, {self.bn}):",
                      f"    {tile.name}[i, j] = {box}[{c}, i, j]"]
        self.features.add("tile_3d")

    def repeat(self) -> None:
        """A tile accumulated by a run-time ``while`` loop over a ``T.alloc_var`` counter."""
        if not self.allowed("while_loop"):
            return
        times = self.draw(st.integers(1, 3))
        e = self.expr(self.draw(st.integers(1, 3)))
        tile = self.accumulator(e, times)
        if tile is None:
            return
        n = self.fresh("n")
        self.body += [f"{n} = T.alloc_var('int32', init=0)",
                      f"while {n} < {times}:",
                      f"    for i, j in T.Parallel({self.bm}, {self.bn}):",
                      f"        {tile.name}[i, j] = {tile.name}[i, j] + {e.text}",
                      f"    {n} = {n} + 1"]
        self.features |= e.features | {"while_loop"}

    def pipelined(self) -> None:
        """The sum over the blocks of this block's column strip of an expression of an input
        tile, loaded into a shared tile by a ``T.Pipelined`` loop (rows past the input's end
        read as zero)."""
        if not self.allowed("pipelined"):
            return
        steps = math.ceil(self.M / self.bm)
        loop = grid_extent("M", self.M, self.bm, self.Mt == "M")
        stages = self.draw(st.integers(1, 3))
        name, low, high = self.draw(st.sampled_from(self.inputs))
        chunk = self.tile("2d", low, high, 0.0)
        self.body[-1] = self.body[-1].replace("T.alloc_fragment", "T.alloc_shared")
        e = self.expr(self.draw(st.integers(1, 3)))
        self.tiles.remove(chunk)  # it holds the last block only after the loop
        tile = self.accumulator(e, steps)
        if tile is None:
            self.body.pop()
            return
        self.body += [f"for k in T.Pipelined({loop}, num_stages={stages}):",
                      f"    T.copy({name}[{self.z}k * {self.bm}, bx * {self.bn}], {chunk.name})",
                      f"    for i, j in T.Parallel({self.bm}, {self.bn}):",
                      f"        {tile.name}[i, j] = {tile.name}[i, j] + {e.text}"]
        self.features |= e.features | {"pipelined"}

    def local(self) -> None:
        """A per-thread scalar (``T.alloc_local((1,), dtype)``) holding this block's first
        element of an input, read by later expressions."""
        if not self.allowed("local_scalar"):
            return
        name, low, high = self.draw(st.sampled_from(self.inputs))
        scalar = self.fresh("s")
        self.body += [f"{scalar} = T.alloc_local((1,), {self.dtype!r})",
                      f"{scalar}[0] = {name}[{self.z}by * {self.bm}, bx * {self.bn}]"]
        self.tiles.append(Tile(scalar, "scalar", low, high, 0.0, self.dtype))
        self.features.add("local_scalar")

    def reduce(self) -> None:
        src = self.draw(st.sampled_from(self.squares()))
        kinds = [k for k in REDUCE_KINDS if self.allowed(f"reduce_{k}") and
                 not (self.floating and k in BITWISE_REDUCE_KINDS)]
        if not kinds:
            return
        kind = self.draw(st.sampled_from(kinds))
        dim = self.draw(st.integers(0, 1))
        k = self.bn if dim == 1 else self.bm
        clear = self.draw(st.booleans())
        init = 0 if clear else self.draw(st.sampled_from((1, 2) if self.unsigned else
                                                         (-1, 2)))
        accs = [self.dtype]
        if self.floating:
            accs += ["float32", "float32"] + [d for d in ("float16", "bfloat16") if
                                              self.dtype == "float32" and d in self.declared]
            if self.dtype != "float32" and self.allowed("reduce_low_to_low"):
                accs += [d for d in ("float16", "bfloat16") if d in self.declared]
        else:  # a narrower integer accumulator, when the sum fits it
            accs += [n for n in _NARROW_INTS if n in self.declared and
                     LIMITS[n] < self.limit and LOWEST[self.dtype] <= LOWEST[n]]
        accs = [a for a in dict.fromkeys(accs) if self.allowed(f"reduce_into_{a}")]
        if not accs:
            return
        acc = self.draw(st.sampled_from(accs))
        acc_limit = FLOAT_MAX if acc in FLOAT_DTYPES else LIMITS[acc]
        mag = max(abs(src.lo), abs(src.hi))
        if kind in ("sum", "abssum"):
            lo = -mag * k if kind == "sum" and src.lo < 0 else 0
            lo, hi = lo - abs(init), mag * k + abs(init)
        elif kind in BITWISE_REDUCE_KINDS:
            # every operand in [-2**b, 2**b): so is any and/or/xor of them
            bound = 1 << max(int(abs(v)).bit_length() for v in (src.lo, src.hi, init))
            lo, hi = (-bound if min(src.lo, init) < 0 else 0), bound - 1
        else:
            lo, hi = -mag - abs(init), mag + abs(init)
        if kind in ("abssum", "absmax") and (self.unsigned or not self.fits(0, mag)):
            return
        if not self.fits(lo, hi) or max(abs(lo), abs(hi)) > acc_limit or \
                (acc.startswith("uint") and lo < 0):
            return
        u_acc = ROUNDOFF.get(acc, 0.0)
        err = src.err * k + (u_acc * math.sqrt(k) * k * mag if kind in ("sum", "abssum")
                             else 0.0) + max(self.u, u_acc) * max(abs(lo), abs(hi))
        out = self.tile("row" if dim == 1 else "col", lo, hi, err, acc)
        if not clear:
            self.body.append(f"T.fill({out.name}, {init})")
        self.body.append(f"T.reduce_{kind}({src.name}, {out.name}, dim={dim}, "
                         f"clear={clear})")
        self.features |= {f"reduce_{kind}", f"reduce_dim{dim}", f"reduce_into_{acc}",
                          f"reduce_acc_{'same' if acc == self.dtype else acc}",
                          "reduce_clear" if clear else "reduce_accumulate"} | \
            ({"reduce_low_to_low"} if acc != self.dtype and self.dtype != "float32" and
             acc in ("float16", "bfloat16") else set())
        self.write_vector(out, dim)

    def write_vector(self, tile: Tile, dim: int) -> None:
        """Each block writes its reduction to its own row or column of an output."""
        name = self.fresh("R")
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        if dim == 1:
            shape = (self.M, gn)
            lines = [f"for i in T.Parallel({self.bm}):",
                     f"    if by * {self.bm} + i < {self.Mt}:",
                     f"        {name}[{self.z}by * {self.bm} + i, bx] = {tile.name}[i]"]
        else:
            shape = (gm, self.N)
            lines = [f"for j in T.Parallel({self.bn}):",
                     f"    if bx * {self.bn} + j < {self.Nt}:",
                     f"        {name}[{self.z}by, bx * {self.bn} + j] = {tile.name}[j]"]
        self.body += lines
        self.outputs.append((name, self.deep(shape), tile.dtype, tile.err))

    def cumsum(self) -> None:
        """``T.cumsum`` or ``T.cummax`` of a tile."""
        kinds = [k for k in SCAN_KINDS if self.allowed(f"cum{k}")]
        if not kinds:
            return
        # a kind drawn only when there is a choice: with cummax avoided, the draws are those
        # of before it
        kind = self.draw(st.sampled_from(kinds)) if len(kinds) > 1 else kinds[0]
        src = self.draw(st.sampled_from(self.squares()))
        dim = self.draw(st.integers(0, 1))
        reverse = self.draw(st.booleans())
        k = self.bn if dim == 1 else self.bm
        if kind == "sum":
            mag = max(abs(src.lo), abs(src.hi)) * k
            lo, hi = (-mag if src.lo < 0 else 0), mag
            err = src.err * k + self.u * math.sqrt(k) * mag * 2
        else:  # a running maximum is one of the elements: exact
            lo, hi, err = src.lo, src.hi, src.err
        if not self.fits(lo, hi):
            return
        out = self.tile("2d", lo, hi, err)
        self.body.append(f"T.cum{kind}({src.name}, {out.name}, dim={dim}, reverse={reverse})")
        self.features |= {f"cum{kind}", f"cum{kind}_dim{dim}"} | (
            {f"cum{kind}_reverse"} if reverse else set())

    def gemm(self) -> None:
        """``T.gemm`` of two loaded or computed tiles into a float32 (or, of int8 tiles,
        int32) accumulator: ``transpose_A``/``transpose_B`` pick which of ``(bm, bn)`` is K,
        the accumulator cleared, filled and accumulated into once or twice (``clear_accum=False``)
        or filled and then discarded by ``clear_accum=True``; each block copies its result to
        its own tile of an output."""
        acc = "float32" if self.floating else "int32" if self.dtype == "int8" else None
        srcs = self.squares()
        # T.gemm takes the non-unit dimensions of an operand as its matrix: no 1-wide tiles
        if acc is None or acc not in self.declared or not srcs or not self.allowed("gemm") or \
                min(self.bm, self.bn) == 1:
            return
        a, b = self.draw(st.sampled_from(srcs)), self.draw(st.sampled_from(srcs))
        bm, bn = self.bm, self.bn
        # op(A) is (m, K) and op(B) is (K, n) for tiles of shape (bm, bn)
        forms = [(False, True, bm, bn, bm), (True, False, bn, bm, bn)]
        if bm == bn:
            forms += [(False, False, bm, bn, bn), (True, True, bn, bm, bm)]
        ta, tb, rows, k, cols = self.draw(st.sampled_from(forms))
        init = self.draw(st.sampled_from(("clear", "fill", "clear_accum")))
        times = self.draw(st.integers(1, 2)) if init != "clear_accum" else 1
        start = self.draw(st.sampled_from((1, -2))) if init != "clear" else 0
        kept = 0 if init == "clear_accum" else start
        mag = times * k * magnitude(a) * magnitude(b)
        lo, hi = kept - mag, kept + mag
        if acc == "int32" and not -2**31 < lo <= hi < 2**31 - 1:
            return
        # float32 inputs may be rounded to tf32 (10 bits) by tensor cores
        u = max(self.u, 2.0 ** -11) if self.floating else 0.0
        err = times * k * (a.err * magnitude(b) + b.err * magnitude(a)) + 2 * u * mag
        name = self.fresh("C")
        self.body.append(f"{name} = T.alloc_fragment(({rows}, {cols}), {acc!r})")
        if init == "clear":
            self.body.append(f"T.clear({name})")
        else:
            self.body.append(f"T.fill({name}, {'7' if init == 'clear_accum' else start})")
        flags = f"transpose_A={ta}, transpose_B={tb}"
        if init == "clear_accum":
            flags += ", clear_accum=True"
        self.body += [f"T.gemm({a.name}, {b.name}, {name}, {flags})"] * times
        out = self.fresh("G")
        gm, gn = math.ceil(self.M / bm), math.ceil(self.N / bn)
        self.body.append(f"T.copy({name}, {out}[{self.z}by * {rows}, bx * {cols}])")
        self.outputs.append((out, self.deep((gm * rows, gn * cols)), acc, err))
        self.features |= {"gemm", f"gemm_{acc}", f"gemm_{init}"} | \
            ({"gemm_twice"} if times == 2 else set()) | \
            ({"gemm_transpose_A"} if ta else set()) | ({"gemm_transpose_B"} if tb else set())

    def block_update(self) -> None:
        """Block code (statements outside ``T.Parallel``, once per block): a scalar set to this
        block's first element of an input, then updated from itself once or, in a
        ``T.serial`` loop, several times (``S[0] = S[0] + X[...]``, or a difference, max or
        min); a shared scalar or a per-thread one, read by later expressions and stored by
        block code to an element of an output that each block owns (``V[by, bx] = S[0]``), or
        such an element itself, first set by a one-iteration ``T.Parallel`` loop."""
        where = [w for w in ("shared", "local", "global") if self.allowed(f"block_update_{w}")]
        if not where or not self.allowed("block_update"):
            return
        kind = self.draw(st.sampled_from(where))
        first = f"[{self.z}by * {self.bm}, bx * {self.bn}]"
        name, lo, hi = self.draw(st.sampled_from(self.inputs))
        other, olo, ohi = self.draw(st.sampled_from(self.inputs))
        op = self.draw(st.sampled_from(("+", "-", "+", "-", "max", "min")))
        times = self.draw(st.integers(1, 3))
        loop = times > 1 and self.draw(st.booleans())
        err = 0.0
        for _ in range(times):
            if op == "+":
                lo, hi = lo + olo, hi + ohi
            elif op == "-":
                lo, hi = lo - ohi, hi - olo
            else:
                f = max if op == "max" else min
                lo, hi = f(lo, olo), f(hi, ohi)
            err += self.u * max(abs(lo), abs(hi)) if op in ("+", "-") else 0.0
        if not self.fits(lo, hi) or (self.unsigned and lo < 0):
            return
        out = self.fresh("U")
        owned = f"{out}[{self.z}by, bx]"
        gm, gn = math.ceil(self.M / self.bm), math.ceil(self.N / self.bn)
        self.outputs.append((out, self.deep((gm, gn)), self.dtype, err))
        if kind == "global":
            cell = owned
            self.body += ["for i in T.Parallel(1):",
                          f"    {out}[{self.z}by, bx + i] = {name}{first}"]
        else:
            target = self.fresh("s")
            cell = f"{target}[0]"
            alloc = "T.alloc_shared" if kind == "shared" else "T.alloc_local"
            self.body += [f"{target} = {alloc}((1,), {self.dtype!r})", f"{cell} = {name}{first}"]
        value = f"{other}{first}"
        update = f"{cell} = ({cell} {op} {value})" if op in ("+", "-") else \
            f"{cell} = T.{op}({cell}, {value})"
        if loop:
            self.body += [f"for {self.fresh('r')} in T.serial({times}):", f"    {update}"]
        else:
            self.body += [update] * times
        if kind != "global":
            self.body.append(f"{owned} = {cell}")
            self.tiles.append(Tile(target, "scalar", lo, hi, err, self.dtype))
        self.features |= {"block_update", f"block_update_{kind}",
                          f"block_update_{op_name(op)}"} | \
            ({"block_update_loop"} if loop else set())

    def block_branch(self) -> None:
        """Block code that branches on data: a new tile computed by one ``T.Parallel`` map,
        then rewritten by a second one only when a condition of the block holds, or as many
        times (0 to 3) as an element says. The condition reads exact values (an input tile or a
        tile computed without rounding): an element of a shared tile or of an input in global
        memory against a constant, or ``T.any_of`` / ``T.all_of`` of part of a row of a shared
        tile (its elements != 0)."""
        if not self.allowed("block_branch"):
            return
        exact = [t for t in self.squares() if t.err == 0.0 and self.scope(t) == "shared"]
        forms = ["global"] + (["shared", "any_of", "all_of"] if exact else []) + \
            (["loop"] if self.allowed("block_branch_loop") else [])
        form = self.draw(st.sampled_from(forms))
        if form == "global" or (form == "loop" and not exact):
            name, lo, hi = self.draw(st.sampled_from(self.inputs))
            read = f"{name}[{self.z}by * {self.bm}, bx * {self.bn}]"
        else:
            tile = self.draw(st.sampled_from(exact))
            r, c = self.draw(st.integers(0, self.bm - 1)), self.draw(st.integers(0, self.bn - 1))
            lo, hi = tile.lo, tile.hi
            read = f"{tile.name}[{r}, {c}]"
        if form in ("any_of", "all_of"):
            width = self.draw(st.integers(1, self.bn - c))
            cond = f"T.{form}({tile.name}[{r}, {c}:{c + width}])"
        elif form == "loop":  # a trip count of 0 to 3 read from the data
            cond = f"T.serial(T.min(T.max(T.cast({read}, 'int32'), 0), 3))"
        else:  # against a value inside the range: either way happens
            k = self.draw(st.integers(math.ceil(lo), max(math.ceil(lo), math.floor(hi))))
            cond = f"{read} {self.draw(st.sampled_from(('>', '<=', '!=')))} {self.const(k).text}"
        first, then = self.expr(self.draw(st.integers(1, 3))), \
            self.expr(self.draw(st.integers(1, 3)))
        out = self.tile("2d", min(first.lo, then.lo), max(first.hi, then.hi),
                        max(first.err, then.err))
        head = self.loop_head()
        pad = " " * (len(head[-1]) - len(head[-1].lstrip()) + 4)
        opening = f"for _ in {cond}:" if form == "loop" else f"if {cond}:"
        self.body += [*head, f"{pad}{out.name}[i, j] = {first.text}", opening,
                      *(f"    {line}" for line in head),
                      f"    {pad}{out.name}[i, j] = {then.text}"]
        self.features |= first.features | then.features | {"block_branch",
                                                            f"block_branch_{form}"}


    def thread_code(self) -> None:
        """Thread-level code (``T.get_thread_binding``): thread ``tx < bn`` of the block
        writes column ``tx`` of a new shared tile from a shared tile, in a loop over the rows
        inside the branch on its index: a running sum down the column (a ``T.alloc_var``
        accumulator), or the mirrored column ``bn - 1 - tx``, another thread's. Backends
        without threads run it thread after thread; CUDA on its threads."""
        if not self.allowed("thread_code"):
            return
        sources = [t for t in self.squares() if self.scope(t) == "shared"]
        if not sources:
            return
        src = self.draw(st.sampled_from(sources))
        form = self.draw(st.sampled_from(("scan", "mirror")))
        lo, hi, err = src.lo, src.hi, src.err
        if form == "scan":  # sums of 1 to bm elements
            lo, hi = min(lo, lo * self.bm), max(hi, hi * self.bm)
            err = src.err * self.bm + self.u * self.bm * max(abs(lo), abs(hi))
            if not self.fits(lo, hi):
                return
        out = self.tile("2d", lo, hi, err)
        self.body[-1] = self.body[-1].replace("T.alloc_fragment", "T.alloc_shared")
        tx, r = self.fresh("tx"), self.fresh("r")
        self.body.append(f"{tx} = T.get_thread_binding()")
        if form == "scan":
            acc = self.fresh("acc")
            self.body += [f"{acc} = T.alloc_var({self.dtype!r})",
                          f"if {tx} < {self.bn}:",
                          f"    {acc} = {self.const(0).text}",
                          f"    for {r} in T.serial({self.bm}):",
                          f"        {acc} = {acc} + {src.name}[{r}, {tx}]",
                          f"        {out.name}[{r}, {tx}] = {acc}"]
        else:
            self.body += [f"if {tx} < {self.bn}:",
                          f"    for {r} in T.serial({self.bm}):",
                          f"        {out.name}[{r}, {tx}] = {src.name}[{r}, {self.bn - 1} - {tx}]"]
        self.features |= {"thread_code", f"thread_code_{form}"}


def magnitude(tile: Tile) -> float:
    return max(abs(tile.lo), abs(tile.hi))


def op_name(op: str) -> str:
    return {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "floormod",
            ">>": "shift", "<<": "shift", "&": "bitwise", "|": "bitwise",
            "^": "bitwise"}.get(op, op)


@st.composite
def programs(draw, avoid=(), dtypes=None, features=None, tile_ops=None,
             op_dtypes=None) -> Program:
    """A strategy of valid programs; ``avoid``: features never to generate; ``dtypes``: the
    dtypes a program may use (default: all); ``features``: the backend's capability
    features (default: all), of which ``dynamic_shapes`` lets sizes be read from the
    arguments, ``extended_math`` draws erf, atan, asinh, fmod, clz and popcount,
    ``atomic_return_prev`` atomics
    returning the previous value and ``vector_dtypes`` vector values (``wide_vectors``: of
    more than 128 bits too); ``tile_ops``: the tile ops the backend declares (default: all),
    of which the atomics' are drawn; ``op_dtypes``: op -> the dtypes the backend takes it for,
    where fewer than ``dtypes`` (the atomics')."""
    declared = set(INT_DTYPES + FLOAT_DTYPES + tuple(FLOAT8)) if dtypes is None else set(dtypes)
    if features is not None:
        lacking = {"extended_math": (*LIBM_MATH, "fmod", "bit_count"),
                   "atomic_return_prev": ("atomic_prev",),
                   "vector_dtypes": ("vector",)}
        avoid = (*avoid, *(f for need, fs in lacking.items() if need not in features
                           for f in fs))
    if tile_ops is not None:
        avoid = (*avoid, *(op for op in ATOMIC_OPS if op not in tile_ops))
    dtype = draw(st.sampled_from([d for d in INT_DTYPES + FLOAT_DTYPES if d in declared]))
    wide = next((w for w in ("int32", "int64") if w in declared and
                 LIMITS[w] > LIMITS.get(dtype, 0)), None)
    bm = draw(st.sampled_from((1, 2, 4, 8, 16)))
    # 32 and 64 columns: several contiguous elements per thread, which backends vectorise
    bn = draw(st.sampled_from((1, 2, 4, 8, 16) + ((32, 64) if "wide_tile" not in avoid
                                                   else ())))
    M = draw(st.integers(1, 3 * bm + 3))
    N = draw(st.integers(1, 3 * bn + 3))
    depth = draw(st.sampled_from((0, 0, 0, 0, 0, 0, 1, 2, 3))) if "tensor_3d" not in avoid else 0
    dynamic = ()
    if (features is None or "dynamic_shapes" in features) and "dynamic_shape" not in avoid:
        dynamic = draw(st.sampled_from(((),) * 6 + (("M",), ("N",), ("M", "N"))))
    b = _Builder(draw, dtype, M, N, bm, bn, avoid, wide, declared, depth, dynamic, op_dtypes,
                 features is None or "wide_vectors" in features)
    z = b.z
    floating = dtype in FLOAT_DTYPES
    n_inputs = draw(st.integers(1, 3))
    inputs = []
    for k in range(n_inputs):
        if floating:
            low, high = -4.0, 4.0
        else:
            low, high = (0, 20) if dtype.startswith("uint") else (-20, 20)
        name = f"X{k}"
        inputs.append((name, low, high))
        b.inputs.append((name, low, high))
        tile = b.tile("2d", low, high, 0.0)
        scope = draw(st.sampled_from(("fragment", "shared")))
        if scope == "shared":
            b.body[-1] = b.body[-1].replace("T.alloc_fragment", "T.alloc_shared")
            b.features.add("shared_tile")
        if depth and b.allowed("tile_3d") and draw(st.integers(0, 2)) == 0:
            b.tile_3d(name, tile)
        else:
            b.body.append(f"T.copy({name}[{z}by * {bm}, bx * {bn}], {tile.name})")
    packed = []
    if dtype in ("int8", "int16", "int32", "int64") and b.allowed("int4_input") and \
            draw(st.integers(0, 3)) == 0:
        packed.append(("P0", -8, 7))
        tile = b.tile("2d", -8, 7, 0.0, "int4")
        b.body.append(f"T.copy(P0[{z}by * {bm}, bx * {bn}], {tile.name})")
        b.features.add("int4_input")
    float8 = []
    kinds = [f for f in FLOAT8 if f in declared]
    if floating and kinds and b.allowed("float8_input") and draw(st.integers(0, 3)) == 0:
        # values drawn in [-4, 4] and rounded to the format when the tensor is made (both
        # formats hold +-4): every backend reads the same values, which convert exactly to
        # float16, bfloat16 and float32 (their exponent ranges and mantissas hold them)
        to = draw(st.sampled_from(kinds))
        float8.append(("F0", to, -4.0, 4.0))
        converted = draw(st.booleans())  # T.copy converting, or a float8 fragment
        tile = b.tile("2d", -4.0, 4.0, 0.0, None if converted else to)
        b.body.append(f"T.copy(F0[{z}by * {bm}, bx * {bn}], {tile.name})")
        b.features |= {"float8_input", f"input_{to}"} | \
            ({"float8_input_converted"} if converted else {"float8_tile"})
    b.features.add(f"dtype_{dtype}")
    if depth:
        b.features.add("tensor_3d")
    b.features |= {f"dynamic_{d}" for d in dynamic} | ({"dynamic_shape"} if dynamic else set())
    if M % bm or N % bn:
        b.features.add("partial_tile")
    if bn > 16:
        b.features.add("wide_tile")
    for _ in range(draw(st.integers(1, 4))):
        kinds = ["map", "map", "map", "reduce", "cumsum", "repeat", "pipelined", "local",
                 "gemm", "atomic"]
        # drawn only when allowed: avoided, the draws are those of before them (previous
        # values twice: four forms)
        kinds += (["subcopy"] if b.allowed("tile_copy") else []) + \
            (["pipelined_gemm"] if b.allowed("pipelined_gemm") else []) + \
            (["block_update"] if b.allowed("block_update") else []) + \
            (["block_branch"] if b.allowed("block_branch") else []) + \
            (["thread_code"] if b.allowed("thread_code") else []) + \
            (["atomic_prev"] * 2 if b.allowed("atomic_prev") else []) + \
            (["vector_map"] if b.lanes() else [])
        kind = draw(st.sampled_from(kinds))
        getattr(b, kind)()
    if not any(line.lstrip().startswith("for i, j in T.Parallel") for line in b.body):
        b.map()
    last = b.squares()[-1]
    err = last.err
    if draw(st.booleans()):
        b.body.append(f"T.copy({last.name}, Y[{z}by * {bm}, bx * {bn}])")
    else:  # each element stored to global memory by a guarded T.Parallel iteration
        b.globals = inputs
        e = b.expr(draw(st.integers(1, 3)))
        err = e.err
        b.body += [f"for i, j in T.Parallel({bm}, {bn}):",
                   f"    if by * {bm} + i < {b.Mt} and bx * {bn} + j < {b.Nt}:",
                   f"        {b.store(f'Y[{z}by * {bm} + i, bx * {bn} + j]', e.text)}"]
        b.features |= e.features | {"global_store"}
    outputs = [("Y", b.deep((M, N)), dtype, err), *b.outputs]
    return Program(dtype, M, N, bm, bn, inputs, outputs, b.body, b.features, depth, dynamic,
                   packed, float8)
