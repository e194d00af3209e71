"""Split-K GEMM: K is cut into slices computed by different blocks and summed with
T.atomic_add into a zero-initialised output.

Run: python examples/gemm_splitk.py [--splits 4]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit
def matmul_splitk(M, N, K, splits, block_M=64, block_N=64, block_K=32, dtype="float32"):
    k_per_split = T.ceildiv(K, block_K * splits)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits,
                      threads=128) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(k_per_split, num_stages=2):
                T.copy(A[by * block_M, (bz * k_per_split + k) * block_K], A_shared)
                T.copy(B[(bz * k_per_split + k) * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.atomic_add(C[by * block_M, bx * block_N], C_local)

    return main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=96)
    parser.add_argument("--k", type=int, default=2000)
    parser.add_argument("--splits", type=int, default=4)
    args = parser.parse_args()
    kernel = matmul_splitk(args.m, args.n, args.k, args.splits)
    a, b = torch.randn(args.m, args.k), torch.randn(args.k, args.n)
    c = torch.zeros(args.m, args.n)
    kernel(a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)
    ms = do_bench(lambda: kernel(a, b, c.zero_()), return_mode="median")
    print(f"split-K gemm {args.m}x{args.n}x{args.k} in {args.splits} splits: matches torch, "
          f"{ms:.3f} ms")


if __name__ == "__main__":
    main()
