"""TileLang's fast-math functions (``T.__exp`` ...): every float dtype on the CPU and the
interpreter, which compute the precise function (an allowed implementation of the contract),
against torch; other dtypes refused at the user's line with TileLang's TypeError."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelTypeError
from tilewright.ir import FAST_MATH_FUNCTIONS
from tvm import tirx

TARGETS = ["cpu", "interp"]
REFERENCE = {"exp": torch.exp, "exp10": lambda x: torch.pow(10.0, x), "log": torch.log,
             "log2": torch.log2, "log10": torch.log10, "tan": torch.tan, "cos": torch.cos,
             "sin": torch.sin}
LOGS = ("log", "log2", "log10")


def every_function(N, dtype, block=64):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), P: T.Tensor((N,), dtype),
             Y: T.Tensor((len(FAST_MATH_FUNCTIONS), N), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                n = bx * block + i
                for k, fn in enumerate(FAST_MATH_FUNCTIONS):
                    Y[k, n] = getattr(T, f"__{fn}")(P[n] if fn in LOGS else X[n])

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_every_function_against_torch(target, dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(100, generator=gen) * 2 - 1).to(getattr(torch, dtype))
    p = (torch.rand(100, generator=gen) * 1.5 + 0.5).to(x.dtype)
    y = tilewright.compile(every_function(100, dtype), out_idx=[2], target=target)(x, p)
    want = torch.stack([REFERENCE[fn](p.double() if fn in LOGS else x.double())
                        for fn in FAST_MATH_FUNCTIONS])
    tol = {"float32": 1e-6, "float64": 1e-12}.get(dtype, 1e-2)
    torch.testing.assert_close(y.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", FAST_MATH_FUNCTIONS)
@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "uint64", "float8_e4m3fn",
                                   "float8_e5m2"])
def test_other_dtypes_are_a_type_error(fn, dtype):
    op = getattr(T, f"__{fn}")
    assert op.__name__ == f"__{fn}"
    with pytest.raises(TypeError, match=rf"T\.__{fn} only supports floating-point inputs, "
                                        rf"but got {dtype}") as err:
        op(tirx.Var("value", dtype))
    assert isinstance(err.value, KernelTypeError)


def test_a_fast_call_is_a_tvm_call_of_its_dtype():
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        call = T.__sin(tirx.Var("value", dtype))
        assert isinstance(call, tirx.Call) and call.dtype == dtype
