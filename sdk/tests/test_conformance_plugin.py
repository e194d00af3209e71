"""The conformance plugin end to end, as a backend author runs it: pytest in this process (on
a fresh plugin manager, so the backends a test registers or breaks do not outlive it), and once
on pytest-xdist workers."""

import dataclasses
import json
import types

import pytest
from tilewright.plugin import (
    API_VERSION,
    Availability,
    BackendModule,
    Capabilities,
    Executor,
    PluginManager,
    get_manager,
    hookimpl,
    set_manager,
)
from tilewright_interp import lowering
from tilewright_interp.plugin import BACKEND
from tilewright_sdk.conformance import known_failures as kf
from tilewright_sdk.conformance import plugin
from tilewright_sdk.conformance.catalogue import cases
from tilewright_sdk.conformance.runner import run_case


def _broken_plugin():
    """A plugin whose backend declaration does not validate."""
    module = types.ModuleType("broken_backend")

    @hookimpl
    def tilewright_backends():
        return [BackendModule(name="broken", version="0", api_version=API_VERSION,
                              target_kinds=("broken",), pipelines={}, codegens={},
                              executors=(), capabilities=Capabilities(set(), set()))]

    module.tilewright_backends = tilewright_backends
    return module


@pytest.fixture
def manager():
    """A fresh process-wide plugin manager (the installed plugins), put back afterwards."""
    fresh = PluginManager()
    previous = set_manager(fresh)
    yield fresh.load()
    set_manager(previous)


class _Config:
    """What pytest_configure reads of pytest's config: the options, and a plugin manager that
    records the plugins registered."""

    def __init__(self, **options):
        self.options = options
        self.registered = []
        self.pluginmanager = self

    def register(self, plugin, name=None):
        self.registered.append(name)

    def getoption(self, name, default=None):
        return self.options.get(name, default)


def test_unknown_backend_lists_the_installed_ones():
    config = _Config(**{"--tilewright-backend": "nosuch", "--tilewright-mode": "execute"})
    with pytest.raises(pytest.UsageError, match=r"--tilewright-backend 'nosuch': no installed "
                       r"backend has that name; installed backends: .*cpu.*interp"):
        plugin.pytest_configure(config)


def test_without_a_backend_the_plugin_stays_inert():
    config = _Config()
    plugin.pytest_configure(config)
    assert plugin.state_of(config) is None


def test_invalid_declarations_fail_the_contract_with_the_reason(pytester, manager):
    manager.register(_broken_plugin(), "broken")
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--pyargs",
        "tilewright_sdk.conformance.test_contract", "--tilewright-backend", "broken")
    result.assert_outcomes(errors=12)
    result.stdout.fnmatch_lines([("*backend plugin 'broken' failed to load: tilewright_backends "
                                  "raised PluginError: backend 'broken': no PassPipeline for "
                                  "target 'broken'*")])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize("workers", ["0", "1"])  # in this process, and on a pytest-xdist worker
def test_interp_conformance_writes_the_reports(pytester, tmp_path, workers):
    """Conformance cases and a fuzzing run in one session (as `make conformance` runs them):
    one report with both, the fuzzing statistics carried from the worker that fuzzed."""
    report = tmp_path / "report"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-n", workers, "--pyargs", "tilewright_sdk.fuzz",
        "tilewright_sdk.conformance", "--tilewright-backend", "interp", "--tilewright-mode",
        "execute", "--examples", "2", "--seed", "0", "--tilewright-report", str(report),
        "-k", "contract or copy_3d or reduce_sum or gemm_nt or agrees_with")
    result.assert_outcomes(passed=1 + 12 + 3 + 14 + 6)
    result.stdout.fnmatch_lines(["*tilewright conformance: backend interp, mode execute*",
                                 "gemm_nt*pass 2/2*pass 2/2*pass 2/2*",
                                 "*tilewright fuzz: backend interp*", "* programs (* executed*"])
    data = json.loads((report / "conformance-interp-execute.json").read_text())
    assert data["backend"] == "interp" and data["summary"]["passed"] == 23
    assert data["fuzz"]["seed"] == 0 and data["fuzz"]["executed"] >= 1
    assert data["fuzz"]["failures"] == []
    assert data["op_coverage"]["gemm"] == {"float32": "passed", "float16": "passed",
                                           "bfloat16": "passed"}
    assert data["name_coverage"]["reduce_sum"]["int32"] == "passed"
    html = (report / "conformance-interp-execute.html").read_text()
    assert "<table>" in html and "reduce_sum_dim0" in html and "T.reduce_sum" in html
    assert "http" not in html.replace("http-equiv", "")  # self-contained
    assert (report / "index.html").exists()


def _partial_plugin():
    """The interpreter again, as backend 'partial' that does not declare cumsum."""
    caps = dataclasses.replace(BACKEND.capabilities,
                               tile_ops=BACKEND.capabilities.tile_ops - {"cumsum"})
    partial = dataclasses.replace(
        BACKEND, name="partial", target_kinds=("partial",),
        pipelines={"partial": BACKEND.pipelines["interp"]},
        codegens={"partial": BACKEND.codegens["interp"]}, capabilities=caps)
    module = types.ModuleType("partial_backend")
    module.tilewright_backends = hookimpl(lambda: [partial])
    return module


def test_undeclared_ops_are_unsupported_not_failures(pytester, manager):
    manager.register(_partial_plugin(), "partial")
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--pyargs",
        "tilewright_sdk.conformance", "--tilewright-backend", "partial",
        "--tilewright-mode", "execute", "-k", "cumsum or reduce_max")
    result.assert_outcomes(passed=11, skipped=6)
    result.stdout.fnmatch_lines(["cumsum *unsup 2/2*unsup 2/2*unsup 2/2*",
                                 "11 passed, 6 unsupported of 17", "unsupported:",
                                 ("*cumsum-float32-full: backend 'partial' does not declare op "
                                  "cumsum*")])


def test_known_failures_are_strict_xfails(pytester, tmp_path, monkeypatch):
    """Two rows of known failures for the interpreter: one for cases a broken cumsum rule
    fails, one for cases that pass."""
    monkeypatch.setitem(lowering.RULES, "cumsum", lowering.RULES["copy"])
    monkeypatch.setattr(kf, "KNOWN_FAILURES", (
        *kf.KNOWN_FAILURES, kf.KnownFailure("interp", "cumsum-*", "cumsum copies"),
        kf.KnownFailure("interp", "copy_3d-*", "fixed long ago")))
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--pyargs",
        "tilewright_sdk.conformance.test_kernels", "--tilewright-backend", "interp",
        "-k", "cumsum or copy_3d", "--tilewright-report", str(tmp_path))
    result.assert_outcomes(xfailed=6, failed=3)
    result.stdout.fnmatch_lines(["*[[]XPASS(strict)] known interp bug: fixed long ago*",
                                 "cumsum *known 2/2*"])
    data = json.loads((tmp_path / "conformance-interp-execute.json").read_text())
    assert data["summary"]["xfailed"] == 6 and data["summary"]["failed"] == 3


def test_a_backend_that_cannot_run_is_not_verified():
    interp = get_manager().backends()["interp"]
    case = cases(["copy"])[0]
    assert run_case(case, interp, "codegen").startswith("max relative error")  # it ran
    mute = Executor("mute", lambda: Availability(False, "no such machine"),
                    lambda s, c, w: None)
    idle = dataclasses.replace(interp, executors=(mute,))
    summary = run_case(case, idle, "codegen")
    assert summary.startswith("not verified: ") and "no such machine" in summary


def test_a_target_the_backend_does_not_declare_lists_its_kinds():
    config = _Config(**{"--tilewright-backend": "interp", "--tilewright-mode": "execute",
                        "--tilewright-target": "nosuch"})
    with pytest.raises(pytest.UsageError, match=r"--tilewright-target 'nosuch': backend "
                                                r"'interp' compiles for \w+"):
        plugin.pytest_configure(config)
    kind = get_manager().backends()["interp"].target_kinds[0]
    config = _Config(**{"--tilewright-backend": "interp", "--tilewright-mode": "execute",
                        "--tilewright-target": kind})
    plugin.pytest_configure(config)
    assert plugin.state_of(config).target == kind
