"""The ``tilewright`` command: backends, doctor, cache and plugin subcommands."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from importlib import metadata

import pytest
from tilewright.cli.main import main
from tilewright.jit.cache import ENV_DIR, DiskCache
from tilewright.plugin import (
    ENTRY_POINT_GROUP,
    ENV_SELECT,
    CliTool,
    PluginManager,
    hookimpl,
    set_manager,
)


class FakeEntryPoint:
    def __init__(self, name: str, load):
        self.name, self._load = name, load
        self.dist = types.SimpleNamespace(name=f"tilewright-{name}", version="0.0.1")

    def load(self):
        return self._load()


def cpu_entry_point():
    return next(ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu")


def broken_import():
    raise ImportError("No module named 'tilewright_broken_dep'")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_SELECT, raising=False)
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "cache"))


@pytest.fixture
def manager():
    """A manager with the real cpu plugin and one that fails at import, installed globally."""
    mgr = PluginManager(entry_points=[cpu_entry_point(), FakeEntryPoint("broken", broken_import)])
    previous = set_manager(mgr)
    yield mgr
    set_manager(previous)


def test_backends_lists_cpu_and_the_broken_plugin(manager, capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "plugin cpu" in out and "backend cpu" in out
    assert "targets" in out and "executor llvm-jit" in out and "executor llvm-shared" in out
    assert "tile ops" in out and "gemm" in out and "float32" in out
    assert "plugin broken 0.0.1 (tilewright-broken): failed" in out
    assert "tilewright_broken_dep" in out


def test_backends_json(manager, capsys):
    assert main(["backends", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["broken"]["status"] == "failed"
    assert "tilewright_broken_dep" in plugins["broken"]["error"]
    (cpu,) = plugins["cpu"]["backends"]
    assert cpu["target_kinds"] == ["cpu"]
    assert cpu["device_available"]["ok"] is True
    executors = {e["name"]: e for e in cpu["executors"]}
    assert {"llvm-shared", "llvm-jit"} <= set(executors)
    assert executors["llvm-jit"]["ok"] is True
    assert "gemm" in cpu["capabilities"]["tile_ops"]
    assert report["conflicts"] == []


def test_backends_shows_why_an_executor_is_unavailable(capsys):
    from tilewright.plugin import Availability, Executor
    from tilewright_cpu.plugin import BACKEND

    missing = Executor("nvrtc", lambda: Availability(False, "libnvrtc not found"),
                       lambda s, c, w: None)
    backend = dataclasses.replace(
        BACKEND, name="other", target_kinds=("other",),
        pipelines={"other": BACKEND.pipelines["cpu"]},
        codegens={"other": BACKEND.codegens["cpu"]}, executors=(missing,),
        device_available=lambda: Availability(False, "no GPU"))
    plugin = types.ModuleType("other")
    plugin.tilewright_backends = hookimpl(lambda: [backend])
    plugin.tilewright_backends.__name__ = "tilewright_backends"
    mgr = PluginManager(entry_points=[])
    mgr.register(plugin, "other")
    previous = set_manager(mgr)
    try:
        assert main(["backends"]) == 0
        out = capsys.readouterr().out
        assert "unavailable: libnvrtc not found" in out and "unavailable: no GPU" in out
        assert main(["doctor"]) == 0
        out = capsys.readouterr().out
        assert "compile only (cannot run here)" in out
    finally:
        set_manager(previous)


def test_doctor(manager, capsys, tmp_path):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "python" in out and "tvm" in out and "torch" in out
    assert "backend cpu" in out and "can compile and run" in out
    assert "executor llvm-jit: usable" in out
    assert "plugin 'broken' (tilewright-broken 0.0.1) [failed]" in out
    assert "tilewright_broken_dep" in out
    assert str(tmp_path / "cache") in out
    assert "target 'auto' resolves to: cpu" in out


def test_doctor_with_every_plugin_disabled_says_to_enable_one(monkeypatch, capsys):
    """Installed plugins that TILEWRIGHT_PLUGINS turns off are not to be installed again."""
    monkeypatch.setenv(ENV_SELECT, "none")
    previous = set_manager(PluginManager(entry_points=[cpu_entry_point()]))
    try:
        assert main(["doctor"]) == 0
    finally:
        set_manager(previous)
    out = capsys.readouterr().out
    assert (f"no backend is loaded: nothing can be compiled; {ENV_SELECT}='none' disables the "
            "installed plugin(s) cpu: name one there or unset it") in out
    assert "pip install" not in out


def test_doctor_json(manager, capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (cpu,) = report["backends"]
    assert cpu["can_run"] and "llvm-jit" in cpu["usable_executors"]
    assert report["missing"][0]["plugin"] == "broken"
    assert report["tvm"]["version"] and report["tvm"]["error"] == ""


def _fake_entry(cache: DiskCache, key: str, size: int) -> None:
    staging = cache.staging()
    (staging / "kernel.bin").write_bytes(b"x" * size)
    cache.commit(key, staging, {"backend": "cpu"})


def test_cache_info_and_clear(capsys, tmp_path):
    cache = DiskCache()
    assert cache.root == tmp_path / "cache"
    _fake_entry(cache, "ab" * 32, 100)
    _fake_entry(cache, "cd" * 32, 50)
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["path"] == str(tmp_path / "cache")
    assert info["entries"] == 2 and info["bytes"] >= 150
    assert main(["cache", "info"]) == 0
    assert "entries  2" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 cache entries" in capsys.readouterr().out
    assert cache.info()["entries"] == 0
    assert main(["cache", "clear"]) == 0
    assert "removed 0 cache entries" in capsys.readouterr().out


def test_cache_needs_an_action(capsys):
    assert main(["cache"]) == 2
    assert "ACTION" in capsys.readouterr().err


def test_plugin_subcommand(capsys):
    seen = []

    def run(argv):
        seen.append(argv)
        return 3

    plugin = types.ModuleType("tools")
    plugin.tilewright_cli_tools = hookimpl(lambda: [CliTool("hello", "say hello", run),
                                                     CliTool("doctor", "shadowing", run)])
    plugin.tilewright_cli_tools.__name__ = "tilewright_cli_tools"
    mgr = PluginManager(entry_points=[])
    mgr.register(plugin, "tools")
    previous = set_manager(mgr)
    try:
        assert main(["hello", "--flag", "x"]) == 3
        assert seen == [["--flag", "x"]]
        assert main(["--help"]) == 0
        captured = capsys.readouterr()
        assert "hello" in captured.out and "say hello (plugin)" in captured.out
        assert "'doctor' is already taken" in captured.err
    finally:
        set_manager(previous)


def test_import_is_light():
    code = ("import sys, tilewright.cli.main; "
            "print(sorted(m for m in ('tvm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_python_m_tilewright_backends(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV_SELECT}
    result = subprocess.run([sys.executable, "-m", "tilewright", "backends"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "plugin cpu" in result.stdout and "targets" in result.stdout
    assert "executor llvm-jit" in result.stdout


def test_misspelt_plugin_selection_leaves_help_working(manager, monkeypatch, capsys):
    monkeypatch.setenv(ENV_SELECT, "cpux")
    assert main(["--help"]) == 0
    captured = capsys.readouterr()
    assert "backends" in captured.out
    assert f"warning: {ENV_SELECT}='cpux': no installed plugin is named 'cpux'" in captured.err
    assert main(["backends"]) == 1
    assert "installed plugins: broken, cpu; did you mean cpu?" in capsys.readouterr().err
