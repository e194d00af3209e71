"""Dynamic-shape GEMM: one compiled kernel serves every M, N, K (T.dynamic).

Run: python examples/gemm_dynamic.py
"""

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench


@tilewright.jit
def matmul_dynamic(A, B, block_M=64, block_N=64, block_K=32, in_dtype=T.float32,
                   out_dtype=T.float32, accum_dtype=T.float32, num_stages=2, threads=128):
    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")
    A: T.Tensor((M, K), in_dtype)
    B: T.Tensor((K, N), in_dtype)
    C = T.empty((M, N), out_dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), in_dtype)
        B_shared = T.alloc_shared((block_K, block_N), in_dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def main():
    for m, n, k in [(128, 128, 128), (300, 200, 100), (77, 513, 65)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.testing.assert_close(matmul_dynamic(a, b), a @ b, rtol=1e-4, atol=1e-4)
        ms = do_bench(lambda a=a, b=b: matmul_dynamic(a, b), return_mode="median")
        print(f"dynamic gemm {m}x{n}x{k}: matches torch, {ms:.3f} ms")
    print(f"compiled specialisations: {len(matmul_dynamic._kernels)}")


if __name__ == "__main__":
    main()
