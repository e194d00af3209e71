"""float8 tensors (TileLang's fp8 examples) on the backends that execute here: every
conversion to and from float8_e4m3fn / float8_e5m2 as torch does it (nearest even, subnormals,
e4m3fn saturating at +-448, e5m2 infinities, NaN)."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.language.fp8 import determine_fp8_type, determine_torch_fp8_type

FORMATS = [(T.float8_e4m3, torch.float8_e4m3fn), ("float8_e5m2", torch.float8_e5m2)]


def convert(n, src, dst):
    @T.prim_func
    def main(A: T.Tensor((n,), src), C: T.Tensor((n,), dst)):
        with T.Kernel(1):
            for i in T.Parallel(n):
                C[i] = T.Cast(dst, A[i])

    return main


def same(actual, expected) -> bool:
    return bool(((actual == expected) | (actual.isnan() & expected.isnan())).all())


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("fp8,torch_fp8", FORMATS)
def test_every_float8_value_decodes_as_in_torch(target, fp8, torch_fp8):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch_fp8)
    kernel = tilewright.compile(convert(256, fp8, "float32"), out_idx=[1], target=target)
    assert same(kernel(codes), codes.float())


def float32_probes() -> torch.Tensor:
    """Every float8 value, the midpoints between neighbours (ties), values just around them,
    subnormals, the overflow region and the special values, both signs."""
    grid = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = []
    for kind in (torch.float8_e4m3fn, torch.float8_e5m2):
        v = grid.view(kind).float()
        v = v[v.isfinite()].unique()
        mids = (v[1:] + v[:-1]) / 2
        values += [v, mids, mids.nextafter(torch.tensor(float("inf"))),
                   mids.nextafter(torch.tensor(float("-inf")))]
    special = torch.tensor([0.0, 1e-30, 1e-7, 448.0, 460.0, 464.0, 500.0, 1e5, 57344.0,
                            61439.0, 61440.0, 1e9, float("inf"), float("nan")])
    values = torch.cat(values + [special])
    return torch.cat([values, -values])


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("fp8,torch_fp8", FORMATS)
def test_float32_encodes_as_in_torch(target, fp8, torch_fp8):
    x = float32_probes()
    kernel = tilewright.compile(convert(x.numel(), "float32", fp8), out_idx=[1], target=target)
    assert torch.equal(kernel(x).view(torch.uint8), x.to(torch_fp8).view(torch.uint8))


def test_tilelang_fp8_helpers():
    assert determine_fp8_type() == "float8_e4m3fn"
    assert determine_fp8_type("e5m2") == "float8_e5m2"
    assert determine_torch_fp8_type() is torch.float8_e4m3fn
    with pytest.raises(tilewright.errors.ConfigError, match="e4m3, e5m2"):
        determine_fp8_type("e3m4")


def through_tiles(n, fp8):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            s = T.alloc_shared((n,), fp8)
            f = T.alloc_fragment((n,), fp8)
            for i in T.Parallel(n):
                s[i] = A[i]
            T.copy(s, f)
            for i in T.Parallel(n):
                C[i] = f[i]

    return main


@pytest.mark.parametrize("fp8,torch_fp8", FORMATS)
def test_float8_tiles_hold_every_value(fp8, torch_fp8):
    # a kernel's own float8 tiles keep float8 bits (not a float32 stand-in converted by TVM's
    # legalisation, which decodes subnormals and specials wrongly)
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch_fp8).float()
    kernel = tilewright.compile(through_tiles(256, fp8), out_idx=[1], target="cpu")
    assert same(kernel(values), values)


def fp8_gemm(m, n, k, fp8):
    @T.prim_func
    def main(A: T.Tensor((m, k), fp8), B: T.Tensor((n, k), fp8), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((m, k), fp8)
            b = T.alloc_shared((n, k), fp8)
            c = T.alloc_fragment((m, n), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, transpose_B=True, clear_accum=True)
            T.copy(c, C)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_float8_gemm(target):
    # the CPU GEMM micro-kernel's vectorised loops read float8 tiles
    kernel = tilewright.compile(fp8_gemm(32, 32, 64, T.float8_e4m3), out_idx=[2], target=target)
    a = torch.randn(32, 64).to(torch.float8_e4m3fn)
    b = torch.randn(32, 64).to(torch.float8_e4m3fn)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float().T)


def partial_tile_copy(n, block, fp8):
    @T.prim_func
    def main(A: T.Tensor((n,), fp8), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            s = T.alloc_shared((block,), fp8)
            T.copy(A[bx * block:(bx + 1) * block], s)  # the last tile overhangs A's end
            for i in T.Parallel(block):
                if bx * block + i < n:
                    C[bx * block + i] = s[i]

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_float8_tile_overhanging_the_tensor(target):
    # the overhang reads a float8 zero: a select of float8 values into a float8 tile
    kernel = tilewright.compile(partial_tile_copy(40, 16, T.float8_e4m3), out_idx=[1],
                                target=target)
    a = torch.randn(40).to(torch.float8_e4m3fn)
    assert same(kernel(a), a.float())
