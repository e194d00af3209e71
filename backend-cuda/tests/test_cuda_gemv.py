"""T.gemm with a one-wide tile (a decode GEMV: one row of A, or one column of B) on CUDA: the
suite's gemv cases take the thread gemm (one row uses 1/16 of an mma.sync and the GEMV is bound
by reading B; ``gemm_fit.mma_not_asked`` says so) and the generated CUDA, run by the host
emulation, computes what torch computes, float16 operands included. A tile of 2..15 rows takes
mma.sync with A's rows padded to 16 by zero registers (``gemm_fit.mma_rows_misfit``)."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright.ir import tile_ops_in
from tilewright.testing import assert_close
from tilewright_cuda import arch, executor
from tilewright_cuda.analysis import gemm_fit
from tilewright_sdk.conformance.catalogue import cases

CASES = [c for c in cases(["gemv", "gemv_nt", "gemv_column", "gemv_column_tn"])
         if c.dtype in ("float32", "float16")]
ARCHS = ["sm_80", "sm_90a"]


def _run(case, arch, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, f"cuda -arch={arch}")
    assert not re.search(r"tw_gemm_\w+<", lowered.source.text)  # no tensor-core gemm call
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    expected = case.reference(inputs)
    out = torch.full([int(s) for s in func.params[-1].shape], float("nan"),
                     dtype=getattr(torch, case.dtype))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *inputs, out)
    assert_close(out, expected[0], dtype=case.dtype,
                 reduction_length=case.kernel.reduction(**case.dims), name=case.id)


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gemv_case_in_host_emulation(case, arch, tmp_path):
    _run(case, arch, tmp_path)


def test_a_one_wide_half_gemm_says_why_it_takes_no_tensor_core():
    case = next(c for c in CASES if c.kernel.name == "gemv" and c.dtype == "float16")
    func = case.kernel.make(case.dtype, **case.dims)
    gemm = next(c for c in tile_ops_in(func.body) if c.name == "gemm")
    assert gemm_fit.mma_policy_error(gemm, arch.get("sm_80"), 128) is None
    assert "one row or column wide" in gemm_fit.mma_not_asked(gemm, arch.get("sm_80"))


def few_rows(M, N, K, bn=64, bk=32, trans_a=False, trans_b=False, dtype="float16", threads=128):
    """A decode GEMV of ``M`` tokens (2..15 rows of A), one block of all of them per N tile."""
    a_shape, a_tile = ((K, M), (bk, M)) if trans_a else ((M, K), (M, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))
    acc = "int32" if dtype == "int8" else "float32"

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(N, bn), threads=threads) as bx:
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_l = T.alloc_fragment((M, bn), acc)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if trans_a:
                    T.copy(A[k * bk, 0], A_s)
                else:
                    T.copy(A[0, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_l, C[0, bx * bn])

    return main


ROWS = [(2, False, False, "float16"), (8, False, True, "float16"), (15, True, False, "bfloat16"),
        (5, False, True, "int8")]


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ARCHS)
@pytest.mark.parametrize("m,trans_a,trans_b,dtype", ROWS)
def test_a_few_rows_take_padded_mma_sync(m, trans_a, trans_b, dtype, arch_name, tmp_path):
    """2..15 rows of A (a float16 tile of 8 rows was refused: not a multiple of 16) take
    mma.sync with A's rows padded to 16 by zero registers; the host emulation matches torch."""
    N, K = 128, 64
    func = few_rows(m, N, K, trans_a=trans_a, trans_b=trans_b, dtype=dtype)
    lowered = tilewright.lower(func, f"cuda -arch={arch_name}")
    assert f"tw_gemm_mma_rows<{m}, 64, 32, " in lowered.source.text
    g = torch.Generator().manual_seed(m)
    if dtype == "int8":
        a = torch.randint(-8, 8, (K, m) if trans_a else (m, K), generator=g).to(torch.int8)
        b = torch.randint(-8, 8, (N, K) if trans_b else (K, N), generator=g).to(torch.int8)
        c = torch.zeros(m, N, dtype=torch.int32)
    else:
        a = torch.randn((K, m) if trans_a else (m, K), generator=g).to(getattr(torch, dtype))
        b = torch.randn((N, K) if trans_b else (K, N), generator=g).to(getattr(torch, dtype))
        c = torch.full((m, N), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    want = (a.double().T if trans_a else a.double()) @ (b.double().T if trans_b else b.double())
    torch.testing.assert_close(c.double(), want, rtol=1e-3, atol=1e-3)


def test_one_row_keeps_the_thread_gemm_and_a_few_rows_pad():
    case = next(c for c in CASES if c.kernel.name == "gemv" and c.dtype == "float16")
    func = case.kernel.make(case.dtype, **case.dims)
    gemm = next(c for c in tile_ops_in(func.body) if c.name == "gemm")
    assert "one row or column wide" in gemm_fit.mma_rows_misfit(gemm, arch.get("sm_80"), 128)
    gemm = next(c for c in tile_ops_in(few_rows(8, 128, 64).body) if c.name == "gemm")
    assert gemm_fit.mma_rows_misfit(gemm, arch.get("sm_80"), 128) is None
    assert gemm_fit.mma_policy_error(gemm, arch.get("sm_90a"), 128) is None
    assert "each of 32 warps" in gemm_fit.mma_rows_misfit(gemm, arch.get("sm_80"), 1024)


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name,opcode", [("sm_80", "HMMA"), ("sm_90a", "HMMA")])
def test_a_few_rows_run_on_tensor_cores_in_sass(arch_name, opcode, tmp_path):
    """The padded GEMV of 4 rows issues HMMA (mma.sync); the one-row GEMV none."""
    def opcodes(func):
        text = tilewright.lower(func, f"cuda -arch={arch_name}").source.text
        cubin, _ = executor.nvrtc_compile(text, arch.get(arch_name), tmp_path)
        return sass.dump(cubin)

    assert re.search(rf"\s{opcode}\.", opcodes(few_rows(4, 128, 64)))
    case = next(c for c in CASES if c.kernel.name == "gemv" and c.dtype == "float16")
    assert not re.search(r"\sHMMA\.", opcodes(case.kernel.make(case.dtype, **case.dims)))


def test_a_few_rows_that_do_not_split_over_the_warps_say_why():
    """8 rows, 64 columns over 16 warps: 4 columns a warp, no whole 8-column tile."""
    with pytest.raises(tilewright.errors.UnsupportedOpError, match=r"tile M x N x K = 8 x 64 x "
                       r"32 is not a multiple of the instruction shape 16 x 8 x 16 \(a tile of "
                       r"8 rows would take it padded to 16 rows, but its tile N x K = 64 x 32 "
                       r"does not give each of 16 warps whole 8-column tiles"):
        tilewright.lower(few_rows(8, 128, 64, threads=512), "cuda -arch=sm_80")
