"""``T.ptr`` tables and ``T.make_tensor`` on CUDA: TileLang's grouped GEMM over pointer tables
(``grouped_gemm/example_grouped_gemm_fwd_ptr.py``, at a small size) lowers for sm_80 and
sm_90a, NVRTC builds it, and its CUDA, run in the host emulation on host tensors (whose
addresses the tables hold), computes torch's products. The reinterpret of a table's int64 to
an address once stopped the lowering (``codegen.reinterpret_operands_widened`` read the
pointer type as a number type: "unknown dtype `T.handle`")."""

import math

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda import arch, executor


def grouped_gemm(sizes, K, N, block_M=64, block_N=64, block_K=32):
    """Groups of ``sizes[g]`` rows, each A [max_M, K], B [K, N], C [max_M, N] a tensor of its
    own named by the tables; each block finds its group from the groups' first tiles."""
    groups, max_M = len(sizes), max(sizes)
    tiles = sum(math.ceil(m / block_M) for m in sizes)

    @T.prim_func
    def main(A_ptrs: T.Tensor([groups], T.ptr), B_ptrs: T.Tensor([groups], T.ptr),
             C_ptrs: T.Tensor([groups], T.ptr), firsts: T.Tensor([groups], T.int32)):
        with T.Kernel(tiles, T.ceildiv(N, block_N), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), T.float16)
            B_shared = T.alloc_shared((block_K, block_N), T.float16)
            C_local = T.alloc_fragment((block_M, block_N), T.float32)
            group = T.alloc_var(dtype=T.int32)
            first = T.alloc_var(dtype=T.int32)
            group = 0
            first = 0
            for g in range(groups):
                here = bx >= firsts[g]
                group = T.if_then_else(here, g, group)
                first = T.if_then_else(here, firsts[g], first)
            row = (bx - first) * block_M
            A = T.make_tensor(A_ptrs[group], (max_M, K), T.float16)
            B = T.make_tensor(B_ptrs[group], (K, N), T.float16)
            C = T.make_tensor(C_ptrs[group], (max_M, N), T.float16)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                T.copy(A[row, ko * block_K], A_shared)
                T.copy(B[ko * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[row, by * block_N])

    return main


SIZES, K, N = [64, 128, 64], 64, 128


@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_grouped_gemm_over_pointer_tables_lowers(arch_name):
    source = tilewright.lower(grouped_gemm(SIZES, K, N), f"cuda -arch={arch_name}").source.text
    # the tables' int64 values become the tensors' addresses
    assert "A_ptrs" in source and "(half*)" in source


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_nvrtc_builds_the_pointer_table_gemm(arch_name, tmp_path):
    text = tilewright.lower(grouped_gemm(SIZES, K, N), f"cuda -arch={arch_name}").source.text
    cubin, _ = executor.nvrtc_compile(text, arch.get(arch_name), tmp_path)
    assert cubin


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_the_pointer_table_gemm_computes_each_groups_product(arch_name, tmp_path):
    lowered = tilewright.lower(grouped_gemm(SIZES, K, N), f"cuda -arch={arch_name}")
    max_M = max(SIZES)
    a = [torch.zeros(max_M, K, dtype=torch.float16) for _ in SIZES]
    for x, m in zip(a, SIZES):
        x[:m] = torch.randn(m, K, dtype=torch.float16)
    b = [torch.randn(K, N, dtype=torch.float16) for _ in SIZES]
    c = [torch.full((max_M, N), float("nan"), dtype=torch.float16) for _ in SIZES]
    firsts = torch.tensor([0, 1, 3], dtype=torch.int32)  # 1, 2 and 1 tiles of 64 rows

    def table(tensors):
        return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)

    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, table(a), table(b),
                table(c), firsts)
    for x, y, z, m in zip(a, b, c, SIZES):
        want = (x[:m].float() @ y.float()).half()
        torch.testing.assert_close(z[:m], want, rtol=2e-3, atol=2e-3)
