"""The pass config ``cuda.blocks_per_sm``: a kernel built for several resident blocks per SM
gets ``__launch_bounds__(threads, blocks)``, setmaxnreg budgets from its share of the
register file, and that share of the SM's shared memory as its limit."""

import re
import sys
from pathlib import Path

import pytest
import tilewright
from test_cuda_pipeline import _emulate
from tilewright.errors import ConfigError, KernelError
from tilewright_cuda import arch, executor
from tilewright_cuda.transforms.memory import shared_bytes_per_block
from tilewright_cuda.transforms.pipeline.tma import consumer_registers

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kernels  # noqa: E402 - after the sys.path setup

TARGET = "cuda -arch=sm_90a"
TWO = {"cuda.blocks_per_sm": 2, "cuda.disable_warp_specialized": True}
SMALL = {**kernels.GEMM, "block_N": 128, "c_shared": False}  # 96 KB of tiles: two fit an SM


def test_budgets_follow_the_blocks_per_sm():
    # one block of 256 + 128 threads: 168 registers each at launch, the producer's 40 left
    # for 232 per compute thread; two blocks: 80 at launch, 96 per compute thread
    assert consumer_registers(256) == 232 and consumer_registers(256, 2) == 96
    sm90 = arch.get("sm_90a")
    assert shared_bytes_per_block(sm90) == 232448
    assert shared_bytes_per_block(sm90, 2) == (232448 + 1024) // 2 - 1024


def test_two_blocks_per_sm_in_the_launch_bounds():
    func = kernels.gemm.fn(1024, 1024, 1024, "float16", **SMALL)
    one = tilewright.lower(func, TARGET, {"cuda.disable_warp_specialized": True}).source.text
    two = tilewright.lower(func, TARGET, TWO).source.text
    assert "__launch_bounds__(256, 1)" in one and "__launch_bounds__(256, 2)" in two
    # with a producer warpgroup the compute threads' budget comes from the smaller share
    ws = tilewright.lower(func, TARGET, {"cuda.blocks_per_sm": 2}).source.text
    assert "__launch_bounds__(384, 2)" in ws and "tw_setmaxnreg_inc<96>" in ws
    # a kernel without gemm or roles too
    add = kernels.add.fn(1024, 1024, "float32", **kernels.ADD)
    text = tilewright.lower(add, TARGET, {"cuda.blocks_per_sm": 4}).source.text
    assert "__launch_bounds__(256, 4)" in text


def test_shared_memory_beyond_the_share_is_an_error_naming_the_config():
    func = kernels.gemm.fn(1024, 1024, 1024, "float16", **kernels.GEMM)  # 208 KB of tiles
    with pytest.raises(KernelError, match=r"above the 115712 bytes each of 2 blocks per SM "
                                          r"\(cuda.blocks_per_sm\) may use on sm_90a") as err:
        tilewright.lower(func, TARGET, TWO)
    assert "kernels.py" in str(err.value)  # the kernel's source line


@pytest.mark.parametrize("value, error, message", [
    (0, KernelError, r"cuda.blocks_per_sm must be an integer from 1 to 8, got 0"),
    (9, KernelError, r"cuda.blocks_per_sm must be an integer from 1 to 8, got 9"),
    (True, KernelError, r"cuda.blocks_per_sm must be an integer from 1 to 8, got True"),
    ("2", ConfigError, r"pass_configs\['cuda.blocks_per_sm'\] must be int, got '2'"),
    (1.5, ConfigError, r"pass_configs\['cuda.blocks_per_sm'\] must be int, got 1.5")])
def test_a_bad_value_is_an_error(value, error, message):
    func = kernels.gemm.fn(256, 256, 256, "float16", **SMALL)
    with pytest.raises(error, match=message):
        tilewright.lower(func, TARGET, {"cuda.blocks_per_sm": value})


def test_producer_registers_leave_the_rest_to_the_compute_warpgroups():
    # 24 beside two compute warpgroups: (168 x 384 - 24 x 128) / 256 = 240, the cap
    assert consumer_registers(256, producer=24) == 240
    func = kernels.attention.fn(1, 1, 256, 128, "float16", **kernels.ATTENTION)
    text = tilewright.lower(func, TARGET, {"cuda.producer_registers": 24}).source.text
    assert "tw_setmaxnreg_dec<24>();" in text and "tw_setmaxnreg_inc<240>();" in text
    text = tilewright.lower(func, TARGET).source.text
    assert "tw_setmaxnreg_dec<40>();" in text and "tw_setmaxnreg_inc<232>();" in text


@pytest.mark.parametrize("value", [16, 30, 264, True])
def test_a_producer_budget_outside_setmaxnreg_is_an_error(value):
    func = kernels.attention.fn(1, 1, 256, 128, "float16", **kernels.ATTENTION)
    with pytest.raises(KernelError, match=r"cuda.producer_registers must be 0 or a multiple "
                                          r"of 8 from 24 to 256 \(setmaxnreg's range\), got "
                                          + re.escape(repr(value))):
        tilewright.lower(func, TARGET, {"cuda.producer_registers": value})


@pytest.mark.nvrtc
def test_ptxas_keeps_to_the_share():
    func = kernels.gemm.fn(4096, 4096, 4096, "float16", **SMALL)
    text = tilewright.lower(func, TARGET, TWO).source.text
    _, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    used = int(re.search(r"Used (\d+) registers", log).group(1))
    assert used <= 65536 // (2 * 256) and "0 bytes spill stores" in log


@pytest.mark.emulator
def test_two_blocks_per_sm_config_matches_torch(tmp_path):
    text = _emulate(kernels.gemm.fn(256, 256, 256, "float16", **SMALL), "sm_90a", tmp_path,
                    256, 256, 256, configs=TWO)
    assert "__launch_bounds__(256, 2)" in text
