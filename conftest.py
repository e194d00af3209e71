"""The one place that decides whether tests that need a device run on this machine.

``gpu``: a visible NVIDIA GPU (through the driver, as the CUDA backend finds it) and a build of
torch that can use it. Without either, every test marked ``gpu``, in any distribution's tests,
is skipped with the one reason given here. (No test needs an NPU: the Ascend backend's tests
run the generated Ascend C on its CPU emulator.) Toolchain markers (``nvrtc``, ``nvcc``,
``emulator``, ``sass``) are the CUDA backend's, in ``backend-cuda/tests/conftest.py``.

It also makes Python's full garbage collections rarer in test processes: each walks every
object the process holds (torch, TVM, the loaded plugins; about 0.1 s), and by default one
follows every 10th collection of generation 1, so a file of emulation tests spent about 1 s
CPU in them (test_ascend_vector.py: 9 full collections, 1.07 s, of 7.8 s in its process; with
100: 1, 0.18 s, the same peak memory).
"""

from __future__ import annotations

import gc

import pytest

FULL_COLLECTION_EVERY = 100  # collections of generation 1 (Python's default: 10)

GPU_HOW = "execution on the H200 is checked by backend-cuda/bench/run_h200.sh"


def _gpu_reason() -> str | None:
    try:
        from tilewright_cuda import arch
    except ImportError:
        return f"needs a GPU: the CUDA backend (tilewright-cuda) is not installed ({GPU_HOW})"
    if arch.visible_gpu_arch() is None:
        return f"needs a GPU: no NVIDIA GPU visible ({GPU_HOW})"
    try:
        import torch
    except ImportError:
        return "needs a GPU: torch is not installed"
    if not torch.cuda.is_available():
        return f"needs a GPU: torch {torch.__version__} cannot use it (a CPU build)"
    return None


def pytest_configure(config):
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, FULL_COLLECTION_EVERY)
    config.addinivalue_line("markers", "gpu: needs a visible NVIDIA GPU (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("gpu")]
    reason = _gpu_reason() if marked else None
    for item in marked if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))
