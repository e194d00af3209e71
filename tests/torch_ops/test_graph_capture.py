"""CUDA graph capture: the launch path of CUDA kernels is capture-safe.

Without a GPU, the launch path is run against a recording stand-in of the CUDA driver: after
the first call (which loads the module) a call is one ``cuLaunchKernel`` on torch's current
stream -- no synchronisation, no allocation, no other driver call. With a GPU, a CUDA graph of
RMSNorm then RoPE in place (the seed's ACLGraph example) is captured and replayed.
"""

import types

import pytest
import torch
from tilewright.runtime import cuda as runtime_cuda
from tilewright.runtime.cuda import CubinFunction

LAUNCH = {"entry": "scale_kernel", "grid": ["(n + 127) // 128", "1", "1"], "block": [128, 1, 1],
          "dynamic_smem_bytes": 0, "symbols": {"n": [0, 0]},
          "params": [{"kind": "tensor", "param": 0}, {"kind": "tensor", "param": 1},
                     {"kind": "symbol", "name": "n", "dtype": "int32"}]}


class RecordingDriver:
    """The few cuda.bindings.driver names the launch path uses, recording every call."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, args))
            return (0, 1) if name != "cuLaunchKernel" else (0,)

        return call

    def CUstream(self, handle):  # noqa: N802 - the driver's name
        return ("stream", handle)


class OnGpu(torch.Tensor):
    """A host tensor that says it is on a CUDA device (what the launch path reads of it)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_after_warm_up_a_call_is_one_launch_on_the_current_stream(monkeypatch):
    driver = RecordingDriver()
    monkeypatch.setattr(runtime_cuda, "_driver", lambda: driver)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: types.SimpleNamespace(cuda_stream=0xC0FFEE))
    fn = CubinFunction(b"not loaded", LAUNCH)
    x, y = (torch.randn(1000).as_subclass(OnGpu) for _ in range(2))
    fn(x, y)  # warm-up: loads the module
    assert [c[0] for c in driver.calls][-1] == "cuLaunchKernel"
    driver.calls.clear()
    fn(x, y)
    assert [name for name, _ in driver.calls] == ["cuLaunchKernel"]
    args = driver.calls[0][1]
    assert args[1:4] == (8, 1, 1)  # the grid from n = 1000
    assert args[8] == ("stream", 0xC0FFEE)  # torch's current stream, the capturing one


@pytest.mark.gpu
def test_rmsnorm_then_rope_capture_and_replay():
    import tilewright
    from torch_kernels import rmsnorm, rope

    m, n = 64, 128
    norm = tilewright.compile(rmsnorm.get_tir(m, n), out_idx=[-1], target="cuda")
    rot = tilewright.compile(rope.get_tir(m, n), target="cuda")
    x = torch.randn(m, n, device="cuda")
    w = torch.randn(n, device="cuda")
    cos, sin = torch.randn(m, n // 2, device="cuda"), torch.randn(m, n // 2, device="cuda")

    def step():
        q = norm(x, w, 1e-6)
        rot(q, cos, sin)
        return q

    torch.cuda.synchronize()
    for _ in range(2):  # warm-up: modules loaded, argument plans made
        step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    x.copy_(torch.randn(m, n, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    a, b = ref.chunk(2, dim=-1)
    torch.testing.assert_close(out, torch.cat([a * cos - b * sin, b * cos + a * sin], -1),
                               rtol=1e-4, atol=1e-4)
