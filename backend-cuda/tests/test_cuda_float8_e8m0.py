"""float8_e8m0fnu (the OCP MX scale format) on CUDA: its buffers hold one code a byte, each
conversion calls ``tw_e8m0_encode`` / ``tw_e8m0_decode`` (include/tw_e8m0.h, torch's rule in
integer code). The kernels of tests/language/test_float8_e8m0.py (every code decoded, 20,000
float32 bit patterns and their float16 / bfloat16 conversions encoded; an MX dequantisation
through shared tiles of values and scales with a reduce_max; the extremes) and a pipelined MX
dequantisation (scale tiles by TMA on sm_90a, cp.async on sm_80) run in the host emulation bit
for bit against torch, as the CPU backend and the interpreter do there, and compile with NVRTC
and nvcc for sm_90a and sm_80; on a GPU the language's cases run through the call path."""

import importlib.util
import re
from pathlib import Path

import hostemu
import pytest
import tilewright
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor, intrinsics, keys
from tilewright_cuda.codegen import HEADERS
from tilewright_cuda.codegen.source import split_kernel
from tilewright_cuda.intrinsics import E8M0 as E8M0_HEADER
from tilewright_cuda.transforms.coded_floats import CODED

E8M0 = torch.float8_e8m0fnu
ARCHS = ["sm_90a", "sm_80"]


def _language_cases():
    """tests/language/test_float8_e8m0.py, whose kernels and probes these tests reuse."""
    path = Path(__file__).resolve().parents[2] / "tests" / "language" / "test_float8_e8m0.py"
    spec = importlib.util.spec_from_file_location("tw_language_float8_e8m0", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _language_cases()
bits = CASES.bits


def lowered(func, arch_name="sm_90a", configs=None):
    source = tilewright.lower(func, f"cuda -arch={arch_name}", pass_configs=configs).source
    # no float8_e8m0fnu buffer or value reaches TVM's printer: the kernels (TVM's prelude
    # aside, which declares every cuda_fp8.h type where a kernel uses float8_e4m3fn) hold
    # bytes and call our header's two functions, which is pasted in
    assert HEADERS[E8M0_HEADER] in source.text
    _, kernels = split_kernel(source.text)
    assert kernels and not re.search(r"e8m0(?!_encode\(|_decode\()|e8_t|e8x", kernels), kernels
    return source


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ARCHS)
def test_every_code_decodes_and_conversions_round_as_torch(arch_name, tmp_path):
    x = CASES.probe_values()
    n = x.numel()
    source = lowered(CASES.conversions(n), arch_name)
    assert "tw_e8m0_encode" in source.text and "tw_e8m0_decode" in source.text
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E8M0)
    values = torch.zeros(256)
    e32, e16, ebf = (torch.full((n,), 0x55, dtype=torch.uint8).view(E8M0) for _ in range(3))
    hostemu.run(source.text, source.payload, tmp_path, codes, x, x.half(), x.bfloat16(),
                values, e32, e16, ebf)
    torch.testing.assert_close(values, codes.float(), rtol=0, atol=0, equal_nan=True)
    for encoded, given in ((e32, x), (e16, x.half()), (ebf, x.bfloat16())):
        want = given.to(E8M0)
        mismatched = [(float(v), g, w) for v, g, w in zip(given, bits(encoded), bits(want))
                      if g != w]
        assert not mismatched, mismatched[:5]


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name", ARCHS)
def test_an_mx_dequantisation_with_scale_tiles(arch_name, tmp_path):
    m, k, block = 4, 64, 32
    source = lowered(CASES.dequantise_mx(m, k, block), arch_name)
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    s = torch.randint(110, 140, (m, k // block), generator=gen, dtype=torch.int32)
    s = s.to(torch.uint8).view(E8M0)
    y = torch.full((m, k), float("nan"))
    amax = torch.full((m,), 0x55, dtype=torch.uint8).view(E8M0)
    hostemu.run(source.text, source.payload, tmp_path, x, s, y, amax)
    want = x.float() * s.float().repeat_interleave(block, dim=1)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    assert bits(amax) == bits(want.amax(dim=1).to(E8M0))


@pytest.mark.emulator
def test_extremes_signs_and_overflow(tmp_path):
    source = lowered(CASES.extremes())
    out = torch.full((4,), 0x55, dtype=torch.uint8).view(E8M0)
    wide = torch.zeros(4)
    hostemu.run(source.text, source.payload, tmp_path, out, wide)
    assert bits(out) == [254, 0, 130, 255]
    assert wide[:3].tolist() == [2.0 ** 127, 2.0 ** -127, 8.0] and wide[3].isnan()


def mx_pipelined(m, k, bm=64, bk=512, block=32):
    """MX dequantisation to bfloat16 in a T.Pipelined loop: a tile of float8_e4m3fn values and
    one of their float8_e8m0fnu scales (bk / block = 16 a row: 16-byte rows, which a TMA box
    takes) copied into shared memory each stage."""
    import tilewright.language as T

    @T.prim_func
    def main(X: T.Tensor((m, k), T.float8_e4m3fn),
             S: T.Tensor((m, k // block), T.float8_e8m0fnu), Y: T.Tensor((m, k), T.bfloat16)):
        with T.Kernel(m // bm, threads=128) as by:
            xs = T.alloc_shared((bm, bk), T.float8_e4m3fn)
            ss = T.alloc_shared((bm, bk // block), T.float8_e8m0fnu)
            for ko in T.Pipelined(k // bk, num_stages=2):
                T.copy(X[by * bm, ko * bk], xs)
                T.copy(S[by * bm, ko * (bk // block)], ss)
                for i, j in T.Parallel(bm, bk):
                    Y[by * bm + i, ko * bk + j] = \
                        T.cast(xs[i, j], T.float32) * T.cast(ss[i, j // block], T.float32)

    return main


# unswizzled shared tiles may be TMA boxes (the scales' tile is not a swizzled one)
TMA = {keys.TMA_UNSWIZZLED: True}


@pytest.mark.emulator
@pytest.mark.parametrize("arch_name, copy", [("sm_90a", "tw_tma_load_2d"),
                                             ("sm_80", "tw_cp_async16")])
def test_scale_tiles_in_a_pipelined_loop(arch_name, copy, tmp_path):
    """The scales' tile is a TMA load on sm_90a (its descriptor one of bytes), cp.async on
    sm_80; the result is torch's and the CPU backend's, bit for bit."""
    m, k = 128, 1024
    func = mx_pipelined(m, k)
    source = lowered(func, arch_name, TMA)
    assert copy in source.text
    maps = {p["tensor"]: p["dtype"] for p in source.payload["params"]
            if p["kind"] == "tensormap"}
    assert maps == ({"X": "float8_e4m3fn", "S": "uint8"} if arch_name == "sm_90a" else {})
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    s = torch.randint(100, 150, (m, k // 32), generator=gen, dtype=torch.int32)
    s = s.to(torch.uint8).view(E8M0)
    y = torch.full((m, k), float("nan"), dtype=torch.bfloat16)
    hostemu.run(source.text, source.payload, tmp_path, x, s, y)
    want = (x.float() * s.float().repeat_interleave(32, dim=1)).bfloat16()
    assert torch.equal(y, want)
    assert torch.equal(y, tilewright.compile(func, out_idx=[2], target="cpu")(x, s))


def test_each_coded_type_calls_functions_of_one_header():
    """The transform's table (a type -> its encode and decode functions) names functions of
    the intrinsics table, both of a type in one header that codegen pastes."""
    for coding in CODED.values():
        encode, decode = intrinsics.named(coding.encode), intrinsics.named(coding.decode)
        assert encode.header == decode.header and encode.header in HEADERS
    assert intrinsics.named(CODED["float8_e8m0fnu"].encode).header == E8M0_HEADER


def test_a_use_as_a_code_is_refused_at_its_line():
    """A float8_e8m0fnu value used other than converted or stored (here reinterpreted) is
    refused at its statement, as a KernelError (not the RuntimeError a refusal raised inside
    a TVM callback becomes)."""
    import tilewright.language as T

    @T.prim_func
    def main(s: T.Tensor((128,), T.float8_e8m0fnu), out: T.Tensor((128,), T.uint8)):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                out[i] = T.reinterpret(s[i], T.uint8)

    with pytest.raises(KernelError, match=r"(?s)float8_e8m0fnu values as codes.*cannot pass "
                       r"s\[i\] to T.reinterpret.*out\[i\] = T.reinterpret"):
        tilewright.lower(main, "cuda -arch=sm_90a")


def _kernels():
    n = CASES.probe_values().numel()
    return [(CASES.conversions(n), None), (CASES.dequantise_mx(4, 64, 32), None),
            (CASES.extremes(), None), (mx_pipelined(128, 1024), TMA)]


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch_name", ARCHS)
def test_kernels_compile_with_nvrtc(arch_name, tmp_path):
    for n, (func, configs) in enumerate(_kernels()):
        executor.nvrtc_compile(lowered(func, arch_name, configs).text, arch.get(arch_name),
                               tmp_path / str(n))


@pytest.mark.nvcc
@pytest.mark.parametrize("arch_name", ARCHS)
def test_kernels_compile_with_nvcc(arch_name, tmp_path):
    for n, (func, configs) in enumerate(_kernels()):
        (tmp_path / str(n)).mkdir()
        executor.nvcc_compile(lowered(func, arch_name, configs).text, arch.get(arch_name),
                              tmp_path / str(n))


@pytest.mark.gpu
@pytest.mark.nvrtc
def test_the_language_cases_run_on_the_gpu():
    """The three kernels through the call path on a GPU: float8_e8m0fnu tensors (torch's
    1-byte dtype) in and out, outputs allocated by the call."""
    x = CASES.probe_values()
    kernel = tilewright.compile(CASES.conversions(x.numel()), out_idx=[4, 5, 6, 7],
                                target="cuda")
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E8M0)
    given = (x, x.half(), x.bfloat16())
    values, *encoded = kernel(codes.cuda(), *(g.cuda() for g in given))
    torch.testing.assert_close(values.cpu(), codes.float(), rtol=0, atol=0, equal_nan=True)
    for got, source in zip(encoded, given, strict=True):
        assert got.dtype == E8M0 and bits(got.cpu()) == bits(source.to(E8M0))

    m, k, block = 4, 64, 32
    gen = torch.Generator().manual_seed(3)
    xq = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    s = torch.randint(110, 140, (m, k // block), generator=gen, dtype=torch.int32)
    s = s.to(torch.uint8).view(E8M0)
    y, amax = tilewright.compile(CASES.dequantise_mx(m, k, block), out_idx=[2, 3],
                                 target="cuda")(xq.cuda(), s.cuda())
    want = xq.float() * s.float().repeat_interleave(block, dim=1)
    torch.testing.assert_close(y.cpu(), want, rtol=0, atol=0)
    assert bits(amax.cpu()) == bits(want.amax(dim=1).to(E8M0))

    out, wide = tilewright.compile(CASES.extremes(), out_idx=[0, 1], target="cuda")()
    assert bits(out.cpu()) == [254, 0, 130, 255]
    assert wide[:3].tolist() == [2.0 ** 127, 2.0 ** -127, 8.0] and wide[3].isnan()
