"""The wgmma GEMM variant (sm_90a): taken where it fits, HGMMA in the machine code, and the
host emulation decodes the generated shared-memory descriptors (so a descriptor bug gives
wrong results), alone and in a TMA + mbarrier + warp-specialised kernel."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright_cuda import arch, executor


def gemm(M=256, N=256, K=128, bM=128, bN=128, bK=64, threads=256, dtype="float16",
         trans_b=False, stages=1):
    """The portable GEMM: copies into 2-D shared tiles (swizzled by layout inference)."""
    b_shape, b_tile = ((N, K), (bN, bK)) if trans_b else ((K, N), (bK, bN))

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, ko * bK], A_s)
                if trans_b:
                    T.copy(B[bx * bN, ko * bK], B_s)
                else:
                    T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=trans_b)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def hopper_gemm(M=256, N=256, K=256, bM=64, bN=128, bK=64, dtype="float16"):
    """Warpgroup 1 loads with TMA, warpgroup 0 multiplies with wgmma; full/empty mbarriers."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            full = T.alloc_barrier(128)
            empty = T.alloc_barrier(128)
            with T.ws(0):
                T.clear(C_l)
            for ko in T.serial(T.ceildiv(K, bK)):
                with T.ws(1):
                    T.mbarrier_wait_parity(empty, (ko % 2) ^ 1)
                    T.tma_copy(A[by * bM:(by + 1) * bM, ko * bK:(ko + 1) * bK], A_s,
                               barrier=full)
                    T.tma_copy(B[ko * bK:(ko + 1) * bK, bx * bN:(bx + 1) * bN], B_s,
                               barrier=full)
                    T.mbarrier_arrive(full)
                with T.ws(0):
                    T.mbarrier_wait_parity(full, ko % 2)
                    T.gemm(A_s, B_s, C_l)
                    T.mbarrier_arrive(empty)
            with T.ws(0):
                T.copy(C_l, C[by * bM, bx * bN])

    return main


CASES = {  # name -> (kernel arguments, the wgmma instruction shape expected in the SASS)
    "f16": ({}, "HGMMA.64x128x16.F32"),
    "bf16": ({"dtype": "bfloat16"}, "HGMMA.64x128x16.F32.BF16"),
    "b_k_major": ({"trans_b": True}, "HGMMA.64x128x16.F32"),
    "n256": ({"N": 256, "bN": 256}, "HGMMA.64x256x16.F32"),
    # three cp.async stages: each gemm reads the tile versions [3, R, C] of its iteration
    "one_warpgroup_sw64_pipelined": ({"bM": 64, "threads": 128, "bK": 32, "stages": 3},
                                     "HGMMA.64x128x16.F32"),
    "sw32": ({"bK": 16, "K": 64}, "HGMMA.64x128x16.F32"),
}


def _text(func, target="cuda -arch=sm_90a"):
    lowered = tilewright.lower(func, target)
    return lowered.source.text, lowered.source.payload


@pytest.mark.parametrize("name", CASES)
def test_wgmma_variant_is_taken_where_it_fits(name):
    text, _ = _text(gemm(**CASES[name][0]))
    kernel = text[text.index('extern "C" __global__'):]
    assert re.search(r"tw_gemm_wgmma<\d+, \d+, \d+, TW_WGMMA_B?F16, (true|false), ", kernel)
    assert "tw_gemm_mma" not in kernel
    assert "wgmma.mma_async.sync.aligned.m64n" in text


def test_other_shapes_and_arches_keep_mma_sync():
    # 128 rows over one warpgroup: not 64 rows per warpgroup; sm_80 and sm_90 have no wgmma
    for func, target in ((gemm(threads=128), "cuda -arch=sm_90a"), (gemm(), "cuda -arch=sm_80"),
                         (gemm(), "cuda -arch=sm_90")):
        text, _ = _text(func, target)
        kernel = text[text.index('extern "C" __global__'):]
        assert "tw_gemm_wgmma" not in kernel and "tw_gemm_mma_rf<" in kernel


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("name", ["f16", "bf16", "n256", "sw32"])
def test_wgmma_sass_has_hgmma_and_no_spills(name):
    kwargs, instr = CASES[name]
    text, _ = _text(gemm(**kwargs))
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    # one wgmma per k16 step of a block tile (bK / 16), in the main loop
    shapes = re.findall(r"HGMMA\.(\d+x\d+x\d+)", code)
    assert instr in code and len(shapes) >= kwargs.get("bK", 64) // 16
    assert "0 bytes spill stores" in log


@pytest.mark.emulator
@pytest.mark.parametrize("name", ["b_k_major", "one_warpgroup_sw64_pipelined", "sw32"])
def test_wgmma_matches_torch_in_emulation(name, tmp_path):
    kwargs = CASES[name][0]
    M, N, K = 256, kwargs.get("N", 256), kwargs.get("K", 128)
    dtype = getattr(torch, kwargs.get("dtype", "float16"))
    torch.manual_seed(0)
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    c = torch.full((M, N), float("nan"))
    text, launch = _text(gemm(**kwargs))
    hostemu.run(text, launch, tmp_path, a, b.t().contiguous() if kwargs.get("trans_b") else b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_tma_warp_specialised_wgmma_kernel_builds():
    text, launch = _text(hopper_gemm())
    assert [(m["tensor"], m["box"], m["swizzle"]) for m in launch["params"]
            if m["kind"] == "tensormap"] == [("A", [64, 64], 128), ("B", [64, 64], 128)]
    assert "tw_gemm_wgmma<128, 64, 128, TW_WGMMA_F16, true, 64, 128, 64, 128>" in text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    for instr in ("HGMMA.64x128x16.F32", "UTMALDG.2D", "SYNCS.PHASECHK.TRANS64.TRYWAIT"):
        assert instr in code


@pytest.mark.emulator
def test_tma_warp_specialised_wgmma_kernel_matches_torch(tmp_path):
    torch.manual_seed(0)
    a, b = torch.randn(200, 256).half(), torch.randn(256, 256).half()
    c = torch.full((200, 256), float("nan"))
    text, launch = _text(hopper_gemm(M=200))
    hostemu.run(text, launch, tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)
