"""TileLang's pass-config names: ``tilewright.PassConfigKey.TL_*`` gives our key, and
``pass_configs`` accept TileLang's strings ("tl.enable_dump_ir") as another spelling of it."""

import os
import subprocess
import sys
import types
from importlib import metadata

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ConfigError, PluginError
from tilewright.plugin import (
    ENTRY_POINT_GROUP,
    ENV_SELECT,
    PassConfigKey,
    PluginManager,
    hookimpl,
    passconfig,
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
    # one file per pass, numbered in order, named by phase and pass
    assert dumps[0].startswith("00_bind_solved_symbols_") and \
        "06_lower_tile_ops_LowerTileOps.tir" in dumps, dumps
    assert "# ---- IR after lower_loops / CPULowerLoops ----" in capsys.readouterr().err


def test_tilelang_strings_dump_too_and_come_back_under_our_names(tmp_path):
    folder = tmp_path / "strings"
    tilewright.compile(double(), out_idx=[-1], target="cpu", pass_configs={
        "tl.dump_ir_path": str(folder), "tl.pass_profile": False})
    assert (folder / "06_lower_tile_ops_LowerTileOps.tir").is_file()
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
    with pytest.raises(AttributeError, match=r"'TL_ASCEND_AUTO_SYNC'; neither the core nor an "
                                             r"installed backend declares this TileLang key \(a "
                                             r"backend plugin may.*TileLang names known "
                                             r"here: TIR_ADD_LOWER_PASS, "):
        Key.TL_ASCEND_AUTO_SYNC  # noqa: B018
    with pytest.raises(ConfigError, match=r"unknown pass_configs key 'tl.ascend_auto_sync'; "
                                          r"neither the core nor an installed backend"):
        passconfig.validate({"tl.ascend_auto_sync": True})
    with pytest.raises(ConfigError, match=r"'tl.enable_dump_irr'; did you mean "
                                          r"'tl.enable_dump_ir'\?"):
        passconfig.validate({"tl.enable_dump_irr": True})


# TileLang's PassConfigKey members (0.1.15 and the upstream tree of the porting runs)
TILELANG_MEMBERS = """
TL_SIMPLIFY TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS
TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL
TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS TL_SIMPLIFY_ENABLE_LET_INLINE
TL_DISABLE_BUFFER_INIT_CHECK TL_DISABLE_DATA_RACE_CHECK TL_DISABLE_PRELOWER_SEMANTIC_CHECK
TL_DISABLE_WARP_SPECIALIZED TL_ENABLE_FAST_MATH TL_DISABLE_FAST_MATH
TL_PTXAS_REGISTER_USAGE_LEVEL TL_ENABLE_PTXAS_VERBOSE_OUTPUT TL_DEVICE_COMPILE_FLAGS
TL_EMIT_LINE_DIRECTIVES TL_CONFIG_INDEX_BITWIDTH TL_ENABLE_REDUCER_PLAN_VERBOSE
TL_LAYOUT_COST_MODEL TL_REDUCER_FORCE_BASELINE TL_DISABLE_TMA_LOWER TL_DISABLE_SAFE_MEMORY_ACCESS
TL_ENABLE_ASYNC_COPY TL_ENABLE_LOWER_LDGSTG TL_ENABLE_LOWER_LDGSTG_PREDICATED
TL_DISABLE_LOWER_LDGSTG_PREDICATED TL_ENABLE_VECTORIZE_PLANNER_VERBOSE TL_DISABLE_WGMMA
TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE
TL_DISABLE_SHARED_MEMORY_REUSE TL_DISABLE_SHUFFLE_ELECT TL_DISABLE_LOOP_UNSWITCHING
TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS
TL_DISABLE_THREAD_STORAGE_SYNC TL_DEBUG_THREAD_STORAGE_SYNC_SUMMARY TL_FORCE_LET_INLINE
TL_AST_PRINT_ENABLE TL_LAYOUT_VISUALIZATION_ENABLE TL_LAYOUT_VISUALIZATION_FORMATS
TL_STORAGE_REWRITE_DETECT_INPLACE TIR_ENABLE_EQUIV_TERMS_IN_CSE TIR_DISABLE_CSE TIR_SIMPLIFY
TIR_DISABLE_STORAGE_REWRITE TIR_DISABLE_VECTORIZE TIR_USE_ASYNC_COPY TIR_ENABLE_DEBUG
TIR_MERGE_STATIC_SMEM TIR_ADD_LOWER_PASS TIR_NOALIAS CUDA_KERNELS_OUTPUT_DIR
TL_DISABLE_OUT_OF_BOUND_WARNING TL_ENABLE_DUMP_IR TL_DUMP_IR_DIR TL_PASS_PROFILE
TL_PASS_PROFILE_THRESHOLD_MS TL_DYNAMIC_ALIGNMENT TL_DISABLE_DYNAMIC_TAIL_SPLIT
""".split()


def test_every_tilelang_member_is_known_without_a_gpu_backend(only_cpu_and):
    only_cpu_and()
    keys = passconfig.known_keys()
    for member in TILELANG_MEMBERS:
        name = getattr(Key, member)
        assert name in keys and keys[name].tilelang == member, member
    assert Key.TL_DISABLE_TMA_LOWER == "cuda.disable_tma_lower"
    assert keys["cuda.ptxas_register_usage_level"].owner == "cuda"
    assert Key.TL_SIMPLIFY == "tilelang.simplify" and Key.TIR_SIMPLIFY == "tilelang.tir_simplify"
    # a TileLang value takes the types TileLang accepts
    assert passconfig.validate({"tl.device_compile_flags": ["-O3"],
                                "tl.ptxas_register_usage_level": 10}) == {
        "cuda.device_compile_flags": ["-O3"], "cuda.ptxas_register_usage_level": 10}
    with pytest.raises(ConfigError, match=r"pass_configs\['tl.ptxas_register_usage_level'\] "
                                          r"must be int"):
        passconfig.validate({"tl.ptxas_register_usage_level": "high"})


def test_a_gpu_backend_owns_the_members_it_declares(only_cpu_and):
    only_cpu_and(keys_plugin("fakecuda", PassConfigKey(
        "fakecuda.no_tma", bool, False, "mine", owner="fakecuda",
        tilelang="TL_DISABLE_TMA_LOWER", tilelang_value="tl.disable_tma_lower")))
    assert Key.TL_DISABLE_TMA_LOWER == "fakecuda.no_tma"
    assert "cuda.disable_tma_lower" not in passconfig.known_keys()


def test_keys_of_other_backends_are_accepted_with_one_log_line(caplog):
    passconfig._NOTED.clear()
    configs = {Key.TL_DISABLE_TMA_LOWER: True, Key.TL_SIMPLIFY: {}, Key.TL_ENABLE_FAST_MATH: True}
    a = torch.randn(64)
    with caplog.at_level("WARNING", logger="tilewright"):
        for _ in range(2):
            kernel = tilewright.compile(double(), out_idx=[-1], target="cpu",
                                        pass_configs={**configs, "tw.disable_cache": True})
    torch.testing.assert_close(kernel(a), 2 * a)
    lines = [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]
    assert lines == [
        "pass config TL_DISABLE_TMA_LOWER (cuda.disable_tma_lower) belongs to backend 'cuda' "
        "and has no effect on backend 'cpu'",
        "pass config TL_SIMPLIFY (tilelang.simplify) belongs to TileLang's own compiler and "
        "has no effect on backend 'cpu'"], lines


def exp_kernel(n=64):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                B[i] = T.exp2(A[i])

    return main


def test_cpu_backend_honours_tl_enable_fast_math():
    def source(configs):
        kernel = tilewright.compile(exp_kernel(), out_idx=[-1], target="cpu",
                                    pass_configs={**configs, "tw.disable_cache": True})
        a = torch.linspace(-10, 10, 64)
        torch.testing.assert_close(kernel(a), torch.exp2(a), rtol=1e-6, atol=0)
        return kernel.get_kernel_source()

    precise = source({Key.TL_ENABLE_FAST_MATH: False})
    assert source({Key.TL_DISABLE_FAST_MATH: True}) == precise == source({})  # the default
    assert "exp2" in source({"cpu.precise_math": True})  # libm's, one call a lane
    fast = source({Key.TL_ENABLE_FAST_MATH: True})
    assert "exp2" not in precise and "exp2" not in fast and fast != precise
    with pytest.raises(ConfigError, match="TL_ENABLE_FAST_MATH=True and TL_DISABLE_FAST_MATH"):
        source({Key.TL_ENABLE_FAST_MATH: True, Key.TL_DISABLE_FAST_MATH: True})
    with pytest.raises(ConfigError, match="fast math .* and for cpu.precise_math"):
        source({Key.TL_ENABLE_FAST_MATH: True, "cpu.precise_math": True})


def test_cpu_backend_divides_exactly_unless_asked_for_fast_math():
    """TileLang's default is precise math: ``a / y`` with ``y`` the same for the whole loop
    is IEEE division (act_quant's ``amax / 448``), not ``a * (1 / y)``, which differs from it
    in the last bit for about half of these values; TL_ENABLE_FAST_MATH=True allows that."""

    @T.prim_func
    def scale(A: T.Tensor((64,), "float32"), y: T.float32, B: T.Tensor((64,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(64):
                B[i] = A[i] / y

    a = torch.linspace(0.5, 8.0, 64)
    exact = a / 448.0
    for configs in ({}, {Key.TL_ENABLE_FAST_MATH: False}):
        kernel = tilewright.compile(scale, out_idx=[-1], target="cpu", pass_configs=configs)
        assert torch.equal(kernel(a, 448.0), exact)
    fast = tilewright.compile(scale, out_idx=[-1], target="cpu",
                              pass_configs={Key.TL_ENABLE_FAST_MATH: True})(a, 448.0)
    torch.testing.assert_close(fast, exact, rtol=2.4e-7, atol=0)
    assert not torch.equal(fast, exact)


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


CORE_CONFIGS_ONLY = '''
import sys, torch, tilewright, tilewright.language as T

@T.prim_func
def add_one(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
    with T.Kernel(1):
        for i in T.Parallel(16):
            B[i] = A[i] + 1.0

kernel = tilewright.compile(add_one, target="cpu", pass_configs={
    "tl.disable_safe_memory_legalize": True, "tw.disable_cache": True})
a = torch.randn(16)
b = torch.empty(16)
kernel(a, b)
assert torch.equal(b, a + 1)
print(sorted({m.split(".")[0] for m in sys.modules if m.startswith("tilewright_")}))
'''


def test_core_pass_configs_load_no_other_backend(tmp_path):
    """Keys the core declares (ours or TileLang's spelling) are validated without collecting
    every plugin's keys, which imports every backend that declares some (0.6 s here)."""
    env = {k: v for k, v in os.environ.items() if k != ENV_SELECT}
    script = tmp_path / "add_one.py"
    script.write_text(CORE_CONFIGS_ONLY)
    out = subprocess.run([sys.executable, str(script)], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert out.splitlines()[-1] == "['tilewright_cpu']"
