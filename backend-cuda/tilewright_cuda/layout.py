"""Where the elements of a shared tile or a fragment live: layouts as values, attached to the
buffers they describe.

Layout inference (``transforms.layout``) chooses, and every later pass, rule and codegen step
reads the choice back with :func:`of`. A layout travels in the buffer's storage scope, as
TVM's own fragment scopes (``wmma.accumulator``) carry theirs: the scope is part of the
buffer's type, so a pass that rebuilds the buffer (a new shape for pipeline versions, a
substituted buffer) keeps it by keeping the scope (:func:`reshaped`), and nothing else about
the buffer (its alignment, say) is borrowed for it. The kinds:

- :class:`Swizzled` -- a 1- or 2-byte shared tile (or a fragment kept in shared memory) stored
  in CuTe's ``Swizzle<B, 4, 3>`` layout on bytes; scope ``<memory>.swizzled``;
- :class:`Accumulator` -- an mma accumulator in registers: ``local.mma_acc`` (the square warp
  grid), ``local.mma_acc.rows`` (warps own whole rows), ``local.mma_acc.wgmma`` (the wgmma D
  layout: one 16-row strip per warp; a 16-bit fragment in it is a register A operand);
- :class:`RowVector` -- a row statistic of such an accumulator in registers:
  ``local.mma_rows``;
- :class:`Spread` -- a fragment spread over the block's threads in registers:
  ``local.spread``.

**The swizzle contract** (between layout inference, memory placement, the ``mma.sync``/
``ldmatrix`` GEMM and any instruction that reads such tiles: ``wgmma`` descriptors, TMA
boxes). A 2-D tile ``[R, C]`` of ``S``-byte elements (``SWIZZLE_DTYPES``: ``S = 2`` for
``float16``/``bfloat16``, ``S = 1`` for ``int8``/``float8_e4m3fn``/``float8_e5m2``) is stored as
column blocks of ``W`` bytes, ``W = 128`` when a row has at least 128 bytes (``C * S >= 128``,
and then ``C * S`` must be a multiple of 128), else ``W = C * S``. Element ``(r, c)`` has the
byte offset, from the tile base,

    o = (c * S // W) * R * W + r * W + (c * S % W)

which is then swizzled on byte offsets,

    o' = o ^ (((o >> 7) & ((1 << B) - 1)) << 4)

with ``B = 3`` for ``W = 128``, ``2`` for ``W = 64``, ``1`` for ``W = 32`` and ``0`` (plain
row-major) otherwise. The XOR moves whole 16-byte chunks, so the ``16 / S`` consecutive
elements of a chunk stay contiguous and 16-byte aligned (``cp.async``, ``ldmatrix`` rows), and
the eight 16-byte rows of one ``ldmatrix`` 8x8 matrix land in eight distinct bank groups. The
layout is one of bytes, the same for both element sizes: a K-major tile of 8-bit elements in
it is what ``wgmma``'s 8-bit forms read (their k32 step spans 32 bytes of a row, as the k16
step of 16-bit elements does). The tile base is aligned to :data:`ALIGN` bytes (one full
swizzle period), so the pattern on absolute shared addresses equals the pattern on offsets:
this is CUTLASS's ``SW128``/``SW64``/``SW32`` K-major layout that ``wgmma`` and TMA expect. A
tile with ``P`` pipeline versions is ``[P, R, C]``: version ``v`` starts ``v * R * C`` elements
after the base.

**Accumulators.** A float32 ``M x N`` fragment split over the warps as a ``WM x WN`` grid
(:func:`warp_grid`); warp ``w`` owns the warp tile ``(w // WN, w % WN)``, each thread four
registers per 16x8 tile of it in the PTX ``mma.m16n8k16`` C layout (:func:`element`).

**Row vectors.** A 1-D float32 fragment of M rows beside a ``(warps x 1)`` accumulator: register
``s`` of a thread is row ``warp * M / warps + (s // 2) * 16 + (s % 2) * 8 + lane / 4``
(:func:`row`); the four lanes of a row keep the same value.

**Spread fragments.** A fragment of ``E`` elements (``E`` a multiple of the block's ``T``
threads) whose every access is by the thread that owns the element: in row-major order, element
``e`` is register ``e // T`` of thread ``e % T`` (thread ``t`` holds ``t, t + T, ...``: a
``T.Parallel`` nest over the fragment's shape, spread over the threads as every other nest
is, finds each iteration's element in its own registers). A reduction along the last
dimension (the dimensions after it of extent one) of length ``L``, ``L`` a multiple of ``T``,
finds ``L / T`` registers of one row in each thread (:func:`spread_rows`). The register array
keeps the fragment's rank: ``[1, ..., 1, E / T]`` (:func:`spread_register_index`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import tirx

from .keys import WARP

ALIGN = 1024  # bytes: the base alignment of a swizzled tile (one swizzle period)
SWIZZLE_BITS = {128: 3, 64: 2, 32: 1}
# the dtypes a swizzled tile may hold, with their element size in bytes
SWIZZLE_DTYPES = {"float16": 2, "bfloat16": 2, "int8": 1, "float8_e4m3fn": 1,
                  "float8_e5m2": 1}
REGISTER_A_DTYPES = ("float16", "bfloat16")  # wgmma's register A operand, as lowered here
ACCUMULATOR = "local.mma_acc"
ROW_VECTOR = "local.mma_rows"
SPREAD = "local.spread"
_SWIZZLED = ".swizzled"
_GRIDS = ("square", "rows", "wgmma")


@dataclass(frozen=True)
class Swizzled:
    """The swizzled layout of a 1- or 2-byte tile: column blocks of ``width`` bytes, ``bits``
    of XOR (the contract above)."""

    width: int
    bits: int


@dataclass(frozen=True)
class Accumulator:
    """An mma accumulator in registers; ``grid``: ``square`` (the warp tile closest to
    square), ``rows`` (one warp column: warps own whole rows) or ``wgmma`` (one 16-row strip
    per warp, 64 rows per warpgroup)."""

    grid: str = "square"

    def __post_init__(self):
        if self.grid not in _GRIDS:
            raise ValueError(f"unknown accumulator grid {self.grid!r}")


@dataclass(frozen=True)
class RowVector:
    """A row vector of a ``(warps x 1)`` accumulator, in registers."""


@dataclass(frozen=True)
class Spread:
    """A fragment spread over the block's threads in registers: thread ``t`` holds elements
    ``t, t + threads, ...`` in row-major order."""


Layout = Swizzled | Accumulator | RowVector | Spread


# -- attaching and reading -----------------------------------------------------------------------
def _scope(buffer) -> str:
    return str(buffer.scope())


def memory(buffer) -> str:
    """The memory a buffer lives in, its layout aside (``shared.dyn``, ``local.fragment``,
    ``global``, ``local.mma_acc`` ...)."""
    scope = _scope(buffer)
    return scope.removesuffix(_SWIZZLED)


def of(buffer) -> Layout | None:
    """The layout attached to ``buffer``, None when it has none."""
    scope = _scope(buffer)
    if scope.endswith(_SWIZZLED):
        shape = _const_shape(buffer)
        found = params(shape[-2], shape[-1], str(buffer.dtype)) if shape is not None and \
            len(shape) in (2, 3) else None
        return Swizzled(*found) if found is not None else None
    if scope == ROW_VECTOR:
        return RowVector()
    if scope == SPREAD:
        return Spread()
    if scope == ACCUMULATOR:
        return Accumulator("square")
    if scope.startswith(ACCUMULATOR + "."):
        return Accumulator(scope[len(ACCUMULATOR) + 1:])
    return None


def attach(buffer, layout: Layout):
    """A copy of ``buffer`` (a new buffer of the same name, shape and dtype) carrying
    ``layout``."""
    if isinstance(layout, Swizzled):
        scope = memory(buffer) + _SWIZZLED
    elif isinstance(layout, Accumulator):
        scope = ACCUMULATOR if layout.grid == "square" else f"{ACCUMULATOR}.{layout.grid}"
    elif isinstance(layout, Spread):
        scope = SPREAD
    else:
        scope = ROW_VECTOR
    return tirx.decl_buffer(buffer.shape, buffer.dtype, buffer.name, scope=scope)


def reshaped(buffer, shape):
    """A new buffer like ``buffer`` (name, dtype, memory and layout) with another shape."""
    return tirx.decl_buffer(shape, buffer.dtype, buffer.name, scope=_scope(buffer))


def is_thread_local(buffer) -> bool:
    """Storage private to each thread (``alloc_local``, ``alloc_var``, reducers, registers)."""
    where = memory(buffer)
    return where.startswith("local") and where != "local.fragment"


def is_accumulator(buffer) -> bool:
    return isinstance(of(buffer), Accumulator)


def is_rows(buffer) -> bool:
    return isinstance(of(buffer), RowVector)


def is_spread(buffer) -> bool:
    return isinstance(of(buffer), Spread)


def is_register_a(buffer) -> bool:
    """A 16-bit fragment in registers in the wgmma accumulator layout: a register A operand."""
    return of(buffer) == Accumulator("wgmma") and str(buffer.dtype) in REGISTER_A_DTYPES


def swizzle_of(buffer) -> tuple[int, int] | None:
    """``(W, B)`` of a swizzled buffer, else None."""
    found = of(buffer)
    return (found.width, found.bits) if isinstance(found, Swizzled) else None


# -- the swizzle ---------------------------------------------------------------------------------
def params(rows: int, cols: int, dtype: str = "float16") -> tuple[int, int] | None:
    """``(W, B)`` of the contract for a ``[rows, cols]`` tile, or None when the tile gets no
    swizzle (not a dtype of ``SWIZZLE_DTYPES``, rows too short to swizzle, or wide rows that
    do not split into whole 128-byte blocks)."""
    size = SWIZZLE_DTYPES.get(dtype)
    if size is None or rows <= 0 or cols <= 0:
        return None
    row_bytes = cols * size
    if row_bytes > 128 and row_bytes % 128:
        return None
    width = 128 if row_bytes >= 128 else row_bytes
    bits = SWIZZLE_BITS.get(width, 0)
    return (width, bits) if bits else None


def byte_offset(r: int, c: int, rows: int, width: int, bits: int, size: int = 2) -> int:
    """Swizzled byte offset of element ``(r, c)`` of a tile of ``size``-byte elements (the
    formula above)."""
    o = (c * size // width) * rows * width + r * width + (c * size % width)
    return o ^ (((o >> 7) & ((1 << bits) - 1)) << 4)


def _const_shape(buffer) -> list[int] | None:
    if not all(isinstance(e, tirx.IntImm) for e in buffer.shape):
        return None
    return [int(e.value) for e in buffer.shape]


def element_index(buffer, indices):
    """The flat element index of ``buffer[indices]`` under its swizzled layout (a TIR
    expression); ``indices`` are ``[r, c]`` or ``[version, r, c]``.

    Written as ``line * LINE + (in_line ^ flip(line))`` over the 128-byte lines (``LINE``
    elements) the XOR permutes within, not as the XOR of the whole offset: the two are equal
    (the flip only moves bits inside a line), but in this form a step of whole swizzle periods
    (the next rows a copy loop's iteration moves, say) stays an addition the C++ compiler folds
    into an immediate offset, where the XOR of the whole offset hid it and every unrolled
    iteration kept an address register of its own, live across the loop around it."""
    shape = _const_shape(buffer)
    width, bits = swizzle_of(buffer)
    size = SWIZZLE_DTYPES[str(buffer.dtype)]
    rows, cols = shape[-2], shape[-1]
    per_row = width // size  # elements per block row
    line_elems = 128 // size
    rows_per_line = line_elems // per_row  # 1, or 2 or 4 rows of a narrow tile (one block)
    *version, r, c = indices
    if cols > per_row:  # 128-byte blocks: one row a line
        line = tirx.floordiv(c, per_row) * rows + r
        in_line = tirx.floormod(c, per_row)
    elif rows_per_line == 1:
        line, in_line = r, c
    else:
        line = tirx.floordiv(r, rows_per_line)
        in_line = tirx.floormod(r, rows_per_line) * per_row + c
    # byte bits [7, 7 + B) select the 16-byte chunk to flip: in elements of 2^s bytes, the
    # line's low B bits shifted to [4 - s, ...)
    shift = size.bit_length() - 1
    mask = tirx.const((1 << bits) - 1, "int32")
    flip = tirx.shift_left(tirx.bitwise_and(line, mask), tirx.const(4 - shift, "int32"))
    e = line * line_elems + tirx.bitwise_xor(in_line, flip)
    if version:
        e = version[0] * (rows * cols) + e
    return e


# -- accumulators --------------------------------------------------------------------------------
def warp_grid(m: int, n: int, warps: int, policy: str = "square") -> tuple[int, int] | None:
    """How ``warps`` split an ``m`` x ``n`` mma output tile: ``(WM, WN)`` warps along rows and
    columns, each warp owning an ``m / WM`` x ``n / WN`` tile of whole 16x8 instruction tiles;
    None when no split exists. ``full_row`` puts every warp on its own rows, ``full_col`` on
    its own columns, ``square`` keeps the warp tile closest to square (fewest fragment loads
    per mma), preferring taller tiles on a tie."""
    grids = [(wm, warps // wm) for wm in range(1, warps + 1)
             if warps % wm == 0 and m % (16 * wm) == 0 and n % (8 * (warps // wm)) == 0]
    if not grids:
        return None
    if policy == "full_row":
        return max(grids)
    if policy == "full_col":
        return min(grids)
    return min(grids, key=lambda g: (abs(math.log2((m / g[0]) / (n / g[1]))), g[0]))


def accumulator_grid(shape, layout: Accumulator, threads: int) -> tuple[int, int] | None:
    """The warp grid of an ``m x n`` accumulator of ``layout`` over ``threads``: the square
    grid of its shape whatever the policy of the gemms that write it (every op touching it
    agrees on one layout); one warp column for ``rows`` (None when the shape has none), one
    16-row strip per warp for ``wgmma``."""
    m, n = (int(e.value) if hasattr(e, "value") else int(e) for e in shape)
    if layout.grid == "wgmma":
        return threads // WARP, 1
    if layout.grid == "rows":
        grid = warp_grid(m, n, threads // WARP, "full_row")
        return grid if grid is not None and grid[1] == 1 else None
    return warp_grid(m, n, threads // WARP)


def grid(buffer, threads: int) -> tuple[int, int] | None:
    """The warp grid of an accumulator buffer (:func:`accumulator_grid`)."""
    return accumulator_grid(buffer.shape, of(buffer), threads)


def registers(buffer, threads: int) -> int:
    """Registers per thread of an accumulator: four per 16x8 tile of its warp tile."""
    m, n = (int(e.value) for e in buffer.shape)
    return m * n // threads


def element(buffer, r, threads: int, tx):
    """(row, column) of register ``r`` of thread ``tx`` in an accumulator: warp ``w`` owns the
    warp tile ``(w // WN, w % WN)``; register ``r`` is element ``r % 4`` of 16x8 tile
    ``r // 4`` (row-major over the warp tile's tiles), in the PTX C layout."""
    m, n = (int(e.value) for e in buffer.shape)
    wm, wn = grid(buffer, threads)
    tm, tn = m // wm, n // wn
    tiles_n = tn // 8
    warp, lane = tirx.floordiv(tx, WARP), tirx.floormod(tx, WARP)
    tile, q = tirx.floordiv(r, 4), tirx.floormod(r, 4)
    row_ = tirx.floordiv(warp, wn) * tm + tirx.floordiv(tile, tiles_n) * 16 + \
        tirx.floordiv(lane, 4) + tirx.floordiv(q, 2) * 8
    col = tirx.floormod(warp, wn) * tn + tirx.floormod(tile, tiles_n) * 8 + \
        tirx.floormod(lane, 4) * 2 + tirx.floormod(q, 2)
    return row_, col


def register_index(buffer, r):
    """Register ``r`` as an index of the (M, N) fragment buffer (flattened: ``r``)."""
    n = int(buffer.shape[1].value)
    return [tirx.floordiv(r, n), tirx.floormod(r, n)]


# -- row vectors ---------------------------------------------------------------------------------
def row_registers(buffer, threads: int) -> int:
    """Registers per thread of a row vector: two per 16-row tile of its warp's strip."""
    return 2 * (int(buffer.shape[0].value) // (threads // WARP) // 16)


def row(buffer, s, threads: int, tx):
    """The row register ``s`` of thread ``tx`` holds in a row vector."""
    m = int(buffer.shape[0].value)
    lane = tirx.floormod(tx, WARP)
    return tirx.floordiv(tx, WARP) * (m // (threads // WARP)) + \
        tirx.floordiv(s, 2) * 16 + tirx.floormod(s, 2) * 8 + tirx.floordiv(lane, 4)


def row_of_register(acc, r):
    """The row-vector register holding the row of accumulator register ``r`` (a ``(warps x
    1)`` grid: register ``r`` is element ``r % 4`` of 16x8 tile ``r // 4``)."""
    tiles_n = int(acc.shape[1].value) // 8
    return tirx.floordiv(tirx.floordiv(r, 4), tiles_n) * 2 + tirx.floordiv(tirx.floormod(r, 4), 2)


# -- spread fragments ----------------------------------------------------------------------------
def spread_registers(shape, threads: int) -> int | None:
    """Registers per thread of a fragment of constant ``shape`` spread over ``threads``, None
    when its elements do not split evenly over them."""
    total = 1
    for e in shape:
        if not isinstance(e, int | tirx.IntImm):
            return None
        total *= int(e.value) if isinstance(e, tirx.IntImm) else e
    return total // threads if total % threads == 0 and total >= threads else None


def spread_register_index(buffer, k):
    """Register ``k`` as an index of a spread fragment: ``[0, ..., 0, k]``, the register array
    having the fragment's rank (:func:`spread_register_shape`)."""
    return [tirx.const(0, "int32")] * (len(buffer.shape) - 1) + [k]


def spread_register_shape(buffer, threads: int) -> list[int]:
    """The shape of a spread fragment's register array in each thread."""
    return [1] * (len(buffer.shape) - 1) + [spread_registers(buffer.shape, threads)]


def spread_rows(shape, axis: int, threads: int) -> tuple[int, int] | None:
    """``(rows, per_row)`` of a reduction along ``axis`` of a spread fragment of ``shape``:
    register ``k`` of every thread holds an element of row ``k // per_row``; None unless the
    dimensions after ``axis`` have extent one and ``axis``'s length is a multiple of
    ``threads``."""
    dims = [int(e.value) if isinstance(e, tirx.IntImm) else e for e in shape]
    axis %= len(dims)
    if spread_registers(dims, threads) is None or any(d != 1 for d in dims[axis + 1:]) or \
            dims[axis] % threads:
        return None
    per_row = dims[axis] // threads
    return spread_registers(dims, threads) // per_row, per_row
