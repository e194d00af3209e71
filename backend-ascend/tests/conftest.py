"""Fixtures of the Ascend backend tests. Nothing here needs CANN, torch_npu or an NPU: the
generated Ascend C runs on the CPU emulator. The checks against the vendor's Ascend C headers
need the asc-devkit (``$TILEWRIGHT_ASC_DEVKIT``, else ``../shared/vendor/asc-devkit`` next to
the repository) and skip without it."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    if not os.environ.get("TILEWRIGHT_ASCEND_EMU_DIR"):
        # the emulator runtime object is built once per test run
        monkeypatch.setenv("TILEWRIGHT_ASCEND_EMU_DIR", str(run_folder(tmp_path_factory) /
                                                            "ascend-emu"))


def run_folder(factory) -> Path:
    """The temporary folder of this test run, shared by its pytest-xdist workers (each has its
    own base temporary folder inside the controller's); a new run starts with a fresh one."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def asc_devkit():
    """The asc-devkit root, or a skip with the reason."""
    from tilewright_ascend.kit.headers import find_devkit, unavailable

    devkit = find_devkit(REPO.parent / "shared" / "vendor" / "asc-devkit")
    reason = unavailable(devkit)
    if reason:
        pytest.skip(reason)
    return devkit
