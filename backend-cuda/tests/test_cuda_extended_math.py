"""TileLang's further math functions in generated CUDA (backend feature extended_math), run in
the host emulation against the conformance rows' references and built with NVRTC. The libm
functions (T.exp10, T.log1p, T.sinh, T.asin, T.atanh, T.erf, T.nearbyint, T.pow, T.fmod,
T.atan2, T.hypot, T.copysign ...: the row libm_math): float32/float64 call CUDA's
functions, float16/bfloat16 their half forms where CUDA's half headers have one and otherwise
the float32 function rounded once
(codegen.HALF_MATH_IN_FLOAT32: TVM left log1p of a half unresolved and printed hsinh, which
NVRTC rejects). T.clz and T.popcount of 32- and 64-bit integers (the row bit_counts): CUDA's
__clz/__popc on the unsigned bits (TVM left popcount of a signed value unresolved)."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["libm_math"])
BIT_CASES = cases(["bit_counts"])


def _emulated(case, tmp_path):
    """(outputs, references) of ``case`` run in the host emulation for sm_90a."""
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    outputs = [torch.zeros(tuple(int(s) for s in p.shape), dtype=getattr(torch, str(p.dtype)))
               for p in func.params[len(inputs):]]
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *inputs, *outputs)
    return zip(outputs, case.reference(inputs), strict=True)


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_libm_row_in_emulation(case, tmp_path):
    for got, want in _emulated(case, tmp_path):
        assert_close(got, want, dtype=case.dtype, name=case.id)


@pytest.mark.nvrtc
@pytest.mark.parametrize("sm", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_libm_builds(dtype, sm, tmp_path):
    case = next(c for c in CASES if c.dtype == dtype)
    source = tilewright.lower(case.kernel.make(dtype, **case.dims), f"cuda -arch={sm}").source.text
    assert "log1pf(" in source and "sinhf(" in source and "fmodf(" in source
    executor.nvrtc_compile(source, arch.get(sm), tmp_path)


@pytest.mark.emulator
@pytest.mark.parametrize("case", BIT_CASES, ids=[c.id for c in BIT_CASES])
def test_bit_counts_in_emulation(case, tmp_path):
    for got, want in _emulated(case, tmp_path):
        assert got.tolist() == want.tolist()


@pytest.mark.nvrtc
@pytest.mark.parametrize("case", BIT_CASES, ids=[c.id for c in BIT_CASES])
def test_bit_counts_build(case, tmp_path):
    source = tilewright.lower(case.kernel.make(case.dtype, **case.dims),
                              "cuda -arch=sm_80").source.text
    assert "__popc" in source and "__clz" in source
    executor.nvrtc_compile(source, arch.get("sm_80"), tmp_path)
