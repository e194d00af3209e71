"""Elementwise add over a 2-D tensor whose shape is not a multiple of the tile (tails).

Run: python examples/elementwise_add.py
"""

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit
def add(A, B, block_M=32, block_N=64):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            row, col = by * block_M + i, bx * block_N + j
            if row < M and col < N:
                C[row, col] = A[row, col] + B[row, col]
    return C


def main():
    a, b = torch.randn(1001, 999), torch.randn(1001, 999)
    torch.testing.assert_close(add(a, b), a + b)
    ours = do_bench(lambda: add(a, b), return_mode="median")
    theirs = do_bench(lambda: a + b, return_mode="median")
    print(f"add 1001x999 (tails): matches torch, {ours:.3f} ms (torch {theirs:.3f} ms)")


if __name__ == "__main__":
    main()
