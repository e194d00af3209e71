"""The vendor-header check of the Ascend conformance run: the Ascend C each case generates (seen
as the ``codegen`` compile event while the case runs) is compiled against the asc-devkit headers
of the run's target (:mod:`.headers`), as the cube core and as a vector core, right where the
suite lowered it; a diagnostic fails the case. The run's workers share one folder of
precompiled headers. Without the kit (``$TILEWRIGHT_ASC_DEVKIT``, else
``../shared/vendor/asc-devkit`` next to the repository) the summary says why nothing was checked.

Loaded by :mod:`.pytest_plugin` in a conformance run of the Ascend backend only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tilewright.engine import events
from tilewright_sdk.conformance.plugin import state_of

from ..facts.arch import ARCHS
from .headers import CORES, HeaderCheck, find_devkit, unavailable
from .sources import REPO

CHECKED = "tilewright_asc_devkit_checked"  # the user property: sources a case checked
LANGUAGE = "ascendc"
PLUGIN = "tilewright-ascend-vendor-headers"


def run_folder(factory) -> Path:
    """The temporary folder of this test run, shared by its pytest-xdist workers (each has its
    own base temporary folder inside the controller's); a new run starts with a fresh one."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class VendorHeaders:
    """Checks the sources of each conformance case; counts them for the summary."""

    def __init__(self, devkit: Path | None, npu_arch: int):
        self.devkit, self.npu_arch = devkit, npu_arch
        self.reason = unavailable(devkit)
        self.checker: HeaderCheck | None = None
        self.checked = 0

    def prepare(self, folder: Path) -> None:
        """The checker, its precompiled headers in ``folder`` (shared by the run's workers)."""
        if self.reason is None:
            self.checker = HeaderCheck(self.devkit, folder / f"asc-devkit-{self.npu_arch}",
                                       self.npu_arch)
            self.checker.prepare()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        case = getattr(item, "callspec", None) and item.callspec.params.get("conformance_case")
        if case is None or self.checker is None:
            return (yield)
        texts: list[str] = []

        def listen(event):
            if event.kind == "codegen" and event.data.get("language") == LANGUAGE:
                texts.append(event.data.get("patched_text") or event.data["text"])

        events.subscribe(listen)
        try:
            result = yield
        finally:
            events.unsubscribe(listen)
        stem = case.id.replace("/", "__")
        sources = {f"{stem}-{i}": text for i, text in enumerate(texts)}
        findings = self.checker.check(sources)
        item.user_properties.append((CHECKED, len(sources)))
        if findings:
            report = "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}" for f in findings)
            raise AssertionError(
                f"the Ascend C of {case.id} does not compile against the asc-devkit headers of "
                f"__NPU_ARCH__ {self.npu_arch} ({self.devkit}): {len(findings)} of "
                f"{len(sources) * len(CORES)} compiles:\n{report}")
        return result

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.checked += sum(v for k, v in report.user_properties if k == CHECKED)

    def pytest_terminal_summary(self, terminalreporter, config):
        state = state_of(config)
        if state is None or not state.results:  # no catalogue case ran (the fuzzer's session)
            return
        if self.reason is not None:
            terminalreporter.write_line(f"asc-devkit header check: not run: {self.reason}")
            return
        terminalreporter.write_line(
            f"asc-devkit header check (__NPU_ARCH__ {self.npu_arch}): {self.checked} generated "
            f"sources compiled as {' and '.join(CORES)}")


@pytest.fixture(scope="session", autouse=True)
def _tilewright_asc_devkit(request, tmp_path_factory):
    """Prepares the checker once per worker, before its first case (a session of the same
    backend without catalogue cases, such as the fuzzer's, needs none)."""
    plugin = request.config.pluginmanager.get_plugin(PLUGIN)
    if plugin is not None and any("conformance_case" in getattr(item, "fixturenames", ())
                                  for item in request.session.items):
        plugin.prepare(run_folder(tmp_path_factory))


def pytest_configure(config):
    state = state_of(config)
    if state is None or state.backend is None:
        return
    target = state.target or state.backend.target_kinds[0]
    devkit = find_devkit(REPO.parent / "shared" / "vendor" / "asc-devkit")
    config.pluginmanager.register(VendorHeaders(devkit, ARCHS[target].npu_arch),
                                  PLUGIN)
