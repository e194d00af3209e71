"""2:4 structured-sparse GEMM: C = A @ B where A [M, K] keeps at most 2 nonzeros in every 4
consecutive elements of a row, the pattern the sparse tensor cores (mma.sp) compute at twice
the dense rate.

A is stored compressed (``tilewright.utils.sparse.compress``): its kept values A_sparse
[M, K / 2] and metadata E [M, K / e_factor] saying where each came from (16-bit metadata holds
four groups: e_factor 16). The kernel copies a k-tile of values, metadata and B to shared
memory and multiplies them with ``T.gemm_sp``, accumulating in float32. C is float32, or
``out_dtype`` (the input dtype, as the dense GEMM writes it: half the bytes of C), stored
through a shared tile with ``c_shared`` (whole rows of 16-byte stores instead of each thread's
accumulator pairs); ``panel`` rasterises the blocks in panels of that many block rows
(``T.use_swizzle``), as the dense benchmark GEMM does. With ``workers`` the kernel is
persistent: that many blocks (one per SM) walk the output tiles (``T.Persistent``, in panels
of ``panel`` or 8 block rows), so a block's loads for its next tile run while it stores the
last one.

Run: python examples/gemm_sp.py [--m 512 --n 512 --k 512] [--dtype bfloat16] [--e_dtype int32]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright import sparse
from tilewright.profiler import do_bench
from tilewright.utils.sparse import compress, randn_semi_sparse


@tilewright.jit(out_idx=[-1])
def gemm_sp_kernel(M, N, K, dtype="float16", e_dtype="int16", accum_dtype="float32",
                   block_M=128, block_N=128, block_K=64, threads=128, num_stages=2,
                   out_dtype=None, c_shared=False, panel=None, workers=None):
    """The kernel: K a multiple of ``block_K``, ``block_K`` of ``e_factor``; C in
    ``out_dtype`` (default ``accum_dtype``); ``workers`` blocks walking the tiles, or one
    block a tile."""
    e_factor = sparse.e_factor(dtype, e_dtype)
    out_dtype = out_dtype or accum_dtype

    @T.macro
    def output_tile(A_sparse, E, B, C, A_s, E_s, B_s, C_l, C_s, by, bx):
        T.clear(C_l)
        for ko in T.Pipelined(K // block_K, num_stages=num_stages):
            T.copy(A_sparse[by * block_M, ko * block_K // 2], A_s)
            T.copy(E[by * block_M, ko * block_K // e_factor], E_s)
            T.copy(B[ko * block_K, bx * block_N], B_s)
            T.gemm_sp(A_s, E_s, B_s, C_l)
        if c_shared:
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * block_M, bx * block_N])
        else:
            T.copy(C_l, C[by * block_M, bx * block_N])

    m_blocks, n_blocks = T.ceildiv(M, block_M), T.ceildiv(N, block_N)

    if workers:
        @T.prim_func
        def persistent(A_sparse: T.Tensor((M, K // 2), dtype),
                       E: T.Tensor((M, K // e_factor), e_dtype),
                       B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)):
            with T.Kernel(workers, threads=threads) as worker:
                A_s = T.alloc_shared((block_M, block_K // 2), dtype)
                E_s = T.alloc_shared((block_M, block_K // e_factor), e_dtype)
                B_s = T.alloc_shared((block_K, block_N), dtype)
                C_l = T.alloc_fragment((block_M, block_N), accum_dtype)
                C_s = T.alloc_shared((block_M, block_N), out_dtype) if c_shared else None
                for by, bx in T.Persistent([m_blocks, n_blocks], workers, worker,
                                           group_size=panel or 8):
                    output_tile(A_sparse, E, B, C, A_s, E_s, B_s, C_l, C_s, by, bx)

        return persistent

    @T.prim_func
    def main(A_sparse: T.Tensor((M, K // 2), dtype), E: T.Tensor((M, K // e_factor), e_dtype),
             B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(n_blocks, m_blocks, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K // 2), dtype)
            E_s = T.alloc_shared((block_M, block_K // e_factor), e_dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_s = T.alloc_shared((block_M, block_N), out_dtype) if c_shared else None
            if panel:
                T.use_swizzle(panel_size=panel)
            output_tile(A_sparse, E, B, C, A_s, E_s, B_s, C_l, C_s, by, bx)

    return main


def gemm_sp_mm(a_sparse, e, b, **tile):
    """C = decompress(a_sparse, e) @ b; the shapes and dtypes are checked before launch."""
    (m, half), (k, n) = a_sparse.shape, b.shape
    dtype, e_dtype = (str(t.dtype).removeprefix("torch.") for t in (a_sparse, e))
    if e_dtype not in sparse.META_BITS or dtype not in sparse.SPARSE_GROUPS:
        raise ValueError(f"A_sparse must be one of {', '.join(sparse.SPARSE_GROUPS)} and E one "
                         f"of {', '.join(sparse.META_BITS)} (got {dtype} and {e_dtype})")
    factor = sparse.e_factor(dtype, e_dtype)
    if half * 2 != k or k % factor or tuple(e.shape) != (m, k // factor):
        raise ValueError(f"for B [{k}, {n}], A_sparse must be [M, K / 2] = [{m}, {k // 2}] and "
                         f"E [M, K / {factor}] = [{m}, {k / factor:g}] (got {list(a_sparse.shape)}"
                         f" and {list(e.shape)})")
    kernel = gemm_sp_kernel(m, n, k, dtype, e_dtype, **tile)
    return kernel(a_sparse, e, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--e_dtype", default="int16", choices=["int8", "int16", "int32"])
    parser.add_argument("--block_K", type=int, default=64)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    a = randn_semi_sparse(args.m, args.k, dtype)
    b = torch.randn(args.k, args.n).to(dtype)
    a_sparse, e = compress(a, getattr(torch, args.e_dtype))
    c = gemm_sp_mm(a_sparse, e, b, block_K=args.block_K)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-3 * ref.abs().mean())
    ms = do_bench(lambda: gemm_sp_mm(a_sparse, e, b, block_K=args.block_K),
                  return_mode="median")
    tflops = 2 * args.m * args.n * args.k / ms * 1e-9
    print(f"2:4 sparse gemm {args.m}x{args.n}x{args.k} {args.dtype} ({args.e_dtype} metadata): "
          f"matches torch, {ms:.3f} ms, {tflops:.3f} TFLOP/s (dense-equivalent)")


if __name__ == "__main__":
    main()
