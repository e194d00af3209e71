"""The language's NaN rule for ``T.max`` / ``T.min`` of floats (the conformance row
``min_max_nan``) in CUDA's generated code, run by the host emulation: float32 and float64 keep
CUDA's ``max(float, float)`` (``fmaxf``, which ignores a NaN); float16 and bfloat16, whose
``max`` in TVM's prelude is ``__hgt(a, b) ? a : b``, are compared in float32 with the NaN
tests of the rule."""

import hostemu
import pytest
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["min_max_nan"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_min_max_of_a_nan_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, "cuda -arch=sm_80", tmp_path)
