"""Tile programs of the templates' computations (:meth:`MatmulTemplate.equivalent_function`).

This module has no ``from __future__ import annotations``: a kernel's parameter annotations
name local shapes, which must be values when ``T.prim_func`` reads them."""

from .. import language as T


def matmul_program(M: int, N: int, K: int, dtype: str, out_dtype: str, accum: str,
                   trans_A: bool, trans_B: bool, tiling: tuple):
    """C = A @ B (A stored as (K, M) with ``trans_A``, B as (N, K) with ``trans_B``) with
    ``tiling`` = (block_M, block_N, block_K, num_stages, threads)."""
    bm, bn, bk, stages, threads = tiling
    a_shape, a_tile = ((K, M), (bk, bm)) if trans_A else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_B else ((K, N), (bk, bn))

    @T.prim_func
    def matmul(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
               C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_tile = T.alloc_shared(a_tile, dtype)
            B_tile = T.alloc_shared(b_tile, dtype)
            C_tile = T.alloc_fragment((bm, bn), accum)
            T.clear(C_tile)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_A:
                    T.copy(A[k * bk, by * bm], A_tile)
                else:
                    T.copy(A[by * bm, k * bk], A_tile)
                if trans_B:
                    T.copy(B[bx * bn, k * bk], B_tile)
                else:
                    T.copy(B[k * bk, bx * bn], B_tile)
                T.gemm(A_tile, B_tile, C_tile, transpose_A=trans_A, transpose_B=trans_B)
            T.copy(C_tile, C[by * bm, bx * bn])

    return matmul
