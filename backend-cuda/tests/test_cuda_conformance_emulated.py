"""The conformance suite's tensor-core cases (float16/bfloat16 gemm, attention, 2:4 sparse
gemm and the W4A16 dequantising gemm, and float8 gemm on the float16 instruction), lowered
for sm_80 and run by the host emulation against the suite's float64 references: the
ldmatrix/mma.sync/mma.sp, swizzle, cp.async, pipelining and dequantisation
(tw_dequant_u4x8_f16 for float16) paths on the suite's own shapes."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases

CASES = [c for c in cases(["gemm", "gemm_pipelined", "attention", "gemm_sp", "gemm_w4a16"])
         if c.dtype in ("float16", "bfloat16") and c.variant != "dynamic"] + \
    [c for c in cases(["gemm_8bit"]) if c.dtype.startswith("float8")]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conformance_case_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    assert "tw_gemm_mma" in lowered.source.text  # the tensor-core path
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    expected = case.reference(inputs)
    outputs = {i % len(func.params) for i in case.kernel.out_idx}
    given, args, results = iter(t.clone() for t in inputs), [], []
    for i, param in enumerate(func.params):
        if i in outputs:
            results.append(torch.full([int(s) for s in param.shape], float("nan"),
                                      dtype=getattr(torch, str(param.dtype))))
            args.append(results[-1])
        else:
            args.append(next(given))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    for got, want in zip(results, expected, strict=True):
        assert_close(got, want, dtype=str(got.dtype),
                     reduction_length=case.kernel.reduction(**case.dims), name=case.id)
