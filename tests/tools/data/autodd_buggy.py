# ruff: noqa  (a planted bug for the AutoDD test: noise is the point)
import math

import tilewright.language as T

M, N, K = 64, 64, 64
scale = math.sqrt(K)
unused = [i * i for i in range(10)]


def helper(x):
    return x + 1


def build(block_K_b=48):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float32")
            B_s = T.alloc_shared((block_K_b, 64), "float32")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.clear(C_l)
            T.copy(A[0, 0], A_s)
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[0, 0])
    return main


with __freeze__:
    print("header kept")
total = helper(3) * 2
if total > 2:
    print("total", total)
func = build()
print("built", func)
