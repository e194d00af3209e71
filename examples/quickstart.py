"""tilewright quickstart: vector add, GEMM and softmax on the CPU backend, checked against torch.

Run: python examples/quickstart.py
"""

import os
import time

# torch's OpenMP workers spin for a while after each call and would take the cores from the
# kernel timed next (tilewright's TVM workers do not spin): let them sleep, for fair timings.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
import torch  # noqa: E402


# Eager style: tensors are declared in the body, the output with T.empty.
@tilewright.jit(target="cpu")
def vector_add(A, B, block_M: int = 1024):
    M = T.const("M")
    A: T.Tensor((M,), T.float32)
    B: T.Tensor((M,), T.float32)
    C = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as (bx,):
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                C[bx * block_M + i] = A[bx * block_M + i] + B[bx * block_M + i]
    return C


# Kernel-factory style: compile-time parameters in, a T.prim_func out.
@tilewright.jit(out_idx=[-1], target="cpu")
def matmul(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


# Fast math, as TileLang's attention examples ask for it (its default is off): exp as a polynomial
# and division by the row sum as a multiplication by its reciprocal (each within a few units in
# the last place; without it, IEEE division and an exp within 2 ulp).
@tilewright.jit(out_idx=[-1], target="cpu",
                pass_configs={tilewright.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def softmax(M, N, block_M=8, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


def timed(ours, theirs, *args, reps=21):
    """Median milliseconds of ``ours(*args)`` and ``theirs(*args)``, their calls alternating
    so that other load on the machine slows both alike."""
    ours(*args), theirs(*args)
    times = ([], [])
    for _ in range(reps):
        for fn, acc in zip((ours, theirs), times):
            start = time.perf_counter()
            fn(*args)
            acc.append(time.perf_counter() - start)
    return tuple(sorted(t)[len(t) // 2] * 1e3 for t in times)


def main():
    torch.manual_seed(0)
    rows = []

    a, b = torch.randn(1_000_003), torch.randn(1_000_003)
    torch.testing.assert_close(vector_add(a, b), a + b)
    rows.append(("vector add (1M, tail)", *timed(vector_add, torch.add, a, b)))

    M = N = K = 512
    kernel = matmul(M, N, K)
    A, B = torch.randn(M, K), torch.randn(K, N)
    torch.testing.assert_close(kernel(A, B), A @ B, rtol=1e-4, atol=1e-3)
    rows.append((f"gemm {M}x{N}x{K} fp32", *timed(kernel, torch.matmul, A, B)))

    X = torch.randn(4096, 256)
    sm = softmax(4096, 256)
    torch.testing.assert_close(sm(X), torch.softmax(X, dim=1), rtol=1e-5, atol=1e-6)
    rows.append(("softmax 4096x256 fp32", *timed(sm, lambda x: torch.softmax(x, 1), X)))

    print(f"tilewright {tilewright.__version__} on the CPU backend; all results match torch\n")
    print(f"{'kernel':<24}{'tilewright ms':>15}{'torch ms':>12}{'torch / ours':>14}")
    for name, ours, theirs in rows:
        print(f"{name:<24}{ours:>15.3f}{theirs:>12.3f}{theirs / ours:>13.2f}x")


if __name__ == "__main__":
    main()
