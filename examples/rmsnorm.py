"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, one block per block_M rows.

Run: python examples/rmsnorm.py [--m 4096 --n 1024] [--dtype float16]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit(out_idx=[-1])
def rmsnorm(M, N, eps=1e-6, block_M=4, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            sq = T.alloc_fragment((block_M, N), "float32")
            ss = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i in T.Parallel(block_M):
                ss[i] = T.rsqrt(ss[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * ss[i] * W[j]
            T.copy(x, Y[bx * block_M, 0])

    return main


def reference(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    x, w = torch.randn(args.m, args.n).to(dtype), torch.randn(args.n).to(dtype)
    kernel = rmsnorm(args.m, args.n, dtype=args.dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(kernel(x, w), reference(x, w, 1e-6), rtol=tol, atol=tol)
    ours = do_bench(lambda: kernel(x, w), return_mode="median")
    theirs = do_bench(lambda: reference(x, w, 1e-6), return_mode="median")
    print(f"rmsnorm {args.m}x{args.n} {args.dtype}: matches torch, {ours:.3f} ms "
          f"(torch {theirs:.3f} ms, ratio {theirs / ours:.2f}x)")


if __name__ == "__main__":
    main()
