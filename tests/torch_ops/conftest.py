"""torch operator tests: they need torch (skipped with one reason without it); ``gpu`` marks
the tests that need a CUDA device and the CUDA compiler (skipped with one reason here)."""

import os

import pytest

torch = pytest.importorskip("torch", reason="the torch operator tests need torch "
                                            "(pip install 'tilewright[torch]')")

from tilewright.jit import native_op as native  # noqa: E402

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
    # the operators' C++ extension (half a minute to build) is built once, into pytest's cache
    # folder, which outlives the session and is shared by xdist workers and the interpreters
    # the tests start; never into the tests' own disk caches (one per test)
    os.environ.setdefault(native.DIR_ENV, str(config.cache.mkdir("tilewright-torch-op")))

