"""The language's NaN rule of max / min / absmax reductions in the generated CUDA (a NaN
element ignored, or with nan_propagate=True making the result NaN), run by the host emulation
against the conformance suite's reference. The emulation's max / min of floats are CUDA's
fmaxf / fminf (hostemu.py); float16 and bfloat16 reductions do not use TVM's prelude
``max(half, half)`` (``__hgt(a, b) ? a : b``, whose NaN result depends on the order)."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["reduce_nan"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_nan_rule_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source
    assert "__hgt" not in source.text.split("__global__")[-1]
    (x,) = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype, **case.dims)
    y = torch.zeros(x.shape[0], 6, dtype=x.dtype)
    hostemu.run(source.text, source.payload, tmp_path, x, y)
    (want,) = case.reference([x])
    assert torch.equal(y.isnan(), want.isnan())
    assert_close(y.double().nan_to_num(), want.nan_to_num(), rtol=0, atol=0)
