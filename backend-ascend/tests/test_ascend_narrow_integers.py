"""Arithmetic on integers narrower than ``int`` (int8, uint8, int16) on the scalar unit, checked
against torch on the emulator: C++ computes on them as ``int``, so each result is cast back to
its type and wraps before a ``T.max``, a comparison or a division reads it (the fuzzer's seed
1001: ``T.max((a + b) * c, d)`` in uint8 kept 768 where TIR's wrapped product is 0)."""

import pytest
import tilewright
import tilewright.language as T
import torch

FORMS = {
    # a sum that wraps, then T.max: 2 * 200 is 144 in uint8, below 200
    "max_of_sum": (lambda x: T.max(x + x, x), lambda x: torch.maximum(x + x, x)),
    # a product that wraps, then a comparison
    "compare_product": (lambda x: T.if_then_else(x * x < x, x, x + 1),
                        lambda x: torch.where(x * x < x, x, x + 1)),
    # a sum that wraps, then floor division (its sign decides the rounding)
    "floordiv_of_sum": (lambda x: (x + x) // 3,
                        lambda x: torch.div(x + x, 3, rounding_mode="floor")),
    # a left shift that wraps and a complement that leaves the type as int, then T.min
    "shift_and_not": (lambda x: T.min(x << 1, ~x), lambda x: torch.minimum(x << 1, ~x)),
}


def narrow(dtype, form, N=64):
    expr = FORMS[form][0]

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32) as _:
            for j in T.Parallel(N):
                Y[j] = expr(X[j])

    return main


def _inputs(dtype, N=64):
    info = torch.iinfo(getattr(torch, dtype))
    low, high = max(info.min, -300), min(info.max, 300)
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(low, high + 1, (N,), generator=gen, dtype=torch.int64)
    x[:4] = torch.tensor([high, low, high // 2 + 1, 16])  # wraps to 0 or across the sign
    return x.to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
@pytest.mark.parametrize("form", list(FORMS))
def test_narrow_integer_arithmetic_wraps_in_its_type(dtype, form):
    kernel = tilewright.compile(narrow(dtype, form), out_idx=[-1], target="ascend")
    x = _inputs(dtype)
    torch.testing.assert_close(kernel(x.clone()), FORMS[form][1](x), rtol=0, atol=0)


def fuzz1001():
    """The fuzzer's kernel (seed 1001) reduced to its cause: uint8 ``(t + t) * x`` under T.max."""

    @T.prim_func
    def main(X: T.Tensor((32,), "uint8"), Y: T.Tensor((32,), "uint8")):
        with T.Kernel(2, threads=128) as bx:
            t = T.alloc_fragment((16,), "uint8")
            T.copy(X[bx * 16], t)
            for j in T.Parallel(16):
                Y[bx * 16 + j] = T.max((t[j] + t[j]) * X[bx * 16 + j], X[(bx * 16 + j + 30) % 32])

    return main


def test_the_fuzzers_uint8_product_wraps_before_max():
    kernel = tilewright.compile(fuzz1001(), out_idx=[-1], target="ascend")
    assert "TW_MAX(TW_CAST(uint8_t, (TW_CAST(uint32_t, TW_CAST(uint8_t, (TW_CAST(uint32_t, " \
        "t.GetValue(j)) + TW_CAST(uint32_t, t.GetValue(j))))) * " in kernel.get_kernel_source()
    x = torch.tensor([2, 6, 20, 3, 0, 12, 19, 5, 15, 9, 2, 13, 20, 14, 5, 15, 6, 18, 16, 13, 15,
                      12, 0, 3, 9, 6, 11, 8, 8, 20, 0, 10], dtype=torch.uint8)
    want = torch.maximum((x + x) * x, torch.roll(x, 2))
    assert want[18] == 6  # 3 * 16 * 16 = 768 wraps to 0
    torch.testing.assert_close(kernel(x.clone()), want, rtol=0, atol=0)


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    sources = {f"{dtype}_{form}": tilewright.lower(narrow(dtype, form), target="ascend").source.text
               for dtype in ("uint8", "int8", "int16") for form in FORMS}
    sources["fuzz1001"] = tilewright.lower(fuzz1001(), target="ascend").source.text
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
