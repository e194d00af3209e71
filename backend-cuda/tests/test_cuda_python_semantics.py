"""Python's meaning survives lowering to CUDA (host emulation against torch): ``//`` and ``%``
floor on negative integer operands, as Python's and torch's do (C's ``/`` and ``%``
truncate), and a Python variable rebound to a second tile names that tile from then on."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch

N, M, BM = 64, 64, 16


def _division():
    @T.prim_func
    def division(X: T.Tensor((N,), "int32"), Y: T.Tensor((4, N), "int32")):
        with T.Kernel(1, threads=64) as _bx:
            for i in T.Parallel(N):
                Y[0, i] = X[i] // 3
                Y[1, i] = X[i] % 3
                Y[2, i] = X[i] // -3
                Y[3, i] = X[i] % -3

    return division


def _rebinding():
    @T.prim_func
    def rebinding(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
                  C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, BM), threads=128) as bx:
            s = T.alloc_shared((BM, N), "float32")
            T.copy(A[bx * BM, 0], s)
            y = T.alloc_fragment((BM, N), "float32")
            for i, j in T.Parallel(BM, N):
                y[i, j] = s[i, j] * 2.0
            s = T.alloc_shared((BM, N), "float32")  # a second tile under the same name
            T.copy(B[bx * BM, 0], s)
            for i, j in T.Parallel(BM, N):
                y[i, j] = y[i, j] + s[i, j]
            T.copy(y, C[bx * BM, 0])

    return rebinding


@pytest.mark.emulator
def test_floor_division_and_modulo_of_negative_integers(tmp_path):
    lowered = tilewright.lower(_division(), "cuda -arch=sm_90a")
    x = torch.arange(N, dtype=torch.int32) - 32
    y = torch.full((4, N), -999, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    want = torch.stack([torch.floor_divide(x, 3), torch.remainder(x, 3),
                        torch.floor_divide(x, -3), torch.remainder(x, -3)])
    assert torch.equal(y, want)


@pytest.mark.emulator
def test_a_rebound_tile_variable_names_the_second_tile(tmp_path):
    lowered = tilewright.lower(_rebinding(), "cuda -arch=sm_90a")
    a, b = torch.randn(M, N), torch.randn(M, N)
    c = torch.full((M, N), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a * 2 + b)


@pytest.mark.emulator
@pytest.mark.parametrize("extent", [0, -4])
def test_loops_without_iterations_run_none(tmp_path, extent):
    """A constant loop extent below zero runs no iteration, as Python's range (TVM's unrolling
    crashed on it: "Cannot unroll non-constant loop")."""
    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(extent):
                A[i] = 1.0
            for k in T.unroll(extent):
                A[k] = 2.0
            for k in T.Pipelined(extent, num_stages=2):
                A[k + 1] = 3.0
            for i in T.Parallel(N):
                A[i] = A[i] + 5.0

    lowered = tilewright.lower(main, "cuda -arch=sm_90a")
    a = torch.zeros(N)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a)
    assert torch.equal(a, torch.full((N,), 5.0))
