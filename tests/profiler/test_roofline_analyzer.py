"""The static roofline analyser: FLOPs, bytes, extents, bounds, models and the chart."""

import builtins

import pytest
from profiler_kernels import axpy_func, dynamic_copy_func, matmul, row_softmax_func
from tilewright.errors import ConfigError, PluginError, TilewrightError
from tilewright.plugin import ArchModel
from tilewright.profiler.arch import arch_models, get_arch
from tilewright.tools.analyzer import Analyzer, plot_roofline


def test_gemm_flops_bytes_and_extents(gpu_arch):
    M, N, K, b = 256, 128, 64, 32
    func = matmul.fn(M, N, K)  # the tile program, without compiling
    r = Analyzer.analysis(func, gpu_arch)
    assert r.total_flops == 2 * M * N * K
    assert r.flops_by_op == {"gemm": 2 * M * N * K}
    grid = (N // b) * (M // b)
    # per block: A panel b*K, B panel K*b, C tile b*b, 4 bytes each
    assert r.total_global_bytes == grid * (b * K + K * b + b * b) * 4
    assert r.grid == (N // b, M // b)
    assert [(name, extent) for name, extent, _ in r.loops] == [("bx", 4), ("by", 8),
                                                               ("k", 2)]
    compute = r.total_flops / 10e12  # the fixture's float32 peak
    memory = r.total_global_bytes / 1000e9
    assert r.compute_time == pytest.approx(compute)
    assert r.memory_time == pytest.approx(memory)
    assert r.estimated_time == pytest.approx(max(compute, memory))
    assert r.bound == "memory"
    assert r.expected_tflops == pytest.approx(r.total_flops / r.estimated_time / 1e12)
    assert r.expected_bandwidth_GBps == pytest.approx(1000.0)


def test_dtype_picks_the_peak(gpu_arch):
    fp16 = Analyzer.analysis(matmul.fn(256, 256, 256, dtype="float16"), gpu_arch)
    fp32 = Analyzer.analysis(matmul.fn(256, 256, 256), gpu_arch)
    assert fp16.flops_by_dtype == {"float16": 2 * 256 ** 3}
    assert fp32.compute_time == pytest.approx(10 * fp16.compute_time)


def test_compute_bound_when_peak_is_low():
    slow = ArchModel("slowchip", {"float32": 0.001}, 1000.0)
    r = Analyzer.analysis(matmul.fn(128, 128, 128), slow)
    assert r.bound == "compute"
    assert r.expected_tflops == pytest.approx(0.001)


def test_reductions_and_elementwise_are_counted(gpu_arch):
    M, N = 64, 128
    r = Analyzer.analysis(row_softmax_func(M, N), gpu_arch)
    assert r.flops_by_op == {"reduce_max": M * N, "reduce_sum": M * N,
                             "elementwise": 4 * M * N}  # sub, mul, exp2; then div
    assert r.total_global_bytes == 2 * M * N * 4
    assert r.grid == (M // 4,)


def test_direct_loads_and_stores(gpu_arch):
    r = Analyzer.analysis(axpy_func(1024), gpu_arch)
    assert r.total_flops == 2 * 1024
    assert r.bytes_by_kind == {"load": 8 * 1024, "store": 4 * 1024}


def test_dynamic_extents_need_symbols(gpu_arch):
    with pytest.raises(ConfigError) as info:
        Analyzer.analysis(dynamic_copy_func(), gpu_arch)
    assert "symbols={'n': ...}" in str(info.value)
    r = Analyzer.analysis(dynamic_copy_func(), gpu_arch, symbols={"n": 640})
    assert r.total_global_bytes == 2 * 640 * 4
    assert r.grid == (10,)


def test_compiled_kernel_and_module_are_accepted(gpu_arch):
    kernel = matmul(64, 64, 64)
    a = Analyzer.analysis(kernel, gpu_arch)
    b = Analyzer.analysis(kernel.get_tir(), gpu_arch)
    assert a.total_flops == b.total_flops == 2 * 64 ** 3
    with pytest.raises(ConfigError, match="takes a PrimFunc"):
        Analyzer.analysis("not a kernel", gpu_arch)


def test_arch_by_name_from_plugins(fake_plugins):
    assert get_arch("TestGPU").name == "testgpu"
    assert get_arch("cpu").compute_units >= 1
    r = Analyzer.analysis(matmul.fn(64, 64, 64), "testgpu")
    assert r.arch.name == "testgpu"


def test_unknown_arch_names_the_registered_ones(fake_plugins):
    with pytest.raises(ConfigError) as info:
        get_arch("h200")
    text = str(info.value)
    assert "unknown architecture 'h200'" in text and "cpu, testgpu" in text
    with pytest.raises(ConfigError, match="did you mean testgpu"):
        get_arch("testgpv")


def test_cpu_plugin_registers_a_measured_host_model():
    cpu = arch_models()["cpu"]
    assert cpu.peak_tflops["float32"] > 0 and cpu.bandwidth_gbps > 0
    assert "measured" in cpu.description


def test_arch_model_validates_itself():
    with pytest.raises(PluginError, match="bandwidth_gbps must be positive"):
        ArchModel("bad", {"float32": 1.0}, 0)
    with pytest.raises(PluginError, match="peak_tflops needs positive entries"):
        ArchModel("bad", {}, 1.0)


def test_nothing_to_analyse(gpu_arch):
    import tilewright.language as T

    @T.prim_func
    def empty(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            s = T.alloc_fragment((4,), "float32")
            T.clear(s)

    with pytest.raises(TilewrightError, match="does no counted work"):
        Analyzer.analysis(empty, gpu_arch)


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_roofline_chart(tmp_path, gpu_arch, suffix, magic):
    pytest.importorskip("matplotlib", reason="the chart needs the viz extra (matplotlib)")
    r = Analyzer.analysis(matmul.fn(128, 128, 128), gpu_arch)
    path = r.plot(tmp_path / f"roof{suffix}", measured_ms=0.01)
    assert path.read_bytes().startswith(magic)


def test_chart_errors(tmp_path, gpu_arch, monkeypatch):
    r = Analyzer.analysis(matmul.fn(64, 64, 64), gpu_arch)
    with pytest.raises(ConfigError, match=r"\.png or \.svg"):
        plot_roofline([r], tmp_path / "roof.pdf")
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(TilewrightError, match=r"pip install 'tilewright\[viz\]'"):
        plot_roofline([r], tmp_path / "roof.png")
