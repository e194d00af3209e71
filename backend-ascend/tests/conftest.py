"""Fixtures of the Ascend backend tests. Nothing here needs CANN, torch_npu or an NPU: the
generated Ascend C runs on the CPU emulator. The checks against the vendor's Ascend C headers
need the asc-devkit (``$TILEWRIGHT_ASC_DEVKIT``, else ``../shared/vendor/asc-devkit`` next to
the repository) and skip without it."""

import os
import sys
from pathlib import Path

import pytest
from tilewright_ascend.facts.arch import NPU_ARCH
from tilewright_ascend.kit.conformance_headers import run_folder
from tilewright_ascend.kit.headers import check_sources, find_devkit, unavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    if not os.environ.get("TILEWRIGHT_ASCEND_EMU_DIR"):
        # the emulator runtime object is built once per test run
        monkeypatch.setenv("TILEWRIGHT_ASCEND_EMU_DIR", str(run_folder(tmp_path_factory) /
                                                            "ascend-emu"))


@pytest.fixture(scope="session")
def asc_devkit():
    """The asc-devkit root, or a skip with the reason."""
    devkit = find_devkit(REPO.parent / "shared" / "vendor" / "asc-devkit")
    reason = unavailable(devkit)
    if reason:
        pytest.skip(reason)
    return devkit


@pytest.fixture(scope="session")
def asc_check(asc_devkit, tmp_path_factory):
    """``check(sources, npu_arch=2201)``: the findings of ``sources`` (name -> Ascend C) against
    the kit's headers (``check_sources``), precompiled once per architecture for the whole run."""
    folder = run_folder(tmp_path_factory)

    def check(sources: dict[str, str], npu_arch: int = NPU_ARCH):
        return check_sources(sources, asc_devkit, npu_arch=npu_arch,
                             workdir=folder / f"asc-devkit-{npu_arch}")

    return check
