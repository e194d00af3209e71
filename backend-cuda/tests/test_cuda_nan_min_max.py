"""The language's NaN rule for ``T.max`` / ``T.min`` of floats (the conformance row
``min_max_nan``) in CUDA's generated code, run by the host emulation: float32 and float64 keep
CUDA's ``max(float, float)`` (``fmaxf``, which ignores a NaN); float16 and bfloat16, whose
``max`` in TVM's prelude is ``__hgt(a, b) ? a : b``, are compared in float32 with the NaN
tests of the rule."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["min_max_nan"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_min_max_of_a_nan_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    x, y = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype, **case.dims)
    (expected,) = case.reference([x, y])
    out = torch.zeros([int(s) for s in func.params[2].shape], dtype=x.dtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x.clone(), y.clone(), out)
    assert_close(out, expected, dtype=case.dtype, name=case.id)
    assert out.isnan().sum() < expected.numel() // 4  # NaN only where both operands are
