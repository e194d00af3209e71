"""The CPU's reductions that compare floats along the contiguous last axis are vector code:
eight partial results combined with ``llvm.maxnum`` / ``llvm.minnum`` (the language's NaN
rule in one vectorisable call; the selects on TVM's ``isnan`` kept the lanes scalar, most of
the quickstart softmax's time), with the same results."""

import numpy as np
import pytest
import tilewright
import tilewright.language as T
import torch

M, N = 16, 64


def _reduce(kind, dtype):
    op = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(2, threads=128) as bx:
            x = T.alloc_fragment((M // 2, N), dtype)
            y = T.alloc_fragment((M // 2,), dtype)
            T.copy(X[bx * (M // 2), 0], x)
            op(x, y, dim=1)
            T.copy(y, Y[bx * (M // 2)])

    return tilewright.compile(main, out_idx=[-1], target="cpu")


def _ignoring_nan(kind, x):
    """C's fmax / fmin (a NaN operand ignored) folded over each row from the identity."""
    x = x.double().numpy()
    if kind == "absmax":
        x = np.abs(x)
    identity = {"max": -np.inf, "min": np.inf, "absmax": 0.0}[kind]
    fold = np.fmin if kind == "min" else np.fmax
    return torch.from_numpy(fold.reduce(x, axis=1, initial=identity))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_float_reductions_ignore_nan_in_vector_lanes(kind, dtype):
    torch.manual_seed(0)
    x = (torch.randn(M, N) * 8).to(getattr(torch, dtype))
    x[0, 5] = x[3, 0] = x[3, 63] = float("nan")
    x[1, :] = float("nan")  # a row of NaN only: the identity (-inf, inf, 0)
    x[2, 7], x[4, 9] = float("inf"), float("-inf")
    kernel = _reduce(kind, dtype)
    got = kernel(x)
    want = _ignoring_nan(kind, x)
    assert torch.equal(got.double().isnan(), want.isnan())
    assert torch.equal(got.double().nan_to_num(), want.nan_to_num())
    if dtype in ("float32", "float64"):
        lanes = {"float32": "v8f32", "float64": "v8f64"}[dtype]
        name = "minnum" if kind == "min" else "maxnum"
        assert f"llvm.{name}.{lanes}" in kernel.get_kernel_source()
