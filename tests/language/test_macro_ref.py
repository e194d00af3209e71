"""``T.Ref`` macro parameters (TileLang's eager-JIT tutorial): the caller passes a buffer element
or a ``T.alloc_var`` scalar, and assigning the parameter in the macro stores into it."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


@T.macro
def set_one(x: T.Ref):
    x = 1  # noqa: F841 - stores into the caller's element


@T.macro
def collatz(n, steps: T.Ref):
    """Counts the steps from ``n`` to 1 into ``steps``, the recursion unrolled at compile
    time (``n`` is a Python int)."""
    if n != 1:
        steps = steps + 1
        collatz(n // 2 if n % 2 == 0 else 3 * n + 1, steps)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_ref_parameters_store_into_the_callers_element_or_variable(target):
    @T.prim_func
    def main(A: T.Tensor((4,), T.float32), C: T.Tensor((2,), T.int32)):
        with T.Kernel(1):
            set_one(A[1])  # a constant index
            idx = T.alloc_var(T.int32, 3)
            set_one(A[idx])  # an index read at run time
            C[0] = 0
            collatz(7, C[0])  # through a recursion of macros
            count = T.alloc_var(T.int32, 0)
            collatz(6, count)
            C[1] = count

    kernel = tilewright.compile(main, target=target)
    a, c = torch.zeros(4), torch.zeros(2, dtype=torch.int32)
    kernel(a, c)
    assert a.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert c.tolist() == [16, 8]


def test_a_ref_parameter_needs_an_element_or_a_variable():
    with pytest.raises(KernelError, match=r"T.macro set_one: parameter 'x' is a T.Ref: pass a "
                                          r"buffer element \(buf\[i\]\) or a T.alloc_var"):
        @T.prim_func
        def main(A: T.Tensor((4,), T.float32)):
            with T.Kernel(1):
                set_one(A[0] + 1)
