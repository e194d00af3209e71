"""A float -> integer T.cast rounds toward zero and saturates at the integer type's bounds; NaN
gives 0 (tilewright.transform.float_to_int), from every floating type to int8, uint8, int16 and
int32, on the CPU (LLVM leaves an out-of-range conversion undefined: 23 of 34 special float32
values converted to int8 differed, by up to 255) and the interpreter (which wrapped, and
stopped on NaN; its T.copy too). The cases are the conformance row float_to_int's."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["float_to_int"])


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_saturating_conversion(case, target):
    func = case.kernel.make(case.dtype, **case.dims)
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    outputs = tilewright.compile(func, target=target)(*inputs)
    for got, want, t in zip(outputs, case.reference(inputs), case.dims["targets"],
                            strict=True):
        assert torch.equal(got, want), f"{case.dtype} -> {t}: {got.tolist()}"


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_copy_converts_by_the_same_rule(target):
    # T.copy from a float32 fragment into an int8 tensor (the interpreter's copy wrapped)
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), C: T.Tensor((8,), "int8")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((8,), "float32")
            T.copy(A, f)
            T.copy(f, C)

    a = torch.tensor([float("nan"), 300.0, -300.0, 127.9, -128.9, 1e10, 5.5, -5.5])
    got = tilewright.compile(main, out_idx=[1], target=target)(a)
    assert got.tolist() == [0, 127, -128, 127, -128, 127, 5, -5]
