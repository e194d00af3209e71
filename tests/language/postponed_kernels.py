"""Kernels in a module with postponed annotations (PEP 563): their ``T.Tensor`` annotations
are strings that ``T.prim_func`` evaluates (tests/test_language.py)."""

from __future__ import annotations

import tilewright.language as T


def scale(M, N, factor=2.0):
    """``B = A * factor``: the shape comes from the factory's arguments (closure cells)."""
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=128) as (bx, by):
            for i, j in T.Parallel(32, 32):
                B[by * 32 + i, bx * 32 + j] = A[by * 32 + i, bx * 32 + j] * factor

    return main


def annotation_only(M, N, rows):
    """``rows`` appears only in an annotation, so the function does not close over it."""
    @T.prim_func
    def main(A: T.Tensor((rows, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=128) as (bx, by):
            for i, j in T.Parallel(32, 32):
                A[by * 32 + i, bx * 32 + j] = 0.0

    return main
