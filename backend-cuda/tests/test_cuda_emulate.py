"""The CUDA generated for the examples computes what torch computes, run on the host with one
thread per CUDA thread (see hostemu.py): indexing, guards, barriers, shuffles, atomics and the
mma.sync fragment layouts (emulated per warp) are checked without a GPU. Outputs start as
NaN."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import UnsupportedOpError


@pytest.mark.emulator
@pytest.mark.parametrize("name", kernels.EMULATED)
def test_generated_cuda_matches_torch(name, tmp_path):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    case = kernels.case(name)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()


def _rows_by_scalar():
    """A grid over an integer scalar argument (TileLang's varlen attention launches
    ``T.ceildiv(max_seqlen, block)`` blocks)."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(T.ceildiv(rows, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                if bx * 32 + i < rows:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0
    return main


@pytest.mark.nvrtc
@pytest.mark.emulator
def test_grid_over_a_scalar_argument(tmp_path):
    func = _rows_by_scalar()
    kernel = tilewright.compile(func, target="cuda -arch=sm_90a", execution_backend="nvrtc")
    assert kernel.executor == "nvrtc"
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    launch = lowered.source.payload
    assert launch["symbols"] == {"rows": [2]}, launch
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 100)
    torch.testing.assert_close(y[:100], x[:100] * 2)
    assert y[100:].isnan().all()  # the grid's 4 blocks cover 128 rows; rows 100.. untouched


def _while_rows(condition_in_shared: bool = False):
    """Blocks walk 32-row tiles in a ``while`` loop (TileLang's stream-K GEMM walks its
    iterations so); each tile is staged in shared memory and written out with its rows
    reversed, so threads read what others wrote: barriers inside the loop and on its back
    edge are needed."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((32, 64), "float32")
            at = T.alloc_shared((1,), "int32") if condition_in_shared else \
                T.alloc_fragment((1,), "int32", "local")
            at[0] = bx * 32
            while at[0] < rows:
                T.copy(X[at[0], 0], S)
                for i, j in T.Parallel(32, 64):
                    Y[at[0] + i, j] = S[31 - i, j] * 2.0
                at[0] = at[0] + 64
    return main


@pytest.mark.emulator
def test_while_loop_with_barriers(tmp_path):
    lowered = tilewright.lower(_while_rows(), "cuda -arch=sm_90a")
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 192)
    want = (x[:192].reshape(6, 32, 64).flip(1) * 2).reshape(192, 64)
    torch.testing.assert_close(y[:192], want)
    assert y[192:].isnan().all()


def test_while_condition_reading_shared_memory_is_refused():
    with pytest.raises(UnsupportedOpError, match=r"backend 'cuda' runs a 'while' loop whose "
                       r"condition is the same in every thread and reads no shared memory; "
                       r"this condition reads shared memory") as err:
        tilewright.lower(_while_rows(condition_in_shared=True), "cuda -arch=sm_90a")
    assert err.value.location is not None and err.value.location.line > 0


def _atomic_rows(branch: bool):
    """``T.atomic_add`` of one element per iteration of a ``T.Parallel`` nest (stream-K's
    partial tiles), alone or in the else branch of a uniform ``if``."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32"),
             flag: T.int32):
        with T.Kernel(4, threads=64) as bx:
            acc = T.alloc_fragment((16, 64), "float32")
            T.copy(X[bx * 16, 0], acc)
            if branch and flag == 0:
                T.copy(acc, Y[bx * 16, 0])
            else:
                for i, j in T.Parallel(16, 64):
                    T.atomic_add(Y[bx * 16 + i, j], acc[i, j])
    return main


@pytest.mark.emulator
@pytest.mark.parametrize("branch", [False, True])
def test_atomic_add_per_parallel_element(branch, tmp_path):
    """Each iteration adds its own element (the backend gave the nest to thread 0 alone)."""
    lowered = tilewright.lower(_atomic_rows(branch), "cuda -arch=sm_90a")
    x, y = torch.randn(64, 64), torch.ones(64, 64)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 1)
    torch.testing.assert_close(y, x + 1)
