"""tilewright-sdk new-backend: refusals, the files it writes, and a contract round trip."""

import sys
import tomllib
from importlib.metadata import EntryPoint

import pytest
from tilewright.plugin import PluginManager, set_manager
from tilewright_sdk.cli import main
from tilewright_sdk.conformance import contract
from tilewright_sdk.scaffold import ScaffoldError, new_backend, render


@pytest.mark.parametrize("name", ["", "Bad", "1abc", "my backend", "a/b", "trailing-",
                                  "x__y", "dots.not.allowed", "é"])
def test_invalid_names_are_refused(name, tmp_path):
    with pytest.raises(ScaffoldError, match="is not a valid backend name"):
        new_backend(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("precious")
    assert main(["new-backend", "mine", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "mine" in err
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["keep.txt"]
    assert main(["new-backend", "Not-Valid", "--dir", str(tmp_path)]) == 2
    assert "not a valid backend name" in capsys.readouterr().err


def test_render_writes_every_part_of_a_distribution():
    files = render("my-accel")
    pkg = "tilewright_my_accel"
    assert set(files) == {"pyproject.toml", "README.md", "tox.ini", f"{pkg}/__init__.py",
                          f"{pkg}/plugin.py", f"{pkg}/pipeline.py", f"{pkg}/lowering.py",
                          f"{pkg}/codegen.py", f"{pkg}/executor.py", "tests/conftest.py",
                          "tests/test_contract.py"}
    assert 'name = "tilewright-my-accel"' in files["pyproject.toml"]
    assert f'my-accel = "{pkg}.plugin"' in files["pyproject.toml"]
    assert f'[project.entry-points."tilewright.hooks"]\ntilewright_backends = "{pkg}.plugin"' \
        in files["pyproject.toml"]
    assert "{{" not in "".join(files.values())
    for path in (f"{pkg}/plugin.py", f"{pkg}/pipeline.py", f"{pkg}/codegen.py",
                 f"{pkg}/executor.py", "tox.ini"):
        assert f"`{path}`" in files["README.md"] or path == "tox.ini"


def test_scaffolded_backend_passes_the_contract_checks(tmp_path):
    folder = main(["new-backend", "fresh", "--dir", str(tmp_path)])
    assert folder == 0
    sys.path.insert(0, str(tmp_path / "fresh"))
    # the entry points its pyproject.toml declares, as pip would install them
    groups = tomllib.loads((tmp_path / "fresh" / "pyproject.toml").read_text())["project"][
        "entry-points"]
    plugins, targets, hooks = ([EntryPoint(k, v, group) for k, v in groups[group].items()]
                               for group in ("tilewright.plugins", "tilewright.targets",
                                             "tilewright.hooks"))
    manager = PluginManager(entry_points=plugins, declarations=targets, hooks=hooks)
    previous = set_manager(manager)
    try:
        backend = manager.backend_for("fresh")
        assert manager.records["fresh"].status == "ok", manager.records["fresh"].error
        for check in ("check_declarations", "check_capabilities", "check_target_claims",
                      "check_target_declarations", "check_hook_declarations",
                      "check_executors", "check_phases_visible",
                      "check_unsupported_message", "check_timers", "check_arch_models"):
            getattr(contract, check)(backend)
        assert not backend.executors[0].available()
        undeclared = PluginManager(entry_points=plugins, declarations=[])
        with pytest.raises(AssertionError, match=r"declares the targets \[\] in the entry-point "
                           r"group tilewright.targets but its backends claim \['fresh'\]"):
            contract.check_target_declarations(undeclared.backend_for("fresh"), undeclared)
    finally:
        set_manager(previous)
        sys.path.remove(str(tmp_path / "fresh"))
        for name in [m for m in sys.modules if m.startswith("tilewright_fresh")]:
            del sys.modules[name]


def test_contract_checks_catch_a_broken_backend():
    import tilewright_interp.plugin as interp
    from tilewright.plugin import Availability, Executor

    mute = Executor("mute", lambda: Availability(False, ""), lambda s, c, w: None)
    broken = interp.BACKEND.__class__(**{**interp.BACKEND.__dict__, "executors": (mute,)})
    with pytest.raises(AssertionError, match="is unavailable and gives no reason"):
        contract.check_executors(broken)
    with pytest.raises(AssertionError, match="not registered: tw_made_up"):
        contract.check_capabilities(broken.__class__(**{
            **broken.__dict__, "capabilities": broken.capabilities.__class__(
                {"tw_made_up"}, {"float32"})}))
    # an expression intrinsic's own capability name (no tile op goes with it) is known
    from tilewright.ir import register_intrinsic

    register_intrinsic("tw.test.lane_value", "test_lane_value", "a test's expression intrinsic")
    contract.check_capabilities(broken.__class__(**{
        **broken.__dict__, "capabilities": broken.capabilities.__class__(
            {"test_lane_value", "copy"}, {"float32"})}))


def test_tox_installs_from_this_checkout_with_package_editable():
    import configparser
    from importlib import metadata

    from tilewright_sdk.scaffold import tilewright_checkout

    root = tilewright_checkout()
    assert root is not None and (root / "core" / "tilewright").is_dir()
    tox = configparser.ConfigParser(interpolation=None)
    tox.read_string(render("local")["tox.ini"])
    env = tox["testenv"]
    assert env["package"] == "editable" and "commands_pre" not in env
    deps = env["deps"].split()
    assert f"{{env:TILEWRIGHT_SRC:{root}}}" in deps and f"{{env:TILEWRIGHT_SRC:{root}}}/sdk" in deps
    # torch is the build this environment has: pip never chooses another one
    assert f"{{env:TILEWRIGHT_TORCH:torch=={metadata.version('torch')}}}" in deps


def test_contract_tests_fail_loudly_without_the_sdk(tmp_path):
    import subprocess

    new_backend("loud", tmp_path)
    code = ("import sys; sys.modules['tilewright_sdk.conformance'] = None; "
            f"sys.path.insert(0, {str(tmp_path / 'loud' / 'tests')!r}); import test_contract")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode != 0
    assert "the contract tests need tilewright-sdk: pip install -e '.[test]'" in proc.stderr
