"""The fractal formats of the cube's memories.

A cube operand is a 2-D tile (the last two dimensions of its buffer; leading dimensions index
versions of the tile) stored in fractals of 16 rows x C0 elements, C0 = 32 bytes / element
size (512 bytes a fractal):

- L1 ``NZ``: column blocks of C0 elements, each holding every (padded) row;
- L0A ``ZZ`` (m x k): fractals row-major over (m block, k block), row-major inside;
- L0B ``ZN`` (k x n): fractals row-major over (k block, n block), column-major inside;
- L0C ``NZ`` (m x n, 16 x 16 fractals): fractals column-major, row-major inside.
"""

from __future__ import annotations

from .dtypes import dtype_bytes

FRACTAL = 512  # bytes


def c0(dtype) -> int:
    return 32 // dtype_bytes(dtype)


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def padded_tile(scope: str, rows: int, cols: int, dtype) -> tuple[int, int]:
    """The (rows, cols) a tile of ``scope`` occupies in its fractal format."""
    k0 = c0(dtype)
    if scope == "ascend.l0b":
        return round_up(rows, k0), round_up(cols, 16)
    if scope == "ascend.l0c":
        return round_up(rows, 16), round_up(cols, 16)
    if scope == "ascend.l1" and dtype_bytes(dtype) == 4:
        # 16 x 16 squares (two fractals) for LoadDataWithTranspose
        return round_up(rows, 16), round_up(cols, 16)
    return round_up(rows, 16), round_up(cols, k0)


def padded_bytes(buf) -> int:
    """Bytes of a cube-memory buffer in its fractal format (every version padded)."""
    shape = [int(s) for s in buf.shape]
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
    versions = 1
    for s in shape[:-2]:
        versions *= s
    pr, pc = padded_tile(str(buf.scope()), rows, cols, str(buf.dtype))
    return versions * pr * pc * dtype_bytes(str(buf.dtype))
