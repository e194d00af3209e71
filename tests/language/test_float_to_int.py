"""A float -> integer T.cast rounds toward zero and saturates at the integer type's bounds; NaN
gives 0 (tilewright.transform.float_to_int), from every floating type, on the CPU (LLVM's
conversion is undefined out of range: x86 gave -128 for 300.0 to int8 after wrapping the
int32 minimum) and the interpreter (which wrapped, and stopped on NaN)."""

import pytest
import tilewright
import torch
from tilewright_sdk.conformance.catalogue import cases

CASES = list(cases(["float_to_int"]))


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_saturating_conversion(case, target):
    func = case.kernel.make(case.dtype, **case.dims)
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    kernel = tilewright.compile(func, target=target)
    for got, want, t in zip(kernel(*inputs), case.reference(inputs), case.dims["targets"],
                            strict=True):
        assert torch.equal(got, want), f"{case.dtype} -> {t}: {got.tolist()}"
