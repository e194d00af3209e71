"""The pytest plugin of the conformance suite (entry point ``pytest11``).

``pytest --pyargs tilewright_sdk.conformance --tilewright-backend NAME
[--tilewright-target KIND] [--tilewright-mode codegen|compile|execute]
[--tilewright-report DIR]``

The plugin is inert unless ``--tilewright-backend`` is given, so installing the SDK changes no
other test session. It resolves the backend (an unknown name is a usage error listing the
installed ones) and the target kind (default: the backend's first; one it does not declare is a
usage error listing its kinds; reports of another kind than the first name it), parametrises
the catalogue, records each case's outcome (pass, fail,
unsupported, unavailable) and prints the coverage matrix; ``--tilewright-report`` also writes
``conformance-NAME-MODE.json`` and ``.html``.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from ..fuzz.stats import FuzzStats
from .outcomes import NOT_VERIFIED, UNAVAILABLE, UNSUPPORTED


def pytest_addoption(parser):
    group = parser.getgroup("tilewright", "tilewright backend conformance")
    group.addoption("--tilewright-backend", default=None, metavar="NAME",
                    help="the backend whose conformance is checked")
    group.addoption("--tilewright-target", default=None, metavar="KIND",
                    help="the backend's target kind to compile for (default: its first)")
    group.addoption("--tilewright-mode", default="execute",
                    choices=("codegen", "compile", "execute"),
                    help="how far each kernel is taken: source, built artifact, or run and "
                         "compared with torch (default: execute)")
    group.addoption("--tilewright-report", default=None, metavar="DIR",
                    help="write a JSON and a self-contained HTML report into DIR")
    group.addoption("--examples", type=int, default=100, metavar="N",
                    help="tilewright_sdk.fuzz: how many programs to generate (default 100)")
    group.addoption("--seed", type=int, default=0, metavar="S",
                    help="tilewright_sdk.fuzz: the Hypothesis seed (default 0)")
    group.addoption("--tilewright-fuzz-known", default="", metavar="FEATURES",
                    help="tilewright_sdk.fuzz: generate these features of known bugs of the "
                         "backend anyway (comma-separated, or 'all'; see "
                         "tilewright_sdk.conformance.known_failures)")
    group.addoption("--tilewright-fuzz-dir", default="tilewright-fuzz", metavar="DIR",
                    help="tilewright_sdk.fuzz: where failing programs are saved as "
                         "reproducers (default ./tilewright-fuzz)")


class _State:
    def __init__(self, name: str, mode: str, target: str | None = None):
        self.name, self.mode, self.target = name, mode, target
        self.backend = None
        self.record = None  # the plugin record when the backend's plugin failed to load
        self.results: list[dict] = []
        self.fuzz = None  # the FuzzStats of a tilewright_sdk.fuzz session


def _installed(manager) -> str:
    names = sorted(manager.backends())
    return ", ".join(names) if names else "none"


def pytest_configure(config):
    name = config.getoption("--tilewright-backend", default=None)
    if not name:
        return
    os.environ.setdefault("TILEWRIGHT_CACHE_DIR", tempfile.mkdtemp(prefix="tw-conformance-"))
    from tilewright.plugin import get_manager

    manager = get_manager()
    state = _State(name, config.getoption("--tilewright-mode"),
                   config.getoption("--tilewright-target", default=None))
    backends = manager.backends()
    if name in backends:
        state.backend = backends[name]
        kinds = state.backend.target_kinds
        if state.target is not None and state.target not in kinds:
            raise pytest.UsageError(f"--tilewright-target {state.target!r}: backend {name!r} "
                                    f"compiles for {', '.join(kinds)}")
    else:
        failed = [r for r in manager.records.values() if r.status == "failed" and r.name == name]
        if not failed:
            raise pytest.UsageError(f"--tilewright-backend {name!r}: no installed backend has "
                                    f"that name; installed backends: {_installed(manager)}")
        state.record = failed[0]
    config._tilewright_conformance = state
    config.pluginmanager.register(_Collector(state), "tilewright-conformance-rows")


def state_of(config) -> _State | None:
    return getattr(config, "_tilewright_conformance", None)


@pytest.fixture(scope="session")
def tilewright_conformance(request):
    """The conformance session: backend name, mode, the loaded backend (or the failed plugin
    record)."""
    state = state_of(request.config)
    if state is None:
        pytest.fail("the conformance suite needs --tilewright-backend NAME", pytrace=False)
    return state


@pytest.fixture(scope="session")
def tilewright_backend(tilewright_conformance):
    """The :class:`BackendModule` under test; fails with the plugin's load error if its
    declarations did not validate."""
    state = tilewright_conformance
    if state.backend is None:
        pytest.fail(f"backend plugin {state.name!r} failed to load: {state.record.error}",
                    pytrace=False)
    return state.backend


class _Fuzz:
    def __init__(self, stats, folder):
        self.stats, self.folder = stats, folder


@pytest.fixture(scope="session")
def tilewright_fuzz(request, tilewright_conformance, tilewright_backend):
    """The fuzzing session: ``stats`` (a :class:`~tilewright_sdk.fuzz.stats.FuzzStats`) and
    ``folder`` for reproducers."""
    from .known_failures import avoided_features

    config = request.config
    wanted = {f.strip() for f in config.getoption("--tilewright-fuzz-known").split(",")}
    avoided = [] if "all" in wanted else \
        sorted(avoided_features(tilewright_backend.name) - wanted)
    stats = FuzzStats(tilewright_backend.name, config.getoption("--seed"),
                      config.getoption("--examples"), avoided)
    tilewright_conformance.fuzz = stats
    return _Fuzz(stats, config.getoption("--tilewright-fuzz-dir"))


def pytest_generate_tests(metafunc):
    if "conformance_case" not in metafunc.fixturenames:
        return
    from .catalogue import cases

    selected = cases()
    metafunc.parametrize("conformance_case", selected, ids=[c.id for c in selected])


RESULT = "tilewright_result"  # the user property carrying a case's row of the report
FUZZ = "tilewright_fuzz_stats"  # the one carrying a fuzzing session's statistics


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A case's row of the report, or the fuzzing statistics, attached to its test report
    (which pytest-xdist carries from the worker that ran it to the session that writes the
    report)."""
    outcome = yield
    report = outcome.get_result()
    state = state_of(item.config)
    if state is not None and state.fuzz is not None and report.when == "call" and \
            "tilewright_fuzz" in getattr(item, "fixturenames", ()):
        report.user_properties.append((FUZZ, state.fuzz.to_json()))
    case = getattr(item, "callspec", None) and item.callspec.params.get("conformance_case")
    if state is None or case is None or report.when != "call" and not (
            report.when == "setup" and report.outcome != "passed"):
        return
    status = report.outcome
    detail = ""
    if report.skipped and hasattr(report, "wasxfail"):
        status, detail = "xfailed", report.wasxfail
    elif report.skipped:
        text = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        text = text.removeprefix("Skipped: ")
        status = "unsupported" if text.startswith(UNSUPPORTED) else \
            "unavailable" if text.startswith(UNAVAILABLE) else "skipped"
        detail = text.split(": ", 1)[-1]
    elif report.failed:
        status = "failed"
        detail = str(getattr(report.longrepr, "reprcrash", None) and
                     report.longrepr.reprcrash.message or report.longrepr)[:2000]
    else:
        detail = next((v for k, v in report.user_properties if k == "tilewright_summary"), "")
        if detail.startswith(NOT_VERIFIED):
            status, detail = "unverified", detail.removeprefix(NOT_VERIFIED)
    report.user_properties.append((RESULT, {
        "kernel": case.kernel.name, "ops": list(case.kernel.ops),
        "names": list(case.kernel.names), "dtype": case.dtype, "variant": case.variant,
        "mode": state.mode, "status": status, "detail": detail,
        "seconds": round(report.duration, 3)}))


class _Collector:
    """Collects the rows in the session that prints and writes the report: this process, or
    the pytest-xdist controller when the cases run on workers (``-n``)."""

    def __init__(self, state: _State):
        self.state = state

    def pytest_runtest_logreport(self, report):
        self.state.results.extend(v for k, v in report.user_properties if k == RESULT)
        if self.state.fuzz is None:  # on a worker: this session's copy of its statistics
            fuzz = [v for k, v in report.user_properties if k == FUZZ]
            if fuzz:
                self.state.fuzz = FuzzStats.from_json(fuzz[-1])


def pytest_terminal_summary(terminalreporter, config):
    state = state_of(config)
    if state is None or not (state.results or state.fuzz):
        return
    from .report import terminal_table, write_reports

    if state.results:
        target = f", target {state.target}" if state.target else ""
        terminalreporter.write_sep("=", f"tilewright conformance: backend {state.name}"
                                        f"{target}, mode {state.mode}")
        for line in terminal_table(state.results):
            terminalreporter.write_line(line)
    if state.fuzz:
        terminalreporter.write_sep("=", f"tilewright fuzz: backend {state.name}")
        for line in state.fuzz.lines():
            terminalreporter.write_line(line)
    directory = config.getoption("--tilewright-report")
    if directory:
        paths = write_reports(state, directory)
        terminalreporter.write_line("report: " + ", ".join(str(p) for p in paths))
