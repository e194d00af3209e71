"""uint16, uint32, int64 and bool on A2. No vector Cast takes uint16/uint32 (类型转换/Cast.md),
so a conversion from or to them runs on the scalar unit; SetAtomicAdd/Max/Min take none of them
nor uint8 (the ASCENDC_ASSERT of impl/basic_api/dav_c220/kernel_operator_set_atomic_impl.h), so
T.atomic_* of them is refused at the user's line; Duplicate fills 16- and 32-bit lanes, so an
int64 tile is filled as int32 lanes (0 and -1 only, other values refused at the line) and a bool
tile as int16 pairs of its byte. Integer atomics add in their own type on the emulator, exactly
beyond 2**24."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError

N = 32


def convert(src, dst):
    @T.prim_func
    def main(X: T.Tensor((N,), src), Y: T.Tensor((N,), dst)):
        with T.Kernel(2, threads=32) as bx:
            for j in T.Parallel(16):
                Y[bx * 16 + j] = T.cast(X[bx * 16 + j], dst)

    return main


def atomic(dtype):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((2,), dtype)):
        with T.Kernel(2, threads=32) as bx:
            t = T.alloc_fragment((16,), dtype)
            T.copy(X[bx * 16], t)
            for j in T.serial(16):
                T.atomic_add(Y[bx], t[j])

    return main


@pytest.mark.parametrize("src,dst", [("uint32", "float32"), ("float32", "uint16")])
def test_a_conversion_no_cast_takes_runs_on_the_scalar_unit(src, dst):
    kernel = tilewright.compile(convert(src, dst), out_idx=[-1], target="ascend")
    assert f"A2's Cast does not convert {src} to {dst}" in kernel.get_kernel_source()
    if src == "uint32":  # above int32's range and float32's exact integers
        x = torch.tensor([0, 1, 2 ** 31 + 2 ** 8, 2 ** 32 - 1] * 8, dtype=torch.int64)
        x = x.to(torch.uint32)
        want = x.to(torch.float64).to(torch.float32)
    else:  # rounds toward zero, saturates at both bounds, NaN gives 0
        x = torch.tensor([0.5, 65534.9, 7e4, -3.0, float("nan"), 1.0, 2.5, 300.75] * 4)
        want = torch.tensor([0, 65534, 65535, 0, 0, 1, 2, 300] * 4).to(torch.uint16)
    torch.testing.assert_close(kernel(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint8"])
def test_atomics_of_types_set_atomic_does_not_take_are_refused_at_the_line(dtype):
    with pytest.raises(UnsupportedOpError, match=rf"test_ascend_integer_dtypes.py:\d+: "
                       rf"T.atomic_add on {dtype} operands .* not supported by backend "
                       r"'ascend' \(it takes bfloat16, float16, float32, int16, int32, int8\)"):
        tilewright.compile(atomic(dtype), target="ascend")


def test_an_int32_atomic_add_is_exact_beyond_float32s_integers():
    kernel = tilewright.compile(atomic("int32"), target="ascend")
    x = torch.full((N,), 2 ** 24 + 1, dtype=torch.int32)
    y = torch.zeros(2, dtype=torch.int32)
    kernel(x, y)
    assert y.tolist() == [16 * (2 ** 24 + 1)] * 2


def fill(dtype, value):
    @T.prim_func
    def main(Y: T.Tensor((2, 24), dtype)):
        with T.Kernel(1, threads=32) as _:
            t = T.alloc_fragment((2, 24), dtype)
            T.fill(t, value)
            T.copy(t, Y)

    return main


@pytest.mark.parametrize("dtype,value", [("int64", -1), ("bool", True)])
def test_fills_duplicate_cannot_take_go_through_narrower_lanes(dtype, value):
    kernel = tilewright.compile(fill(dtype, value), out_idx=[-1], target="ascend")
    lanes = "int32_t" if dtype == "int64" else "int16_t"
    assert f".ReinterpretCast<{lanes}>()" in kernel.get_kernel_source()
    want = torch.full((2, 24), value, dtype=getattr(torch, dtype))
    torch.testing.assert_close(kernel(), want, rtol=0, atol=0)


def test_an_int64_fill_of_unequal_halves_is_refused_at_the_line():
    with pytest.raises(KernelError, match=r"test_ascend_integer_dtypes.py:\d+: T.fill of the "
                       r"int64 tile 't': A2's Duplicate fills 16- and 32-bit lanes"):
        tilewright.compile(fill("int64", 2 ** 32 + 5), out_idx=[-1], target="ascend")


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    sources = {f"{s}_{d}": tilewright.lower(convert(s, d), target="ascend").source.text
               for s, d in [("uint32", "float32"), ("float32", "uint16"), ("uint16", "int8"),
                            ("int64", "bool")]}
    sources.update({f"fill_{d}": tilewright.lower(fill(d, v), target="ascend").source.text
                    for d, v in [("int64", -1), ("bool", True)]})
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
