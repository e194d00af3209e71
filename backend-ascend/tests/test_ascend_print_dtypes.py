"""T.print, T.printf and T.dump_tensor of every integer width and bool: the emulator formats
as the kit documents AscendC::printf (each argument a 64-bit slot, %d for the signed types,
%u for the unsigned ones and bool, %x 64 bits wide) and dumps integers exactly; the generated
printf compiles against the vendor's headers for 2201 and 3510."""

import pytest
import tilewright
import tilewright.language as T
import tilewright_ascend.language as A
import torch
from tilewright_ascend.facts.arch import ARCHS

# (dtype, boundary values)
VALUES = {
    "uint32": [0, 2**32 - 1, 3000000000],
    "int64": [0, 2**63 - 1, -(2**63)],
    "uint16": [0, 65535, 40000],
    "uint8": [0, 255, 200],
    "bool": [0, 1, 1],
    "int8": [0, 127, -128],
}


@T.prim_func
def print_all(U32: T.Tensor((8,), "uint32"), I64: T.Tensor((8,), "int64"),
              U16: T.Tensor((8,), "uint16"), U8: T.Tensor((8,), "uint8"),
              B: T.Tensor((8,), "bool"), I8: T.Tensor((8,), "int8"),
              O: T.Tensor((8,), "int64")):
    with T.Kernel(1, threads=32) as _:
        for i in T.serial(3):
            T.print(U32[i], msg="u32")
            T.print(I64[i], msg="i64")
            T.print(U16[i], msg="u16")
            T.print(U8[i], msg="u8")
            T.print(B[i], msg="b")
            T.print(I8[i], msg="i8")
        t = T.alloc_shared((8,), "int64")
        T.copy(I64, t)
        T.print(t, msg="tile")
        T.copy(t, O)


def _inputs():
    return [torch.tensor(v + [0] * 5).to(getattr(torch, d)) for d, v in VALUES.items()]


def test_print_of_each_integer_width_formats_as_the_vendor_documents(capfd):
    kernel = tilewright.compile(print_all, out_idx=[-1], target="ascend")
    src = kernel.get_kernel_source()
    assert '"u32: %u (uint32)\\n", TW_CAST(uint64_t, ' in src
    assert '"i64: %d (int64)\\n", TW_CAST(int64_t, ' in src
    inputs = _inputs()
    torch.testing.assert_close(kernel(*inputs), inputs[1])
    out = capfd.readouterr().out
    for i in range(3):
        for (dtype, values), msg in zip(VALUES.items(), ("u32", "i64", "u16", "u8", "b", "i8")):
            assert f"{msg}: {values[i]} ({dtype})\n" in out, (msg, values[i], out)
    assert "data_type=int64, position=UB, dump_size=8\n" in out
    assert "[0, 9223372036854775807, -9223372036854775808, 0, 0, 0, 0, 0]\n" in out


@A.prim_func
def printf_conversions(X: A.Tensor((8,), "int32"), Y: A.Tensor((8,), "uint32")):
    with A.Kernel(1, is_npu=True) as (cid, vid):
        with A.Scope("V"):
            if vid == 0:
                A.printf("d=%d i=%i x=%x u=%u w=[%5d] %%\n", X[0], X[1], X[0], Y[0], X[2])


def test_printf_conversions_read_64_bit_slots(capfd):
    kernel = tilewright.compile(printf_conversions, target="ascend")
    kernel(torch.tensor([-1, -2147483648, 42, 0, 0, 0, 0, 0], dtype=torch.int32),
           torch.tensor([4294967295] + [0] * 7, dtype=torch.uint32))
    # %x of int32 -1: the slot is int64 -1, printed 64 bits wide on the NPU (assert.md)
    assert "d=-1 i=-2147483648 x=ffffffffffffffff u=4294967295 w=[   42] %\n" in \
        capfd.readouterr().out


@pytest.mark.parametrize("target", ["ascend", "ascend-950"])
def test_print_sources_compile_against_the_vendor_headers(asc_check, target):
    src = tilewright.lower(print_all, target=target).source.text
    findings = asc_check({"print_all": src}, npu_arch=ARCHS[target].npu_arch)
    assert not findings, "\n".join(f.text[-2000:] for f in findings)
