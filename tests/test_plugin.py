"""The plugin contract: loading, validation, error isolation, selection and target claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from importlib import metadata

import pytest
from tilewright.errors import ConfigError, PluginError, TargetError
from tilewright.plugin import (
    API_VERSION,
    ENTRY_POINT_GROUP,
    ENV_SELECT,
    Availability,
    BackendModule,
    Capabilities,
    DeviceCodegen,
    Executor,
    PassConfigKey,
    PassPipeline,
    Phase,
    PluginManager,
    Timer,
    check_api_version,
    hookimpl,
    passconfig,
    set_manager,
)


class FakeDist:
    def __init__(self, name: str, version: str):
        self.name, self.version = name, version


class FakeEntryPoint:
    """What the manager reads from an ``importlib.metadata`` entry point."""

    def __init__(self, name: str, load, version: str = "9.9", value: str | None = None):
        self.name = name
        if value is not None:  # the plugin module (else the manager names the entry point)
            self.value = value
        self._load = load
        self.dist = FakeDist(f"tilewright-{name}", version)
        self.loads = 0

    def load(self):
        self.loads += 1
        return self._load()


def cpu_entry_point():
    eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu"]
    assert eps, "tilewright-cpu is not installed"
    return eps[0]


def fake_backend(name="fake", kinds=("fake",), api_version=API_VERSION, **overrides):
    fields = dict(
        name=name, version="1.2.3", api_version=api_version, target_kinds=kinds,
        pipelines={k: PassPipeline((Phase("only", lambda ctx: []),)) for k in kinds},
        codegens={k: DeviceCodegen("c", "c", lambda mod, ctx: None) for k in kinds},
        executors=(Executor("run", lambda: Availability(True), lambda src, ctx, wd: None),),
        capabilities=Capabilities(frozenset({"copy"}), frozenset({"float32"})),
    )
    fields.update(overrides)
    return BackendModule(**fields)


def plugin_module(name: str, **hooks) -> types.ModuleType:
    """A plugin module whose hooks are the given functions, marked with ``hookimpl``."""
    module = types.ModuleType(name)
    for hook, fn in hooks.items():
        fn.__name__ = hook
        setattr(module, hook, hookimpl(fn))
    return module


def backend_plugin(name: str, make_backends) -> types.ModuleType:
    return plugin_module(name, tilewright_backends=lambda: make_backends())


def broken_import():
    raise ImportError("No module named 'tilewright_broken_dep'")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(ENV_SELECT, raising=False)


@pytest.fixture
def install():
    """Install a manager as the process-wide one; the previous one comes back afterwards."""
    previous = set_manager(None)
    yield set_manager
    set_manager(previous)


# -- error isolation -------------------------------------------------------------------------
def test_plugin_failing_at_import_is_recorded_and_cpu_still_works():
    broken = FakeEntryPoint("broken", broken_import)
    manager = PluginManager(entry_points=[broken, cpu_entry_point()]).load()
    record = manager.records["broken"]
    assert record.status == "failed"
    assert "tilewright_broken_dep" in record.error
    assert record.version == "9.9" and record.distribution == "tilewright-broken"
    assert manager.records["cpu"].status == "ok"
    assert manager.backend_for("cpu").name == "cpu"
    assert set(manager.backends()) == {"cpu"}


def test_loading_is_idempotent():
    broken = FakeEntryPoint("broken", broken_import)
    fake = FakeEntryPoint("fake", lambda: backend_plugin("fake", lambda: [fake_backend()]))
    manager = PluginManager(entry_points=[broken, fake])
    manager.load()
    manager.load()
    assert broken.loads == 1 and fake.loads == 1
    assert list(manager.backends()) == ["fake"]


# -- declared targets: a target imports only its plugin ---------------------------------------
class FakeDeclaration:
    """An entry point of ``tilewright.targets``: a kind, then the plugin's module."""

    def __init__(self, kind: str, plugin: str):
        self.name, self.value = kind, f"tw_{plugin}.plugin"


def claiming(name: str, *kinds: str) -> FakeEntryPoint:
    return FakeEntryPoint(name, lambda: backend_plugin(
        name, lambda: [fake_backend(name, kinds=kinds or (f"k{name}",))]),
        value=f"tw_{name}.plugin")


def test_a_declared_target_imports_only_its_plugin():
    a, b = claiming("a"), claiming("b")
    manager = PluginManager(entry_points=[a, b], declarations=[
        FakeDeclaration("ka", "a"), FakeDeclaration("kb", "b")])
    assert manager.backend_for("ka").name == "a"
    assert manager.backend_for("ka").name == "a"
    assert (a.loads, b.loads) == (1, 0)
    assert manager.declared_targets("b") == {"kb"}
    assert set(manager.backends()) == {"a", "b"}  # what needs every plugin loads the rest
    assert (a.loads, b.loads) == (1, 1)


def test_the_plugins_a_binary_may_depend_on_are_the_same_loaded_or_not():
    entry_points = [claiming("a"), claiming("b")]
    declarations = [FakeDeclaration("ka", "a"), FakeDeclaration("kb", "b")]
    lazy = PluginManager(entry_points=entry_points, declarations=declarations)
    lazy.backend_for("ka")
    full = PluginManager(entry_points=entry_points, declarations=declarations).load()
    assert lazy.sources() == full.sources() == [("a", "9.9", "tw_a"), ("b", "9.9", "tw_b")]


def test_a_plugin_declaring_nothing_makes_every_target_load_everything():
    a, b = claiming("a"), claiming("b")
    manager = PluginManager(entry_points=[a, b], declarations=[FakeDeclaration("ka", "a")])
    assert manager.backend_for("ka").name == "a"
    assert (a.loads, b.loads) == (1, 1)  # b might claim ka too
    assert manager.declared_targets("b") == set()


def test_a_kind_two_plugins_declare_is_refused_naming_both():
    a, b = claiming("a", "shared"), claiming("b", "shared")
    manager = PluginManager(entry_points=[a, b], declarations=[
        FakeDeclaration("shared", "a"), FakeDeclaration("shared", "b")])
    with pytest.raises(TargetError, match="target 'shared' is claimed by several backends"):
        manager.backend_for("shared")


def test_a_plugin_claiming_other_targets_than_it_declares_is_named(caplog):
    a, b = claiming("a", "ka", "kz"), claiming("b")
    manager = PluginManager(entry_points=[a, b], declarations=[
        FakeDeclaration("ka", "a"), FakeDeclaration("kb", "b")])
    assert manager.backend_for("ka").name == "a"
    assert b.loads == 1
    assert "declares the targets ka (entry-point group tilewright.targets) but its backends " \
        "claim ka, kz; loading every plugin" in caplog.text


def test_a_declared_plugin_that_fails_to_import_is_named_like_any_other():
    broken = FakeEntryPoint("broken", broken_import, value="tw_broken.plugin")
    manager = PluginManager(entry_points=[broken, claiming("b")], declarations=[
        FakeDeclaration("kbroken", "broken"), FakeDeclaration("kb", "b")])
    with pytest.raises(TargetError, match=r"no installed backend claims target 'kbroken'.*"
                                          r"tilewright_broken_dep"):
        manager.backend_for("kbroken")
    assert broken.loads == 1


class FakeProbe:
    """An entry point of ``tilewright.devices``: a plugin's name, then its device probe."""

    def __init__(self, plugin: str, present: bool):
        self.name, self.value, self.calls = plugin, f"tw_{plugin}.device:present", 0
        self.present = present

    def load(self):
        def probe():
            self.calls += 1
            return Availability(self.present, "" if self.present else "no device")
        return probe


def accelerator(name: str, present: bool) -> FakeEntryPoint:
    return FakeEntryPoint(name, lambda: backend_plugin(name, lambda: [fake_backend(
        name, kinds=(f"k{name}",), accelerator=True, device=name,
        device_available=lambda: Availability(present, ""))]), value=f"tw_{name}.plugin")


def test_target_auto_imports_only_the_plugins_whose_device_is_present():
    absent, present, host = accelerator("gpu", False), accelerator("npu", True), claiming("cpu")
    probes = [FakeProbe("gpu", False), FakeProbe("npu", True)]
    manager = PluginManager(entry_points=[absent, present, host], declarations=[
        FakeDeclaration("kgpu", "gpu"), FakeDeclaration("knpu", "npu"),
        FakeDeclaration("kcpu", "cpu")], devices=probes)
    assert manager.accelerator_with_device().name == "npu"
    assert (absent.loads, present.loads, host.loads) == (0, 1, 0)
    assert [p.calls for p in probes] == [1, 1]


def test_without_a_present_device_target_auto_imports_no_accelerator():
    absent, host = accelerator("gpu", False), claiming("cpu")
    manager = PluginManager(entry_points=[absent, host], declarations=[
        FakeDeclaration("kgpu", "gpu"), FakeDeclaration("kcpu", "cpu")],
        devices=[FakeProbe("gpu", False)])
    assert manager.accelerator_with_device() is None
    assert (absent.loads, host.loads) == (0, 0)
    undeclared = PluginManager(entry_points=[accelerator("gpu", True), claiming("cpu")],
                               declarations=[FakeDeclaration("kcpu", "cpu")])
    assert undeclared.accelerator_with_device().name == "gpu"  # it declares nothing: probed


def test_the_installed_distributions_declare_what_their_backends_claim():
    manager = PluginManager().load()
    for name in ("cpu", "interp"):
        record = manager.records[name]
        assert manager.declared_targets(name) == \
            {kind for b in record.backends for kind in b.target_kinds}


# -- declared hooks: collecting a hook imports only the plugins implementing it ----------------
class FakeHookDeclaration:
    """An entry point of ``tilewright.hooks``: a hook, then the plugin's module."""

    def __init__(self, hook: str, plugin: str):
        self.name, self.value = hook, f"tw_{plugin}.plugin"


def fake_timer(name: str) -> Timer:
    return Timer(name, lambda: Availability(True), lambda fn, w, r: [1.0] * r)


def implementing(name: str, *hooks: str) -> FakeEntryPoint:
    """A plugin with a backend claiming ``k<name>`` that implements ``hooks`` too (a timer, an
    architecture model: nothing)."""
    def make():
        extra = {hook: (lambda: [fake_timer(f"t{name}")]) if hook == "tilewright_timers"
                 else (lambda: []) for hook in hooks}
        return plugin_module(name, tilewright_backends=lambda: [fake_backend(
            name, kinds=(f"k{name}",))], **extra)
    return FakeEntryPoint(name, make, value=f"tw_{name}.plugin")


def declaring(**plugins: tuple[str, ...]) -> list[FakeHookDeclaration]:
    """The ``tilewright.hooks`` entry points of plugins declaring these hooks besides
    ``tilewright_backends``."""
    return [FakeHookDeclaration(hook, plugin) for plugin, hooks in plugins.items()
            for hook in ("tilewright_backends", *hooks)]


def test_collecting_a_hook_imports_only_the_plugins_declaring_it():
    a, b, c = (implementing("a", "tilewright_timers"), implementing("b"),
               implementing("c", "tilewright_timers"))
    manager = PluginManager(entry_points=[a, b, c], hooks=declaring(
        a=("tilewright_timers",), b=(), c=("tilewright_timers",)))
    assert [t.name for t in manager.collect("tilewright_timers")] == ["ta", "tc"]
    assert manager.collect("tilewright_lowering_rules", backend="ka") == []
    assert manager.collect("tilewright_timers") != []
    assert (a.loads, b.loads, c.loads) == (1, 0, 1)
    assert set(manager.records) == {"a", "c"}
    assert manager.declared_hooks("b") == {"tilewright_backends"}
    assert set(manager.backends()) == {"a", "b", "c"}  # what needs every plugin loads the rest


def test_a_plugin_declaring_no_hooks_makes_collect_load_everything():
    a, b = implementing("a", "tilewright_timers"), implementing("b")
    manager = PluginManager(entry_points=[a, b], hooks=declaring(a=("tilewright_timers",)))
    assert [t.name for t in manager.collect("tilewright_timers")] == ["ta"]
    assert (a.loads, b.loads) == (1, 1)  # b might implement it too
    assert manager.declared_hooks("b") == set()


def test_a_plugin_implementing_an_undeclared_hook_is_named_and_collect_loads_everything(
        caplog):
    a = implementing("a", "tilewright_timers", "tilewright_arch_models")
    b, c = implementing("b"), implementing("c", "tilewright_arch_models")
    manager = PluginManager(entry_points=[a, b, c], hooks=declaring(
        a=("tilewright_timers",), b=(), c=("tilewright_arch_models",)))
    assert [t.name for t in manager.collect("tilewright_timers")] == ["ta"]
    assert "plugin 'a' (tilewright-a 9.9) declares the hooks tilewright_backends, " \
        "tilewright_timers (entry-point group tilewright.hooks) but implements " \
        "tilewright_arch_models, tilewright_backends, tilewright_timers; collecting a hook " \
        "loads every plugin" in caplog.text
    assert (a.loads, b.loads, c.loads) == (1, 1, 1)


def test_a_plugin_declaring_a_hook_it_lacks_makes_later_collects_load_everything(caplog):
    a, b = implementing("a"), implementing("b")
    manager = PluginManager(entry_points=[a, b],
                            declarations=[FakeDeclaration("ka", "a"), FakeDeclaration("kb", "b")],
                            hooks=declaring(a=("tilewright_timers",), b=()))
    assert manager.backend_for("ka").name == "a"  # its target loads it, and it is checked
    assert "declares the hooks tilewright_backends, tilewright_timers (entry-point group " \
        "tilewright.hooks) but implements tilewright_backends;" in caplog.text
    assert b.loads == 0
    assert manager.collect("tilewright_arch_models") == []
    assert b.loads == 1  # nobody declares arch models, but the declarations are not trusted


def test_the_contract_check_names_the_declared_and_the_implemented_hooks():
    from tilewright_sdk.conformance.contract import check_hook_declarations

    manager = PluginManager(entry_points=[implementing("a", "tilewright_timers")],
                            hooks=declaring(a=()))
    backend = manager.backend_for("ka")
    with pytest.raises(AssertionError) as exc:
        check_hook_declarations(backend, manager)
    assert str(exc.value).startswith(  # pytest's rewritten assert may append the comparison
        "plugin 'a' (tilewright-a 9.9) declares the hooks ['tilewright_backends'] in the "
        "entry-point group tilewright.hooks but its module a implements "
        "['tilewright_backends', 'tilewright_timers']: list each hook there as "
        "`tilewright_HOOK = \"a\"` (and reinstall the distribution, which is where entry "
        "points are read from)")
    check_hook_declarations(backend, PluginManager(
        entry_points=[implementing("a", "tilewright_timers")],
        hooks=declaring(a=("tilewright_timers",))).load())


def repository_entry_points() -> dict[str, list[metadata.EntryPoint]]:
    """The entry points the backends of this repository declare, read from their
    ``pyproject.toml`` (what installing them gives)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    groups: dict[str, list] = {}
    for pyproject in [*root.glob("*/pyproject.toml"), *root.glob("plugins/*/pyproject.toml")]:
        declared = tomllib.loads(pyproject.read_text())["project"].get("entry-points", {})
        if ENTRY_POINT_GROUP in declared:
            for group in (ENTRY_POINT_GROUP, "tilewright.targets", "tilewright.hooks"):
                groups.setdefault(group, []).extend(
                    metadata.EntryPoint(k, v, group) for k, v in declared[group].items())
    return groups


def test_the_repository_backends_declare_the_hooks_they_implement():
    from tilewright_sdk.conformance.contract import check_hook_declarations

    groups = repository_entry_points()
    manager = PluginManager(entry_points=groups[ENTRY_POINT_GROUP],
                            declarations=groups["tilewright.targets"],
                            hooks=groups["tilewright.hooks"])
    assert {"cpu", "interp", "cuda", "ascend"} <= {ep.name for ep in groups[ENTRY_POINT_GROUP]}
    manager.backend_for("cuda")
    manager.collect("tilewright_lowering_rules", backend="cuda")  # no plugin declares any
    assert set(manager.records) == {"cuda"}
    for record in manager.load().records.values():
        assert record.status == "ok", record.error
        for backend in record.backends:
            check_hook_declarations(backend, manager)


def test_missing_target_lists_plugins_that_did_not_load():
    manager = PluginManager(entry_points=[FakeEntryPoint("broken", broken_import)])
    with pytest.raises(TargetError, match=r"no installed backend claims target 'cuda'") as exc:
        manager.backend_for("cuda")
    assert "broken" in str(exc.value) and "tilewright_broken_dep" in str(exc.value)


def test_hook_that_raises_later_is_skipped():
    def keys():
        raise RuntimeError("boom")

    manager = PluginManager(entry_points=[])
    manager.register(plugin_module("bad_keys", tilewright_pass_config_keys=keys), "bad_keys")
    assert manager.collect("tilewright_pass_config_keys") == []
    assert manager.records["bad_keys"].error == \
        "tilewright_pass_config_keys raised RuntimeError: boom"


# -- validation at registration --------------------------------------------------------------
def test_unknown_hook_is_refused_naming_the_hook():
    module = plugin_module("foo", tilewright_foo=lambda: [])
    manager = PluginManager(entry_points=[])
    record = manager.register(module, "foo")
    assert record.status == "failed"
    assert "tilewright_foo" in record.error and "'foo'" in record.error
    assert "tilewright_backends" in record.error  # the known hooks are listed
    assert manager.collect("tilewright_foo") == []


def test_hook_with_unknown_argument_is_refused_naming_plugin_hook_and_signature():
    module = plugin_module("rules", tilewright_lowering_rules=lambda backend, extra: {})
    record = PluginManager(entry_points=[]).register(module, "rules")
    assert record.status == "failed"
    assert "rules" in record.error and "tilewright_lowering_rules" in record.error
    assert "extra" in record.error


def test_incompatible_api_version_is_refused_naming_both_versions():
    manager = PluginManager(entry_points=[])
    record = manager.register(
        backend_plugin("future", lambda: [fake_backend("future", api_version="2.0")]), "future")
    assert record.status == "failed"
    assert "2.0" in record.error and API_VERSION in record.error
    assert "future" not in manager.backends()
    with pytest.raises(PluginError, match=r"2\.0.*" + API_VERSION.replace(".", r"\.")):
        check_api_version("future", "2.0")
    check_api_version("current", API_VERSION)


def test_hook_returning_something_else_than_backend_module_is_refused():
    record = PluginManager(entry_points=[]).register(
        backend_plugin("odd", lambda: ["cpu"]), "odd")
    assert record.status == "failed" and "not a BackendModule" in record.error


@pytest.mark.parametrize("make, message", [
    (lambda: fake_backend(pipelines={}), r"no PassPipeline for target 'fake'"),
    (lambda: fake_backend(codegens={}), r"no DeviceCodegen for target 'fake'"),
    (lambda: fake_backend(executors=()), r"needs at least one Executor"),
    (lambda: fake_backend(kinds=()), r"claims no target kinds"),
    (lambda: fake_backend(name="Bad Name"), r"backend name 'Bad Name' must match"),
    (lambda: fake_backend(kinds=("CUDA",)), r"target kind name 'CUDA' must match"),
    (lambda: Executor("Not OK", lambda: Availability(True), lambda s, c, w: None),
     r"executor name 'Not OK'"),
    (lambda: Phase("lower tile", lambda ctx: []), r"phase name 'lower tile'"),
    (lambda: PassPipeline((Phase("a", lambda ctx: []), Phase("a", lambda ctx: []))),
     r"repeated: \['a'\]"),
    (lambda: PassPipeline(()), r"at least one phase"),
    (lambda: fake_backend(api_version="one"), r"is not 'MAJOR.MINOR'"),
    (lambda: fake_backend(device_available=True), r"device_available must be callable"),
    (lambda: fake_backend(target_defaults={}), r"target_defaults must be callable"),
])
def test_invalid_declarations_raise_plugin_error(make, message):
    with pytest.raises(PluginError, match=message):
        make()


def test_invalid_declaration_in_a_plugin_fails_only_that_plugin():
    manager = PluginManager(entry_points=[
        FakeEntryPoint("nopipe", lambda: backend_plugin(
            "nopipe", lambda: [fake_backend("nopipe", pipelines={})])),
        cpu_entry_point(),
    ]).load()
    assert manager.records["nopipe"].status == "failed"
    assert "PluginError" in manager.records["nopipe"].error
    assert "no PassPipeline for target 'fake'" in manager.records["nopipe"].error
    assert manager.backend_for("cpu").name == "cpu"


# -- target claims -----------------------------------------------------------------------------
def test_two_backends_claiming_one_target_collide_naming_both():
    manager = PluginManager(entry_points=[
        FakeEntryPoint("alpha", lambda: backend_plugin("alpha", lambda: [fake_backend("alpha")])),
        FakeEntryPoint("beta", lambda: backend_plugin("beta", lambda: [fake_backend("beta")])),
    ])
    with pytest.raises(TargetError) as exc:
        manager.backend_for("fake")
    assert str(exc.value).startswith(
        "target 'fake' is claimed by several backends: backend 'alpha' of plugin 'alpha' "
        "(tilewright-alpha 9.9), backend 'beta' of plugin 'beta' (tilewright-beta 9.9); "
        f"uninstall one or select plugins with {ENV_SELECT}")
    assert manager.conflicts() == [str(exc.value)]


def test_backend_claiming_cpu_collides_with_the_cpu_plugin():
    manager = PluginManager(entry_points=[
        cpu_entry_point(),
        FakeEntryPoint("mycpu", lambda: backend_plugin(
            "mycpu", lambda: [fake_backend("mycpu", kinds=("cpu",))])),
    ])
    with pytest.raises(TargetError) as exc:
        manager.backend_for("cpu")
    assert "backend 'cpu' of plugin 'cpu' (tilewright-cpu" in str(exc.value)
    assert "backend 'mycpu' of plugin 'mycpu' (tilewright-mycpu 9.9)" in str(exc.value)


# -- TILEWRIGHT_PLUGINS ------------------------------------------------------------------------
def selection_manager():
    return PluginManager(entry_points=[
        cpu_entry_point(),
        FakeEntryPoint("fake", lambda: backend_plugin("fake", lambda: [fake_backend()])),
    ]).load()


def test_selection_none_disables_every_plugin(monkeypatch):
    monkeypatch.setenv(ENV_SELECT, "none")
    manager = selection_manager()
    assert {r.status for r in manager.records.values()} == {"disabled"}
    assert manager.backends() == {}
    with pytest.raises(TargetError, match=f"disabled by {ENV_SELECT}.*{ENV_SELECT}='none' "
                                          "disables the installed plugin"):
        manager.backend_for("cpu")


def test_no_backend_at_all_says_what_to_install():
    with pytest.raises(TargetError, match=r"known targets: none\); install a backend, for "
                                          r"example `pip install tilewright-cpu`"):
        PluginManager(entry_points=[]).load().backend_for("cpu")


def test_selection_by_name_loads_only_that_plugin(monkeypatch):
    monkeypatch.setenv(ENV_SELECT, "cpu")
    manager = selection_manager()
    assert manager.records["cpu"].status == "ok"
    assert manager.records["fake"].status == "disabled"
    assert set(manager.backends()) == {"cpu"}


def test_selection_minus_excludes_a_plugin(monkeypatch):
    monkeypatch.setenv(ENV_SELECT, "-cpu")
    manager = selection_manager()
    assert manager.records["cpu"].status == "disabled"
    assert manager.records["fake"].status == "ok"
    assert set(manager.backends()) == {"fake"}
    with pytest.raises(TargetError, match="no installed backend claims target 'cpu'"):
        manager.backend_for("cpu")


# -- pass configs ----------------------------------------------------------------------------
def test_unknown_pass_config_key_lists_close_matches(install):
    install(PluginManager(entry_points=[]))
    with pytest.raises(ConfigError, match=r"unknown pass_configs key 'tw.disable_vectoriz'") \
            as exc:
        passconfig.validate({"tw.disable_vectoriz": True})
    assert "did you mean 'tw.disable_vectorize'" in str(exc.value)


def test_plugin_pass_config_keys_are_known_and_typed(install):
    manager = PluginManager(entry_points=[])
    key = PassConfigKey("fake.unroll", int, 4, "unroll factor", owner="fake")
    manager.register(plugin_module("fake", tilewright_pass_config_keys=lambda: [key]), "fake")
    install(manager)
    assert passconfig.validate({"fake.unroll": 8, "tw.dump_ir": False}) == \
        {"fake.unroll": 8, "tw.dump_ir": False}
    with pytest.raises(ConfigError, match=r"did you mean 'fake.unroll'"):
        passconfig.validate({"fake.unrol": 8})
    with pytest.raises(ConfigError, match=r"must be int"):
        passconfig.validate({"fake.unroll": "8"})


# -- isolation: exits, hangs, wrong types, names claimed twice --------------------------------
def test_sys_exit_at_import_is_a_failed_plugin():
    def exits():
        raise SystemExit(3)

    manager = PluginManager(entry_points=[FakeEntryPoint("exits", exits)]).load()
    assert manager.records["exits"].status == "failed"
    assert manager.records["exits"].error == "importing exits raised SystemExit: 3 (sys.exit)"


def test_import_and_probe_time_limits(monkeypatch):
    import threading

    monkeypatch.setenv("TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT", "0.2")
    monkeypatch.setenv("TILEWRIGHT_PLUGIN_PROBE_TIMEOUT", "0.2")
    release, probes = threading.Event(), []

    def hang():
        probes.append(1)
        release.wait(30)
        return Availability(True)

    slow_import = FakeEntryPoint("slow", lambda: hang() and None)
    probing = FakeEntryPoint("probing", lambda: backend_plugin(
        "probing", lambda: [fake_backend("probing", device_available=hang)]))
    try:
        manager = PluginManager(entry_points=[slow_import, probing]).load()
        assert manager.records["slow"].error == (
            "importing slow did not finish within 0.2 s (limit set by "
            "TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT); abandoned")
        backend = manager.backend_for("fake")
        first, second = backend.device_available(), backend.device_available()
        assert not first and first.reason == second.reason
        assert "device probe of backend 'probing' did not finish within 0.2 s" in first.reason
        assert "(plugin 'probing' (tilewright-probing 9.9))" in first.reason
        assert len(probes) == 2  # the import and one probe: an abandoned probe is not retried
    finally:
        release.set()


def test_bad_time_limit_is_a_config_error(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="TILEWRIGHT_PLUGIN_IMPORT_TIMEOUT='soon' is not a "
                                          "time limit"):
        PluginManager(entry_points=[FakeEntryPoint("x", lambda: None)]).load()


def test_probe_that_raises_or_returns_garbage_is_unavailable():
    def boom():
        raise SystemExit("no device")

    manager = PluginManager(entry_points=[FakeEntryPoint("odd", lambda: backend_plugin(
        "odd", lambda: [fake_backend("odd", device_available=boom, executors=(
            Executor("run", lambda: "yes", lambda s, c, w: None),))]))]).load()
    backend = manager.backend_for("fake")
    assert backend.device_available().reason == (
        "device probe of backend 'odd' raised SystemExit: no device (sys.exit) "
        "(plugin 'odd' (tilewright-odd 9.9))")
    assert backend.executors[0].available().reason == (
        "availability probe of executor 'run' of backend 'odd' returned str, not an "
        "Availability (plugin 'odd' (tilewright-odd 9.9))")


def test_two_backends_with_one_name_are_both_refused():
    manager = PluginManager(entry_points=[
        FakeEntryPoint("one", lambda: backend_plugin("one", lambda: [fake_backend("same")])),
        FakeEntryPoint("two", lambda: backend_plugin(
            "two", lambda: [fake_backend("same", kinds=("other",))])),
    ]).load()
    message = ("backend name 'same' is declared by plugin 'one' (tilewright-one 9.9) and plugin "
               "'two' (tilewright-two 9.9); neither is used")
    assert manager.backends() == {}
    assert manager.conflicts()[0].startswith(message)
    for kind in ("fake", "other"):
        with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)")):
            manager.backend_for(kind)


def test_hook_items_claimed_twice_keep_the_first_and_note_the_second():
    timer = fake_timer
    manager = PluginManager(entry_points=[])
    manager.register(plugin_module("a", tilewright_timers=lambda: [timer("event")]), "a")
    manager.register(plugin_module("b", tilewright_timers=lambda: [timer("event"),
                                                                    timer("other")]), "b")
    assert [t.name for t in manager.collect("tilewright_timers")] == ["event", "other"]
    assert manager.records["b"].error == ("tilewright_timers: 'event' is also provided by "
                                          "plugin 'a', which is used; refused from this plugin")


@pytest.mark.parametrize("hook, result, message", [
    ("tilewright_timers", Availability(True), "tilewright_timers returned Availability, not a "
                                              "list of Timer"),
    ("tilewright_pass_config_keys", ["cpu.x"], "tilewright_pass_config_keys returned str among "
                                               "its items, not PassConfigKey"),
    ("tilewright_lowering_rules", {"copy": 3}, "tilewright_lowering_rules returned dict, not a "
                                               "mapping of op names to rules"),
])
def test_hook_returning_the_wrong_type_is_noted_and_skipped(hook, result, message):
    fn = (lambda backend: result) if hook == "tilewright_lowering_rules" else (lambda: result)
    manager = PluginManager(entry_points=[])
    manager.register(plugin_module("odd", **{hook: fn}), "odd")
    kwargs = {"backend": "cpu"} if hook == "tilewright_lowering_rules" else {}
    assert manager.collect(hook, **kwargs) == []
    assert manager.records["odd"].error == message
    assert manager.records["odd"].status == "ok"


def test_target_defaults_that_raise_name_the_plugin():
    def defaults(kind):
        raise RuntimeError("no arch")

    manager = PluginManager(entry_points=[FakeEntryPoint("dflt", lambda: backend_plugin(
        "dflt", lambda: [fake_backend("dflt", target_defaults=defaults)]))]).load()
    from tilewright.engine import resolve_target

    with pytest.raises(PluginError, match=r"target_defaults of backend 'dflt' raised "
                                          r"RuntimeError: no arch \(plugin 'dflt'"):
        resolve_target("fake", manager)


def test_misspelt_selection_lists_installed_plugins(monkeypatch):
    monkeypatch.setenv(ENV_SELECT, "cpux,-fak")
    with pytest.raises(PluginError) as exc:
        selection_manager()
    assert str(exc.value) == (f"{ENV_SELECT}='cpux,-fak': no installed plugin is named 'cpux', "
                              "'fak'; installed plugins: cpu, fake; did you mean cpu, fake? "
                              "(or 'none')")


LOAD_FROM_CACHE = '''
import json, sys, torch, tilewright, tilewright.language as T
from tilewright.plugin import get_manager

if sys.argv[1:] == ["all"]:
    get_manager().load()

@T.prim_func
def double(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1):
        for i in T.Parallel(64):
            B[i] = A[i] * 2.0

kernel = tilewright.compile(double, out_idx=[-1], target="cpu")
a = torch.randn(64)
assert torch.equal(kernel(a), a * 2)
print(json.dumps([kernel.artifact_dir, sorted({m.split(".")[0] for m in sys.modules
                                               if m.startswith("tilewright_")})]))
'''


def test_a_cached_cpu_kernel_imports_no_other_backend(tmp_path):
    """The first compile, in a process that loaded every plugin, lowers; the second, in a fresh
    process, finds the same cache entry (the key does not depend on what was imported) and
    imports the CPU plugin only."""
    env = {**os.environ, "TILEWRIGHT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop(ENV_SELECT, None)
    script = tmp_path / "double.py"
    script.write_text(LOAD_FROM_CACHE)
    runs = [json.loads(subprocess.run([sys.executable, str(script), *args], env=env,
                                      capture_output=True, text=True, check=True,
                                      timeout=300).stdout.splitlines()[-1])
            for args in (["all"], [])]
    (first_dir, first_modules), (second_dir, second_modules) = runs
    assert first_dir == second_dir
    assert {"tilewright_cpu", "tilewright_cuda"} <= set(first_modules)
    assert second_modules == ["tilewright_cpu"]
