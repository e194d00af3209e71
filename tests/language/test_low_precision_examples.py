"""The low-precision examples beyond their command lines (tests/language/test_examples.py runs
those on the CPU): the scaled fp8 GEMM in each scale layout and the W4A16 GEMM on the
interpreter against torch, and scales or packed weights of the wrong shape refused before
anything is launched."""

import sys
from pathlib import Path

import pytest
import tilewright
import torch
from tilewright.errors import UnsupportedOpError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import gemm_fp8_scaled as fp8  # noqa: E402 - after the sys.path setup
import gemm_w4a16 as w4  # noqa: E402

TILE = {"block_M": 32, "block_N": 64, "threads": 128, "num_stages": 2}


@pytest.mark.parametrize("layout", fp8.LAYOUTS)
def test_scaled_fp8_gemm_on_the_interpreter(layout):
    m, n, k = 40, 256, 384  # a partial row tile, 3 k-blocks, 2 column tiles per 128-row block
    gen = torch.Generator().manual_seed(1)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), layout)
    w = torch.randn(n, k, generator=gen)
    b, b_scale = fp8.quantize_blocks(w) if layout == "block" else fp8.quantize(w, layout)
    func = fp8.fp8_gemm_scaled.fn(m, n, k, layout, **TILE)
    kernel = tilewright.compile(func, out_idx=[4], target="interp")
    want = fp8.reference(a, b, a_scale, b_scale, layout)
    got = kernel(a, b, a_scale, b_scale)
    torch.testing.assert_close(got.double(), want, rtol=8e-3, atol=1e-3 * want.abs().mean())


def test_block_scales_in_256_column_tiles_on_the_interpreter():
    # block_N = 256: each k-tile's two 128-column halves promoted with their own block of
    # B's scale; the second column tile's second half lies past N = 384
    m, n, k = 40, 384, 384
    gen = torch.Generator().manual_seed(2)
    a, a_scale = fp8.quantize(torch.randn(m, k, generator=gen), "block")
    b, b_scale = fp8.quantize_blocks(torch.randn(n, k, generator=gen))
    func = fp8.fp8_gemm_scaled.fn(m, n, k, "block", **{**TILE, "block_N": 256})
    kernel = tilewright.compile(func, out_idx=[4], target="interp")
    want = fp8.reference(a, b, a_scale, b_scale, "block")
    got = kernel(a, b, a_scale, b_scale)
    torch.testing.assert_close(got.double(), want, rtol=8e-3, atol=1e-3 * want.abs().mean())


def test_block_scales_need_128_deep_k_tiles():
    with pytest.raises(ValueError, match="block_K must be 128 and block_N divide it"):
        fp8.fp8_gemm_scaled.fn(64, 256, 256, "block", block_K=64)


@pytest.mark.parametrize(("a_scale", "b_scale"), [
    ((64, 2), (2, 3)),   # a block layout with B's K groups wrong
    ((64,), (1,)),       # per-token A with a per-tensor B
    ((64, 3), (256, 3)),  # B per row and K group: not a layout
])
def test_scales_of_no_layout_are_refused_before_launch(a_scale, b_scale):
    a = torch.zeros(64, 384).to(torch.float8_e4m3fn)
    b = torch.zeros(256, 384).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError) as info:
        fp8.scaled_mm(a, b, torch.ones(a_scale), torch.ones(b_scale))
    text = str(info.value)
    assert f"scales a_scale {list(a_scale)} and b_scale {list(b_scale)} match no scale " \
           f"layout of A [64, 384] x B [256, 384]^T" in text
    assert "block: a_scale [64, 3], b_scale [2, 3]" in text
    assert "token: a_scale [64], b_scale [256]" in text


def test_scales_must_be_float32():
    a = torch.zeros(64, 128).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="b_scale is torch.float16: scales are float32"):
        fp8.scaled_mm(a, a, torch.ones(1), torch.ones(1, dtype=torch.float16))


@pytest.mark.parametrize(("target", "splits"), [("interp", 1), ("interp", 2), ("cpu", 2)])
def test_w4a16_matches_torch(target, splits):
    # splits: K in slices whose partial sums a second kernel adds (split-K)
    m, n, k, group = 7, 96, 256, 64
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    func = w4.w4a16_gemm.fn(m, n, k, group, block_N=64, splits=splits)
    got = tilewright.compile(func, out_idx=[4], target=target)(a, q, scales, zeros)
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2 * want.abs().mean())


@pytest.mark.parametrize(("target", "splits"), [("interp", 1), ("cpu", 2)])
def test_w4a16_overlap_gives_the_default_bits(target, splits):
    # overlap: k-tiles two a step, two float16 tiles, the odd k-tile's gemm a step later;
    # the same products in the same k order as the default
    m, n, k, group = 7, 96, 1024, 64
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    got = {overlap: tilewright.compile(
        w4.w4a16_gemm.fn(m, n, k, group, block_N=64, splits=splits, overlap=overlap),
        out_idx=[4], target=target)(a, q, scales, zeros) for overlap in (False, True)}
    assert torch.equal(got[True], got[False])
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(got[True].double(), want, rtol=1e-2,
                               atol=1e-2 * want.abs().mean())


@pytest.mark.parametrize(("target", "splits"), [("interp", 1), ("cpu", 2)])
@pytest.mark.parametrize("option", ["stage_scales", "swap"])
def test_w4a16_options_match_the_default(target, splits, option):
    # stage_scales: the slice's scales from shared memory, the same arithmetic; swap: C^T =
    # W A^T, the same products summed in the same k order here: the same bits for both
    m, n, k, group = 7, 96, 1024, 64
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    got = {on: tilewright.compile(
        w4.w4a16_gemm.fn(m, n, k, group, block_N=64, splits=splits, **{option: on}),
        out_idx=[4], target=target)(a, q, scales, zeros) for on in (False, True)}
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(got[True].double(), want, rtol=1e-2,
                               atol=1e-2 * want.abs().mean())
    assert torch.equal(got[True], got[False])


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_w4a16_mm_reorders_the_codes_for_register_w(target, monkeypatch):
    # register_w reads the codes in wgmma_order; the wrapper takes quantize's plain order
    monkeypatch.setenv("TILEWRIGHT_TARGET", target)
    m, n, k, group = 5, 192, 512, 128
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(m, k, generator=gen).half()
    q, scales, zeros = w4.quantize(torch.randn(n, k, generator=gen).half(), group)
    tile = dict(swap=True, stage_scales=True, register_w=True, threads=256, block_M=8,
                block_N=128, block_K=64, splits=2, num_stages=2)
    want = a.double() @ w4.dequantize(q, scales, zeros).double().T
    got = w4.w4a16_mm(a, q, scales, zeros, **tile)
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2 * want.abs().mean())
    plain = w4.w4a16_gemm(m, n, k, group, **tile)(a, q, scales, zeros)  # the order unasked
    assert not torch.allclose(plain.double(), want, rtol=1e-2, atol=1e-2 * want.abs().mean())


def test_w4a16_ticket_combine_is_refused_where_blocks_cannot_fence(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_TARGET", "cpu")
    a = torch.zeros(5, 512).half()
    q, scales, zeros = w4.quantize(torch.zeros(128, 512).half(), 128)
    with pytest.raises(UnsupportedOpError, match="fence_gpu is an op of the .cuda. dialect"):
        w4.w4a16_mm(a, q, scales, zeros, splits=2, ticket_combine=True)


def test_quantize_round_trips_within_half_a_step():
    w = torch.randn(8, 256).half()
    q, scales, zeros = w4.quantize(w, 128)
    err = (w4.dequantize(q, scales, zeros).float() - w.float()).abs()
    assert (err <= scales.float().repeat_interleave(128, 1) * 0.51 + 1e-3).all()


@pytest.mark.parametrize(("q_shape", "groups", "message"), [
    ((96, 100), 4, r"Q must be uint8 \[N, K / 2\] = \[96, 128\] for A \[7, 256\]"),
    ((96, 128), 3, r"scales \[96, 3\] and zeros \[96, 3\] must both be \[N, K / group\]"),
])
def test_w4a16_shapes_are_refused_before_launch(q_shape, groups, message):
    a = torch.zeros(7, 256).half()
    with pytest.raises(ValueError, match=message):
        w4.w4a16_mm(a, torch.zeros(q_shape, dtype=torch.uint8), torch.ones(96, groups).half(),
                    torch.ones(96, groups).half())
