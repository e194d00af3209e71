"""Persistent GEMM: a fixed number of resident blocks walk all output tiles (T.Persistent).

Run: python examples/gemm_persistent.py [--workers 4]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit(out_idx=[-1])
def matmul_persistent(M, N, K, workers, block_M=64, block_N=64, block_K=32, num_stages=2,
                      dtype="float32", accum_dtype="float32"):
    m_blocks, n_blocks = T.ceildiv(M, block_M), T.ceildiv(N, block_N)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(workers, threads=128) as block_id:
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared = T.alloc_shared((block_M, block_N), dtype)
            for bx, by in T.Persistent([m_blocks, n_blocks], workers, block_id):
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[bx * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, by * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C_shared)
                T.copy(C_shared, C[bx * block_M, by * block_N])

    return main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=500)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    kernel = matmul_persistent(args.m, args.n, args.k, args.workers)
    a, b = torch.randn(args.m, args.k), torch.randn(args.k, args.n)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    ms = do_bench(lambda: kernel(a, b), return_mode="median")
    print(f"persistent gemm {args.m}x{args.n}x{args.k} on {args.workers} workers: matches "
          f"torch, {ms:.3f} ms")


if __name__ == "__main__":
    main()
