"""bfloat16 buffers the kernel allocates (tiles, ``T.alloc_global`` workspaces), which TVM's
BF16ComputeLegalize re-declares as float32: the bits of a tile's element
(``T.reinterpret(S[i], "int16")``) come from its float32 value, and a workspace's
element read in a rounded bfloat16 operation is read as the float32 it holds (both were a
bitcast of a float32 to 16 bits that LLVM refuses). Checked against torch."""

import tilewright
import tilewright.language as T
import torch


def tile_bits(N=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "bfloat16"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=32) as _bx:
            S = T.alloc_shared((N,), "bfloat16")
            for i in T.Parallel(N):
                S[i] = X[i]
                Y[i] = T.cast(T.reinterpret(S[i], "int16"), "int32")

    return main


def test_bits_of_a_tile_element():
    x = torch.randn(64).bfloat16()
    y = tilewright.compile(tile_bits(), out_idx=[1], target="cpu")(x)
    assert torch.equal(y, x.view(torch.int16).int())


def workspace(M, N, bm=4, bn=8):
    """Two launches: the second adds a fragment to the workspace the first wrote."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "bfloat16"), B: T.Tensor((M, N), "bfloat16")):
        W = T.alloc_global((M, N), "bfloat16")
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M and bx * bn + j < N:
                    W[by * bm + i, bx * bn + j] = A[by * bm + i, bx * bn + j] * 2.0
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            own = T.alloc_fragment((bm, bn), "bfloat16")
            T.copy(A[by * bm, bx * bn], own)
            for i, j in T.Parallel(bm, bn):
                r, c = by * bm + i, bx * bn + j
                if r < M and c < N:
                    B[r, c] = W[M - 1 - r, c] + own[i, j]

    return main


def test_a_workspace_element_in_a_rounded_operation():
    a = torch.randn(12, 20).bfloat16()
    b = tilewright.compile(workspace(12, 20), out_idx=[1], target="cpu")(a)
    assert torch.equal(b, (a.flip(0).float() * 2 + a.float()).bfloat16())
