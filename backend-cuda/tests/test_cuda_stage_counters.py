"""Pipeline versions and barrier phases on counters the loop carries (transforms/pipeline/
counters.py): a 3-stage pipeline's ``k % 3`` and ``(k / 3) & 1`` cost no division in any
pipeline form, a persistent kernel starts them once per tile from its running count, and
powers of two keep their masks. The emulated runs of these forms are in
test_cuda_tma_pipeline.py, test_cuda_pipeline.py and test_cuda_persistent_ws.py."""

import re

import pytest
import sass
import tilewright
from test_cuda_persistent_ws import _persistent
from test_cuda_tma_pipeline import CPASYNC, IN_ORDER, _kernel, hopper_gemm
from tilewright_cuda import arch, executor

# ptxas divides by 3 by a multiply-high with one of these (32-bit, or 16-bit on a short range)
DIVISION_BY_3 = re.compile(r"0xaaaaaaab|-0x55555555|0xaaab\b")
MOD_OR_DIV_3 = re.compile(r"[%/] 3\b")


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("configs", [{}, IN_ORDER, CPASYNC], ids=["ws", "in_order", "cp_async"])
def test_three_stages_compile_without_a_division(configs, tmp_path):
    text = tilewright.lower(hopper_gemm(K=4096), "cuda -arch=sm_90a", configs).source.text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), str(tmp_path))
    code = sass.dump(cubin)
    assert "HGMMA" in code and not DIVISION_BY_3.search(code)


def test_the_loops_carry_the_stage_and_the_round():
    loop = _kernel(tilewright.lower(hopper_gemm(K=448), "cuda -arch=sm_90a").source.text)
    loop = loop[loop.index("for (int k = 0;"):]
    # the consumer: one counter pair, stepped at the end of each iteration
    assert not MOD_OR_DIV_3.search(loop)
    assert re.search(r"if \(k_stage_ptr\[0\] == 2\) \{\s+k_stage_ptr\[0\] = 0;\s+"
                     r"k_round_ptr\[0\] = \(k_round_ptr\[0\] \+ 1\);\s+\} else \{\s+"
                     r"k_stage_ptr\[0\] = \(k_stage_ptr\[0\] \+ 1\);", loop)


def test_a_persistent_kernel_starts_its_counters_once_per_tile():
    text = tilewright.lower(_persistent(512, 512, 256, 4, "float16", num_stages=3),
                            "cuda -arch=sm_90a").source.text
    kernel = _kernel(text)
    for name in ("ko", "ko_load"):  # the compute warpgroups and the producer
        loop = kernel[kernel.index(f"for (int {name} = 0;"):]
        assert not MOD_OR_DIV_3.search(loop.split("}\n", 1)[0])
        start = kernel[:kernel.index(f"for (int {name} = 0;")].rsplit("for (int wave", 1)[1]
        role = "consumed" if name == "ko" else "issued"
        # (floor division of a count the printer cannot prove non-negative)
        assert f"{name}_stage_ptr[0] = ((ko_{role}_base % 3) + " in start
        assert f"{name}_round_ptr[0] = ((ko_{role}_base / 3) + " in start


@pytest.mark.parametrize("stages", [2, 4])
def test_powers_of_two_keep_their_masks(stages):
    text = tilewright.lower(hopper_gemm(K=448, stages=stages), "cuda -arch=sm_90a").source.text
    assert "_stage_ptr" not in text and f"& {stages - 1})" in text
