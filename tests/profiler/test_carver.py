"""The tile-shape recommender: feasible candidates, scores that explain themselves, configs
that autotune accepts."""

import pytest
import tilewright
from profiler_kernels import matmul
from tilewright.carver import MatmulTemplate
from tilewright.errors import ConfigError
from tilewright.plugin import ArchModel


def test_hints_fit_the_budgets_and_are_sorted(gpu_arch):
    hints = MatmulTemplate(4096, 4096, 4096).with_arch(gpu_arch).recommend_hints(topk=20)
    assert len(hints) == 20
    assert [h.score for h in hints] == sorted(h.score for h in hints)
    for h in hints:
        assert h.smem_bytes <= gpu_arch.shared_memory_bytes
        assert h.reg_usage == 2 * h.block_M * h.block_N  # fp32 accumulator: 32 bits / 32
        assert h.reg_usage <= gpu_arch.register_budget
        assert h.block_M % 16 == 0 and h.block_N % 8 == 0 and h.block_K % 16 == 0
        assert h.score == (h.traffic_bytes + 1) * h.waves
        assert h.tiles == -(-4096 // h.block_M) * -(-4096 // h.block_N)
        assert h.waves == -(-h.tiles // (h.blocks_per_unit * gpu_arch.compute_units))
        assert f"{h.traffic_bytes} B per tile" in h.explanation
        assert f"{h.waves} wave(s)" in h.explanation


def test_traffic_counts_transactions(gpu_arch):
    t = MatmulTemplate(256, 256, 256).with_arch(gpu_arch)
    # 64x64x32 fp16: per K step A is 64 rows of 64 B (each rounded to one 128 B
    # transaction), B is 32 rows of 128 B; C is 64 rows of 128 B
    assert t._traffic(64, 64, 32) == 8 * (64 * 128 + 32 * 128) + 64 * 128


def test_small_problem_blocks_do_not_exceed_it(gpu_arch):
    hints = MatmulTemplate(48, 40, 64).with_arch(gpu_arch).recommend_hints(topk=50)
    assert all(h.block_M <= 48 and h.block_N <= 40 for h in hints)


def test_configs_feed_autotune(gpu_arch):
    configs = MatmulTemplate(128, 128, 128, "float32", "float32", "float32") \
        .with_arch(gpu_arch).recommend_configs(topk=3, keys=("block_M", "block_N", "block_K"))
    assert len(configs) == 3 and set(configs[0]) == {"block_M", "block_N", "block_K"}
    tuned = tilewright.autotune(configs=configs)(matmul)  # validation accepts the keys
    assert tuned.configs == configs
    renamed = MatmulTemplate(128, 128, 128).with_arch(gpu_arch).recommend_hints(1)[0] \
        .config({"block_M": "bm", "num_stages": "stages"})
    assert set(renamed) == {"bm", "stages"}


def test_errors(gpu_arch):
    with pytest.raises(ConfigError, match="M must be a positive integer"):
        MatmulTemplate(0, 16, 16)
    with pytest.raises(ConfigError, match="call .with_arch"):
        MatmulTemplate(16, 16, 16).recommend_hints()
    with pytest.raises(ConfigError, match="topk must be a positive integer"):
        MatmulTemplate(16, 16, 16).with_arch(gpu_arch).recommend_hints(topk=0)
    bare = ArchModel("bare", {"float32": 1.0}, 1.0)
    with pytest.raises(ConfigError, match="lacks compute_units, shared_memory_bytes, "
                                          "register_budget"):
        MatmulTemplate(16, 16, 16).with_arch(bare)
    tiny = ArchModel("tiny", {"float32": 1.0}, 1.0, compute_units=1, shared_memory_bytes=64,
                     register_budget=8)
    with pytest.raises(ConfigError, match="no tile shape of 64x64x64 fits"):
        MatmulTemplate(64, 64, 64).with_arch(tiny).recommend_hints()
    with pytest.raises(ConfigError, match="has no field"):
        MatmulTemplate(64, 64, 64).with_arch(gpu_arch).recommend_hints(1)[0].config(["bm"])


def test_cpu_model_gives_hints():
    hints = MatmulTemplate(512, 512, 512, "float32", "float32", "float32") \
        .with_arch("cpu").recommend_hints(topk=5)
    assert hints and all(h.block_M % 8 == 0 for h in hints)


def test_tilelang_layout_and_hint_names(gpu_arch):
    """``carver.template.MatmulTemplate`` and ``carver.roller.rasterization`` where TileLang's
    GEMM autotune examples import them, and the hint fields they read."""
    from dataclasses import replace

    import torch
    from tilewright.carver.roller.rasterization import NoRasterization, Rasterization2DColumn
    from tilewright.carver.template import MatmulTemplate as FromTemplate

    assert FromTemplate is MatmulTemplate
    for h in MatmulTemplate(1024, 768, 512).with_arch(gpu_arch).recommend_hints(topk=30):
        warp_m, warp_n = h.warp
        assert (h.block_M // warp_m) * (h.block_N // warp_n) * 32 == h.threads
        assert h.rstep == (h.block_K,) and h.pipeline_stage == h.num_stages
    # TileLang's roller plan: column panels of sqrt(units) tiles on an sm_80+ GPU whose L2
    # cannot hold A and B; none when it can, before sm_80, or without the facts
    big = replace(gpu_arch, details={"compute_capability": "8.0", "l2_bytes": 40 << 20})
    plan = MatmulTemplate(8192, 8192, 8192).with_arch(big).recommend_hints(1)[0]
    assert plan.rasterization_plan == Rasterization2DColumn(10)
    assert plan.rasterization_plan.panel_width == 10
    for arch, size in ((big, 1024), (replace(big, details={"compute_capability": "7.0",
                                                           "l2_bytes": 6 << 20}), 8192),
                       (gpu_arch, 8192)):
        hint = MatmulTemplate(size, size, size).with_arch(arch).recommend_hints(1)[0]
        assert hint.rasterization_plan == NoRasterization()
    with pytest.raises(ConfigError, match="has no panel width"):
        _ = NoRasterization().panel_width
    # the template's computation as a tile program that runs
    for trans_a, trans_b in ((False, False), (True, True)):
        template = MatmulTemplate(96, 80, 64, trans_A=trans_a, trans_B=trans_b)
        kernel = tilewright.compile(template.equivalent_function(), out_idx=[-1], target="cpu")
        a = torch.randn(64, 96) if trans_a else torch.randn(96, 64)
        b = torch.randn(80, 64) if trans_b else torch.randn(64, 80)
        a, b = a.half(), b.half()
        expected = (a.T if trans_a else a).float() @ (b.T if trans_b else b).float()
        torch.testing.assert_close(kernel(a, b).float(), expected, rtol=1e-2, atol=1e-2)
