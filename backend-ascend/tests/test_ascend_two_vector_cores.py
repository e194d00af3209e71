"""Portable vector kernels use both vector cores: AIV ``vid`` of group ``cid`` runs block
``2 * cid + vid``. The emulator checks the two cores against each other in GM exactly to the
byte where DataCopyPad writes part of a 32-byte granule: neighbouring rows written by the two
cores are no race, the same bytes written by both are."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_ascend.executor import EmulatorError, last_run_stats


def _rows(M, N, same_row):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M) as bx:
            t = T.alloc_fragment((1, N), "float32")
            T.copy(A[bx, 0], t)
            for i, j in T.Parallel(1, N):
                t[i, j] = t[i, j] + 1.0
            T.copy(t, B[0 if same_row else bx, 0])

    return main


def test_blocks_pair_up_on_the_two_vector_cores():
    M, N = 5, 12  # 48-byte rows: neighbouring rows share a 32-byte GM granule
    kernel = tilewright.compile(_rows(M, N, False), target="ascend")
    source = kernel.get_kernel_source()
    assert "((cid * 2) + vid) < 5" in source and "<<<3, nullptr" in source, source
    a, b = torch.randn(M, N), torch.full((M, N), float("nan"))
    kernel(a, b)
    torch.testing.assert_close(b, a + 1)
    assert last_run_stats()["races"] == 0


def test_the_same_bytes_from_both_vector_cores_are_a_race():
    kernel = tilewright.compile(_rows(4, 12, True), target="ascend")
    with pytest.raises(EmulatorError, match=r"race \(write-after-write\) on GM buffer 'B'"):
        kernel(torch.randn(4, 12), torch.zeros(4, 12))
