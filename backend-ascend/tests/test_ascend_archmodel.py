"""The Ascend SoCs as roofline models: ``--arch ascend-910b`` (and each SoC) is registered."""

import tilewright.language as T
from tilewright.profiler.arch import arch_models, get_arch
from tilewright.tools.analyzer import Analyzer
from tilewright_ascend.facts.arch import DEFAULT_SOC, SOCS


def test_every_soc_is_a_model_and_ascend_910b_is_the_default_one():
    models = arch_models()
    assert {f"ascend-{name.lower()}" for name in SOCS} | {"ascend-910b"} <= set(models)
    default, b3 = get_arch("ascend-910b"), get_arch("ascend-910b3")
    assert default.details["soc"] == DEFAULT_SOC and "not measured" in default.description
    assert default.compute_units == SOCS[DEFAULT_SOC].aic > b3.compute_units
    assert default.peak_tflops["float16"] > default.peak_tflops["float32"] > 0


def test_a_portable_gemm_is_analysed_against_it():
    n, block = 512, 128

    @T.prim_func
    def gemm(A: T.Tensor((n, n), "float16"), B: T.Tensor((n, n), "float16"),
             C: T.Tensor((n, n), "float32")):
        with T.Kernel(n // block, n // block) as (bx, by):
            A_s = T.alloc_shared((block, 64), "float16")
            B_s = T.alloc_shared((64, block), "float16")
            acc = T.alloc_fragment((block, block), "float32")
            T.clear(acc)
            for k in T.serial(n // 64):
                T.copy(A[by * block, k * 64], A_s)
                T.copy(B[k * 64, bx * block], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * block, bx * block])

    arch = get_arch("ascend-910b")
    result = Analyzer.analysis(gemm, arch)
    assert result.total_flops == 2 * n ** 3 and result.arch is arch
    assert result.estimated_time >= 2 * n ** 3 / (arch.peak_tflops["float16"] * 1e12)
