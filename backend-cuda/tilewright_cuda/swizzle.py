"""The swizzled shared-memory layout of 2-byte GEMM operand tiles: the contract between layout
inference, memory placement, the ``mma.sync``/``ldmatrix`` GEMM and any other instruction
variant that reads such tiles (``wgmma`` descriptors, TMA boxes).

A 2-D shared tile ``[R, C]`` of ``float16``/``bfloat16`` that is a gemm operand is stored as
column blocks of ``W`` bytes, ``W = 128`` when a row has at least 128 bytes (``C * 2 >= 128``,
and then ``C * 2`` must be a multiple of 128), else ``W = C * 2``. Element ``(r, c)`` has the
byte offset, from the tile base,

    o = (c * 2 // W) * R * W + r * W + (c * 2 % W)

which is then swizzled with CuTe's ``Swizzle<B, 4, 3>`` on byte offsets,

    o' = o ^ (((o >> 7) & ((1 << B) - 1)) << 4)

with ``B = 3`` for ``W = 128``, ``2`` for ``W = 64``, ``1`` for ``W = 32`` and ``0`` (plain
row-major) otherwise. The XOR moves whole 16-byte chunks, so eight consecutive elements that
start at a multiple of eight columns stay contiguous and 16-byte aligned (``cp.async``,
``ldmatrix`` rows), and the eight 16-byte rows of one ``ldmatrix`` 8x8 matrix land in eight
distinct bank groups. The tile base is aligned to :data:`ALIGN` bytes (one full swizzle
period), so the pattern on absolute shared addresses equals the pattern on offsets: this is
CUTLASS's ``SW128``/``SW64``/``SW32`` K-major layout that ``wgmma`` and TMA expect.

A tile with ``S`` pipeline versions is ``[S, R, C]``: version ``v`` starts ``v * R * C``
elements after the base (a multiple of the swizzle period whenever ``R * W >= 1024``).

Where the layout is recorded: infer_layout marks a chosen buffer by declaring it with
``data_alignment = ALIGN`` (:func:`layout_of` reads the mark) and writes the choice into the
PrimFunc attribute :data:`ATTR` (buffer name -> ``[W, B]``) for later passes and codegen.
"""

from __future__ import annotations

from tvm import tirx

ALIGN = 1024
ATTR = "tw.cuda.smem_layout"
SWIZZLE_BITS = {128: 3, 64: 2, 32: 1}
DTYPES = ("float16", "bfloat16")


def params(rows: int, cols: int, dtype: str = "float16") -> tuple[int, int] | None:
    """``(W, B)`` of the contract for a ``[rows, cols]`` tile, or None when the tile gets no
    swizzle (not a 2-byte dtype, rows too short to swizzle, or wide rows that do not split
    into whole 128-byte blocks)."""
    if dtype not in DTYPES or rows <= 0 or cols <= 0:
        return None
    row_bytes = cols * 2
    if row_bytes > 128 and row_bytes % 128:
        return None
    width = 128 if row_bytes >= 128 else row_bytes
    bits = SWIZZLE_BITS.get(width, 0)
    return (width, bits) if bits else None


def byte_offset(r: int, c: int, rows: int, width: int, bits: int) -> int:
    """Swizzled byte offset of element ``(r, c)`` of a 2-byte tile (the formula above)."""
    o = (c * 2 // width) * rows * width + r * width + (c * 2 % width)
    return o ^ (((o >> 7) & ((1 << bits) - 1)) << 4)


def _const_shape(buffer) -> list[int] | None:
    if not all(isinstance(e, tirx.IntImm) for e in buffer.shape):
        return None
    return [int(e.value) for e in buffer.shape]


def layout_of(buffer) -> tuple[int, int] | None:
    """``(W, B)`` of a buffer that layout inference chose to swizzle, else None. The last two
    dimensions are the tile; a leading dimension, when present, counts pipeline versions."""
    if int(buffer.data_alignment) != ALIGN:
        return None
    shape = _const_shape(buffer)
    if shape is None or len(shape) not in (2, 3):
        return None
    return params(shape[-2], shape[-1], str(buffer.dtype))


def marked(buffer, shape=None):
    """A copy of ``buffer`` (optionally with another shape) carrying the swizzle mark."""
    return tirx.decl_buffer(shape if shape is not None else buffer.shape, buffer.dtype,
                            buffer.name, scope=str(buffer.scope()), data_alignment=ALIGN)


def element_index(buffer, indices):
    """The flat element index of ``buffer[indices]`` under its swizzled layout (a TIR
    expression); ``indices`` are ``[r, c]`` or ``[version, r, c]``."""
    shape = _const_shape(buffer)
    width, bits = layout_of(buffer)
    rows, cols = shape[-2], shape[-1]
    per_row = width // 2  # elements per block row
    *version, r, c = indices
    if cols > per_row:
        e = tirx.floordiv(c, per_row) * (rows * per_row) + r * per_row + tirx.floormod(c, per_row)
    else:
        e = r * per_row + c
    # byte bits [7, 7 + B) select the 16-byte chunk to flip: element bits [6, 6 + B) -> [3, ...)
    mask = tirx.const((1 << bits) - 1, "int32")
    flip = tirx.shift_left(tirx.bitwise_and(tirx.shift_right(e, tirx.const(6, "int32")), mask),
                           tirx.const(3, "int32"))
    e = tirx.bitwise_xor(e, flip)
    if version:
        e = version[0] * (rows * cols) + e
    return e
