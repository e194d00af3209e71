"""The CUDA dialect's kernels run on the host (hostemu.py): TMA as a synchronous tiled copy
that honours the box, out-of-range zero fill and the swizzle mode, mbarriers as counters with a
phase bit, named barriers per role. Outputs start as NaN."""

import hostemu
import pytest
import tilewright
import torch
from dialect_cases import cluster_scale, head_copy, tma_gemm, tma_gemm_swizzled, ws_gemm, ws_store


def _lower(func, target="cuda -arch=sm_90a"):
    lowered = tilewright.lower(func, target)
    return lowered.source.text, lowered.source.payload


def _emulate(func, tmp_path, *args):
    text, launch = _lower(func)
    hostemu.run(text, launch, tmp_path, *args)


def _gemm_inputs(M, N, K, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    return a, b, torch.full((M, N), float("nan"))


@pytest.mark.emulator
def test_tma_pipeline_matches_torch(tmp_path):
    # partial tiles: TMA fills the part of a box outside the tensor with zeros
    M, N, K = 200, 136, 104
    a, b, c = _gemm_inputs(M, N, K, torch.float16)
    _emulate(tma_gemm(M, N, K), tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)


@pytest.mark.emulator
def test_swizzled_tma_feeds_the_swizzled_mma(tmp_path):
    # a descriptor or swizzle mismatch between TMA and the mma.sync reader gives wrong values
    a, b, c = _gemm_inputs(256, 256, 128, torch.float16)
    _emulate(tma_gemm_swizzled(), tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)


@pytest.mark.emulator
def test_warp_specialised_gemm_matches_torch(tmp_path):
    a, b, c = _gemm_inputs(256, 256, 128, torch.float32)
    _emulate(ws_gemm(dtype="float32"), tmp_path, a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.emulator
def test_tma_store_roles_and_clusters_match_torch(tmp_path):
    a = torch.randn(200, 136)
    out = torch.full_like(a, float("nan"))
    _emulate(ws_store(200, 136), tmp_path, a, out)
    torch.testing.assert_close(out, a + 1)
    a = torch.randn(200, 128).half()
    out = torch.full_like(a, float("nan"))
    _emulate(cluster_scale(200, 128), tmp_path, a, out)
    torch.testing.assert_close(out, a * 2)


@pytest.mark.emulator
def test_rank4_tma_with_a_symbolic_length_matches_torch(tmp_path):
    k = torch.randn(2, 3, 100, 64).half()  # 100 = 3 tiles of 32 + a partial one
    out = torch.full_like(k, float("nan"))
    _emulate(head_copy(), tmp_path, k, out)
    torch.testing.assert_close(out, k)
