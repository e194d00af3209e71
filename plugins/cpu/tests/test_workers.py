"""The block grid on the kernel shim's worker pool: every block runs, and an error raised in
whichever thread ran a block is the call's error."""

import os
import subprocess
import sys
import textwrap

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


@tilewright.jit(out_idx=[-1], target="cpu")
def block_visits(X, Y):
    @T.prim_func
    def main(A: T.Tensor((Y, X), "int32"), B: T.Tensor((Y, X), "int32")):
        with T.Kernel(X, Y) as (bx, by):
            B[by, bx] = A[by, bx] + 1
    return main


@pytest.mark.parametrize("grid", [(1, 1), (2, 1), (3, 1), (7, 3), (301, 2)])
def test_each_block_runs_once_whatever_the_share_sizes(grid):
    """Shares of uneven size (fewer blocks than workers, a remainder) still cover every block
    once: a block run twice would add 2."""
    kernel = block_visits(*grid)
    a = torch.arange(grid[0] * grid[1], dtype=torch.int32).reshape(grid[1], grid[0])
    for _ in range(10):
        torch.testing.assert_close(kernel(a), a + 1)


@pytest.mark.parametrize("threads", ["1", "3"])
def test_a_pool_of_another_size_than_the_compiled_worker_count(tmp_path, threads):
    """A kernel compiled for the host's cores runs on a pool of one thread (every share on
    the caller's thread) or of more threads than shares, spinning or not."""
    script = textwrap.dedent("""
        import torch, tilewright, tilewright.language as T
        @tilewright.jit(out_idx=[-1], target="cpu")
        def k(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
                with T.Kernel(T.ceildiv(M, 64)) as bx:
                    for i in T.Parallel(64):
                        if bx * 64 + i < M:
                            B[bx * 64 + i] = A[bx * 64 + i] * 2
            return main
        a = torch.rand(64 * 37 + 3)
        for _ in range(50):
            torch.testing.assert_close(k(a.numel())(a), a * 2)
        print("ok")
    """)
    env = {**os.environ, "TILEWRIGHT_NUM_THREADS": threads,
           "TILEWRIGHT_SPIN_US": "0" if threads == "1" else "50",
           "TILEWRIGHT_CACHE_DIR": str(tmp_path / "tw-cache")}
    (tmp_path / "pool.py").write_text(script)
    result = subprocess.run([sys.executable, str(tmp_path / "pool.py")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
