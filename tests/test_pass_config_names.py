"""TileLang's pass-config names: ``tilewright.PassConfigKey.TL_*`` gives our key, and
``pass_configs`` accept TileLang's strings ("tl.enable_dump_ir") as another spelling of it."""

import subprocess
import sys
import types
from importlib import metadata

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.engine import passconfig
from tilewright.errors import ConfigError, PluginError
from tilewright.plugin import (
    ENTRY_POINT_GROUP,
    PassConfigKey,
    PluginManager,
    hookimpl,
    set_manager,
)

Key = tilewright.PassConfigKey


def double(n=64, block=32):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return main


@pytest.fixture
def only_cpu_and(request):
    """A process-wide manager holding the cpu plugin and the given fake plugin modules."""
    previous = set_manager(None)

    def install(*modules):
        cpu = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu"]
        manager = PluginManager(entry_points=cpu)
        for module in modules:
            manager.register(module, module.__name__)
        set_manager(manager)
        return manager

    yield install
    set_manager(previous)


def keys_plugin(name: str, *keys) -> types.ModuleType:
    module = types.ModuleType(name)

    def tilewright_pass_config_keys():
        return list(keys)

    module.tilewright_pass_config_keys = hookimpl(tilewright_pass_config_keys)
    return module


def test_tilelang_named_dump_switches_write_the_ir(tmp_path, capsys):
    folder = tmp_path / "dump_ir"
    kernel = tilewright.compile(double(), out_idx=[-1], target="cpu", pass_configs={
        Key.TL_ENABLE_DUMP_IR: True, Key.TL_DUMP_IR_DIR: str(folder)})
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a), 2 * a)
    dumps = sorted(p.name for p in folder.iterdir())
    assert dumps[0] == "00_lower_tile_ops_LowerTileOps.tir", dumps
    assert "# ---- IR after lower_loops / CPULowerLoops ----" in capsys.readouterr().err


def test_tilelang_strings_dump_too_and_come_back_under_our_names(tmp_path):
    folder = tmp_path / "strings"
    tilewright.compile(double(), out_idx=[-1], target="cpu", pass_configs={
        "tl.dump_ir_path": str(folder), "tl.pass_profile": False})
    assert (folder / "00_lower_tile_ops_LowerTileOps.tir").is_file()
    assert passconfig.validate({"tl.enable_dump_ir": True, "tl.dump_ir_path": "d",
                                "tirx.disable_vectorize": True}) == \
        {"tw.disable_vectorize": True, "tw.dump_ir": True, "tw.dump_ir_dir": "d"}
    # the attribute is the key string itself; .value as on TileLang's enum members
    assert Key.TL_ENABLE_DUMP_IR == "tw.dump_ir" == Key.TL_ENABLE_DUMP_IR.value
    assert Key.TW_DUMP_IR == "tw.dump_ir" and Key.TL_LAYOUT_VISUALIZATION_FORMATS == \
        "tw.layout_visualization_formats"
    configs = passconfig.validate({Key.TL_ENABLE_DUMP_IR: True})
    assert type(next(iter(configs))) is str  # the cache key holds plain strings


def test_one_key_under_two_spellings():
    assert passconfig.validate({"tl.enable_dump_ir": True, "tw.dump_ir": True}) == \
        {"tw.dump_ir": True}
    with pytest.raises(ConfigError, match=r"pass_configs sets 'tw.dump_ir' twice with "
                                          r"different values: 'tl.enable_dump_ir': True and "
                                          r"'tw.dump_ir': False"):
        passconfig.validate({"tl.enable_dump_ir": True, "tw.dump_ir": False})
    with pytest.raises(ConfigError, match=r"pass_configs\['tl.dump_ir_path'\] must be str"):
        passconfig.validate({"tl.dump_ir_path": True})


def test_unknown_tilelang_names_are_explained(only_cpu_and):
    only_cpu_and()  # no Ascend or CUDA plugin here
    with pytest.raises(AttributeError, match=r"has no 'TL_ENABLE_DUMP_I'; did you mean "
                                             r"'TL_ENABLE_DUMP_IR'\?"):
        Key.TL_ENABLE_DUMP_I  # noqa: B018
    for name in ("TL_ASCEND_AUTO_SYNC", "TL_DISABLE_TMA_LOWER", "TL_DISABLE_WGMMA"):
        with pytest.raises(AttributeError, match=rf"'{name}'; neither the core nor an installed "
                                                 r"backend declares this TileLang key \(a "
                                                 r"backend plugin may.*TileLang names known "
                                                 r"here: TIR_DISABLE_VECTORIZE, "):
            getattr(Key, name)
    with pytest.raises(ConfigError, match=r"unknown pass_configs key 'tl.ascend_auto_sync'; "
                                          r"neither the core nor an installed backend"):
        passconfig.validate({"tl.ascend_auto_sync": True})
    with pytest.raises(ConfigError, match=r"'tl.enable_dump_irr'; did you mean "
                                          r"'tl.enable_dump_ir'\?"):
        passconfig.validate({"tl.enable_dump_irr": True})


def test_plugin_tilelang_names_resolve_and_are_listed(only_cpu_and):
    only_cpu_and(keys_plugin("fake", PassConfigKey(
        "fake.unroll", int, 4, "unroll factor", owner="fake", tilelang="TL_FAKE_UNROLL",
        tilelang_value="tl.fake_unroll")))
    assert Key.TL_FAKE_UNROLL == "fake.unroll"
    names = dir(Key)
    assert {"TL_FAKE_UNROLL", "TL_ENABLE_DUMP_IR", "FAKE_UNROLL", "TW_DUMP_IR"} <= set(names)
    assert "TL_ASCEND_AUTO_SYNC" not in names
    assert passconfig.validate({"tl.fake_unroll": 8}) == {"fake.unroll": 8}


def test_declarations_check_their_tilelang_names():
    with pytest.raises(PluginError, match="give both tilelang"):
        PassConfigKey("fake.x", bool, False, tilelang="TL_FAKE_X")
    with pytest.raises(PluginError, match=r"tilelang name 'tl_fake_x' must match"):
        PassConfigKey("fake.x", bool, False, tilelang="tl_fake_x", tilelang_value="tl.fake_x")


def test_import_stays_light():
    code = ("import sys, tilewright; assert 'PassConfigKey' in tilewright.__all__; "
            "assert 'tvm' not in sys.modules, 'import tilewright imported TVM'")
    subprocess.run([sys.executable, "-c", code], check=True)
