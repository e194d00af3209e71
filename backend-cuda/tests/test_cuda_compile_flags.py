"""What the device compiler gets besides our flags: ``--use_fast_math`` when the pass configs
ask for fast math (``TL_ENABLE_FAST_MATH``, off by default, as in TileLang), then the user's
``TL_DEVICE_COMPILE_FLAGS``; both reach NVRTC and nvcc, and bad flags are named."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from sass import dump
from tilewright.errors import ConfigError
from tilewright_cuda import arch, executor, options
from tilewright_cuda.executor import CompileError

FAST = {tilewright.PassConfigKey.TL_ENABLE_FAST_MATH: True}


def softmax_rows(M=64, N=128):
    """exp2 of every element and a division per row: what fast math changes in a softmax."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(M, N):
                x[i, j] = T.exp2(x[i, j])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, Y)

    return main


def build(configs=None, executor="nvrtc"):
    return tilewright.compile(softmax_rows(), out_idx=[1], target="cuda -arch=sm_80",
                              execution_backend=executor, pass_configs=configs)


@pytest.mark.parametrize("fast, user, flags", [
    (None, None, ()),
    (False, None, ()),
    (True, None, ("--use_fast_math",)),
    (True, "-lineinfo --extra-device-vectorization", ("--use_fast_math", "-lineinfo",
                                                     "--extra-device-vectorization")),
    (None, ["-lineinfo"], ("-lineinfo",)),
])
def test_flags_are_fast_math_then_the_users(fast, user, flags):
    assert options.compile_flags(fast, user) == flags


@pytest.mark.parametrize("user, words", [
    (3, "takes a string or a list of flags, got int"),
    (["lineinfo"], "'lineinfo' is not a compiler flag"),
    ([None], "None is not a compiler flag"),
    ("-arch=sm_70", "'-arch=sm_70' chooses the architecture"),
    (["--gpu-architecture", "sm_70"], "chooses the architecture, which the target gives"),
])
def test_bad_flags_are_config_errors(user, words):
    with pytest.raises(ConfigError, match=words):
        options.compile_flags(None, user)


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("executor", ["nvrtc", pytest.param("nvcc", marks=pytest.mark.nvcc)])
def test_fast_math_reaches_the_compiler(executor):
    """Precise exp2f keeps a result it may flush exact: a compare and two multiplies around
    each MUFU.EX2; the division calls its slow path (FCHK). Fast math is one MUFU.EX2 per
    element and a reciprocal per row."""
    precise, fast = build(executor=executor), build(FAST, executor)
    assert "compile_flags" not in precise.executable.launch
    assert fast.executable.launch["compile_flags"] == ["--use_fast_math"]
    slow, quick = dump(precise.executable.cubin), dump(fast.executable.cubin)
    assert quick.count("MUFU.EX2") == slow.count("MUFU.EX2") > 0
    assert "FSETP" in slow and "FCHK" in slow
    assert "FSETP" not in quick and "FCHK" not in quick


@pytest.mark.nvrtc
def test_user_flags_reach_nvrtc_and_a_bad_one_is_named():
    kernel = build({tilewright.PassConfigKey.TL_DEVICE_COMPILE_FLAGS: "-lineinfo"})
    assert kernel.executable.launch["compile_flags"] == ["-lineinfo"]
    with pytest.raises(CompileError, match="--no-such-flag"):
        build({tilewright.PassConfigKey.TL_DEVICE_COMPILE_FLAGS: ["--no-such-flag"]})


# what TileLang's examples give (deepseek_mla/example_mla_decode_ws.py): nvcc's flags
TILELANG_FLAGS = ["-O3", "-Wno-deprecated-declarations", "-U__CUDA_NO_HALF_OPERATORS__",
                  "--expt-relaxed-constexpr", "--expt-extended-lambda",
                  "--ptxas-options=-v,--register-usage-level=10", "-DNDEBUG"]


def test_nvccs_flags_become_nvrtcs():
    kept, dropped = executor.nvrtc_flags(
        [*TILELANG_FLAGS, "-Xcompiler", "-fPIC", "-Xptxas", "-O2,-v", "-lineinfo", "-g"])
    assert kept == ["-U__CUDA_NO_HALF_OPERATORS__", "--ptxas-options=-v",
                    "--ptxas-options=--register-usage-level=10", "-DNDEBUG",
                    "--ptxas-options=-O2", "--ptxas-options=-v", "-lineinfo"]
    assert [d.split(":")[0] for d in dropped] == [
        "-O3", "-Wno-deprecated-declarations", "--expt-relaxed-constexpr",
        "--expt-extended-lambda", "-Xcompiler=-fPIC", "-g"]
    assert "host code's optimisation level" in dropped[0]


@pytest.mark.nvrtc
def test_tilelangs_nvcc_flags_build_with_nvrtc(tmp_path):
    """TileLang's examples give nvcc's flags; NVRTC, which has no option for some of them,
    builds with the others and its log says which it left out (it stopped on "-O3")."""
    kernel = tilewright.compile(softmax_rows(), out_idx=[1], target="cuda -arch=sm_90a",
                                execution_backend="nvrtc", compile_flags=TILELANG_FLAGS)
    assert kernel.executable.launch["compile_flags"] == TILELANG_FLAGS
    text = tilewright.lower(softmax_rows(), "cuda -arch=sm_90a").source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), tmp_path, TILELANG_FLAGS)
    assert cubin and log.startswith("NVRTC left out nvcc's flags it has no option for:")
    assert "  -O3: the host code's optimisation level" in log
    assert "ptxas info" in log  # -v reached ptxas as an option of its own


@pytest.mark.nvrtc
def test_jit_compile_flags_reach_nvrtc():
    """``@tilewright.jit(compile_flags=...)``, TileLang's spelling, is the same pass config."""
    kernel = tilewright.compile(softmax_rows(), out_idx=[1], target="cuda -arch=sm_80",
                                compile_flags=["-lineinfo"], pass_configs=FAST)
    assert kernel.executable.launch["compile_flags"] == ["--use_fast_math", "-lineinfo"]


@pytest.mark.emulator
def test_fast_math_kernel_matches_torch(tmp_path):
    lowered = tilewright.lower(softmax_rows(), "cuda -arch=sm_80", pass_configs=FAST)
    assert lowered.source.payload["compile_flags"] == ["--use_fast_math"]
    x, y = torch.randn(64, 128), torch.empty(64, 128)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, torch.exp2(x) / torch.exp2(x).sum(1, keepdim=True))
