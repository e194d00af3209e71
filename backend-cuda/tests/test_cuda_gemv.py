"""T.gemm with a one-wide tile (a decode GEMV: one row of A, or one column of B) on CUDA: the
suite's gemv cases take the thread gemm (no mma.sync/wgmma instruction has a one-wide tile;
``gemm_fit.mma_not_asked`` says so) and the generated CUDA, run by the host emulation,
computes what torch computes, float16 operands included (a float16 gemm whose tile does not fit
the tensor-core instruction is otherwise an error)."""

import re

import hostemu
import pytest
import tilewright
import torch
from tilewright.ir import tile_ops_in
from tilewright.testing import assert_close
from tilewright_cuda import arch
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
