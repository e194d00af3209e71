"""torch operator tests: they need torch (skipped with one reason without it); ``gpu`` marks
the tests that need a CUDA device and the CUDA compiler (skipped with one reason here)."""

import pytest

torch = pytest.importorskip("torch", reason="the torch operator tests need torch "
                                            "(pip install 'tilewright[torch]')")

GPU_REASON = "needs a CUDA device (and the CUDA compiler, to build the kernels)"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: {GPU_REASON}")
