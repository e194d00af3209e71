"""Layouts, as ``tilelang.layout`` lays them out: :class:`Layout`, :class:`Fragment` and the
swizzled shared-memory layouts that ``T.annotate_layout`` takes.

Layouts are hints about where elements live, never about what a kernel computes: a backend
that does not use them (the CPU backend) ignores them.
"""

from __future__ import annotations

from ..errors import kernel_error
from ..language.annotations import Fragment, Layout
from ..language.buffer import TileBuffer
from ..language.dtypes import DType

__all__ = ["Fragment", "Layout", "make_full_bank_swizzled_layout", "make_gemm_fragment_8x8",
           "make_gemm_fragment_8x8_transposed",
           "make_half_bank_swizzled_layout", "make_quarter_bank_swizzled_layout",
           "make_swizzled_layout"]


def _xor_swizzle(buffer, bank_bytes: int, what: str) -> Layout:
    """Rows of 16-byte chunks permuted by XOR with the row index, within ``bank_bytes``."""
    if not isinstance(buffer, TileBuffer) or len(buffer.shape) != 2:
        raise kernel_error(f"{what} takes a 2-D shared buffer")
    rows, cols = buffer.shape
    vec = max(1, 16 // DType(buffer.dtype).itemsize) if buffer.dtype != "bool" else 16
    chunks = min(bank_bytes // 16, cols // vec) if isinstance(cols, int) else 1
    if chunks <= 1:
        return Layout(buffer.shape, lambda i, j: (i, j))

    def forward(i, j):
        chunk = (j // vec) % chunks
        return i, j - chunk * vec + ((chunk ^ (i % chunks)) * vec)

    return Layout(buffer.shape, forward)


def make_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    """The bank-conflict-free layout of a shared tile (128-byte XOR swizzle)."""
    return _xor_swizzle(buffer, 128, "make_swizzled_layout")


def make_full_bank_swizzled_layout(buffer) -> Layout:
    """128-byte XOR swizzle."""
    return _xor_swizzle(buffer, 128, "make_full_bank_swizzled_layout")


def make_half_bank_swizzled_layout(buffer) -> Layout:
    """64-byte XOR swizzle."""
    return _xor_swizzle(buffer, 64, "make_half_bank_swizzled_layout")


def make_quarter_bank_swizzled_layout(buffer) -> Layout:
    """32-byte XOR swizzle."""
    return _xor_swizzle(buffer, 32, "make_quarter_bank_swizzled_layout")


def make_gemm_fragment_8x8() -> Fragment:
    """The 8x8 tile of a warp's tensor-core fragment as ``ldmatrix`` / ``stmatrix`` and
    ``mma.m16n8k16`` hold it (PTX ISA, "Matrix fragments for mma.m16n8k16"): each of the 32
    threads holds two neighbouring elements of one row, thread ``4 * row + col // 2``."""
    return Fragment((8, 8), forward_thread_fn=lambda i, j: i * 4 + j // 2,
                    forward_index_fn=lambda i, j: j % 2)


def make_gemm_fragment_8x8_transposed() -> Fragment:
    """:func:`make_gemm_fragment_8x8` of the transposed tile: each thread holds two
    neighbouring elements of one column, thread ``4 * col + row // 2``."""
    return Fragment((8, 8), forward_thread_fn=lambda i, j: j * 4 + i // 2,
                    forward_index_fn=lambda i, j: i % 2)
