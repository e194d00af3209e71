"""Narrow integer arithmetic on CUDA (``tilewright.transform.wrapping_int``) at the boundary
values, where each product, difference or quotient leaves its type: made in 32 bits (int32;
uint32 for a uint16 product, up to 0xFFFE0001), wrapped as torch wraps, run by the host
emulation of the generated CUDA."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch

N = 64


def _boundary_ops(dtype: str):
    """Y0 = X * W, Y1 = X - W, Y2 = X // W (W nonzero), Y3 = int8 of X * W."""
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((4, N), dtype)):
        with T.Kernel(1, threads=N):
            for j in T.Parallel(N):
                Y[0, j] = X[j] * W[j]
                Y[1, j] = X[j] - W[j]
                Y[2, j] = X[j] // W[j]
                Y[3, j] = T.cast(T.cast(X[j] * W[j], "int8"), dtype)
    return main


def _wrapped(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    info = torch.iinfo(dtype)
    return ((values - info.min) % 2 ** info.bits + info.min).to(dtype)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_boundary_values_wrap_as_torch(dtype, tmp_path):
    lowered = tilewright.lower(_boundary_ops(dtype), "cuda -arch=sm_90a")
    text = lowered.source.text
    assert "int64_t" not in text[text.index('extern "C" __global__'):]
    info = torch.iinfo(getattr(torch, dtype))
    edges = [info.min, info.min + 1, -1, 1, info.max - 1, info.max]
    edges = [e for e in edges if info.min <= e <= info.max and e != 0]
    pairs = [(a, b) for a in edges + [0] for b in edges]
    x = torch.tensor([a for a, _ in pairs] + [info.max] * (N - len(pairs)))
    w = torch.tensor([b for _, b in pairs] + [info.max] * (N - len(pairs)))
    tdtype = getattr(torch, dtype)
    y = torch.zeros(4, N, dtype=tdtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x.to(tdtype),
                w.to(tdtype), y)
    want = torch.stack([_wrapped(x * w, tdtype), _wrapped(x - w, tdtype),
                        _wrapped(torch.div(x, w, rounding_mode="floor"), tdtype),
                        _wrapped(_wrapped(x * w, torch.int8).long(), tdtype)])
    assert torch.equal(y.long(), want.long()), (x, w, y, want)
