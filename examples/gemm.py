"""The standard GEMM (blocks 128x128x32, 3 pipeline stages), fp16 in / fp32 accumulate.

Run: python examples/gemm.py [--m 1024 --n 1024 --k 1024] [--dtype float16]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit
def matmul(A, B, block_M=128, block_N=128, block_K=32, num_stages=3, dtype=T.float16,
           accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.m, args.k).to(dtype)
    b = torch.randn(args.k, args.n).to(dtype)
    c = matmul(a, b, dtype=args.dtype)
    ref = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(c.float(), ref.float(), rtol=2e-2, atol=2e-2 * args.k ** 0.5)
    ms = do_bench(lambda: matmul(a, b, dtype=args.dtype), return_mode="median")
    tflops = 2 * args.m * args.n * args.k / ms * 1e-9
    print(f"gemm {args.m}x{args.n}x{args.k} {args.dtype}: matches torch, {ms:.3f} ms, "
          f"{tflops:.3f} TFLOP/s")


if __name__ == "__main__":
    main()
