"""float4_e2m1fn on CUDA: float4 buffers hold one code a byte, conversions call CUDA's
cuda_fp4.h (include/tw_fp4.h). The conformance suite's float4_casts case (every code decoded,
probes of float32, float16 and bfloat16 rounded: ties to even, saturation, NaN) runs in the
host emulation against the suite's reference and compiles with NVRTC for sm_90a."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import cases

CASE, = cases(["float4_casts"])


def lowered(target):
    return tilewright.lower(CASE.kernel.make(CASE.dtype, **CASE.dims), target)


@pytest.mark.emulator
def test_float4_casts_in_host_emulation(tmp_path):
    source = lowered("cuda -arch=sm_90a").source
    assert "tw_fp4_encode" in source.text and "tw_fp4_decode" in source.text
    inputs = CASE.kernel.inputs(torch, torch.Generator().manual_seed(0), CASE.dtype,
                                **CASE.dims)
    expected = CASE.reference(inputs)
    packed = inputs[0].view(torch.uint8)  # the kernel takes one code a byte, low nibble first
    codes = torch.stack((packed & 15, packed >> 4), dim=-1).reshape(-1)
    outputs = [torch.full(tuple(w.shape), float("nan")) for w in expected]
    hostemu.run(source.text, source.payload, tmp_path, codes, *inputs[1:], *outputs)
    for got, want in zip(outputs, expected, strict=True):
        assert_close(got, want, rtol=0.0, atol=0.0, max_mismatch_ratio=0.0, name=CASE.id)


@pytest.mark.nvrtc
def test_float4_kernel_compiles_for_sm_90a(tmp_path):
    executor.nvrtc_compile(lowered("cuda -arch=sm_90a").source.text, arch.get("sm_90a"),
                           tmp_path)
