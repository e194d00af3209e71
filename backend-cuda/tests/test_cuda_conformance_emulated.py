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


def _inplace_cases() -> list:
    """The first case of each kernel that writes into its arguments (atomics, their returned
    previous values, tables of addresses): the outputs the check reads are those arguments."""
    from tilewright.plugin import get_manager

    features = get_manager().backend_for("cuda").capabilities.features
    first = {}
    for case in cases():
        if case.kernel.inplace and set(case.kernel.features) <= features:
            first.setdefault(case.kernel.name, case)
    return list(first.values())


INPLACE = _inplace_cases()


@pytest.mark.emulator
@pytest.mark.parametrize("case", INPLACE, ids=[c.id for c in INPLACE])
def test_a_case_writing_its_arguments_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, "cuda -arch=sm_90a", tmp_path)


VECTORS = cases(["vector_access"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", VECTORS, ids=[c.id for c in VECTORS])
def test_vector_cases_in_host_emulation(case, tmp_path):
    """Vector dtypes: CUDA's vector types (float2, uint4, the packed int / int2 of 8- and
    16-bit lanes, whose construction from lanes codegen's ``packed_vectors`` writes as words)."""
    hostemu.run_case(case, "cuda -arch=sm_90a", tmp_path)
