"""The conformance plugin end to end, run in subprocesses as a backend author runs it."""

import json
import textwrap

import pytest
from tilewright_sdk.conformance import plugin

BROKEN = textwrap.dedent('''
    """A plugin whose backend declaration does not validate, registered before the suite."""
    import types

    from tilewright.plugin import PluginManager, get_manager, hookimpl, set_manager
    from tilewright.plugin import API_VERSION, BackendModule, Capabilities, Executor, Availability

    module = types.ModuleType("broken_backend")

    @hookimpl
    def tilewright_backends():
        return [BackendModule(name="broken", version="0", api_version=API_VERSION,
                              target_kinds=("broken",), pipelines={}, codegens={},
                              executors=(), capabilities=Capabilities(set(), set()))]

    module.tilewright_backends = tilewright_backends
    manager = get_manager()
    manager.register(module, "broken")
''')


class _Config:
    def __init__(self, **options):
        self.options = options

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


def test_invalid_declarations_fail_the_contract_with_the_reason(pytester):
    pytester.makepyfile(broken_setup=BROKEN)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "broken_setup", "--pyargs",
        "tilewright_sdk.conformance.test_contract", "--tilewright-backend", "broken")
    result.assert_outcomes(errors=9)
    result.stdout.fnmatch_lines([("*backend plugin 'broken' failed to load: tilewright_backends "
                                  "raised PluginError: backend 'broken': no PassPipeline for "
                                  "target 'broken'*")])
    assert "Traceback" not in result.stdout.str()


def test_interp_conformance_writes_the_reports(pytester, tmp_path):
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--pyargs", "tilewright_sdk.conformance",
        "--tilewright-backend", "interp", "--tilewright-mode", "execute",
        "--tilewright-report", str(report), "-k", "contract or copy or reduce_sum or gemm_nt")
    result.assert_outcomes(passed=9 + 6 + 6 + 3 + 6)
    result.stdout.fnmatch_lines(["*tilewright conformance: backend interp, mode execute*",
                                 "gemm_nt*pass 2/2*pass 2/2*pass 2/2*"])
    data = json.loads((report / "conformance-interp-execute.json").read_text())
    assert data["backend"] == "interp" and data["summary"]["passed"] == 21
    assert data["op_coverage"]["gemm"] == {"float32": "passed", "float16": "passed",
                                           "bfloat16": "passed"}
    html = (report / "conformance-interp-execute.html").read_text()
    assert "<table>" in html and "reduce_sum_dim0" in html
    assert "http" not in html.replace("http-equiv", "")  # self-contained


PARTIAL = textwrap.dedent('''
    """The interpreter again, as backend 'partial' that does not declare cumsum."""
    import dataclasses
    import types

    from tilewright.plugin import get_manager, hookimpl

    from tilewright_interp.plugin import BACKEND

    caps = dataclasses.replace(BACKEND.capabilities,
                               tile_ops=BACKEND.capabilities.tile_ops - {"cumsum"})
    PARTIAL = dataclasses.replace(
        BACKEND, name="partial", target_kinds=("partial",),
        pipelines={"partial": BACKEND.pipelines["interp"]},
        codegens={"partial": BACKEND.codegens["interp"]}, capabilities=caps)
    module = types.ModuleType("partial_backend")
    module.tilewright_backends = hookimpl(lambda: [PARTIAL])
    get_manager().register(module, "partial")
''')


def test_undeclared_ops_are_unsupported_not_failures(pytester):
    pytester.makepyfile(partial_setup=PARTIAL)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "partial_setup", "--pyargs",
        "tilewright_sdk.conformance", "--tilewright-backend", "partial",
        "--tilewright-mode", "execute", "-k", "cumsum or reduce_max")
    result.assert_outcomes(passed=6, skipped=12)
    result.stdout.fnmatch_lines(["cumsum *unsup 2/2*unsup 2/2*unsup 2/2*",
                                 "6 passed, 12 unsupported of 18", "unsupported:",
                                 ("*cumsum-float32-full: backend 'partial' does not declare op "
                                  "cumsum*")])
