"""TileLang's ``T.ptr`` addresses on CUDA, run by the host emulation: scalar address
parameters (the conformance row ``pointer_params``: the caller's tensors passed as addresses,
``T.make_tensor`` on them before the kernel, which the backend moves into the kernel) and a
grouped GEMM reading a table of addresses (``T.Tensor([groups], T.ptr)``); and a shape symbol
that only a linear dimension gives (``T.Tensor((n * 3 + 1,))``), which the launcher solves."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["pointer_params"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_address_parameters_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    params = lowered.source.payload["params"]
    assert [p["dtype"] for p in params[:2]] == ["handle", "handle"]
    x, y, n = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                 **case.dims)
    (expected,) = case.reference([x, y, n])
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, n)
    assert_close(y, expected, dtype=case.dtype, name=case.id)
    y.zero_()  # an address given as an int
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x.data_ptr(),
                y.data_ptr(), n)
    assert_close(y, expected, dtype=case.dtype, name=case.id)


def grouped_gemm(groups, M, N, K, block):
    @T.prim_func
    def main(A_ptrs: T.Tensor([groups], T.ptr), B_ptrs: T.Tensor([groups], T.ptr),
             C_ptrs: T.Tensor([groups], T.ptr)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), groups, threads=128) as \
                (bx, by, g):
            A = T.make_tensor(A_ptrs[g], (M, K), T.float16)
            B = T.make_tensor(B_ptrs[g], (K, N), T.float16)
            C = T.make_tensor(C_ptrs[g], (M, N), T.float32)
            A_shared = T.alloc_shared((block, K), T.float16)
            B_shared = T.alloc_shared((K, block), T.float16)
            C_local = T.alloc_fragment((block, block), T.float32)
            T.clear(C_local)
            T.copy(A[by * block, 0], A_shared)
            T.copy(B[0, bx * block], B_shared)
            T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block, bx * block])

    return main


@pytest.mark.emulator
def test_grouped_gemm_through_a_table_of_addresses(tmp_path):
    groups, M, N, K = 2, 32, 64, 32
    lowered = tilewright.lower(grouped_gemm(groups, M, N, K, 32), "cuda -arch=sm_80")
    gen = torch.Generator().manual_seed(1)
    a = [torch.randn(M, K, generator=gen).half() for _ in range(groups)]
    b = [torch.randn(K, N, generator=gen).half() for _ in range(groups)]
    c = [torch.zeros(M, N) for _ in range(groups)]

    def table(tensors):
        return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)

    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, table(a), table(b),
                table(c))
    for x, w, got in zip(a, b, c, strict=True):
        assert_close(got, x.double() @ w.double(), dtype="float16", reduction_length=K)


def linear_dimension():
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n * 3 + 1,), "int32")):
        with T.Kernel(T.ceildiv(n * 3 + 1, 8), threads=32) as bx:
            for i in T.Parallel(8):
                if bx * 8 + i < n * 3 + 1:
                    A[bx * 8 + i] = bx * 8 + i + n * 100

    return main


@pytest.mark.emulator
def test_a_symbol_solved_from_a_linear_dimension(tmp_path):
    # TileLang reads n from A's 3 * n + 1 elements: the launcher solves it from the extent
    lowered = tilewright.lower(linear_dimension(), "cuda -arch=sm_80")
    assert lowered.source.payload["symbols"] == {"A_dim0": [0, 0]}
    a = torch.zeros(13, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a)  # n = 4, 2 blocks
    assert a.tolist() == [i + 400 for i in range(13)]
