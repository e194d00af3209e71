"""Kernels that use the cube and the vector cores (a GEMM with an epilogue, flash attention)
are split into a cube and a vector program meeting in GM workspaces; the emulator runs both
core types at once and reports a handoff that no cross-core flag orders."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_sdk.conformance.catalogue import _attention, _attention_ref


def gemm_bias_relu(M, N, K, bm=32, bn=32, bk=32, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             bias: T.Tensor((N,), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(bm, bn):
                C_f[i, j] = T.max(C_f[i, j] + bias[bx * bn + j], 0.0)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def test_gemm_with_vector_epilogue_is_split_and_matches_torch():
    kernel = tilewright.compile(gemm_bias_relu(64, 64, 96), out_idx=[-1], target="ascend")
    src = kernel.get_kernel_source()
    # the cube accumulates the whole K loop, then hands the tile over once
    assert src.count("CrossCoreSetFlag<2, PIPE_FIX>(0);") == 1
    assert src.count("CrossCoreWaitFlag(0);") == 1
    assert "GM_ADDR ws_C_f_0_addr" in src and "if ASCEND_IS_AIV" in src
    # each vector core takes 16 of the 32 rows: its half of the workspace and of C
    assert "LocalTensor<float> C_f = ub_mem.GetWithOffset<float>(512, " in src
    assert "vid == 0" not in src
    a, b, bias = torch.randn(64, 96).half(), torch.randn(96, 64).half(), torch.randn(64)
    out = kernel(a, b, bias)
    torch.testing.assert_close(out, torch.relu(a.float() @ b.float() + bias), rtol=1e-3,
                               atol=1e-3)


@pytest.mark.parametrize("dtype,S", [("float16", 20), ("bfloat16", 16)])
def test_attention_splits_per_gemm_and_matches_torch(dtype, S):
    kernel = tilewright.compile(_attention(dtype, S, 16), out_idx=[-1], target="ascend")
    src = kernel.get_kernel_source()
    # three channels (scores to the vector core, P to the cube, P @ V back), each with a
    # full flag and an empty flag for its two workspace slots
    assert sorted(set(re.findall(r"CrossCoreWaitFlag\((\d+)\)", src))) == \
        [str(i) for i in range(6)]
    assert "vid == 0" not in src  # rows split over both vector cores
    q, k, v = (torch.randn(S, 16).to(getattr(torch, dtype)) for _ in range(3))
    out = kernel(q, k, v)
    ref = _attention_ref(q.double(), k.double(), v.double())[0]
    tol = 2e-2 if dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)


def decayed_gemm(M, N, K, bm=32, bn=32, bk=32):
    """acc = acc / 2 + A_k @ B_k over the K steps: the vector core rescales the accumulator
    between GEMMs, so every product is handed over (one cube -> vector channel in a loop)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.serial(T.ceildiv(K, bk)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] = acc[i, j] * 0.5
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def _decayed_ref(a, b, bk=32):
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for k in range(0, a.shape[1], bk):
        acc = acc * 0.5 + a[:, k:k + bk].double() @ b[k:k + bk].double()
    return acc


def test_decayed_accumulation_hands_over_every_product():
    kernel = tilewright.compile(decayed_gemm(64, 32, 128), out_idx=[-1], target="ascend")
    a, b = torch.randn(64, 128).half(), torch.randn(128, 32).half()
    torch.testing.assert_close(kernel(a, b).double(), _decayed_ref(a, b), rtol=1e-3, atol=1e-3)


def gemm_with_column_sums(M, N, K):
    """C = A @ B and the column sums of C: a reduction down the rows keeps the vector work
    on one vector core."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(1) as _:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            col = T.alloc_fragment((N,), "float32")
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.reduce_sum(C_f, col, dim=0)
            T.copy(C_f, C[0, 0])
            T.copy(col, S[0])

    return main


def test_reduction_down_the_rows_keeps_vector_work_on_one_core():
    kernel = tilewright.compile(gemm_with_column_sums(32, 32, 64), out_idx=[2, 3],
                                target="ascend")
    assert "if ((vid == 0))" in kernel.get_kernel_source()
    a, b = torch.randn(32, 64).half(), torch.randn(64, 32).half()
    c, col = kernel(a, b)
    ref = a.float() @ b.float()
    torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(col, ref.sum(0), rtol=1e-3, atol=1e-2)


def scaled_a_gemm(M, N, K, bm=32, bn=32, bk=32):
    """The vector core scales each A tile before the cube uses it: UB -> workspace -> L1 in
    every K step (a vector -> cube channel with two slots)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                for i, j in T.Parallel(bm, bk):
                    A_s[i, j] = A_s[i, j] * 2.0
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def test_vector_produced_gemm_operand_goes_through_l1():
    kernel = tilewright.compile(scaled_a_gemm(64, 32, 160), out_idx=[-1], target="ascend")
    src = kernel.get_kernel_source()
    assert "CrossCoreSetFlag<2, PIPE_MTE3>(0);" in src  # the vector core hands A over
    assert "CrossCoreSetFlag<2, PIPE_MTE2>(1);" in src  # the cube frees the slot
    a, b = torch.randn(64, 160).half(), torch.randn(160, 32).half()
    torch.testing.assert_close(kernel(a, b), 2 * a.float() @ b.float(), rtol=1e-3, atol=1e-3)
