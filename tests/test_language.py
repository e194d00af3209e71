"""The tile language on the CPU reference backend: results match torch."""

import pytest
import tilewright
import tilewright.language as T
import torch


def close(a, b, **kw):
    torch.testing.assert_close(a, b, **kw)


# -- eager style -----------------------------------------------------------------------------
@tilewright.jit(target="cpu")
def vector_add(A, B, block_M: int = 128):
    M = T.const("M")
    A: T.Tensor((M,), T.float32)
    B: T.Tensor((M,), T.float32)
    C = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as (bx,):
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                C[bx * block_M + i] = A[bx * block_M + i] + B[bx * block_M + i]
    return C


@pytest.mark.parametrize("m", [128, 1000, 1, 257])
def test_vector_add_tails(m):
    a, b = torch.randn(m), torch.randn(m)
    close(vector_add(a, b), a + b)


def test_vector_add_block_size_is_compile_time():
    a, b = torch.randn(300), torch.randn(300)
    close(vector_add(a, b, block_M=64), a + b)
    close(vector_add(a, b, block_M=32), a + b)


def test_eager_compile_by_const_name():
    kernel = vector_add.compile(M=200)
    assert isinstance(kernel, tilewright.JITKernel)
    a, b = torch.randn(200), torch.randn(200)
    close(kernel(a, b), a + b)


@tilewright.jit(target="cpu")
def scale_shift_2d(X, alpha: float = 2.0, bm: int = 16, bn: int = 32):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
        for i, j in T.Parallel(bm, bn):
            r = by * bm + i
            c = bx * bn + j
            if r < M and c < N:
                Y[r, c] = X[r, c] * alpha + T.float32(1.0)
    return Y


def test_parallel_2d_with_tails():
    x = torch.randn(37, 70)
    close(scale_shift_2d(x), x * 2 + 1)


def test_symbolic_and_in_if_is_an_ir_and():
    text = scale_shift_2d.compile(M=37, N=70).get_tir().script()
    assert " and " in text


@tilewright.jit(target="cpu")
def relu_branch(X, blk: int = 64):
    M = T.const("M")
    X: T.Tensor((M,), T.float32)
    Y = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, blk)) as bx:
        for i in T.Parallel(blk):
            g = bx * blk + i
            if g < M:
                if X[g] > T.float32(0):
                    Y[g] = X[g]
                else:
                    Y[g] = T.float32(0)
    return Y


def test_symbolic_if_inside_parallel():
    x = torch.randn(150)
    close(relu_branch(x), torch.relu(x))


@tilewright.jit(target="cpu")
def unrolled_and_serial(X, weights=(1.0, 2.0, 3.0), blk: int = 32):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M,), T.float32)
    Z = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, blk)) as bx:
        acc = T.alloc_fragment((blk,), T.float32)
        tot = T.alloc_fragment((blk,), T.float32)
        T.clear(acc)
        T.clear(tot)
        for c, w in enumerate(weights):  # a Python list: unrolled at trace time
            for i in T.Parallel(blk):
                if bx * blk + i < M:
                    acc[i] = acc[i] + X[bx * blk + i, c] * w
        for k in range(N):  # range inside a kernel: a serial IR loop
            for i in T.Parallel(blk):
                if bx * blk + i < M:
                    tot[i] = tot[i] + X[bx * blk + i, k]
        for i in T.Parallel(blk):
            if bx * blk + i < M:
                Y[bx * blk + i] = acc[i]
                Z[bx * blk + i] = tot[i]
    return Y, Z


def test_python_for_unrolls_and_range_is_serial_loop():
    x = torch.randn(50, 7)
    y, z = unrolled_and_serial(x)
    close(y, x[:, 0] * 1 + x[:, 1] * 2 + x[:, 2] * 3)
    close(z, x.sum(1), rtol=1e-5, atol=1e-5)
    func = unrolled_and_serial.compile(M=50, N=7).get_tir()
    text = func.script()
    # the list loop left three copies of its body; `range(N)` is one serial IR loop
    assert text.count("acc[i] = acc[i] + X[") == 3
    assert text.count('"tw.loop": "serial"') == 1
    assert "for k in T.serial(7" in text


# -- factory style ---------------------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def prefix_sum(M, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M,), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1) as bx:
            acc = T.alloc_local((1,), dtype)
            acc[0] = T.cast(0, dtype)
            for k in T.serial(M):
                acc[0] = acc[0] + A[k]
                B[k] = acc[0]
    return main


def test_serial_loop():
    a = torch.randn(33)
    close(prefix_sum(33)(a), torch.cumsum(a, 0), rtol=1e-5, atol=1e-5)


@T.macro
def clamp_store(dst, src, idx, lo, hi):
    dst[idx] = T.min(T.max(src[idx], lo), hi)


@tilewright.jit(out_idx=[-1], target="cpu")
def clamp(M, lo, hi):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                clamp_store(B, A, i, T.float32(lo), T.float32(hi))
    return main


def test_macro_and_min_max():
    a = torch.randn(64) * 3
    close(clamp(64, -1.0, 0.5)(a), a.clamp(-1.0, 0.5))


@tilewright.jit(out_idx=[-1], target="cpu")
def math_ops(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float16"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                x = T.cast(A[i], "float32")
                pos = T.exp(x) + T.exp2(x)
                B[i] = T.if_then_else(x > T.float32(0), pos,
                                      T.max(x, -T.infinity("float32")))
    return main


def test_exp_exp2_cast_if_then_else_infinity():
    a = torch.randn(40).half()
    x = a.float()
    want = torch.where(x > 0, torch.exp(x) + torch.exp2(x), x)
    close(math_ops(40)(a), want, rtol=1e-5, atol=1e-5)


@tilewright.jit(out_idx=[-1], target="cpu")
def row_min_via_infinity(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_fragment((M,), "float32")
            for i in T.Parallel(M):
                acc[i] = T.infinity("float32")
            for k in T.serial(N):
                for i in T.Parallel(M):
                    acc[i] = T.min(acc[i], A[i, k])
            T.copy(acc, B)
    return main


def test_infinity_as_identity():
    a = torch.randn(8, 13)
    close(row_min_via_infinity(8, 13)(a), a.min(1).values)


# -- reductions ------------------------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_kernel(M, N, kind, dim, clear=True):
    out_len = N if dim == 0 else M
    op = T.reduce_sum if kind == "sum" else T.reduce_max

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((out_len,), "float32")):
        with T.Kernel(1) as bx:
            tile = T.alloc_fragment((M, N), "float32")
            acc = T.alloc_fragment((out_len,), "float32")
            T.copy(A, tile)
            if not clear:
                T.fill(acc, 1.0)
            op(tile, acc, dim=dim, clear=clear)
            if not clear:
                op(tile, acc, dim=dim, clear=False)
            T.copy(acc, B)
    return main


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_sum(dim):
    a = torch.randn(12, 20)
    close(reduce_kernel(12, 20, "sum", dim)(a), a.sum(dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_max(dim):
    a = torch.randn(12, 20)
    close(reduce_kernel(12, 20, "max", dim)(a), a.amax(dim))


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_clear_false_accumulates(dim):
    a = torch.randn(12, 20)
    # acc starts at 1, then two accumulating reductions
    close(reduce_kernel(12, 20, "sum", dim, clear=False)(a), 1 + 2 * a.sum(dim),
          rtol=1e-5, atol=1e-5)
    want_max = torch.clamp(a.amax(dim), min=1.0)
    close(reduce_kernel(12, 20, "max", dim, clear=False)(a), want_max)


@tilewright.jit(out_idx=[-1], target="cpu")
def softmax(M, N, dtype, block_M=4):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            tile = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], tile)
            T.reduce_max(tile, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                tile[i, j] = T.exp(tile[i, j] - row_max[i])
            T.reduce_sum(tile, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                tile[i, j] = tile[i, j] / row_sum[i]
            T.copy(tile, Y[bx * block_M, 0])
    return main


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 1e-3)])
def test_row_softmax(dtype, tol):
    x = (torch.randn(10, 33) * 4).to(getattr(torch, dtype))
    y = softmax(10, 33, dtype)(x)
    assert y.dtype == x.dtype
    close(y.float(), torch.softmax(x.float(), dim=1), rtol=tol, atol=tol)


# -- dynamic shapes, reuse, script -----------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def dyn_add(block=64):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m,), "float32"), B: T.Tensor((m,), "float32"),
             C: T.Tensor((m,), "float32")):
        with T.Kernel(T.ceildiv(m, block)) as bx:
            for i in T.Parallel(block):
                if bx * block + i < m:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return main


def test_dynamic_shape_one_kernel_serves_all_sizes():
    kernel = dyn_add()
    assert dyn_add() is kernel  # factory results are memoised per argument tuple
    for n in (1, 63, 64, 65, 500):
        a, b = torch.randn(n), torch.randn(n)
        close(kernel(a, b), a + b)
    assert dyn_add() is kernel


def test_eager_reuses_kernel_per_shape():
    a, b = torch.randn(100), torch.randn(100)
    vector_add(a, b)
    n = len(vector_add._kernels)
    vector_add(torch.randn(100), torch.randn(100))
    assert len(vector_add._kernels) == n
    vector_add(torch.randn(101), torch.randn(101))
    assert len(vector_add._kernels) == n + 1


@tilewright.jit(out_idx=[-1], target="cpu")
def matmul(M, N, K, bm=32, bn=32, bk=16, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])
    return main


def test_gemm_with_tails():
    a, b = torch.randn(70, 45), torch.randn(45, 50)
    close(matmul(70, 50, 45)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_script_shows_tile_ops():
    text = matmul(64, 64, 32).get_tir().script()
    assert "tw_copy" in text and "tw_gemm" in text and "tw_fill" in text
    assert "tw_reduce_sum" in softmax(4, 8, "float32").get_tir().script()


@tilewright.jit(out_idx=[-1], target="cpu")
def axpy(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), alpha: T.float32, B: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                B[i] = A[i] * alpha
    return main


def test_scalar_parameter():
    k = axpy(16)
    a = torch.randn(16)
    close(k(a, 2.5), a * 2.5)
    close(k(a, -1.0), -a)


@tilewright.jit(target="cpu")
def clip_outside(X, lo=None, hi: float = 1.0, blk: int = 64):
    M = T.const("M")
    X: T.Tensor((M,), T.float32)
    Y = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, blk)) as bx:
        for i in T.Parallel(blk):
            g = bx * blk + i
            if g < M:
                # `lo is not None and ...` short-circuits in Python; `or` of IR conditions
                if lo is not None and X[g] < T.float32(lo) or X[g] > T.float32(hi):
                    Y[g] = T.float32(0)
                else:
                    Y[g] = X[g]
    return Y


@pytest.mark.parametrize("lo", [None, -0.5])
def test_and_or_in_conditions(lo):
    x = torch.randn(100)
    outside = x > 1.0 if lo is None else (x < lo) | (x > 1.0)
    close(clip_outside(x, lo=lo), torch.where(outside, torch.zeros_like(x), x))
