"""Select conditions joined by and/or/not on the vector unit (the comparisons' bit masks joined
by And/Or/Not on their uint16 lanes, 逻辑计算/And.md, Or.md, Not.md) and selects over whole
padded tiles as one range: the emulator's logic instructions against the documentation, the
generated source, and the emulator against torch."""

import pytest
import tilewright
import tilewright.language as T
import torch
from test_ascend_cmpsel_model import _run
from tvm import tirx


# -- the models (逻辑计算/And.md, Or.md, Not.md: their "tensor前n个数据计算" examples) -----------
def test_and_or_follow_the_documentation(tmp_path):
    """And.md / Or.md: [1 2 3 ... 512] with [513 512 511 ... 2] gives [1 0 3 ... 0] and
    [513 514 511 ... 514]."""
    a = torch.arange(1, 513, dtype=torch.int16)[None]
    b = torch.arange(513, 1, -1, dtype=torch.int16)[None]
    c, _ = _run(tmp_path, "And(c, a, b, 512);", a, b, n=512, dtype="int16", name="and")
    assert c[:3].tolist() == [1, 0, 3] and c[-1] == 0 and torch.equal(c, a[0] & b[0])
    c, _ = _run(tmp_path, "Or(c, a, b, 512);", a, b, n=512, dtype="int16", name="or")
    assert c[:3].tolist() == [513, 514, 511] and c[-1] == 514 and torch.equal(c, a[0] | b[0])


def test_not_follows_the_documentation(tmp_path):
    """Not.md: [9 -2 8 ... 9 0] gives [-10 1 -9 ... -10 -1]."""
    a = torch.tensor([9, -2, 8] * 170 + [9, 0], dtype=torch.int16)[None]
    c, _ = _run(tmp_path, "Not(c, a, 512);", a, a, n=512, dtype="int16")
    assert c[:3].tolist() == [-10, 1, -9] and c[-2:].tolist() == [-10, -1]
    assert torch.equal(c, ~a[0])


def test_logic_takes_16_bit_lanes_on_a2(tmp_path):
    """And.md, 数据类型 for Atlas A2: int16_t and uint16_t only (wider ones through
    ReinterpretCast)."""
    a = torch.ones(1, 64)
    with pytest.raises(Exception, match=r"A2 takes int16_t and uint16_t"):
        _run(tmp_path, "And(c, a, b, 64);", a, a)


# -- conditions --------------------------------------------------------------------------------
# name -> (the condition on tile values x, y, the same on torch tensors); Python's and/or/not
# inside a kernel body are TIR's And/Or/Not (test_guard_joined_by_and_not_becomes_a_select)
_CONDITIONS = {
    "and": (lambda x, y: tirx.And(x > 0, x < 1), lambda x, y: (x > 0) & (x < 1)),
    "bitand": (lambda x, y: (x > y) & (y > -0.5), lambda x, y: (x > y) & (y > -0.5)),
    "or": (lambda x, y: tirx.Or(x < -1, y >= 1), lambda x, y: (x < -1) | (y >= 1)),
    "bitor": (lambda x, y: (x == y) | (x > 1.5), lambda x, y: (x == y) | (x > 1.5)),
    "not": (lambda x, y: tirx.Not(x > y), lambda x, y: ~(x > y)),
    "nested": (lambda x, y: tirx.Or(tirx.And(x > 0, y > 0), tirx.Not(x != y)),
               lambda x, y: ((x > 0) & (y > 0)) | ~(x != y)),
    "isinf": (lambda x, y: T.isinf(x), lambda x, y: torch.isinf(x)),
    "isfinite": (lambda x, y: T.isfinite(y), lambda x, y: torch.isfinite(y)),
    "isnan": (lambda x, y: tirx.Or(T.isnan(x), y < 0), lambda x, y: torch.isnan(x) | (y < 0)),
}


def _conditions(M, N, dtype, block=None):
    """For each condition c: Z[k] = c ? x : y * 2, over ``block`` rows per kernel block (the
    last one partial when ``block`` does not divide ``M``)."""
    bm = block or M
    conds = [c for c, _ in _CONDITIONS.values()]

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype),
             Z: T.Tensor((len(conds), M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=32) as bx:
            x = T.alloc_fragment((bm, N), dtype)
            y = T.alloc_fragment((bm, N), dtype)
            z = T.alloc_fragment((bm, N), dtype)
            T.copy(X[bx * bm, 0], x)
            T.copy(Y[bx * bm, 0], y)
            for k, cond in enumerate(conds):
                for i, j in T.Parallel(bm, N):
                    z[i, j] = T.if_then_else(cond(x[i, j], y[i, j]), x[i, j], y[i, j] * 2)
                T.copy(z, Z[k, bx * bm, 0])

    return main


def _inputs(M, N, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(M, N, generator=gen) * 1.5
    y = torch.where(torch.rand(M, N, generator=gen) < 0.2, x, torch.randn(M, N, generator=gen))
    x.view(-1)[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.5])
    y.view(-1)[4:7] = torch.tensor([float("inf"), float("nan"), -float("inf")])
    t = getattr(torch, dtype)
    return x.to(t), y.to(t)


def _expected(x, y):
    return torch.stack([torch.where(ref(x, y), x, y * 2) for _, ref in _CONDITIONS.values()])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N,block", [(12, 20, None), (16, 64, None), (50, 24, 16)],
                         ids=["padded", "whole", "partial-last"])
def test_joined_conditions_match_torch(dtype, M, N, block):
    """Every condition form on whole tiles, on tiles with padded rows (12 x 20) and over blocks
    whose last one is partial (50 rows in blocks of 16)."""
    kernel = tilewright.compile(_conditions(M, N, dtype, block), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and "SetValue" not in text
    for name in ("And(", "Or(", "Not(", "Select("):
        assert name in text
    x, y = _inputs(M, N, dtype)
    torch.testing.assert_close(kernel(x, y), _expected(x, y), equal_nan=True)


def _count(text, name):
    return sum(line.strip().startswith(name + "(") for line in text.splitlines())


def test_a_padded_tile_takes_one_instruction_each():
    """12 x 20 float32 tiles have rows padded to 24: each Compare(s), And/Or/Not, Select and
    the Muls of the false arm runs once over the 12 x 24 range, with no per-row loop."""
    text = tilewright.lower(_conditions(12, 20, "float32"), target="ascend").source.text
    assert "for (int32_t r" not in text
    comparisons = _count(text, "Compare") + _count(text, "Compares")
    # one per comparison: 2 + 2 + 2 + 2 + 1 + 3, isinf |x| == inf and not x != x 2, isfinite
    # (the language's not (|x| == inf and not isnan) and not isnan) 3, isnan or 2
    assert comparisons == 19, text
    assert _count(text, "Select") == len(_CONDITIONS)
    assert "Select(z, " in text and ", 288);" in text  # the whole 12 x 24 range


def test_guard_joined_by_and_not_becomes_a_select():
    """``if x > 0 and not x >= 1: B = 3 x`` keeps B's other elements."""

    @T.prim_func
    def main(A: T.Tensor((8, 20), "float32"), B: T.Tensor((8, 20), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 20), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 20):
                if x[i, j] > 0 and not x[i, j] >= 1:
                    B[i, j] = x[i, j] * 3

    kernel = tilewright.compile(main, target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and "And(" in text and "Not(" in text
    a, b = torch.rand(8, 20) * 2 - 0.5, torch.randn(8, 20)
    expect = torch.where((a > 0) & (a < 1), a * 3, b)
    kernel(a, b)
    torch.testing.assert_close(b, expect)


def test_generated_logic_compiles_against_the_vendor_headers(asc_check):
    """And/Or/Not on ReinterpretCast<uint16_t>() masks, Compare/Compares and Select over a
    padded range, as generated, against the arch-2201 headers."""
    sources = {f"masks_{dtype}_{M}": tilewright.lower(_conditions(M, N, dtype), target="ascend")
               .source.text for dtype in ("float32", "float16") for M, N in ((12, 20), (16, 64))}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)


def test_columns_of_a_wider_tile_outside_the_nest_are_kept():
    """A 12 x 24 tile written on its first 20 columns: the columns past them are the kernel's
    (not padding of this pass), so the Muls and the select run row by row and leave them."""

    @T.prim_func
    def main(A: T.Tensor((12, 24), "float32"), B: T.Tensor((12, 24), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((12, 24), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(12, 20):
                x[i, j] = T.if_then_else(x[i, j] > 0, x[i, j], x[i, j] * 0.5)
            T.copy(x, B[0, 0])

    kernel = tilewright.compile(main, out_idx=[-1], target="ascend")
    assert "for (int32_t r" in kernel.get_kernel_source()
    a = torch.randn(12, 24)
    expect = a.clone()
    expect[:, :20] = torch.where(a[:, :20] > 0, a[:, :20], a[:, :20] * 0.5)
    torch.testing.assert_close(kernel(a), expect)
