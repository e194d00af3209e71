"""Branches on tile data in scalar-unit loops: the scalar unit does not branch on a value it has
not read yet, so an ``if`` whose arms only bind names and store to UB tiles becomes selects
(the condition bound once, before the stores), checked against torch on the emulator."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def compare_and_swap(M=8, N=16):
    """Neighbouring columns put in order through a name bound to an element (the conformance
    case ``named_value``): the second store must see the value before the first."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], t)
            for i, j in T.Parallel(M, N):
                p = j ^ 1
                if j < p and t[i, j] > t[i, p]:
                    v = t[i, j]
                    t[i, j] = t[i, p]
                    t[i, p] = v
            T.copy(t, B[0, 0])

    return main


def test_a_compare_and_swap_on_tile_data_runs_as_selects():
    kernel = tilewright.compile(compare_and_swap(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "TW_SELECT(tw_c1, " in text and not re.search(r"if \([^\n]*GetValue", text)
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    pairs = a.reshape(8, 8, 2)
    want = torch.stack([pairs.min(-1).values, pairs.max(-1).values], -1).reshape(8, 16)
    torch.testing.assert_close(kernel(a), want)


def both_arms(M=8, N=24):
    """An if/else on tile data whose arms store two tiles each, the then arm reading a tile
    the else arm writes, and a nested branch on tile data."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"),
             Z: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M, N), "float32")
            z = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                if x[i, j] > 0:
                    y[i, j] = x[i, j] * 2.0
                    z[i, j] = 1.0
                    if x[i, j] > 1:
                        z[i, j] = 2.0
                else:
                    y[i, j] = -x[i, j]
                    z[i, j] = y[i, j] + 0.5
            T.copy(y, Y[0, 0])
            T.copy(z, Z[0, 0])

    return main


def test_an_if_else_with_a_nested_branch_on_tile_data():
    kernel = tilewright.compile(both_arms(), out_idx=[1, 2], target="ascend")
    a = torch.randn(8, 24, generator=torch.Generator().manual_seed(2)) * 2
    y, z = kernel(a)
    torch.testing.assert_close(y, torch.where(a > 0, a * 2, -a))
    torch.testing.assert_close(z, torch.where(a > 1, 2.0, torch.where(a > 0, 1.0, -a + 0.5)))


def test_a_branch_on_tile_data_that_stores_to_global_memory_is_refused_at_its_line():
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as _:
            x = T.alloc_fragment((8, 8), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 8):
                if x[i, j] > 0:
                    B[(i * 3) % 8, j] = x[i, j]

    with pytest.raises(KernelError, match=r"the scalar unit does not branch on tile data .* "
                                          r"cannot be written as selects") as info:
        tilewright.lower(main, target="ascend")
    assert "test_ascend_scalar_branches.py" in str(info.value)
