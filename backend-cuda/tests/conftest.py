"""The one place that decides what the CUDA tests can do on this machine.

Markers: ``nvcc`` and ``nvrtc`` (a compiler), ``emulator`` (g++ for the host emulation of
generated CUDA), ``sass`` (cuobjdump and nvdisasm to read machine code). A test whose
requirement is missing is skipped with the reason given here. ``gpu`` (a visible NVIDIA GPU)
is decided for every distribution's tests by the repository's root ``conftest.py``. Every
test compiles into its own disk cache; the host emulation's builds are shared by the tests
and the workers of one run (a folder of the run's base temporary folder).
"""

from __future__ import annotations

import os

import hostemu
import pytest
import sass
from tilewright_cuda import arch, executor


def _reasons() -> dict[str, str | None]:
    nvrtc = executor.nvrtc_available()
    nvcc = executor.nvcc_available()
    return {
        "nvrtc": None if nvrtc else f"NVRTC unavailable: {nvrtc.reason}",
        "nvcc": None if nvcc else f"nvcc unavailable: {nvcc.reason}",
        "emulator": (f"host emulation unavailable: {hostemu.available()}"
                     if hostemu.available() else None),
        "sass": f"SASS unreadable: {sass.available()}" if sass.available() else None,
    }


def pytest_configure(config):
    for name in ("nvcc", "nvrtc", "emulator", "sass"):
        config.addinivalue_line("markers", f"{name}: needs {name} (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    reasons = _reasons()
    for item in items:
        for name, reason in reasons.items():
            if reason and item.get_closest_marker(name):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "tw-cache"
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(path))
    monkeypatch.delenv(arch.ENV, raising=False)
    return path


@pytest.fixture(autouse=True, scope="session")
def hostemu_builds(tmp_path_factory):
    """The host emulation builds each kernel once a run: in the base temporary folder of the
    run, which pytest-xdist's workers share (each has its own below it)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "hostemu"
    hostemu.share_builds(folder)
    return folder
