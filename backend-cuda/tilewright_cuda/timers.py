"""``do_bench`` timers of the CUDA backend, all on torch's current stream:

- ``event``: CUDA events around each call (launch gaps between calls are not counted, the
  launch overhead of the call itself is);
- ``cudagraph``: ``n`` calls captured once in a ``torch.cuda.CUDAGraph``, then the graph
  replayed between two events; a sample is one replay divided by ``n`` (no launch overhead);
- ``cupti``: the calls run under ``torch.profiler`` with CUDA activities; a sample is the
  sum of the durations of the kernels one call ran (device time only).
"""

from __future__ import annotations

from tilewright.plugin import Availability, Timer

CALL_MARK = "tilewright.do_bench.call"
GRAPH_CALLS = 10  # calls captured per graph


def _torch_cuda() -> Availability:
    try:
        import torch
    except ImportError:
        return Availability(False, "torch is not installed")
    if not torch.cuda.is_available():
        return Availability(False, "torch sees no CUDA device")
    return Availability(True)


def _event(fn, n_warmup: int, n_repeat: int, flush=None) -> list[float]:
    import torch

    for _ in range(n_warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(n_repeat):
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def _cudagraph_available() -> Availability:
    state = _torch_cuda()
    if not state:
        return state
    import torch

    if not hasattr(torch.cuda, "CUDAGraph"):
        return Availability(False, f"torch {torch.__version__} has no torch.cuda.CUDAGraph")
    return Availability(True)


def _cudagraph(fn, n_warmup: int, n_repeat: int) -> list[float]:
    import torch

    # warm up on a side stream: the first call loads the module, which a capture must not do
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(n_warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    per_graph = max(1, min(GRAPH_CALLS, n_repeat))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    torch.cuda.synchronize()
    graph.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    samples = []
    for _ in range(max(1, -(-n_repeat // per_graph))):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / per_graph)
    return samples


def _cupti_available() -> Availability:
    state = _torch_cuda()
    if not state:
        return state
    import torch

    if not torch.autograd.kineto_available():
        return Availability(False, f"torch {torch.__version__} was built without kineto "
                                   "(CUPTI) profiling")
    return Availability(True)


def kernel_ms_per_call(events, n_calls: int) -> list[float]:
    """Per call, the summed duration (ms) of the device kernels that started inside that
    call's ``CALL_MARK`` range. ``events`` are profiler events with ``name``, ``time_range``
    (``start``, ``end`` in us) and ``device_type``; kernels are the CUDA-device ones."""
    calls = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.name == CALL_MARK and _on_host(e))
    kernels = [e for e in events if not _on_host(e) and e.name != CALL_MARK]
    if len(calls) != n_calls:
        raise RuntimeError(f"the cupti timer saw {len(calls)} marked calls, expected {n_calls}")
    totals = [0.0] * n_calls
    for k in kernels:
        for i, (lo, hi) in enumerate(calls):
            if lo <= k.time_range.start <= hi:
                totals[i] += (k.time_range.end - k.time_range.start) / 1e3
                break
    if not any(totals):
        raise RuntimeError("the cupti timer recorded no CUDA kernel inside the timed calls; "
                           "does the function launch work on the GPU?")
    return totals


def _on_host(event) -> bool:
    return str(getattr(event, "device_type", "CPU")).rsplit(".", 1)[-1] == "CPU"


def _cupti(fn, n_warmup: int, n_repeat: int) -> list[float]:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(n_warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n_repeat):
            with record_function(CALL_MARK):
                fn()
                torch.cuda.synchronize()  # the call's kernels finish inside its range
    return kernel_ms_per_call(prof.events(), n_repeat)


TIMERS = (
    Timer("event", _torch_cuda, _event, "CUDA events around each call on torch's current stream"),
    Timer("cudagraph", _cudagraph_available, _cudagraph,
          f"{GRAPH_CALLS} calls captured in a CUDA graph, replays timed with CUDA events "
          "(no launch overhead)"),
    Timer("cupti", _cupti_available, _cupti,
          "torch.profiler (CUPTI) kernel durations summed per call (device time only)"),
)
