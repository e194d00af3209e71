"""float8 T.gemm before sm_89 (``gemm_fit.WIDENED_MMA_FORMS``): sm_80 has no float8
mma.sync, so the e4m3/e5m2 fragments are widened to float16 in registers and each k32 step
is two ``mma.sync m16n8k16 .f16`` into the float32 accumulators (include/tw_mma_widen.h).
Every float8 value is a float16 value: the host emulation gives every code of both formats
(subnormals, the largest, -0, e5m2's infinities, NaN) exactly, and products summed as torch's
float32 product of the float8 operands, for A and B stored either way and C in registers, in
shared memory or of 2..15 rows; the machine code is HMMA on unpacked registers, with no
float8 instruction; sm_89 and sm_90a keep their float8 instructions."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright.ir import tile_ops_in
from tilewright_cuda import arch, executor
from tilewright_cuda.analysis import gemm_fit

FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
# (transpose_A, transpose_B): NN, NT, TN, TT
FLAGS = [(False, False), (False, True), (True, False), (True, True)]


def _gemm(m, n, k, dtype, ta, tb, c_in="fragment"):
    """C = op(A) @ op(B) of one block of 128 threads, C a register accumulator ("fragment")
    or a shared tile ("shared")."""
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    alloc = T.alloc_fragment if c_in == "fragment" else T.alloc_shared

    @T.prim_func
    def gemm_float8(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
                    C: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared(a_shape, dtype)
            B_s = T.alloc_shared(b_shape, dtype)
            C_t = alloc((m, n), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_t, transpose_A=ta, transpose_B=tb, clear_accum=True)
            T.copy(C_t, C)

    return gemm_float8


def _codes(dtype, count, gen):
    """``count`` float8 values: every code but NaN in order, then random ones."""
    codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, dtype))
    finite = codes[~codes.float().isnan()]
    rand = torch.randint(0, len(finite), (count,), generator=gen)
    return torch.cat([finite, finite[rand]])[:count]


def _run(func, arch_name, tmp_path, a, b, m, n):
    lowered = tilewright.lower(func, f"cuda -arch={arch_name}")
    c = torch.full((m, n), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    return lowered.source.text, c


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", FLOAT8)
def test_every_float8_value_is_widened_exactly(tmp_path, dtype):
    # C = A @ I: each element of C is a sum of one product by 1.0 and products by 0, so C
    # holds A's codes as the float16 instruction saw them: the finite codes in A's first rows,
    # then each infinity and NaN alone in a row (its product by 0 makes the rest of the row NaN)
    m, n, k = 64, 64, 64
    codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, dtype))
    values = codes.float()
    finite, special = codes[values.isfinite()], codes[~values.isfinite()]
    a = torch.zeros(m * k).to(getattr(torch, dtype))
    a[:len(finite)] = finite
    a = a.view(m, k)
    want = a.float()
    for i, code in enumerate(special):
        row, col = 8 + i, 3 * i
        a[row, col] = code
        want[row] = float("nan")
        want[row, col] = code.float()
    b = torch.eye(64).to(getattr(torch, dtype))  # B [N, K]
    text, c = _run(_gemm(m, n, k, dtype, False, True), "sm_80", tmp_path, a, b, m, n)
    assert "tw_gemm_mma_rf_widened<64, 64, 64, false, true, 128, " in text
    torch.testing.assert_close(c, want, rtol=0, atol=0, equal_nan=True)
    nonzero = ~want.isnan() & (want != 0)  # -0 + 0 products is +0, as in any sum
    assert torch.equal(torch.signbit(c[nonzero]), torch.signbit(want[nonzero]))


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize(("ta", "tb"), FLAGS, ids=["NN", "NT", "TN", "TT"])
def test_float8_gemm_on_sm_80_matches_torch_in_emulation(tmp_path, dtype, ta, tb):
    m, n, k = 64, 64, 128
    gen = torch.Generator().manual_seed(5)
    a, b = (_codes(dtype, r * c, gen).view(r, c).contiguous()
            for r, c in (((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))))
    if dtype == "float8_e5m2":  # no infinities: inf - inf is NaN
        a, b = (torch.where(x.float().isinf(), torch.zeros_like(x.float()), x.float())
                .to(x.dtype) for x in (a, b))
    text, c = _run(_gemm(m, n, k, dtype, ta, tb), "sm_80", tmp_path, a, b, m, n)
    flags = f"{str(ta).lower()}, {str(tb).lower()}"
    assert f"tw_gemm_mma_rf_widened<64, 64, 128, {flags}, 128, " in text
    want = (a.double().T if ta else a.double()) @ (b.double().T if tb else b.double())
    # exact products, float32 sums (float8 magnitudes up to 448 or 57344 squared)
    torch.testing.assert_close(c.double(), want, rtol=1e-5, atol=want.abs().max() * 1e-6)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize(("m", "c_in", "function"), [
    (64, "shared", "tw_gemm_mma_widened<64, 64, 64, "),   # C in shared memory
    (5, "shared", "tw_gemm_mma_rows_widened<5, 64, 64, "),  # 5 rows padded to 16
])
def test_float8_gemm_with_c_in_shared_memory_on_sm_80(tmp_path, dtype, m, c_in, function):
    n, k = 64, 64
    gen = torch.Generator().manual_seed(7)
    a, b = (torch.randn(*s, generator=gen).to(getattr(torch, dtype)) for s in ((m, k), (n, k)))
    text, c = _run(_gemm(m, n, k, dtype, False, True, c_in), "sm_80", tmp_path, a, b, m, n)
    assert function in text
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", FLOAT8)
def test_the_gemm_fit_widens_float8_before_sm_89_only(dtype):
    call, = (c for c in tile_ops_in(_gemm(64, 64, 64, dtype, False, True)) if c.name == "gemm")
    native = gemm_fit.MMA_FORMS[(dtype, dtype, "float32")]
    for name in ("sm_80", "sm_86"):
        form = gemm_fit.mma_form(call, arch.get(name))
        assert form.widened == dtype[7:11] and form.min_sm == 80
        assert form.instruction == f"mma.sync m16n8k16 .f16 on {dtype[7:11]} widened to f16"
        assert gemm_fit.mma_misfit(call, arch.get(name), 128) is None
    for name in ("sm_89", "sm_90a"):
        assert gemm_fit.mma_form(call, arch.get(name)) is native
    # before sm_80 no mma.sync form fits: the thread gemm, as for float16
    assert "needs sm_80 or newer" in gemm_fit.mma_not_asked(call, arch.get("sm_75"))
    assert gemm_fit.mma_policy_error(call, arch.get("sm_75"), 128) is None
    assert "float8_e4m3fn -> float32 (widened to f16)" in gemm_fit.forms_on(arch.get("sm_80"))


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize(("ta", "tb"), FLAGS, ids=["NN", "NT", "TN", "TT"])
def test_float8_gemm_on_sm_80_runs_on_hmma(tmp_path, dtype, ta, tb):
    source = tilewright.lower(_gemm(64, 64, 128, dtype, ta, tb), "cuda -arch=sm_80").source.text
    cubin, log = executor.nvcc_compile(source, arch.get("sm_80"), tmp_path)
    assert int(re.search(r"(\d+) bytes spill stores", log).group(1)) == 0, log
    code = sass.dump(cubin)
    # 4 warps of 32 x 32: 2 x 4 tiles of 16 x 8, 4 k32 steps, two m16n8k16 each
    assert len(re.findall(r"\sHMMA\.16816\.F32\s", code)) == 64, code
    assert "QMMA" not in code and "HMMA.16816.F32.BF16" not in code
    # each fragment register widened once (not once per mma using it): per k32 step, a
    # warp's 2 x 4 A and 4 x 2 B registers give two float16 pairs each, by the byte
    # permutations of tw::widen (e4m3: then times 256)
    selectors = ("0x1404", "0x3424") if dtype == "float8_e5m2" else ("0x1504", "0x3726")
    for selector in selectors:
        assert len(re.findall(rf"\sPRMT [^;]*, {selector}, [^;]*;", code)) == 4 * 16, code
    assert len(re.findall(r"\sHMUL2\s", code)) == (0 if dtype == "float8_e5m2" else 128)
