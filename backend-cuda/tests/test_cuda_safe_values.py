"""``T.annotate_safe_value`` on CUDA (host emulation): a tile copy that passes the end of a
tensor pads with the safe value, directly or through a shared tile, and TileLang's element
copy inside ``T.Parallel`` does too (the language tests' kernels,
tests/language/test_copy_elements.py); inside nested ``T.sblock`` scopes, the innermost
block's value (tests/language/test_script_blocks.py)."""

import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import torch

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path[:0] = [str(TESTS / "language"), str(TESTS)]  # the language tests and their helpers
from test_copy_elements import padded_copy, padded_reference, padded_tile_copy  # noqa: E402
from test_script_blocks import BM, BN, M, N, check_lexical_scope, lexical_scope  # noqa: E402


@pytest.mark.emulator
@pytest.mark.parametrize("src,dst,pad,shared", [("float32", "float32", -99, False),
                                                ("float32", "float16", -99, True),
                                                ("int32", "int32", 7, True)])
def test_a_tile_copy_pads_with_the_safe_value(tmp_path, src, dst, pad, shared):
    M, N, bm, bn = 70, 75, 32, 32
    a = (torch.randn(M, N) * 10).to(getattr(torch, src))
    want = padded_reference(a, M, N, bm, bn, dst, pad)
    b = torch.zeros_like(want)
    lowered = tilewright.lower(padded_tile_copy(M, N, bm, bn, src, dst, pad, shared),
                               "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    assert torch.equal(b, want)


@pytest.mark.emulator
def test_element_copies_in_parallel_pad_with_the_safe_value(tmp_path):
    M, N, PM, PN = 70, 75, 96, 96
    a = torch.randn(M, N)
    b = torch.zeros(PM, PN)
    lowered = tilewright.lower(padded_copy(M, N, PM, PN, "float32", "float32", -99),
                               "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    want = torch.full((PM, PN), -99.0)
    want[:M, :N] = a
    assert torch.equal(b, want)


@pytest.mark.emulator
def test_the_innermost_blocks_safe_value_pads_its_copies(tmp_path):
    a = torch.arange(M * N, dtype=torch.int32).reshape(M, N)
    out, inner = (torch.zeros(BM, BN, dtype=torch.int32) for _ in range(2))
    lowered = tilewright.lower(lexical_scope(), "cuda -arch=sm_90a")
    assert "-99" in lowered.source.text and "-1" in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out, inner)
    check_lexical_scope(a, out, inner)
