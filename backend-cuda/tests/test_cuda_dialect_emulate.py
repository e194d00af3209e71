"""The CUDA dialect's kernels run on the host (hostemu.py): TMA as a synchronous tiled copy
that honours the box, out-of-range zero fill and the swizzle mode, mbarriers as counters with a
phase bit, named barriers per role, clusters of blocks at once. Outputs start as NaN.

- ``tma_gemm``: partial tiles, TMA fills the part of a box outside the tensor with zeros;
- ``tma_gemm_swizzled``: a descriptor or swizzle mismatch between TMA and the mma.sync reader
  gives wrong values;
- ``ws_gemm``: warp-specialised roles; ``ws_store``, ``cluster_scale``: TMA stores, roles and
  clusters; ``head_copy``: rank-4 TMA with a symbolic length (100 = 3 tiles of 32 + a
  partial one); ``wide_tma_copy``, ``tall_tma_copy``: TMA boxes over 256 elements (576
  columns: one box of a folded view; 320 rows: split); ``grouped_copies``: cp.async commit /
  wait groups; ``prefetched_copies``: a three-stage cp.async pipeline waiting with
  T.ptx_wait_group(2); ``grid_sum``: T.sync_grid, the blocks of a cooperative kernel at once."""

import dialect_cases
import hostemu
import pytest
import tilewright
import torch

CASES = dialect_cases.cases()


@pytest.mark.emulator
@pytest.mark.parametrize("name, func, case", CASES, ids=[c[0] for c in CASES])
def test_dialect_kernel_matches_torch(name, func, case, tmp_path):
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()


@pytest.mark.emulator
@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("configs", [{}, {"cuda.disable_warp_specialized": True}])
def test_a_carried_wgmma_group_keeps_its_stage_until_it_retires(tmp_path, stages, configs):
    # 4 k-tiles through 3 or 4 stages, the TMA producer warpgroup (its stage released after
    # the consumer's wait that retires the stage's group) and the in-order TMA loop (the
    # refill one step later): the product of every k-tile once
    gen = torch.Generator().manual_seed(3)
    a, b = (torch.randn(64, 256, generator=gen).half() for _ in range(2))
    lowered = tilewright.lower(dialect_cases.carried_group_gemm(stages), "cuda -arch=sm_90a",
                               pass_configs=configs)
    text = lowered.source.text
    loop = text[text.index("for (int ko = 0;"):]
    assert "tw_wgmma_wait<1>();" in loop
    c = torch.full((64, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float().T), rtol=1e-3, atol=1e-3)
