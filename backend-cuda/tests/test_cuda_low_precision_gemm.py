"""T.gemm on 8-bit operands (bench/kernels.py ``gemm_low_precision``): int8 into int32
accumulators on ``mma.sync m16n8k32 .s8`` (sm_80+), float8_e4m3fn/float8_e5m2 into float32 on
``m16n8k32 .e4m3/.e5m2`` (sm_89), and on sm_90a wgmma's ``m64nNk32 .s32.s8.s8`` and
``.f32.e4m3/.e5m2`` (1-byte tiles in the swizzled layout, loaded by TMA and read through
matrix descriptors). The machine code shows the integer or fp8 tensor-core instruction itself
(``IMMA.16832.S8.S8``, ``QMMA.16832.F32.E4M3.E4M3``, ``IGMMA.64x64x32.S8.S8``,
``QGMMA.64x64x32.F32.E4M3.E4M3``), with no conversion to fp16, no HMMA and, for wgmma, no
mma.sync; the host emulation checks the numbers against torch (``torch._int_mm``, the float32
product of the float8 operands), the emulated wgmma reading the 8-bit tiles through its
decoded descriptors into int32 or float32 accumulators (float8 before sm_89, on the float16
instruction: test_cuda_float8_widened_gemm.py); float8 casts to every declared dtype
compile."""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import torch
from tilewright.errors import UnsupportedOpError
from tilewright.ir import tile_ops_in
from tilewright.plugin import get_manager
from tilewright_cuda import arch, executor
from tilewright_cuda.analysis import gemm_fit
from tilewright_sdk.conformance.catalogue import cases

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import kernels  # noqa: E402 - after the sys.path setup

TILE = {"block_M": 64, "block_N": 64, "block_K": 64, "num_stages": 2}


def _gemm(m, n, k, dtype, trans_b=True):
    return kernels.gemm_low_precision.fn(m, n, k, dtype, trans_b=trans_b, **TILE)


def _sass(tmp_path, dtype, arch_name, **kwargs):
    source = tilewright.lower(_gemm(128, 128, 128, dtype, **kwargs),
                              f"cuda -arch={arch_name}").source.text
    cubin, log = executor.nvcc_compile(source, arch.get(arch_name), tmp_path)
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log
    return sass.dump(cubin)


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize(("dtype", "arch_name", "instruction"), [
    ("int8", "sm_80", "IMMA.16832.S8.S8"),
    ("int8", "sm_90a", "IGMMA.64x64x32.S8.S8"),
    ("float8_e4m3fn", "sm_89", "QMMA.16832.F32.E4M3.E4M3"),
    ("float8_e5m2", "sm_89", "QMMA.16832.F32.E5M2.E5M2"),
    ("float8_e4m3fn", "sm_90a", "QGMMA.64x64x32.F32.E4M3.E4M3"),
    ("float8_e5m2", "sm_90a", "QGMMA.64x64x32.F32.E5M2.E5M2"),
])
def test_8bit_gemm_runs_on_its_tensor_core_instruction(tmp_path, dtype, arch_name, instruction):
    code = _sass(tmp_path, dtype, arch_name)
    found = re.findall(rf"\s{re.escape(instruction)}\s", code)
    assert "HMMA" not in code and "F2FP" not in code and "I2F" not in code
    if "GMMA" in instruction:
        # one warpgroup's 64x64 tile: a wgmma per 32-deep k step, both operands read from
        # shared memory through descriptors (no ldmatrix), loaded by TMA; no mma.sync form
        # (IMMA, QMMA) and no other wgmma form beside it
        assert found and "LDSM" not in code, code
        assert "UTMALDG.2D" in code and "IMMA" not in code and "QMMA" not in code
        assert set(re.findall(r"\s(\w+GMMA)\.", code)) == {instruction.split(".")[0]}
        return
    # 64x64 block tiles, 4 warps of 32x32: 2 x 4 tiles of 16x8 per k32 step, 2 steps a k-tile
    assert found and len(found) % 16 == 0, code
    assert "LDSM.16.M88.4" in code  # A [M, K] and B [N, K] through ldmatrix, not transposed


@pytest.mark.nvcc
@pytest.mark.sass
def test_float8_gemm_with_b_stored_k_by_n_keeps_mma_sync_on_sm_90a(tmp_path):
    # the 8-bit wgmma forms read B K-major only: B [K, N] stays on mma.sync, which ptxas runs
    # as fp16 HMMA after unpacking (correct, slower); the predicate says why
    func = _gemm(128, 128, 128, "float8_e4m3fn", trans_b=False)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source.text
    assert "tw_gemm_wgmma" not in source[source.index('extern "C" __global__'):]
    call, = (c for c in tile_ops_in(func) if c.name == "gemm")
    assert "B must be stored [N, K] (transpose_B=True)" in gemm_fit.wgmma_shape_misfit(
        call, arch.get("sm_90a"), 128)
    assert "HMMA" in _sass(tmp_path, "float8_e4m3fn", "sm_90a", trans_b=False)


def _operands(dtype, m, n, k, trans_b):
    gen = torch.Generator().manual_seed(3)
    if dtype == "int8":
        a, b = (torch.randint(-128, 128, s, generator=gen, dtype=torch.int8)
                for s in ((m, k), (n, k)))
        return a, b, torch._int_mm(a, b.T.contiguous()), torch.full((m, n), -7, dtype=torch.int32)
    a, b = (torch.randn(*s, generator=gen).to(getattr(torch, dtype)) for s in ((m, k), (n, k)))
    return a, b, a.float() @ b.float().T, torch.full((m, n), float("nan"))


@pytest.mark.emulator
@pytest.mark.parametrize(("dtype", "arch_name", "trans_b"), [
    ("int8", "sm_80", True),     # B [N, K]: ldmatrix
    ("int8", "sm_90a", False),   # B [K, N]: bytes gathered into registers (no byte transpose)
    ("int8", "sm_90a", True),    # wgmma .s32.s8.s8 on TMA-loaded 64-byte swizzled tiles
    ("float8_e4m3fn", "sm_89", True),
    ("float8_e5m2", "sm_89", True),
    ("float8_e4m3fn", "sm_90a", True),  # wgmma on 64-byte swizzled tiles loaded by TMA
    ("float8_e5m2", "sm_90a", True),
])
def test_8bit_gemm_matches_torch_in_emulation(tmp_path, dtype, arch_name, trans_b):
    m, n, k = 128, 64, 192  # 2 x 1 blocks, 3 k-tiles through the pipeline
    lowered = tilewright.lower(_gemm(m, n, k, dtype, trans_b), f"cuda -arch={arch_name}")
    wgmma = arch_name == "sm_90a" and trans_b
    form = "TW_WGMMA_S8" if dtype == "int8" else f"TW_WGMMA_{dtype[7:11].upper()}"
    assert (f"tw_gemm_wgmma<64, 64, 64, {form}, false, 64, 64, 64, 64>" if wgmma else
            "tw_gemm_mma_rf<64, 64, 64, false, ") in lowered.source.text
    a, b, want, c = _operands(dtype, m, n, k, trans_b)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a,
                b if trans_b else b.T.contiguous(), c)
    if dtype == "int8":
        assert torch.equal(c, want)
    else:  # exact products, float32 sums in another order
        torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-4)


@pytest.mark.emulator
def test_float8_wgmma_reads_cp_async_tiles_in_emulation(tmp_path):
    # TMA off: every thread copies 16-byte chunks to the 1-byte swizzled addresses of the
    # layout's TIR index (128-byte rows: SW128), which the wgmma descriptors then read
    m, n, k = 64, 128, 256
    func = kernels.gemm_low_precision.fn(m, n, k, "float8_e4m3fn", block_M=64, block_N=128,
                                         block_K=128, num_stages=2)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a", {"cuda.disable_tma_lower": True})
    text = lowered.source.text
    assert "tw_gemm_wgmma<128, 128, 128, TW_WGMMA_E4M3, false, 64, 128, 128, 128>" in text
    assert "tw_tma_load_2d(" not in text[text.index('extern "C" __global__'):]
    a, b, want, c = _operands("float8_e4m3fn", m, n, k, True)
    hostemu.run(text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-4)


def test_int8_gemm_k_not_a_multiple_of_32_is_refused():
    func = kernels.gemm_low_precision.fn(128, 128, 128, "int8", block_K=48)
    with pytest.raises(UnsupportedOpError, match=r"instruction shape 16 x 8 x 32"):
        tilewright.lower(func, "cuda -arch=sm_80")


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch_name", ["sm_80", "sm_90a"])
def test_float8_casts_to_every_dtype_compile(tmp_path, arch_name):
    # the conformance cast case of float8_e4m3fn to every dtype the backend declares: e4m3 to
    # e5m2 goes through float32 (CUDA's fp8 types do not convert to each other)
    backend = get_manager().backends()["cuda"]
    case, = (c.narrowed(backend.capabilities.dtypes) for c in cases(["cast"])
             if c.dtype == "float8_e4m3fn")
    assert {"float8_e5m2", "int8", "bfloat16"} <= set(case.dims["targets"])
    source = tilewright.lower(case.kernel.make(case.dtype, **case.dims),
                              f"cuda -arch={arch_name}").source.text
    assert "tw_fp8_e5m2(((float)" in source  # not the saturating (__nv_fp8_e5m2) cast
    executor.nvrtc_compile(source, arch.get(arch_name), tmp_path)
