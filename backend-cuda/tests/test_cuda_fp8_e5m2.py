"""``tw_fp8_e5m2`` (include/tw_fp8.h), float32 to float8_e5m2 as torch converts (overflow to
inf). On sm_89 and newer it is the hardware ``cvt.rn.satfinite.e5m2x2.f32`` and
``tw_fp8_e5m2_unsaturate``; the host checks that fix-up on cuda_fp8.hpp's own ``.satfinite``
conversion (what the instruction computes, its software model) bit for bit against torch,
over every float16 value and the float32 values at each rounding boundary; the machine code
is one ``F2FP`` and a compare, no software rounding."""

import ctypes
import re
import subprocess

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda import arch, executor
from tilewright_cuda.codegen import HEADERS
from tilewright_cuda.intrinsics import FP8

HARNESS = r"""
#include <cmath>
#define __device__
#define __forceinline__ inline
HEADER
extern "C" void convert(const float* x, unsigned char* sat, unsigned char* fixed,
                        unsigned char* nosat, int n) {
  for (int i = 0; i < n; ++i) {
    sat[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2);
    fixed[i] = tw_fp8_e5m2_unsaturate(x[i], sat[i]);
    nosat[i] = tw_fp8_e5m2(x[i]).__x;  // the software path of architectures before sm_89
  }
}
"""


def _probes() -> torch.Tensor:
    """Every float16 value as float32, and around each midpoint between neighbouring e5m2
    values (every tie, the overflow boundary 61440 among them) the float32 values one ulp
    below, at and one ulp above, both signs; the largest float32 values and the infinities."""
    half = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    codes = torch.arange(0, 0x7c, dtype=torch.uint8).view(torch.float8_e5m2).float()
    mids = torch.cat([(codes[1:] + codes[:-1]) / 2, torch.tensor([61440.0])])
    near = torch.cat([torch.nextafter(mids, torch.tensor(0.0)), mids,
                      torch.nextafter(mids, torch.tensor(float("inf")))])
    big = torch.tensor([57344.0, 65536.0, 1e30, torch.finfo(torch.float32).max, float("inf")])
    x = torch.cat([half.float(), near, big])
    return torch.cat([x, -x]).contiguous()


@pytest.mark.emulator
def test_unsaturated_satfinite_conversion_is_torchs_bit_for_bit(tmp_path):
    src = tmp_path / "fp8.cc"
    src.write_text(HARNESS.replace("HEADER", HEADERS[FP8]))
    lib = tmp_path / "fp8.so"
    subprocess.run(["g++", *hostemu.FLAGS, "-shared", "-o", str(lib), str(src)], check=True)
    x = _probes()
    n = len(x)
    out = [torch.empty(n, dtype=torch.uint8) for _ in range(3)]
    ctypes.CDLL(str(lib)).convert(ctypes.c_void_p(x.data_ptr()),
                                  *(ctypes.c_void_p(o.data_ptr()) for o in out), n)
    sat, fixed, nosat = out
    want = x.to(torch.float8_e5m2).view(torch.uint8)
    nan = x.isnan()
    assert bool((sat[~nan] != want[~nan]).any())  # .satfinite alone differs (its +-57344)
    for got in (fixed, nosat):
        assert torch.equal(got[~nan], want[~nan])
        assert got[nan].view(torch.float8_e5m2).float().isnan().all()  # NaN payloads aside
    boundary = x.abs() == 61440.0
    assert torch.equal(fixed[boundary] & 0x7f, torch.full_like(fixed[boundary], 0x7c))


@T.prim_func
def _to_e5m2(x: T.Tensor((1024,), "float32"), y: T.Tensor((1024,), "float8_e5m2")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            y[bx * 128 + i] = T.cast(x[bx * 128 + i], "float8_e5m2")


@pytest.mark.nvcc
@pytest.mark.sass
@pytest.mark.parametrize("arch_name", ["sm_89", "sm_90a"])
def test_e5m2_conversion_is_the_hardware_cvt_on_sm_89_and_newer(tmp_path, arch_name):
    source = tilewright.lower(_to_e5m2, f"cuda -arch={arch_name}").source.text
    cubin, _ = executor.nvcc_compile(source, arch.get(arch_name), tmp_path)
    code = sass.dump(cubin)
    assert len(re.findall(r"\sF2FP\.SATFINITE\.E5M2\.F32\.PACK_AB\w*\s", code)) == 1, code
    # the whole kernel: index, load, convert, fix up, store (the software rounding of
    # cuda_fp8.hpp is 75 instructions with 8 branches)
    body = [i for i in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)",
                                  code) if not i.startswith("NOP")]
    assert len(body) <= 20 and sum(i.startswith("BRA") for i in body) <= 1, code
