"""``A if C else B`` in a kernel body: a Python condition picks one value as Python does; a
symbolic one selects between both, as ``T.if_then_else`` (TileLang's meaning; its varlen
attention examples write padding rows this way). On the backends that execute here."""

import pytest
import tilewright
import tilewright.language as T
import torch


def padded(n=16, valid=11, use_b=True):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                C[i] = A[i] if i < valid else (B[i] if use_b else T.cast(0, "float32"))

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("use_b", [True, False])
def test_a_symbolic_condition_selects_between_both_values(target, use_b):
    a, b = torch.randn(16), torch.randn(16)
    c = tilewright.compile(padded(use_b=use_b), out_idx=[-1], target=target)(a, b)
    want = torch.where(torch.arange(16) < 11, a, b if use_b else torch.zeros(16))
    assert torch.equal(c, want)


def truth_values():
    """Run-time values as conditions, as C takes them (non-zero is true): an int32 and a
    float32 T.alloc_var and an element in ``if``, ``x if c else y``, ``and`` / ``or`` / ``not``
    and ``while``."""

    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), X: T.Tensor((2,), "float32"),
             B: T.Tensor((8,), "int32")):
        with T.Kernel(1):
            v = T.alloc_var("int32", init=A[0])
            f = T.alloc_var("float32", init=X[0])
            if v:
                B[0] = 1
            else:
                B[0] = 2
            B[1] = 7 if f else 8
            B[2] = T.if_then_else(v and A[1], 3, 4)
            B[3] = T.if_then_else(v or A[1], 5, 6)
            B[4] = T.if_then_else(not v, 9, 10)
            B[5] = 11 if X[1] else 12
            n = T.alloc_var("int32", init=A[2])
            count = T.alloc_var("int32", init=0)
            while n:
                n = n - 1
                count = count + 1
            B[6] = count
            B[7] = T.if_then_else(not (f and True), 13, 14)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("a0, a1, x0, x1", [(0, 0, 0.0, 0.0), (5, 0, 0.5, -0.0),
                                            (0, 3, -2.0, 1.0), (-1, 1, 1.0, 0.25)])
def test_run_time_values_are_conditions_as_in_c(target, a0, a1, x0, x1):
    a = torch.tensor([a0, a1, 3, 0], dtype=torch.int32)
    x = torch.tensor([x0, x1])
    b = torch.zeros(8, dtype=torch.int32)
    tilewright.compile(truth_values(), target=target)(a, x, b)
    want = [1 if a0 else 2, 7 if x0 else 8, 3 if a0 and a1 else 4, 5 if a0 or a1 else 6,
            9 if not a0 else 10, 11 if x1 else 12, 3, 13 if not x0 else 14]
    assert b.tolist() == want


def test_an_optional_buffer_is_tested_by_its_presence():
    """``if bias:`` of a macro's optional tile parameter: a buffer is true (TileLang's kernels
    write this), ``None`` false."""

    @T.macro
    def add_bias(acc, bias):
        if bias:
            for i in T.Parallel(4):
                acc[i] = acc[i] + bias[i]

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), Bias: T.Tensor((4,), "float32"),
             C: T.Tensor((2, 4), "float32")):
        with T.Kernel(1):
            acc = T.alloc_fragment((4,), "float32")
            T.copy(A, acc)
            add_bias(acc, None)
            T.copy(acc, C[0, 0])
            add_bias(acc, Bias)
            T.copy(acc, C[1, 0])

    a, bias = torch.randn(4), torch.randn(4)
    c = torch.zeros(2, 4)
    tilewright.compile(main, target="cpu")(a, bias, c)
    assert torch.equal(c, torch.stack([a, a + bias]))
