"""Row softmax: each block normalises block_M rows held in a fragment.

Run: python examples/softmax.py [--m 4096 --n 1024] [--dtype float16]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit(out_idx=[-1])
def softmax(M, N, block_M=4, dtype="float32"):
    scale = 1.44269504  # log2(e): exp(x) = exp2(x * log2(e))

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * scale)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.m, args.n).to(dtype)
    kernel = softmax(args.m, args.n, dtype=args.dtype)
    ref = torch.softmax(x.float(), dim=1).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(kernel(x), ref, rtol=tol, atol=tol)
    ours = do_bench(lambda: kernel(x), return_mode="median")
    theirs = do_bench(lambda: torch.softmax(x, dim=1), return_mode="median")
    print(f"softmax {args.m}x{args.n} {args.dtype}: matches torch, {ours:.3f} ms "
          f"(torch {theirs:.3f} ms, ratio {theirs / ours:.2f}x)")


if __name__ == "__main__":
    main()
