"""Vector dtypes on CUDA (``T.float32x2``, ``T.bfloat16x2``, the 64- to 256-bit word accesses
``T.ldg64`` ... ``T.stg256`` and ``T.lds64`` / ``T.sts128``): TVM's printer makes them CUDA's
vector types (``float2``, ``uint4``, ``half2``, ``nv_bfloat162``); the kernels of
``tests/language/test_vector_dtypes.py`` run in the host emulation against torch and compile
with NVRTC for sm_80 and sm_90a."""

import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import UnsupportedOpError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "language"))
from test_vector_dtypes import (  # noqa: E402
    packed_lanes,
    slice_to_slice,
    tilelang_ldg_forms,
    vector_arithmetic,
    wide_words,
)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int8"])
def test_lanes_pack_and_extract(dtype, tmp_path):
    lowered = tilewright.lower(packed_lanes(T.dtype(dtype), T.dtype(f"{dtype}x2")),
                               "cuda -arch=sm_90a")
    x = torch.tensor([1.25, -2.5]).to(getattr(torch, dtype)) if dtype != "int8" else \
        torch.tensor([7, -100], dtype=torch.int8)
    y = torch.zeros_like(x)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    assert torch.equal(y, x)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("words", [2, 4])
def test_wide_word_accesses(dtype, words, tmp_path):
    kernel, group = wide_words(dtype, words)
    lowered = tilewright.lower(kernel, "cuda -arch=sm_80")
    per_word = 4 // torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    x = (torch.randn(3, 16 * per_word) * 50).to(getattr(torch, dtype))
    y, z, p = (torch.zeros_like(x) for _ in range(3))
    first = torch.zeros(3, 16 // words, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, z, p, first)
    assert torch.equal(y, x) and torch.equal(z, x)
    even = (torch.arange(x.shape[1]) // group % 2 == 0)
    assert torch.equal(p, torch.where(even, x, torch.zeros((), dtype=x.dtype)))
    assert torch.equal(first, x.view(torch.int32)[:, ::words])


@pytest.mark.emulator
def test_vector_values_store_into_slices(tmp_path):
    lowered = tilewright.lower(tilelang_ldg_forms(), "cuda -arch=sm_90a")
    assert "float2" in lowered.source.text and "float4" in lowered.source.text
    x, y, z = torch.randn(128), torch.zeros(128), torch.zeros(128)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, z)
    assert torch.equal(y, x) and torch.equal(z, x)
    lowered = tilewright.lower(vector_arithmetic(), "cuda -arch=sm_90a")
    x, y = torch.randn(64), torch.zeros(64)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    assert torch.equal(y, (x * 2 + torch.tensor([1.0, -1.0]).repeat(32)).clamp(min=0))


@pytest.mark.emulator
def test_a_slice_stores_into_a_slice_as_a_vector(tmp_path):
    lowered = tilewright.lower(slice_to_slice(), "cuda -arch=sm_90a")
    a = torch.arange(256.0).reshape(16, 16)
    b = torch.zeros(16, 8, dtype=torch.bfloat16)
    want = a.clone()
    want[0, 4:8] = want[0, 0:4].clone()
    want[1, 1:5] = want[1, 0:4].clone()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    assert torch.equal(a, want) and torch.equal(b[2, :4], want[2, 8:12].bfloat16())


def test_vectors_past_128_bits_are_refused_at_the_line():
    """CUDA's vector types hold up to 128 bits (TVM 0.27 prints a uint32x8 as a ulonglong4
    built from eight values, which no compiler takes): T.ldg256 is refused where it stands."""
    with pytest.raises(UnsupportedOpError, match=r"a value is uint32x8, which backend 'cuda' "
                                                 r"does not compute .*; vectors of them of "
                                                 r"up to 128 bits\).*\n.*ldg\(X\[r"):
        tilewright.lower(wide_words("float32", 8)[0], "cuda -arch=sm_90a")


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_vector_kernels_compile_with_nvrtc(arch, tmp_path):
    from tilewright_cuda import arch as archs
    from tilewright_cuda import executor

    kernels = [packed_lanes(T.bfloat16, T.bfloat16x2), packed_lanes(T.float16, T.float16x2),
               wide_words("bfloat16", 4)[0], wide_words("int8", 2)[0], tilelang_ldg_forms(),
               vector_arithmetic()]
    for n, func in enumerate(kernels):
        folder = tmp_path / str(n)
        folder.mkdir()
        executor.nvrtc_compile(tilewright.lower(func, f"cuda -arch={arch}").source.text,
                               archs.get(arch), folder)
