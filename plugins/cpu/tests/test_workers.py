"""The block grid on the kernel shim's worker pool: every block runs, and an error raised in
whichever thread ran a block is the call's error."""

import pytest
import tilewright
import tilewright.language as T
import torch

BLOCK = 64


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "tw-cache"))


@tilewright.jit(out_idx=[-1], target="cpu")
def checked_sqrt(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, BLOCK)) as bx:
            for i in T.Parallel(BLOCK):
                if bx * BLOCK + i < M:
                    T.device_assert(A[bx * BLOCK + i] >= T.float32(0), "negative input")
                    B[bx * BLOCK + i] = T.sqrt(A[bx * BLOCK + i])
    return main


def test_every_block_runs():
    kernel = checked_sqrt(BLOCK * 300 + 5)
    a = torch.rand(BLOCK * 300 + 5)
    for _ in range(20):
        torch.testing.assert_close(kernel(a), a.sqrt())


@pytest.mark.parametrize("block", [0, 150, 300])
def test_an_assertion_in_any_block_is_the_calls_error(block):
    kernel = checked_sqrt(BLOCK * 300 + 5)
    a = torch.rand(BLOCK * 300 + 5)
    for _ in range(5):  # the failing block lands on the caller's thread or a worker
        a[block * BLOCK + 3] = -1.0
        with pytest.raises(RuntimeError, match="device_assert failed: negative input"):
            kernel(a)
        a[block * BLOCK + 3] = 1.0
        torch.testing.assert_close(kernel(a), a.sqrt())
