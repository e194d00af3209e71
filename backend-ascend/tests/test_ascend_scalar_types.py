"""Scalar arithmetic in its types, on the emulator against torch. int32 that leaves its type
wraps modulo 2**32 as TIR's does: the generated code computes a signed +, -, * through the
unsigned type of its width (C++ leaves signed overflow undefined), the emulator computes a
scalar value in its C++ type after each operator (it computed in double: ``T.max(x + x, x)``
read 2**31 + 2), and the vector unit's integer Add, Mul and Adds keep the low bits (they
computed in float, inexact past 2**24). Integer selects are exact past 2**24; float16 rounds
after each operator."""

import re

import tilewright
import tilewright.language as T
import tilewright_ascend.language as A
import torch


def wrapped(values: torch.Tensor, bits: int) -> torch.Tensor:
    """int64 ``values`` modulo 2**bits as two's complement."""
    half = 1 << (bits - 1)
    return (values + half) % (2 * half) - half


def test_int32_scalar_arithmetic_wraps_before_max_and_min():
    @T.prim_func
    def main(X: T.Tensor((16,), "int32"), Y: T.Tensor((16,), "int32"),
             Z: T.Tensor((16,), "int32")):
        with T.Kernel(1, threads=32) as _:
            for j in T.Parallel(16):
                Y[j] = T.max(X[j] + X[j], X[j])
                Z[j] = T.min(X[j] * 5, X[j] - 7)

    kernel = tilewright.compile(main, out_idx=[1, 2], target="ascend")
    assert re.search(r"TW_CAST\(int32_t, \(TW_CAST\(uint32_t, \w+\.GetValue\(j\)\) - "
                     r"TW_CAST\(uint32_t, 7\)\)\)", kernel.get_kernel_source())
    x = torch.tensor([2**30 + 1, 2**30 + 2, -2**31, -2**31 + 3, 2**31 - 1, 5, -6, 0] * 2,
                     dtype=torch.int64)
    y, z = kernel(x.to(torch.int32))
    torch.testing.assert_close(y, torch.maximum(wrapped(2 * x, 32), x).int(), rtol=0, atol=0)
    torch.testing.assert_close(z, torch.minimum(wrapped(5 * x, 32), wrapped(x - 7, 32)).int(),
                               rtol=0, atol=0)


def test_vector_int32_add_mul_and_adds_keep_the_low_bits():
    """Add.md/Mul.md of A2 say nothing of overflow; SetCtrlSpr(ISASI).md's CTRL[53] (950):
    integer vector arithmetic truncates to the low bits by default."""

    @A.prim_func
    def main(X: A.Tensor((64,), "int32"), Y: A.Tensor((64,), "int32"),
             S: A.Tensor((64,), "int32"), P: A.Tensor((64,), "int32")):
        with A.Kernel(1, is_npu=True) as (cid, vid):
            a = A.alloc_ub((64,), "int32")
            b = A.alloc_ub((64,), "int32")
            c = A.alloc_ub((64,), "int32")
            d = A.alloc_ub((64,), "int32")
            with A.Scope("V"):
                if vid == 0:
                    A.copy(X[0], a)
                    A.copy(Y[0], b)
                    A.barrier_all()
                    A.tile.add(c, a, b)
                    A.tile.mul(d, a, b)
                    A.barrier_all()
                    A.tile.adds(c, c, 3)
                    A.barrier_all()
                    A.copy(c, S[0])
                    A.copy(d, P[0])

    x = torch.arange(64, dtype=torch.int64) * 33554467 + 16777217  # past 2**24, odd
    y = torch.arange(64, dtype=torch.int64) * -12345701 + 2**30
    s, p = tilewright.compile(main, out_idx=[2, 3], target="ascend")(x.int(), y.int())
    torch.testing.assert_close(s, wrapped(x + y + 3, 32).int(), rtol=0, atol=0)
    torch.testing.assert_close(p, wrapped(x * y, 32).int(), rtol=0, atol=0)


def test_int32_selects_and_comparisons_are_exact_past_2_24():
    """Integer selects and comparisons run on the scalar unit (A2's Select takes floats; its
    Compare takes int32 == only): values 1 apart above 2**24, where float32 rounds them to one
    value, are told apart."""

    @T.prim_func
    def main(X: T.Tensor((64,), "int32"), W: T.Tensor((64,), "int32"),
             F: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "int32"),
             Z: T.Tensor((64,), "int32"), V: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=32) as _:
            for j in T.Parallel(64):
                Y[j] = T.if_then_else(X[j] > W[j], X[j], W[j] - 1)
                Z[j] = T.Cast("int32", X[j] == W[j] + 1) + T.Cast("int32", X[j] < W[j]) * 2
                V[j] = T.if_then_else(F[j] > 0.0, X[j], W[j])

    i = torch.arange(64)
    w = (2**24 + 1 + (i // 3) * 2**25).int()
    x = w + (i % 3 - 1).int()
    f = torch.where(i % 2 == 0, 1.0, -1.0)
    y, z, v = tilewright.compile(main, out_idx=[3, 4, 5], target="ascend")(x, w, f)
    torch.testing.assert_close(y, torch.where(x > w, x, w - 1), rtol=0, atol=0)
    torch.testing.assert_close(z, (x == w + 1).int() + (x < w).int() * 2, rtol=0, atol=0)
    torch.testing.assert_close(v, torch.where(f > 0, x, w), rtol=0, atol=0)


def test_float16_scalar_arithmetic_rounds_after_each_operator():
    """TIR's float16 arithmetic rounds each result to float16; C++ may keep a half result in
    float (excess precision), so the generated code casts each one to half, and the emulator
    rounds each half operator's result (it computed the whole expression in double). The
    vendor's documentation states no precision for the scalar unit's half arithmetic."""

    @T.prim_func
    def main(X: T.Tensor((48,), "float16"), W: T.Tensor((48,), "float16"),
             Y: T.Tensor((48,), "float16")):
        with T.Kernel(1, threads=32) as _:
            for j in T.Parallel(48):  # j % 3: a condition the vector unit leaves to the scalar
                Y[j] = T.if_then_else(j % 3 == 0, (X[j] + W[j]) + W[j], X[j] * W[j] - X[j])

    kernel = tilewright.compile(main, out_idx=[2], target="ascend")
    assert re.search(r"TW_CAST\(half, \(\w+\.GetValue\(j\) \+ \w+\.GetValue\(j\)\)\) \+ ",
                     kernel.get_kernel_source())
    # 2048 + 1 rounds to 2048 (in float: 2050 at the end); (1 + 2**-10)**2 rounds to 1 + 2**-9
    x = torch.tensor([2048.0, 1 + 2**-10, 1024.0] * 16, dtype=torch.float16)
    w = torch.tensor([1.0, 1 + 2**-10, 0.5] * 16, dtype=torch.float16)
    want = torch.where(torch.arange(48) % 3 == 0, (x + w) + w, x * w - x)
    assert want[:2].tolist() == [2048.0, 2**-10]
    torch.testing.assert_close(kernel(x, w), want, rtol=0, atol=0)
