"""T.gemm_sp (examples/gemm_sp.py) on CUDA: float16/bfloat16 values and metadata in shared
memory into a register accumulator run on ``wgmma.mma_async.sp m64nNk32`` on sm_90a (64 rows
per warpgroup, C in the wgmma accumulator layout) and on ``mma.sp::ordered_metadata
m16n8k32`` otherwise (sm_80+); the machine code shows the sparse tensor-core instruction
(``HGMMA.SP.64x128x32.F32``, ``HMMA.SP.16832.F32``) and no dense HMMA or HGMMA; the host
emulation checks every metadata width and B's two orientations against torch on both
instructions (the emulated wgmma.sp reads values and B through its decoded descriptors and
gathers each warp's metadata from its lanes as the PTX ISA lays it out), and the thread gemm
other dtypes take; a tile the instruction cannot cut is refused naming it. (cuda_cases'
gemm_sp runs the example in emulation; the catalogue's gemm_sp row runs in
test_cuda_conformance_emulated.)"""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright import sparse
from tilewright.errors import UnsupportedOpError
from tilewright.utils.sparse import compress, randn_semi_sparse
from tilewright_cuda import arch, executor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import gemm_sp  # noqa: E402 - after the sys.path setup


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_sparse_gemm_runs_on_the_sparse_tensor_core_instruction(tmp_path, arch_name):
    func = gemm_sp.gemm_sp_kernel.fn(256, 256, 256, block_M=128, block_N=128, block_K=64)
    source = tilewright.lower(func, f"cuda -arch={arch_name}").source.text
    assert "tw_gemm_mma_sp_rf<128, 128, 64, false, 128, 2, 2" in source
    cubin, log = executor.nvcc_compile(source, arch.get(arch_name), tmp_path)
    code = sass.dump(cubin)
    # 4 warps of 64x64: 4 x 8 tiles of 16x8 per k32 step, 2 steps a 64-deep k-tile; nvcc may
    # unroll the loop over the 4 k-tiles whole (it does for sm_80)
    assert len(re.findall(r"\sHMMA\.SP\.16832\.F32\s", code)) in (64, 4 * 64), code
    assert not re.search(r"\sHMMA\.(?!SP)", code)  # no dense HMMA
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("trans_b", [False, True])
def test_sparse_gemm_runs_on_sparse_wgmma_on_sm_90a(tmp_path, trans_b):
    # 128 x 128 tiles on two warpgroups: one wgmma.sp of 64 x 128 x 32 per warpgroup and k32
    # step, B [K, N] (MN-major, the transpose operand) or [N, K]
    func = _sparse.fn(256, 256, 256, "float16", "int16", trans_b, bm=128, bn=128, threads=256)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source.text
    assert f"tw_gemm_wgmma_sp<128, 64, 128, TW_WGMMA_F16, {str(not trans_b).lower()}, 128, " \
        "64, " in source
    assert "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.f16.f16" in source
    cubin, log = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    code = sass.dump(cubin)
    assert re.findall(r"\sHGMMA\.SP\.64x128x32\.F32\s", code), code
    assert not re.search(r"\sHMMA\.", code) and not re.search(r"\sHGMMA\.(?!SP)", code)
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log


@tilewright.jit(out_idx=[-1])
def _sparse(M, N, K, dtype, meta, trans_b, bm=64, bn=64, bk=64, threads=128, stages=2):
    ef = sparse.e_factor(dtype, meta)
    b_shape, bs_shape = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor((M, K // 2), dtype), E: T.Tensor((M, K // ef), meta),
             B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk // 2), dtype)
            E_s = T.alloc_shared((bm, bk // ef), meta)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk // 2], A_s)
                T.copy(E[by * bm, k * bk // ef], E_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_f, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.emulator
@pytest.mark.parametrize(("dtype", "meta", "trans_b", "arch_name", "path"), [
    ("float16", "int8", False, "sm_80", "tw_gemm_mma_sp_rf"),
    ("bfloat16", "int16", True, "sm_80", "tw_gemm_mma_sp_rf"),
    ("float16", "int32", True, "sm_80", "tw_gemm_mma_sp_rf"),
    ("float32", "int16", False, "sm_80", "gemm_acc"),  # no float32 mma.sp: the thread gemm
    ("float16", "int16", False, "sm_90a", "tw_gemm_wgmma_sp"),  # B [K, N]: MN-major B
    ("bfloat16", "int8", True, "sm_90a", "tw_gemm_wgmma_sp"),
    ("float16", "int32", True, "sm_90a", "tw_gemm_wgmma_sp"),
])
def test_sparse_gemm_matches_torch_in_emulation(tmp_path, dtype, meta, trans_b, arch_name,
                                                path):
    m, n, k = 128, 64, 192  # 2 x 1 blocks, 3 k-tiles through the pipeline
    lowered = tilewright.lower(_sparse.fn(m, n, k, dtype, meta, trans_b),
                               f"cuda -arch={arch_name}")
    assert path in lowered.source.text
    gen = torch.Generator().manual_seed(4)
    t = getattr(torch, dtype)
    a = randn_semi_sparse(m, k, t, generator=gen)
    b = torch.randn(k, n, generator=gen).to(t)
    values, e = compress(a, getattr(torch, meta))
    c = torch.full((m, n), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, values, e,
                b.T.contiguous() if trans_b else b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


@pytest.mark.emulator
def test_pipelined_sparse_wgmma_retires_its_group_before_the_next_k_tile(tmp_path):
    # 3 stages and 8 k-tiles: the pipeline wraps around its stages; a dense wgmma gemm leaves
    # its group in flight into the next iteration (wait_group 1), a wgmma.sp may not: its
    # metadata register, loaded inside tw_gemm_wgmma_sp, is reused by the next iteration's
    # code while the wgmma.sp reads it (the H200's 28% wrong elements at 8192^3). The
    # emulation aborts on a wgmma.sp left in flight past a wait.
    m, n, k = 128, 64, 512
    lowered = tilewright.lower(_sparse.fn(m, n, k, "float16", "int16", False, stages=3),
                               "cuda -arch=sm_90a")
    text = lowered.source.text
    assert "tw_gemm_wgmma_sp<" in text
    assert "tw_wgmma_wait<1>" not in text and "tw_wgmma_wait<0>" in text
    gen = torch.Generator().manual_seed(5)
    a = randn_semi_sparse(m, k, torch.float16, generator=gen)
    b = torch.randn(k, n, generator=gen).to(torch.float16)
    values, e = compress(a, torch.int16)
    c = torch.full((m, n), float("nan"))
    hostemu.run(text, lowered.source.payload, tmp_path, values, e, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_a_tile_mma_sp_cannot_cut_is_refused_naming_the_instruction():
    func = gemm_sp.gemm_sp_kernel.fn(128, 128, 128, block_M=64, block_N=64, block_K=16)
    with pytest.raises(UnsupportedOpError) as info:
        tilewright.lower(func, "cuda -arch=sm_80")
    text = str(info.value)
    assert "T.gemm_sp of float16 into float32 accumulators on backend 'cuda' (sm_80) uses the " \
           "tensor-core instruction mma.sp::ordered_metadata m16n8k32 .f16" in text
    assert "M x N x K = 64 x 64 x 16 is not a multiple of the instruction shape 16 x 8 x 32" \
        in text
    assert "T.gemm_sp(A_s, E_s, B_s, C_l)" in text and "gemm_sp.py" in text
