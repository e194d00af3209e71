"""The API a TileLang user touches: names, the JIT object, the kernel's profiler, autotune
with an explicit config and given inputs (CPU backend)."""

import logging

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.autotuner import set_autotune_inputs, tuner
from tilewright.errors import KernelError
from tilewright.profiler import Profiler


@tilewright.jit(out_idx=[-1], target="cpu")
def scale(n, block=32, factor=2.0):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * factor

    return main


def test_dtype_names_and_torch_dtypes():
    assert T.dtype("half") == "float16" and T.dtype(torch.bfloat16) == "bfloat16"
    assert T.dtype(T.float16).as_torch() is torch.float16 and T.float16.bits == 16
    assert (T.float, T.half, T.int, T.uint, T.tfloat32) == \
        ("float32", "float16", "int32", "uint32", "float32")
    with pytest.raises(KernelError, match="unknown dtype 'floa16'; did you mean"):
        T.dtype("floa16")


def test_integer_helpers():
    assert tilewright.cdiv(7, 2) == 4 and tilewright.next_power_of_2(100) == 128
    assert tilewright.math.next_power_of_2(1) == 1 and tilewright.math.cdiv(8, 4) == 2
    with pytest.raises(TypeError, match="cdiv: a must be an int"):
        tilewright.cdiv(7.0, 2)


def scalar_ops(n=16):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), I: T.Tensor((n,), "int32"),
             B: T.Tensor((n,), "float32"), J: T.Tensor((n,), "int32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                # an int32 meets a float32: promoted to float32, as TVM's arithmetic does
                B[i] = T.max(I[i], A[i]) + T.clamp(A[i], -0.5, 0.5) + T.Cast("float32", I[i])
                J[i] = T.floordiv(I[i], 3) * 10 + T.floormod(I[i], 3)

    return main


def test_cast_floordiv_floormod_clamp_and_promotion():
    kernel = tilewright.compile(scalar_ops(), out_idx=[2, 3], target="cpu")
    a, ints = torch.randn(16), torch.arange(-8, 8, dtype=torch.int32)
    b, j = kernel(a, ints)
    f = ints.float()
    torch.testing.assert_close(b, torch.maximum(f, a) + a.clamp(-0.5, 0.5) + f)
    torch.testing.assert_close(j, torch.div(ints, 3, rounding_mode="floor") * 10 + ints % 3)
    assert T.floordiv(-7, 2) == -4 and T.floormod(-7, 2) == 1


def test_jit_keywords_are_honoured(tmp_path, capsys):
    debug = tmp_path / "debug"

    @tilewright.jit(out_idx=[-1], target="cpu", verbose=True, debug_root_path=str(debug),
                    execution_backend="cython")
    def double(n):
        return scale.get_tir(n, factor=2.0)

    a = torch.randn(64)
    torch.testing.assert_close(double(64)(a), 2 * a)
    assert "tilewright: compiled scale for cpu" in capsys.readouterr().out  # get_tir names it
    assert sorted(p.name for p in debug.iterdir()) == [
        "tilewright_jit_kernel_double.ll", "tilewright_jit_program_double.py"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'out_idxx'"):
        tilewright.jit(out_idxx=[-1])


def test_jit_keywords_without_meaning_here_say_so(caplog):
    with caplog.at_level(logging.WARNING, logger="tilewright"):
        kernel = tilewright.jit(out_idx=[-1], target="cpu", target_host="llvm",
                                compile_flags=["-O3"])(lambda n: scale.get_tir(n))(32)
    torch.testing.assert_close(kernel(torch.ones(32)), 2 * torch.ones(32))
    text = caplog.text
    assert "target_host='llvm' has no effect" in text
    assert "TL_DEVICE_COMPILE_FLAGS (cuda.device_compile_flags) belongs to backend 'cuda'" in text


def test_jit_object_get_tir_source_compile_and_par_compile():
    func = scale.get_tir(64, block=16)
    assert func.attrs["global_symbol"] == "scale" and "T.Parallel" not in func.script()[:0]
    assert scale.get_kernel_source(64) == scale.compile(64).get_kernel_source()
    kernels = scale.par_compile([{"n": 64, "factor": 3.0}, (32,)], num_workers=2)
    a = torch.randn(64)
    torch.testing.assert_close(kernels[0](a), 3 * a)
    torch.testing.assert_close(kernels[1](a[:32]), 2 * a[:32])
    bad = tilewright.jit(out_idx=[-1], target="cpu")(lambda n: scale.get_tir(n - 32))
    with pytest.raises(KernelError, match="non-positive dimension"):
        bad.par_compile([(32,)], ignore_error=True)  # tracing errors always raise


def test_profiler_of_a_kernel():
    kernel = scale(256)
    profiler = kernel.get_profiler(tensor_supply_type=tilewright.TensorSupplyType.Integer)
    assert isinstance(profiler, Profiler)
    inputs = profiler._get_inputs()
    assert inputs[0].shape == (256,) and set(inputs[0].tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert profiler.run_once().shape == (256,)
    profiler.assert_allclose(lambda a: 2 * a)
    with pytest.raises(AssertionError, match=r"elements .* of tilewright and ref differ"):
        profiler.assert_allclose(lambda a: 3 * a + 1)
    assert profiler.do_bench(warmup=1, rep=2, backend="cupti") > 0  # wall clock here
    assert profiler.do_bench(lambda a: a * 2, n_warmup=1, n_repeat=2) > 0
    profiler.assert_consistent(repeat=2)


def test_autotune_with_an_explicit_config_and_given_inputs():
    tuner._MEMORY.clear()
    tuned = tilewright.autotune(configs=[{"block": 16}, {"block": 64}], warmup=1, rep=2,
                                ref_prog=lambda a: 2 * a, progress=False, cache=False,
                                workers=1)(scale)
    explicit = tuned(128, block=32)  # every tuned parameter given: no search
    assert not hasattr(explicit, "autotune_result")
    a = torch.randn(128)
    with set_autotune_inputs([a]):
        kernel = tuned(128)
    assert kernel.config in ({"block": 16}, {"block": 64}) and kernel.latency > 0
    torch.testing.assert_close(kernel(a), 2 * a)
    with pytest.raises(tilewright.ConfigError, match="unexpected keyword argument.*nope"):
        tilewright.autotune(configs=[{"block": 16}], nope=1)


def test_autotune_ref_prog_checks_with_tilelang_tolerances():
    """With ``ref_prog`` (TileLang's spelling) the check is TileLang's, ``rtol = atol = 1e-2``
    (gemm_fp8/example_tilelang_gemm_amd: a float32 sum in another order than torch's failed
    float32's own tolerance in every config); ``reference`` keeps the dtype's."""
    tuner._MEMORY.clear()
    near = lambda a: 2 * a * (1 + 1e-4)  # noqa: E731 - off by far more than float32's rounding
    common = {"configs": [{"block": 16}], "warmup": 1, "rep": 2, "progress": False,
              "cache": False, "workers": 1}
    a = torch.randn(128)
    with set_autotune_inputs([a]):
        assert tilewright.autotune(ref_prog=near, **common)(scale)(128).latency > 0
        with pytest.raises(tilewright.TilewrightError, match="no config compiled, ran and "
                                                             "passed the check"):
            tilewright.autotune(reference=near, **common)(scale)(128)


def row_normalise(block_n=None, n=64, m=32):
    """A plain factory (not decorated), as TileLang's object API takes it: each row divided by
    its sum (a loop-invariant divisor: fast math makes it a reciprocal product on the CPU)."""
    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(m) as row:
            total = T.alloc_fragment((1,), "float32")
            T.clear(total)
            for j in T.serial(n):
                total[0] += A[row, j]
            for j in T.Parallel(block_n):
                for jj in T.serial(n // block_n):
                    B[row, jj * block_n + j] = A[row, jj * block_n + j] / total[0]

    return main


def test_object_api_with_pass_configs_in_a_config(caplog):
    """``AutoTuner.from_kernel(...).set_compile_args(...).set_profile_args(...).run(...)``,
    ``supply_prog`` given the input parameters as TileLang gives them, and a config's own
    ``pass_configs`` merged over the compile arguments' (TileLang's
    example_gemm_autotune_pass_configs and _early_stop)."""
    tuner._MEMORY.clear()
    fast, precise = ({tilewright.PassConfigKey.TL_ENABLE_FAST_MATH: on} for on in (True, False))
    configs = [{"block_n": 16, "pass_configs": fast}, {"block_n": 16, "pass_configs": precise}]
    tuned = (tuner.AutoTuner.from_kernel(kernel=row_normalise, configs=configs)
             .set_compile_args(out_idx=[-1], target="cpu",
                               pass_configs={"tw.disable_cache": True})
             .set_profile_args(supply_prog=lambda params: [torch.rand(*params[0].shape) + 0.5],
                               ref_prog=lambda a: a / a.sum(dim=1, keepdim=True),
                               cache_input_tensors=True))
    with caplog.at_level(logging.WARNING):
        result = tuned.run(warmup=1, rep=2, early_stop=True, early_stop_factor=1e9,
                           enable_grouped_compile=True)
    assert [row["status"] for row in result.rows] == ["ok", "ok"]
    assert result.config in configs and result.latency > 0 and result.ref_latency > 0
    a = torch.rand(32, 64) + 0.5
    torch.testing.assert_close(result.kernel(a), a / a.sum(dim=1, keepdim=True))
    assert result.libcode == result.kernel.get_kernel_source()
    as_jit = tilewright.jit(out_idx=[-1], target="cpu")(row_normalise)
    assert result.func.script() == as_jit.get_tir(16).script()
    said = " | ".join(r.getMessage() for r in caplog.records)
    assert "enable_grouped_compile have no effect" in said and \
        "cache_input_tensors have no effect" in said
    # each config compiled with its own pass configs over the compile arguments'
    sources = {on: tilewright.jit(out_idx=[-1], target="cpu", pass_configs={
        tilewright.PassConfigKey.TL_ENABLE_FAST_MATH: on})(row_normalise)(16).get_kernel_source()
        for on in (True, False)}
    assert sources[True] != sources[False]
    chosen = result.config["pass_configs"][tilewright.PassConfigKey.TL_ENABLE_FAST_MATH]
    assert result.libcode == sources[chosen]
    with pytest.raises(tilewright.ConfigError, match="pass_configs must be a dict"):
        tuner.AutoTuner.from_kernel(row_normalise, [{"block_n": 16, "pass_configs": 1}])
    with pytest.raises(tilewright.ConfigError, match="unexpected keyword argument.*nope"):
        tuned.run(nope=1)
