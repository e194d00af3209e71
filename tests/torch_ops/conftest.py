"""torch operator tests: they need torch (skipped with one reason without it); ``gpu`` marks
the tests that need a CUDA device (decided by the repository's root ``conftest.py``)."""

import os
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch operator tests need torch "
                                            "(pip install 'tilewright[torch]')")

from tilewright.jit import native_op as native  # noqa: E402


def pytest_configure(config):
    # the operators' C++ extension (half a minute to build) is built once, into pytest's cache
    # folder, which outlives the session and is shared by xdist workers and the interpreters
    # the tests start; never into the tests' own disk caches (one per test)
    os.environ.setdefault(native.DIR_ENV, str(_build_dir(config)))


def _build_dir(config):
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if cache is not None:
        return cache.mkdir("tilewright-torch-op")
    return Path(tempfile.gettempdir()) / f"tilewright-torch-op-{os.getuid()}"

