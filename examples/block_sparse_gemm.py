"""Block-sparse GEMM: each (block_M x block_K) x (block_K x block_N) product is computed only
where a block mask says so (T.any_of over the mask's flags of that K block), fp16 in / fp32
accumulate.

Run: python examples/block_sparse_gemm.py [--m 512 --n 512 --k 1024] [--density 0.5]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit(out_idx=[-1])
def block_sparse_matmul(M, N, K, flags=2, block_M=64, block_N=64, block_K=32, num_stages=2,
                        dtype="float16"):
    """``BlockMask[i, j, k, :]`` holds ``flags`` booleans per output block ``(i, j)`` and K
    block ``k``; the product of that K block is added when any of them is set."""
    mask_shape = (T.ceildiv(M, block_M), T.ceildiv(N, block_N), T.ceildiv(K, block_K), flags)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             BlockMask: T.Tensor(mask_shape, "bool"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if T.any_of(BlockMask[by, bx, k, :]):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def random_mask(M, N, K, density, flags=2, block_M=64, block_N=64, block_K=32, seed=0):
    """A block mask with about ``density`` of the K blocks kept (one flag of the ``flags``
    set), and every output block's first K block skipped (the accumulator must still start
    at zero)."""
    gen = torch.Generator().manual_seed(seed)
    blocks = (-(-M // block_M), -(-N // block_N), -(-K // block_K))
    kept = torch.rand(blocks, generator=gen) < density
    kept[:, :, 0] = False
    mask = torch.zeros(*blocks, flags, dtype=torch.bool)
    which = torch.randint(0, flags, blocks, generator=gen)
    mask.scatter_(3, which.unsqueeze(-1), kept.unsqueeze(-1))
    return mask


def reference(a, b, mask, block_M=64, block_N=64, block_K=32):
    """The dense product of ``a`` with its masked-out K blocks zeroed, per output block."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros(M, N)
    for i in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            keep = mask[i, j].any(-1).repeat_interleave(block_K)[:K]
            rows, cols = slice(i * block_M, (i + 1) * block_M), slice(j * block_N,
                                                                     (j + 1) * block_N)
            c[rows, cols] = (a[rows].float() * keep) @ b[:, cols].float()
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--density", type=float, default=0.5)
    args = parser.parse_args()
    a = torch.randn(args.m, args.k).half()
    b = torch.randn(args.k, args.n).half()
    mask = random_mask(args.m, args.n, args.k, args.density)
    kernel = block_sparse_matmul(args.m, args.n, args.k)
    c = kernel(a, b, mask)
    torch.testing.assert_close(c, reference(a, b, mask), rtol=1e-3, atol=1e-3 * args.k ** 0.5)
    ms = do_bench(lambda: kernel(a, b, mask), return_mode="median")
    kept = mask.any(-1).float().mean().item()
    print(f"block-sparse gemm {args.m}x{args.n}x{args.k}, {kept:.0%} of the K blocks kept: "
          f"matches torch, {ms:.3f} ms")


if __name__ == "__main__":
    main()
