"""Scalar expressions and math on the CPU backend: every T.<fn> against torch, per dtype."""

import pytest
import tilewright
import tilewright.language as T
import torch
from language_helpers import DTYPES, TORCH, check, rand

UNARY = {
    "exp": (torch.exp, "any"), "exp2": (torch.exp2, "any"), "log": (torch.log, "positive"),
    "log2": (torch.log2, "positive"), "sqrt": (torch.sqrt, "positive"),
    "rsqrt": (torch.rsqrt, "positive"), "tanh": (torch.tanh, "any"),
    "sigmoid": (torch.sigmoid, "any"), "floor": (torch.floor, "any"),
    "ceil": (torch.ceil, "any"), "abs": (torch.abs, "any"),
}


@tilewright.jit(out_idx=[-1], target="cpu")
def unary(dtype, bm=16):
    """Row f of Y is UNARY[f] applied to row f of X; n is a call-time size."""
    n = T.dynamic("n")
    fns = [getattr(T, name) for name in UNARY]

    @T.prim_func
    def main(X: T.Tensor((len(fns), n), dtype), Y: T.Tensor((len(fns), n), dtype)):
        with T.Kernel(T.ceildiv(n, bm)) as bx:
            for f, fn in enumerate(fns):  # a Python loop: one IR loop per function
                for i in T.Parallel(bm):
                    if bx * bm + i < n:
                        Y[f, bx * bm + i] = fn(X[f, bx * bm + i])
    return main


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_math(dtype):
    kernel = unary(dtype)
    for n in (37, 8):  # one dynamic kernel, a partial tile and a short one
        x = rand(len(UNARY), n, seed=n) * 3
        for f, (_, domain) in enumerate(UNARY.values()):
            if domain == "positive":
                x[f] = x[f].abs() + 0.05
        x = x.to(TORCH[dtype])
        y = kernel(x)
        for f, (name, (fn, _)) in enumerate(UNARY.items()):
            # float32 exp/exp2 use a polynomial with relative error below 2e-7
            rtol = 4e-7 if dtype == "float32" and name in ("exp", "exp2", "sigmoid") else None
            check(y[f], fn(x[f].double()), rtol=rtol, name=f"T.{name}({dtype})")
    assert unary(dtype) is kernel


@tilewright.jit(out_idx=[-1], target="cpu")
def binary_and_select(M, dtype):
    @T.prim_func
    def main(A: T.Tensor((M,), dtype), B: T.Tensor((M,), dtype), Y: T.Tensor((5, M), dtype)):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                Y[0, i] = T.max(A[i], B[i])
                Y[1, i] = T.min(A[i], 0.25)  # a Python scalar takes the other side's dtype
                Y[2, i] = T.if_then_else(A[i] > B[i], A[i] - B[i], T.cast(0, dtype))
                Y[3, i] = T.max(-0.5, T.abs(A[i]) - 1)
                Y[4, i] = T.if_then_else(i % 2 == 0, A[i], B[i])
    return main


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_if_then_else(dtype):
    a, b = rand(19, dtype=dtype), rand(19, dtype=dtype, seed=1)
    x, y = a.double(), b.double()
    even = torch.arange(19) % 2 == 0
    want = torch.stack([torch.maximum(x, y), x.clamp(max=0.25), (x - y).clamp(min=0),
                        (x.abs() - 1).clamp(min=-0.5), torch.where(even, x, y)])
    check(binary_and_select(19, dtype)(a, b), want)


@tilewright.jit(out_idx=[-1], target="cpu")
def integer_ops(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "int32"), B: T.Tensor((M,), "int32"),
             Y: T.Tensor((6, M), "int32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                Y[0, i] = A[i] // B[i]
                Y[1, i] = A[i] % B[i]
                Y[2, i] = A[i] // 4 + A[i] % 4
                Y[3, i] = T.abs(A[i])
                Y[4, i] = T.max(A[i], B[i]) - T.min(A[i], 3)
                Y[5, i] = T.ceildiv(T.abs(A[i]), 3)
    return main


def test_integer_floordiv_mod_abs_follow_python_semantics():
    gen = torch.Generator().manual_seed(2)
    a = torch.randint(-40, 40, (50,), generator=gen, dtype=torch.int32)
    b = torch.randint(1, 9, (50,), generator=gen, dtype=torch.int32)
    b[::2] *= -1  # negative divisors too
    a64, b64 = a.long(), b.long()
    want = torch.stack([
        torch.div(a64, b64, rounding_mode="floor"), torch.remainder(a64, b64),
        torch.div(a64, 4, rounding_mode="floor") + torch.remainder(a64, 4), a64.abs(),
        torch.maximum(a64, b64) - a64.clamp(max=3), torch.div(a64.abs() + 2, 3,
                                                               rounding_mode="floor")])
    assert torch.equal(integer_ops(50)(a, b).long(), want)


@tilewright.jit(target="cpu")
def casts_and_constants(M, dtype):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), I: T.Tensor((M,), "int32"),
             Y: T.Tensor((M,), dtype), Z: T.Tensor((M,), "int32"),
             C: T.Tensor((8,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(M):
                Y[i] = T.cast(A[i], dtype) * T.cast(2, dtype) + T.float16(0.5)
                Z[i] = T.cast(A[i] * 10, "int32") + T.int32(I[i])
            C[0] = T.infinity("float32")
            C[1] = -T.infinity(T.float32)
            C[2] = T.cast(T.max_value("float16"), "float32")
            C[3] = T.cast(T.min_value("float16"), "float32")
            C[4] = T.cast(T.max_value("int32"), "float32")
            C[5] = T.cast(T.min_value(T.int8), "float32")
            C[6] = T.cast(T.infinity("bfloat16"), "float32")
            C[7] = T.cast(T.max_value("bfloat16"), "float32")
    return main


@pytest.mark.parametrize("dtype", DTYPES)
def test_cast_dtype_objects_and_limits(dtype):
    a = rand(20) * 3
    i = torch.arange(20, dtype=torch.int32)
    y, z, c = (torch.empty(20, dtype=TORCH[dtype]), torch.empty(20, dtype=torch.int32),
               torch.empty(8))
    casts_and_constants(20, dtype)(a, i, y, z, c)
    check(y, a.to(TORCH[dtype]).double() * 2 + 0.5)
    assert torch.equal(z, (a * 10).to(torch.int32) + i)  # casts to int truncate toward zero
    want = torch.tensor([float("inf"), float("-inf"), torch.finfo(torch.float16).max,
                         torch.finfo(torch.float16).min, float(2 ** 31 - 1), -128.0,
                         float("inf"), torch.finfo(torch.bfloat16).max])
    assert torch.equal(c, want)


def test_dtype_objects_are_names():
    assert T.float16 == "float16" and T.bfloat16 == "bfloat16" and T.int32 == "int32"
    assert str(T.float16(1.5).ty) == "float16"
    assert {T.float32, T.float64, T.int8, T.uint8, T.bool} <= {"float32", "float64", "int8",
                                                              "uint8", "bool"}


def classify(dtype):
    """Rows 0-2 of Y: T.isnan, T.isinf and T.isfinite of X, as 0/1 in int8; row 3 the three
    of an integer (constants: finite, neither NaN nor infinite)."""
    n = 16

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), I: T.Tensor((n,), "int32"),
             Y: T.Tensor((4, n), "int8")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                Y[0, i] = T.if_then_else(T.isnan(X[i]), 1, 0)
                Y[1, i] = T.if_then_else(T.isinf(X[i]), 1, 0)
                Y[2, i] = T.if_then_else(T.isfinite(X[i]), 1, 0)
                Y[3, i] = T.if_then_else(T.isfinite(I[i]), 1, 0) + \
                    T.if_then_else(T.isnan(I[i]), 2, 0) + T.if_then_else(T.isinf(I[i]), 4, 0)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", [*DTYPES, "float8_e5m2"])
def test_isnan_isinf_isfinite(target, dtype):
    kernel = tilewright.compile(classify(dtype), out_idx=-1, target=target)
    x = torch.tensor([0.0, -1.5, float("nan"), float("inf"), -float("inf"), 448.0, -0.0,
                      1e-3] * 2).to(getattr(torch, dtype))
    y = kernel(x, torch.arange(16, dtype=torch.int32))
    wide = x.float()
    for row, fn in enumerate((torch.isnan, torch.isinf, torch.isfinite)):
        assert torch.equal(y[row], fn(wide).to(torch.int8)), (fn.__name__, y[row])
    assert torch.equal(y[3], torch.ones(16, dtype=torch.int8))


def negation(dtype):
    @T.prim_func
    def main(X: T.Tensor((4,), dtype), Y: T.Tensor((4,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            for j in T.Parallel(4):
                Y[j] = -X[j] + (-T.cast(bx, dtype))
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_negation_of_an_unsigned_value_wraps(dtype, target):
    """``-x`` of an unsigned value wraps as torch's does; TVM's negation multiplied by a
    constant -1 of the unsigned type and stopped ('cannot make uint from negative value')."""
    x = torch.tensor([0, 1, 2, 200], dtype=getattr(torch, dtype))
    bits = 8 * x.element_size()
    want = ((-x.long()) % (1 << bits)).to(x.dtype)
    assert torch.equal(tilewright.compile(negation(dtype), out_idx=[1], target=target)(x), want)
