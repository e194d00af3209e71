"""The conformance suite's tensor-core cases (float16/bfloat16 gemm, attention, 2:4 sparse
gemm and the W4A16 dequantising gemm, and float8 gemm on the float16 instruction), lowered
for sm_80 and run by the host emulation against the suite's float64 references: the
ldmatrix/mma.sync/mma.sp, swizzle, cp.async, pipelining and dequantisation
(tw_dequant_u4x8_f16 for float16) paths on the suite's own shapes."""

import hostemu
import pytest
from tilewright_sdk.conformance.catalogue import cases

CASES = [c for c in cases(["gemm", "gemm_pipelined", "attention", "gemm_sp", "gemm_w4a16"])
         if c.dtype in ("float16", "bfloat16") and c.variant != "dynamic"] + \
    [c for c in cases(["gemm_8bit"]) if c.dtype.startswith("float8")]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conformance_case_in_host_emulation(case, tmp_path):
    source = hostemu.run_case(case, "cuda -arch=sm_80", tmp_path)
    assert "tw_gemm_mma" in source  # the tensor-core path
