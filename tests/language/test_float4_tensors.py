"""``T.float4_e2m1fn`` as TileLang has it: a kernel's float4 tensor is torch's
``float4_e2m1fn_x2`` with the last dimension halved (two codes a byte, the even index in the
low nibble); conversions round to nearest even and saturate to +-6 (NaN gives +6, as CUDA's
``__nv_cvt_float_to_fp4`` does), decoding is exact. Every code and every tie is checked on the
CPU backend and the interpreter against a table built here from the format's definition."""

import math

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, TilewrightError
from tilewright.language.dtypes import FLOAT_FORMATS

TARGETS = ["cpu", "interp"]


def code_value(code: int) -> float:
    """e2m1 from its definition: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0
    is subnormal (0 or 0.5); no infinities, no NaN."""
    sign = -1.0 if code & 8 else 1.0
    exponent, mantissa = (code >> 1) & 3, code & 1
    if exponent == 0:
        return sign * mantissa * 0.5
    return sign * (1 + mantissa / 2) * 2.0 ** (exponent - 1)


VALUES = [code_value(c) for c in range(16)]


def reference_code(x: float) -> int:
    """The code nearest ``x`` among the 16 (ties to the even code), saturating at +-6; NaN
    gives +6 (code 7); a negative value rounding to zero gives -0 (code 8)."""
    if math.isnan(x):
        return 7
    negative = math.copysign(1.0, x) < 0
    magnitude = min(abs(x), 6.0)
    best = min(range(8), key=lambda c: (abs(magnitude - VALUES[c]), c & 1))
    return best | (8 if negative else 0)


def probes() -> list[float]:
    """Every value, every midpoint between neighbours (the ties), a value either side of each,
    both signs, past the largest value, infinities and NaN."""
    magnitudes = sorted(set(abs(v) for v in VALUES))
    out = [*magnitudes]
    for low, high in zip(magnitudes, magnitudes[1:]):
        mid = (low + high) / 2
        out += [mid, mid - 1 / 64, mid + 1 / 64]
    out += [6.5, 7.0, 1e4, 0.1, 1 / 1024, float("inf")]
    out += [-v for v in out]
    out += [float("nan")]
    return out + [0.0] * (len(out) % 2)  # an even count: two codes a byte


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """The codes of a float4_e2m1fn_x2 tensor, one a byte (written independently of the
    runtime's)."""
    b = packed.view(torch.uint8)
    return torch.stack((b & 15, b >> 4), dim=-1).reshape(*b.shape[:-1], -1)


def pack(codes: torch.Tensor) -> torch.Tensor:
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8).view(
        torch.float4_e2m1fn_x2)


def casts(P: int):
    @T.prim_func
    def main(codes: T.Tensor((16,), T.float4_e2m1fn), x32: T.Tensor((P,), T.float32),
             x16: T.Tensor((P,), T.float16), xbf: T.Tensor((P,), T.bfloat16),
             values: T.Tensor((16,), T.float32), e32: T.Tensor((P,), T.float4_e2m1fn),
             e16: T.Tensor((P,), T.float4_e2m1fn), ebf: T.Tensor((P,), T.float4_e2m1fn)):
        with T.Kernel(1, threads=32):
            tile = T.alloc_fragment((P,), T.float4_e2m1fn)
            for i in T.Parallel(16):
                values[i] = T.cast(codes[i], "float32")
            for i in T.Parallel(P):
                tile[i] = x32[i]
            T.copy(tile, e32)
            for i in T.Parallel(P):
                e16[i] = x16[i]
                ebf[i] = xbf[i]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_every_code_and_tie_against_the_formats_definition(target):
    xs = probes()
    kernel = tilewright.compile(casts(len(xs)), out_idx=[4, 5, 6, 7], target=target)
    codes = pack(torch.arange(16, dtype=torch.uint8))
    x32 = torch.tensor(xs, dtype=torch.float32)
    values, e32, e16, ebf = kernel(codes, x32, x32.half(), x32.bfloat16())
    expect = torch.tensor(VALUES)
    assert torch.equal(values, expect) and torch.equal(values.signbit(), expect.signbit())
    for encoded, source in ((e32, x32), (e16, x32.half()), (ebf, x32.bfloat16())):
        assert encoded.dtype == torch.float4_e2m1fn_x2 and encoded.shape == (len(xs) // 2,)
        want = [reference_code(float(v)) for v in source.float()]
        assert unpack(encoded).tolist() == want


def test_the_formats_table():
    fmt = FLOAT_FORMATS["float4_e2m1fn"]
    assert (fmt.bits, fmt.bias, fmt.max_value, fmt.nan_code) == (4, 1, 6.0, None)
    assert [fmt.value(c) for c in range(16)] == VALUES
    for name in ("float8_e4m3fn", "float8_e5m2"):  # the table's float8 rows decode as torch
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
        want = codes.view(getattr(torch, name)).float()
        got = torch.tensor([FLOAT_FORMATS[name].value(c) for c in range(256)])
        assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
    assert T.float4_e2m1fn.as_torch() is torch.float4_e2m1fn_x2
    assert T.dtype(torch.float4_e2m1fn_x2) == "float4_e2m1fn"


@pytest.mark.parametrize("target", TARGETS)
def test_float4_inputs_outputs_and_written_inputs(target):
    M, N = 3, 8

    @T.prim_func
    def step(X: T.Tensor((M, N), T.float4_e2m1fn), Y: T.Tensor((M, N), T.float4_e2m1fn)):
        with T.Kernel(1):
            for i, j in T.Parallel(M, N):
                Y[i, j] = X[i, j] * 2.0  # rounded to float4: 4 * 2 saturates to 6
                X[i, j] = -X[i, j]

    kernel = tilewright.compile(step, out_idx=-1, target=target)
    codes = torch.arange(M * N, dtype=torch.uint8).reshape(M, N) % 16
    x = pack(codes)
    y = kernel(x)
    assert y.dtype == torch.float4_e2m1fn_x2 and y.shape == (M, N // 2)
    assert unpack(y).tolist() == [[reference_code(VALUES[c] * 2) for c in row]
                                  for row in codes.tolist()]
    assert torch.equal(unpack(x), codes ^ 8)  # negation flips the sign bit, zero included


def test_float4_arguments_are_checked():
    @T.prim_func
    def widen(A: T.Tensor((4, 8), T.float4_e2m1fn), B: T.Tensor((4, 8), T.float32)):
        with T.Kernel(1):
            for i, j in T.Parallel(4, 8):
                B[i, j] = A[i, j]

    kernel = tilewright.compile(widen, out_idx=-1, target="cpu")
    with pytest.raises(ArgumentError, match=r"float4_e2m1fn of shape \(4, 8\), passed packed "
                                            r"2 values a byte: a float4_e2m1fn_x2 tensor of "
                                            r"shape \(4, 4\) \(or uint8, int8\); got int16 of "
                                            r"shape \(4, 4\)"):
        kernel(torch.zeros(4, 4, dtype=torch.int16))
    with pytest.raises(ArgumentError, match=r"got float4_e2m1fn_x2 of shape \(4, 8\)"):
        kernel(pack(torch.zeros(4, 16, dtype=torch.uint8)))

    @T.prim_func
    def odd(A: T.Tensor((4, 7), T.float4_e2m1fn), B: T.Tensor((4, 7), T.float32)):
        with T.Kernel(1):
            for i, j in T.Parallel(4, 7):
                B[i, j] = A[i, j]

    with pytest.raises(TilewrightError, match="float4_e2m1fn tensor 'A' of shape .*multiple "
                                              "of 2"):
        tilewright.compile(odd, out_idx=-1, target="cpu")


@pytest.mark.parametrize("target", TARGETS)
def test_an_odd_dynamic_last_dimension_is_refused_at_the_call(target):
    @tilewright.jit(target=target)
    def narrow(x):
        N = T.dynamic("N")
        x: T.Tensor[(N,), T.float32]
        y = T.empty((N,), T.float4_e2m1fn)
        with T.Kernel(1):
            for i in T.Parallel(N):
                y[i] = x[i]
        return y

    assert unpack(narrow(torch.tensor([1.0, -3.0]))).tolist() == [2, 13]
    with pytest.raises(ArgumentError, match=r"would have shape \(3,\) .*float4_e2m1fn_x2 "
                                            "tensor packs 2 values a byte"):
        narrow(torch.ones(3))


def test_float4_bytes_may_come_as_uint8_or_int8():
    # TileLang passes float4_e2m1fn tensors as uint8 (or int8) bytes of two values each
    @T.prim_func
    def main(X: T.Tensor((4, 16), "float4_e2m1fn"), Y: T.Tensor((4, 16), "float32")):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(4, 16):
                Y[i, j] = T.cast(X[i, j], "float32")

    kernel = tilewright.compile(main, target="cpu")
    codes = torch.randint(0, 256, (4, 8), dtype=torch.uint8)
    y_bytes, y_typed = torch.zeros(4, 16), torch.zeros(4, 16)
    kernel(codes, y_bytes)
    kernel(codes.view(torch.float4_e2m1fn_x2), y_typed)
    assert torch.equal(y_bytes, y_typed)
    y_signed = torch.zeros(4, 16)
    kernel(codes.view(torch.int8), y_signed)  # TileLang's subtype tests pass int8 views
    assert torch.equal(y_bytes, y_signed)
    with pytest.raises(ArgumentError, match=r"float4_e2m1fn_x2 tensor of shape \(4, 8\) "
                                            r"\(or uint8, int8\); got int16"):
        kernel(codes.view(torch.int16), y_bytes)
