"""The CUDA architecture models carry what the roofline and the tile-shape recommender need,
and the recommender keeps within a block's shared-memory limit and counts waves over the SMs."""

from dataclasses import replace

import pytest
from tilewright.carver import MatmulTemplate
from tilewright.profiler.arch import get_arch
from tilewright_cuda import arch

FIELDS = ("compute_capability", "warp_size", "max_threads_per_block", "max_threads_per_unit",
          "registers_per_unit", "l2_bytes", "mma_shapes")


@pytest.mark.parametrize("name, sms, cc, sm_arch", [
    ("A100", 108, "8.0", "sm_80"), ("H100", 132, "9.0", "sm_90a"), ("H200", 132, "9.0", "sm_90a"),
    ("RTX4090", 128, "8.9", "sm_89")])
def test_models_have_the_gpu_facts(name, sms, cc, sm_arch):
    model = get_arch(name)
    assert model.compute_units == sms
    assert model.details["compute_capability"] == cc
    assert all(f in model.details for f in FIELDS)
    assert model.details["warp_size"] == 32 and model.register_budget == 65536
    assert (16, 8, 16) in model.details["mma_shapes"] and model.mma_shape == (16, 8, 16)
    # the per-block limit is the one the compiler checks kernels against
    assert model.block_shared_memory_bytes == arch.get(sm_arch).max_shared_bytes
    assert model.block_shared_memory_bytes < model.shared_memory_bytes
    assert model.peak_tflops["float16"] > model.peak_tflops["float32"] > 0


def test_recommender_keeps_within_the_block_limit():
    template = MatmulTemplate(4096, 4096, 4096)
    h100 = get_arch("H100")
    hints = template.with_arch(h100).recommend_hints(50)
    assert all(h.smem_bytes <= h100.block_shared_memory_bytes for h in hints)
    small = replace(h100, name="H100-48K", block_shared_memory_bytes=48 << 10)
    hints = template.with_arch(small).recommend_hints(50)
    assert hints and all(h.smem_bytes <= 48 << 10 for h in hints)
    # fewer stages fit in 48 KB than in 227 KB for the same best tile
    assert max(h.num_stages for h in hints) <= max(
        h.num_stages for h in template.with_arch(h100).recommend_hints(50))


def test_recommender_counts_waves_over_the_sms():
    template = MatmulTemplate(4096, 4096, 4096)
    a100 = template.with_arch("A100").recommend_hints(1)[0]
    assert a100.waves == -(-a100.tiles // (a100.blocks_per_unit * 108))
    half = replace(get_arch("A100"), name="A100-half", compute_units=54)
    fewer = template.with_arch(half).recommend_hints(50)
    same = next(h for h in fewer if h.block == a100.block and h.block_K == a100.block_K)
    assert same.waves >= 2 * a100.waves - 1
