"""The CUDA timers of do_bench (event, cudagraph, cupti): registered, each unavailable with a
clear reason where torch sees no GPU (do_bench then times with the wall clock), the cupti
per-call bookkeeping checked on recorded events, and all three timing a GPU kernel where one
is visible."""

from types import SimpleNamespace

import pytest
import torch
from tilewright.profiler import do_bench
from tilewright.profiler.timers import availability, timers
from tilewright_cuda import timers as cuda_timers

NAMES = ("event", "cudagraph", "cupti")


def test_the_three_timers_are_registered():
    known = timers()
    assert all(name in known for name in NAMES)
    assert all(known[name].doc for name in NAMES)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device here")
@pytest.mark.parametrize("name", NAMES)
def test_without_a_gpu_each_timer_says_why(name):
    assert availability(timers()[name]).reason == "torch sees no CUDA device"
    # do_bench times with the wall clock instead (TileLang's GPU timers fall back)
    assert do_bench(lambda: None, backend=name, _n_warmup=1, _n_repeat=3) >= 0


def test_cudagraph_needs_cuda_graphs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delattr(torch.cuda, "CUDAGraph")
    assert "has no torch.cuda.CUDAGraph" in availability(timers()["cudagraph"]).reason


def test_cupti_needs_kineto(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.autograd, "kineto_available", lambda: False)
    assert "without kineto (CUPTI)" in availability(timers()["cupti"]).reason


def _event(name, start, end, device="DeviceType.CPU"):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end),
                           device_type=device)


def test_cupti_sums_the_kernels_of_each_call():
    mark = cuda_timers.CALL_MARK
    events = [
        _event(mark, 0, 100), _event(mark, 200, 300),
        _event("gemm_kernel", 10, 40, "DeviceType.CUDA"),
        _event("epilogue_kernel", 50, 55, "DeviceType.CUDA"),
        _event("gemm_kernel", 210, 250, "DeviceType.CUDA"),
        _event("cuLaunchKernel", 5, 8),                     # host-side API call: not counted
        _event("stray_kernel", 150, 160, "DeviceType.CUDA"),  # outside every call
    ]
    assert cuda_timers.kernel_ms_per_call(events, 2) == pytest.approx([0.035, 0.04])
    with pytest.raises(RuntimeError, match="saw 2 marked calls, expected 3"):
        cuda_timers.kernel_ms_per_call(events, 3)
    with pytest.raises(RuntimeError, match="recorded no CUDA kernel"):
        cuda_timers.kernel_ms_per_call([_event(mark, 0, 10)], 1)


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_timers_time_a_gpu_kernel(name):
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    ms = do_bench(lambda: a @ a, backend=name, _n_warmup=3, _n_repeat=20)
    assert 0.001 < ms < 100
