"""Dynamic shapes (T.dynamic) on Ascend: the dimensions are int32 kernel arguments read from
the tensors at each launch, the grid is computed from them, and copies clip to them at run
time (DataCopyPad lengths, Nd2Nz rows, Fixpipe sizes), so one compiled kernel serves every
size, partial last tiles included."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


@tilewright.jit(target="ascend")
def tile_add(A, B, block_M=16, block_N=32):
    M, N = T.dynamic("m"), T.dynamic("n")
    A: T.Tensor((M, N), T.float32)
    B: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
        a = T.alloc_fragment((block_M, block_N), T.float32)
        b = T.alloc_fragment((block_M, block_N), T.float32)
        T.copy(A[by * block_M, bx * block_N], a)
        T.copy(B[by * block_M, bx * block_N], b)
        for i, j in T.Parallel(block_M, block_N):
            a[i, j] = a[i, j] + b[i, j]
        T.copy(a, C[by * block_M, bx * block_N])
    return C


@tilewright.jit(target="ascend")
def guarded_axpy(A, B, block_M=16, block_N=32):
    M, N = T.dynamic("m"), T.dynamic("n")
    A: T.Tensor((M, N), T.float32)
    B: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            row, col = by * block_M + i, bx * block_N + j
            if row < M and col < N:
                C[row, col] = A[row, col] * 2 + B[row, col]
    return C


@pytest.mark.parametrize("kernel,ref", [(tile_add, lambda a, b: a + b),
                                        (guarded_axpy, lambda a, b: a * 2 + b)],
                         ids=["tile_copies", "guarded_parallel"])
def test_vector_kernel_serves_every_size(kernel, ref):
    torch.manual_seed(0)
    for m, n in [(32, 64), (37, 45), (5, 8)]:
        a, b = torch.randn(m, n), torch.randn(m, n)
        torch.testing.assert_close(kernel(a, b), ref(a, b))
    assert len(kernel._kernels) == 1
    source = next(iter(kernel._kernels.values())).get_kernel_source()
    assert "int32_t m" in source and "int32_t n" in source, source


@tilewright.jit(target="ascend")
def dyn_gemm(A, B, dtype=T.float16, block_M=32, block_N=32, block_K=16):
    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((N, K), dtype)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), dtype)
        B_s = T.alloc_shared((block_N, block_K), dtype)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[bx * block_N, k * block_K], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True)
        T.copy(C_l, C[by * block_M, bx * block_N])
    return C


def test_cube_gemm_serves_every_size():
    torch.manual_seed(0)
    for m, n, k in [(32, 32, 32), (45, 20, 40)]:
        a, b = torch.randn(m, k).half(), torch.randn(n, k).half()
        torch.testing.assert_close(dyn_gemm(a, b), a.float() @ b.float().T, rtol=1e-3,
                                   atol=1e-3)
    assert len(dyn_gemm._kernels) == 1


@tilewright.jit(target="ascend")
def dyn_gemm_epilogue(A, B, block=32):
    M = T.dynamic("m")
    A: T.Tensor((M, 32), T.float16)
    B: T.Tensor((32, 32), T.float16)
    C = T.empty((M, 32), T.float32)
    with T.Kernel(T.ceildiv(M, block)) as bx:
        A_s = T.alloc_shared((block, 32), T.float16)
        B_s = T.alloc_shared((32, 32), T.float16)
        C_l = T.alloc_fragment((block, 32), T.float32)
        T.copy(A[bx * block, 0], A_s)
        T.copy(B[0, 0], B_s)
        T.gemm(A_s, B_s, C_l, clear_accum=True)
        for i, j in T.Parallel(block, 32):
            C_l[i, j] = T.max(C_l[i, j], 0)
        T.copy(C_l, C[bx * block, 0])
    return C


def test_split_kernel_with_a_dynamic_grid_is_refused():
    a, b = torch.randn(40, 32).half(), torch.randn(32, 32).half()
    with pytest.raises(KernelError, match=r"dynamic shapes \(T\.dynamic\).*split"):
        dyn_gemm_epilogue(a, b)
