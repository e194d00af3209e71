"""A target may be given as TileLang and TVM 0.27 give it: a string, a configuration dict or a
``tvm.target.Target``; each resolves to the same target (and so the same cache entry)."""

import pytest
import tilewright
import tilewright.language as T
import torch
import tvm
from tilewright.engine import resolve_target


@pytest.mark.parametrize("form", [
    "cuda -arch=sm_90a",
    {"kind": "cuda", "arch": "sm_90a"},
    {"kind": "cuda", "arch": "sm_90a", "tag": "", "keys": ["cuda", "gpu"]},
    tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}),
])
def test_target_forms_resolve_alike(form):
    target, backend = resolve_target(form)
    assert (str(target), backend.name) == ("cuda -arch=sm_90a", "cuda")


def test_a_dict_target_compiles_and_runs():
    @T.prim_func
    def double(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(64):
                B[i] = A[i] * 2.0

    kernel = tilewright.compile(double, out_idx=[-1], target={"kind": "cpu"})
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a), a * 2)
    assert str(kernel.target) == "cpu"


@pytest.mark.parametrize("form, message", [
    ({"arch": "sm_90"}, r"names no kind"),
    ({}, r"names no kind"),
    ({"kind": "cpu", "arch": "sm_80"}, r"backend 'cpu' has no option -arch \(options: none\)"),
    ({"kind": "cuda", "arch": {"sm": 90}}, r"option 'arch' must be a string, a number or a list"),
    ({"kind": "tpu"}, r"no installed backend claims target 'tpu'"),
    (3, r"must be a non-empty string or a dict"),
])
def test_bad_target_forms_are_named(form, message):
    with pytest.raises(tilewright.TargetError, match=message):
        resolve_target(form)
