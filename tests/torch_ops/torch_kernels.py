"""Kernels of the torch operator tests (compiled once per process, cached by their JIT)."""

import tilewright
import tilewright.language as T


@tilewright.jit(target="cpu", torch_op="tw_test::vadd")
def vector_add(A, B, block_M: int = 256):
    """Eager style, T.const: compiled once per length, one operator."""
    M = T.const("M")
    A: T.Tensor((M,), T.float32)
    B: T.Tensor((M,), T.float32)
    C = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as (bx,):
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                C[bx * block_M + i] = A[bx * block_M + i] + B[bx * block_M + i]
    return C


@tilewright.jit(target="cpu", torch_op="tw_test::row_scale")
def row_scale(X, W, block_N: int = 64):
    """Eager style, T.dynamic: one kernel for every shape; Y has X's shape, R one row."""
    M, N = T.dynamic("m"), T.dynamic("n")
    X: T.Tensor((M, N), T.float32)
    W: T.Tensor((N,), T.float32)
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), M, threads=64) as (bx, by):
        for j in T.Parallel(block_N):
            if bx * block_N + j < N:
                Y[by, bx * block_N + j] = X[by, bx * block_N + j] * W[bx * block_N + j]
    return Y


@tilewright.jit(out_idx=[-1], target="cpu")
def rmsnorm(M, N, block_M=4, dtype="float32"):
    """Factory style, static shapes, a scalar parameter (eps)."""
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), eps: T.float32,
             Y: T.Tensor((M, N), dtype)):
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


@tilewright.jit(target="cpu")
def rope(M, D, block_M=4, dtype="float32"):
    """Factory style, in place (no out_idx): rotates the two halves of each row of Q."""
    half = D // 2

    @T.prim_func
    def main(Q: T.Tensor((M, D), dtype), Cos: T.Tensor((M, half), dtype),
             Sin: T.Tensor((M, half), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            q = T.alloc_fragment((block_M, D), dtype)
            o = T.alloc_fragment((block_M, D), dtype)
            T.copy(Q[bx * block_M, 0], q)
            for i, j in T.Parallel(block_M, half):
                o[i, j] = q[i, j] * Cos[bx * block_M + i, j] - \
                    q[i, j + half] * Sin[bx * block_M + i, j]
                o[i, j + half] = q[i, j + half] * Cos[bx * block_M + i, j] + \
                    q[i, j] * Sin[bx * block_M + i, j]
            T.copy(o, Q[bx * block_M, 0])

    return main


@tilewright.jit(out_idx=[-1], target="cpu")
def take_first(n_out):
    """An output whose size is a scalar argument's value, not an input's size."""
    length = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((T.dynamic("m"),), "float32"), n: T.int32,
             C: T.Tensor((length,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                C[i] = A[i]

    return main


@tilewright.jit(out_idx=[-1], target="cpu")
def softmax_fwd(M, N, block_M=4, dtype="float64"):
    """Row softmax: X -> Y."""
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), dtype)
            row_max = T.alloc_fragment((block_M,), dtype)
            row_sum = T.alloc_fragment((block_M,), dtype)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


@tilewright.jit(out_idx=[-1], target="cpu")
def softmax_bwd(M, N, block_M=4, dtype="float64"):
    """Its backward: (Y, grad_Y) -> grad_X = Y * (grad_Y - sum(grad_Y * Y))."""
    @T.prim_func
    def main(Y: T.Tensor((M, N), dtype), grad_Y: T.Tensor((M, N), dtype),
             grad_X: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            y = T.alloc_fragment((block_M, N), dtype)
            g = T.alloc_fragment((block_M, N), dtype)
            prod = T.alloc_fragment((block_M, N), dtype)
            dot = T.alloc_fragment((block_M,), dtype)
            T.copy(Y[bx * block_M, 0], y)
            T.copy(grad_Y[bx * block_M, 0], g)
            for i, j in T.Parallel(block_M, N):
                prod[i, j] = y[i, j] * g[i, j]
            T.reduce_sum(prod, dot, dim=1)
            for i, j in T.Parallel(block_M, N):
                g[i, j] = y[i, j] * (g[i, j] - dot[i])
            T.copy(g, grad_X[bx * block_M, 0])

    return main
