"""Kernels of several ``with T.Kernel`` blocks (the ``kernel_sequence`` feature): one kernel
per block, launched in order by the host function, sharing the ``T.alloc_global`` workspaces
the executor allocates for the call (``transforms/sequence.py``); the conformance case
``kernel_sequence`` runs the catalogue's two-block kernel."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

N = 64


def chain(n=N, bn=16):
    """Three launches: each block of a later one reads what other blocks of the one before
    wrote (a reversal, then a neighbour's element), through int32 and float32 workspaces."""

    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "float32")):
        W = T.alloc_global((n,), "int32")
        V = T.alloc_global((n,), "float32")
        with T.Kernel(n // bn, threads=32) as bx:
            for j in T.Parallel(bn):
                W[bx * bn + j] = A[n - 1 - (bx * bn + j)] * 3
        with T.Kernel(n // bn, threads=32) as bx:
            for j in T.Parallel(bn):
                V[bx * bn + j] = T.cast(W[(bx * bn + j + bn) % n], "float32") + 0.5
        with T.Kernel(n // 8, threads=32) as bx:
            for j in T.Parallel(8):
                B[bx * 8 + j] = V[bx * 8 + j] * 2.0

    return main


def test_three_blocks_run_in_order_through_workspaces():
    kernel = tilewright.compile(chain(), out_idx=[-1], target="ascend")
    source = kernel.get_kernel_source()
    launches = re.findall(r"(\w+_kernel)<<<(\d+), nullptr, stream>>>", source)
    # four, four and eight blocks on the AIVs: two, two and four AI core groups
    assert launches == [("main_0_kernel", "2"), ("main_1_kernel", "2"), ("main_2_kernel", "4")]
    a = torch.arange(N, dtype=torch.int32) * 7 - 100
    want = (torch.roll(a.flip(0) * 3, -16).float() + 0.5) * 2
    torch.testing.assert_close(kernel(a), want, rtol=0, atol=0)


def test_a_dynamic_workspace_is_refused_at_the_kernel():
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        W = T.alloc_global((n,), "float32")
        with T.Kernel(T.ceildiv(n, 16), threads=32) as bx:
            for j in T.Parallel(16):
                if bx * 16 + j < n:
                    W[bx * 16 + j] = A[bx * 16 + j]
        with T.Kernel(T.ceildiv(n, 16), threads=32) as bx:
            for j in T.Parallel(16):
                if bx * 16 + j < n:
                    B[bx * 16 + j] = W[bx * 16 + j]

    with pytest.raises(KernelError, match=r"test_ascend_kernel_sequence.py:\d+: .*the "
                       r"T.alloc_global workspace 'W' .*static shape only"):
        tilewright.compile(main, out_idx=[-1], target="ascend")


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    findings = asc_check({"chain": tilewright.lower(chain(), target="ascend").source.text})
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
