"""Kernels the reliability tests compile, importable by their child processes too."""

from pathlib import Path

import tilewright.language as T

FOLDER = Path(__file__).parent


def scaled(scale: float, n: int = 64):
    """C = A * scale over ``n`` elements (each scale is another kernel, another cache key)."""
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32)) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    C[bx * 32 + i] = A[bx * 32 + i] * scale
    return main
