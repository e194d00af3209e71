"""T.gemm on the CPU backend against torch: the register-blocked micro-kernel and its edges."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
import tvm
from tilewright_cpu.blocking import choose_blocking
from tilewright_cpu.gemm_loops import hoist_gemm_conversions


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "tw-cache"))


def close(actual, expected, tol=1e-4):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


@tilewright.jit(out_idx=[-1], target="cpu")
def matmul(M, N, K, bm, bn, bk, dtype="float32", trans_a=False, trans_b=False):
    a_shape, a_tile = ((K, M), (bk, bm)) if trans_a else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def operands(m, n, k, dtype=torch.float32, trans_a=False, trans_b=False):
    a = torch.randn(k, m) if trans_a else torch.randn(m, k)
    b = torch.randn(n, k) if trans_b else torch.randn(k, n)
    a, b = a.to(dtype), b.to(dtype)
    ref = (a.float().T if trans_a else a.float()) @ (b.float().T if trans_b else b.float())
    return a, b, ref


@pytest.mark.parametrize("m,n,k,bm,bn,bk", [
    (64, 64, 64, 32, 32, 32),     # whole micro-kernels and tiles
    (96, 128, 64, 48, 64, 32),    # block rows a multiple of MR
    (70, 50, 45, 32, 32, 16),     # partial tiles in M, N and K
    (13, 20, 7, 13, 20, 7),       # a row remainder of 1, a column remainder of 4
    (5, 3, 2, 8, 8, 8),           # smaller than one micro-kernel
    (1, 1, 1, 4, 4, 4),
    (33, 40, 17, 33, 40, 17),     # a vectorised column remainder of 8
])
def test_float32(m, n, k, bm, bn, bk):
    a, b, ref = operands(m, n, k)
    close(matmul(m, n, k, bm, bn, bk)(a, b), ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_accumulate_in_float32(dtype):
    a, b, ref = operands(40, 36, 50, getattr(torch, dtype))
    c = matmul(40, 36, 50, 24, 32, 16, dtype)(a, b)
    assert c.dtype == torch.float32
    close(c, ref, tol=1e-3)


@pytest.mark.parametrize("trans_a,trans_b", [(True, False), (False, True), (True, True)])
def test_transposes(trans_a, trans_b):
    a, b, ref = operands(30, 37, 29, trans_a=trans_a, trans_b=trans_b)
    close(matmul(30, 37, 29, 16, 24, 8, trans_a=trans_a, trans_b=trans_b)(a, b), ref)


def test_transposed_half_inputs():
    a, b, ref = operands(20, 24, 16, torch.float16, trans_a=True, trans_b=True)
    close(matmul(20, 24, 16, 12, 24, 16, "float16", True, True)(a, b), ref, tol=1e-3)


@tilewright.jit(out_idx=[-1], target="cpu")
def matmul_clear_accum(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((M, K), "float32")
            B_s = T.alloc_shared((K, N), "float32")
            C_l = T.alloc_fragment((M, N), "float32")
            T.fill(C_l, 5.0)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("m,n,k", [(12, 32, 8), (7, 19, 5)])
def test_clear_accum_discards_previous_values(m, n, k):
    a, b, ref = operands(m, n, k)
    close(matmul_clear_accum(m, n, k)(a, b), ref)


@tilewright.jit(out_idx=[-1], target="cpu")
def matmul_regions(M, N, K):
    """Two stages of A in one 3-D buffer; C computed as two column halves."""
    h = N // 2

    @T.prim_func
    def main(A: T.Tensor((M, 2 * K), "float32"), B: T.Tensor((2 * K, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((2, M, K), "float32")
            B_s = T.alloc_shared((2 * K, N), "float32")
            C_l = T.alloc_fragment((M, N), "float32")
            T.clear(C_l)
            T.copy(B, B_s)
            for s in T.Pipelined(2, num_stages=1):
                T.copy(A[0, s * K], A_s[s, :, :])
                T.gemm(A_s[s, :, :], B_s[s * K:s * K + K, 0:h], C_l[:, 0:h])
                T.gemm(A_s[s, :, :], B_s[s * K:s * K + K, h:N], C_l[:, h:N])
            T.copy(C_l, C)

    return main


def test_regions_with_start_offsets():
    a, b, ref = operands(14, 40, 18)
    close(matmul_regions(14, 40, 9)(a, b), ref)


def test_accumulators_are_one_vector_each():
    """A register block several vectors wide (3 x 8 lanes for 32 x 512 on AVX2) keeps one
    accumulator buffer per vector: a row of 24 floats in one buffer was an LLVM vector of a
    width that is not a power of two, scalarised and reassembled at every k (10x slower)."""
    blk = choose_blocking(32, 512, 32)
    assert blk.nr > blk.lanes
    a, b, ref = operands(32, 512, 64, trans_a=True)
    kernel = matmul(32, 512, 64, 32, 512, 64, trans_a=True)
    close(kernel(a, b), ref)
    widths = [int(w) for w in re.findall(r"C_acc\w* = T\.alloc_buffer\(\((\d+),\)",
                                          kernel.get_lowered_tir())]
    assert widths and max(widths) == blk.lanes


@tilewright.jit(out_idx=[-1], target="cpu")
def repeated_gemm(M, N, K, R, dtype, refill):
    """C = sum over r < R of A_r @ B^T, B staged once; A_r = A * 2 ** (r + 1) when ``refill``
    (the tile is doubled in place in the loop: exact in every dtype), else A_r = A."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(C_l)
            for _r in T.serial(R):
                if refill:
                    for i, k in T.Parallel(M, K):
                        A_s[i, k] = T.cast(T.cast(A_s[i, k], "float32") * 2, dtype)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C)

    return main


def _gemm_reads(func) -> str:
    """The text of the program after the CPU's conversion hoisting."""
    return hoist_gemm_conversions()(tvm.IRModule({"main": func}))["main"].script()


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_invariant_narrow_operands_are_converted_once(dtype):
    """A gemm operand of a narrower type that the loop around the gemm never writes is
    converted to float32 once, before the loop; a tile the loop rewrites is not."""
    a, b = torch.randn(24, 48).to(getattr(torch, dtype)), torch.randn(16, 48).to(
        getattr(torch, dtype))
    for refill in (False, True):
        kernel = repeated_gemm(24, 16, 48, 3, dtype, refill)
        scale = 2 + 4 + 8 if refill else 3
        close(kernel(a, b), (a.float() * scale) @ b.float().T)
        text = _gemm_reads(repeated_gemm.get_tir(24, 16, 48, 3, dtype, refill))
        gemm = next(line for line in text.splitlines() if "tw_gemm" in line)
        assert "B_s_float32" in gemm
        assert ("A_s_float32" in gemm) == (not refill)
