"""``T.float8_e8m0fnu``, the OCP MX scale format: unsigned powers of two, code ``c`` is
``2 ** (c - 127)`` and 255 is NaN. Its tensors are torch's ``float8_e8m0fnu``; a conversion to
it is torch's (the exponent field, plus one for a mantissa above half or a normal's tie; the
sign dropped; NaN and infinities give NaN), checked here bit for bit against torch on the CPU
backend and the interpreter, over every code and 20,000 float32 bit patterns."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import TilewrightError
from tilewright.language.dtypes import FLOAT_FORMATS

TARGETS = ["cpu", "interp"]
E8M0 = torch.float8_e8m0fnu


def bits(t: torch.Tensor) -> list[int]:
    return t.view(torch.uint8).tolist()


def probe_values(count=20000, seed=0) -> torch.Tensor:
    """Random float32 bit patterns (every sign, subnormals, NaN and infinities among them),
    the ties of the rule (1.5 * 2^e, normal and subnormal), zero of both signs, the largest
    values."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(-2**31, 2**31 - 1, (count,), generator=gen, dtype=torch.int64)
    random = raw.to(torch.int32).view(torch.float32)
    ties = [1.5 * 2.0 ** e for e in (-127, -126, -1, 0, 1, 60, 126)] + [3 * 2.0 ** 127]
    special = [0.0, -0.0, 1.0, -1.0, 2.0 ** -127, 2.0 ** -128, 2.0 ** -149, 2.0 ** 127,
               float("inf"), -float("inf"), float("nan"), 1.4999999, 1.5000001]
    return torch.cat([random, torch.tensor(ties + special, dtype=torch.float32)])


def conversions(n):
    @T.prim_func
    def main(codes: T.Tensor((256,), T.float8_e8m0fnu), x32: T.Tensor((n,), T.float32),
             x16: T.Tensor((n,), T.float16), xbf: T.Tensor((n,), T.bfloat16),
             values: T.Tensor((256,), T.float32), e32: T.Tensor((n,), T.float8_e8m0fnu),
             e16: T.Tensor((n,), T.float8_e8m0fnu), ebf: T.Tensor((n,), T.float8_e8m0fnu)):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(256):
                values[i] = T.cast(codes[i], T.float32)
            for i in T.Parallel(n):
                e32[i] = T.cast(x32[i], T.float8_e8m0fnu)
                e16[i] = T.cast(x16[i], T.float8_e8m0fnu)
                ebf[i] = T.cast(xbf[i], T.float8_e8m0fnu)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_every_code_decodes_and_conversions_round_as_torch(target):
    x = probe_values()
    n = x.numel()
    kernel = tilewright.compile(conversions(n), out_idx=[4, 5, 6, 7], target=target)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E8M0)
    values, e32, e16, ebf = kernel(codes, x, x.half(), x.bfloat16())
    torch.testing.assert_close(values, codes.float(), rtol=0, atol=0, equal_nan=True)
    for encoded, source in ((e32, x), (e16, x.half()), (ebf, x.bfloat16())):
        assert encoded.dtype == E8M0
        want = source.to(E8M0)
        mismatched = [(float(v), g, w) for v, g, w in zip(source, bits(encoded), bits(want))
                      if g != w]
        assert not mismatched, mismatched[:5]


def test_the_formats_table_decodes_and_encodes_as_torch():
    fmt = FLOAT_FORMATS["float8_e8m0fnu"]
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E8M0)
    got = torch.tensor([fmt.value(c) for c in range(256)])
    torch.testing.assert_close(got, codes.float(), rtol=0, atol=0, equal_nan=True)
    x = probe_values(count=5000, seed=1)
    assert [fmt.encode(float(v)) for v in x] == bits(x.to(E8M0))
    assert (fmt.max_value, fmt.value(0)) == (2.0 ** 127, 2.0 ** -127)
    assert T.float8_e8m0fnu.as_torch() is E8M0 and T.dtype(E8M0) == "float8_e8m0fnu"


def dequantise_mx(m, k, block):
    """MX-style dequantisation: float8_e4m3fn values with one float8_e8m0fnu scale a block of
    ``block`` along k, through shared tiles of both (a tile of scales included)."""
    @T.prim_func
    def main(X: T.Tensor((m, k), T.float8_e4m3fn), S: T.Tensor((m, k // block), T.float8_e8m0fnu),
             Y: T.Tensor((m, k), T.float32), amax: T.Tensor((m,), T.float8_e8m0fnu)):
        with T.Kernel(1, threads=64):
            xs = T.alloc_shared((m, k), T.float8_e4m3fn)
            ss = T.alloc_shared((m, k // block), T.float8_e8m0fnu)
            top = T.alloc_fragment((m,), T.float32)
            T.copy(X, xs)
            T.copy(S, ss)
            for i, j in T.Parallel(m, k):
                Y[i, j] = T.cast(xs[i, j], T.float32) * T.cast(ss[i, j // block], T.float32)
            T.reduce_max(Y, top, dim=1)
            for i in T.Parallel(m):
                amax[i] = T.cast(top[i], T.float8_e8m0fnu)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_an_mx_dequantisation_with_scale_tiles(target):
    m, k, block = 4, 64, 32
    kernel = tilewright.compile(dequantise_mx(m, k, block), out_idx=[2, 3], target=target)
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    s = torch.randint(110, 140, (m, k // block), generator=gen, dtype=torch.int32)
    s = s.to(torch.uint8).view(E8M0)
    y, amax = kernel(x, s)
    want = x.float() * s.float().repeat_interleave(block, dim=1)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    assert bits(amax) == bits(want.amax(dim=1).to(E8M0))


def extremes():
    @T.prim_func
    def main(out: T.Tensor((4,), T.float8_e8m0fnu), wide: T.Tensor((4,), T.float32)):
        with T.Kernel(1):
            out[0] = T.max_value(T.float8_e8m0fnu)
            out[1] = T.min_value(T.float8_e8m0fnu)
            out[2] = T.cast(-6.0, T.float8_e8m0fnu)  # the sign is dropped: 8 (a tie rounds up)
            out[3] = out[0] * T.cast(2.0, T.float8_e8m0fnu)  # past the largest: NaN
            for i in T.serial(4):
                wide[i] = T.cast(out[i], T.float32)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_extremes_signs_and_overflow(target):
    out, wide = tilewright.compile(extremes(), out_idx=[0, 1], target=target)()
    assert bits(out) == [254, 0, 130, 255]
    assert wide[:3].tolist() == [2.0 ** 127, 2.0 ** -127, 8.0] and wide[3].isnan()


def test_it_has_no_infinity():
    with pytest.raises(TilewrightError, match=r"float8_e8m0fnu has no infinity"):
        @T.prim_func
        def main(out: T.Tensor((1,), T.float8_e8m0fnu)):
            with T.Kernel(1):
                out[0] = T.infinity(T.float8_e8m0fnu)
