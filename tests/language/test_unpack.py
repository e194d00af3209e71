"""T.unpack: fields of packed integers (4-bit weights two to a byte, 2-bit fields four to a
byte), unsigned or sign-extended, on the backends that execute here; misuse is refused at the
user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def unpack_all(n, container, bits, signed):
    fields = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32}[container] // bits
    out = f"int{container.removeprefix('u').removeprefix('int')}" if signed else \
        f"uint{container.removeprefix('u').removeprefix('int')}"
    out = {"uint16": "int32", "uint32": "int64"}.get(out, out)  # torch has no uint16 math

    @T.prim_func
    def main(P: T.Tensor((n,), container), C: T.Tensor((n, fields), out)):
        with T.Kernel(1):
            for i, f in T.Parallel(n, fields):
                C[i, f] = T.cast(T.unpack(P[i], f, bits, signed=signed), out)

    return main, fields, getattr(torch, out)


def expected(packed, bits, fields, signed, dtype):
    width = bits * fields
    raw = packed.long() & ((1 << width) - 1)
    out = torch.stack([(raw >> (f * bits)) & ((1 << bits) - 1) for f in range(fields)], 1)
    if signed:
        out = torch.where(out >= 1 << (bits - 1), out - (1 << bits), out)
    return out.to(dtype)


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize(("container", "bits", "signed"), [
    ("uint8", 4, False), ("uint8", 4, True), ("int8", 4, True), ("int8", 2, False),
    ("uint8", 2, True), ("int32", 4, True), ("int16", 8, False)])
def test_unpack_every_field(target, container, bits, signed):
    func, fields, dtype = unpack_all(64, container, bits, signed)
    kernel = tilewright.compile(func, out_idx=[1], target=target)
    info = torch.iinfo(getattr(torch, container))
    packed = torch.randint(info.min, info.max, (64,), dtype=torch.int64)
    packed[:2] = torch.tensor([info.min, info.max])
    packed = packed.to(getattr(torch, container))
    assert torch.equal(kernel(packed), expected(packed, bits, fields, signed, dtype))


def one_field(dtype, bits, index):
    @T.prim_func
    def main(P: T.Tensor((4,), dtype), C: T.Tensor((4,), "int32")):
        with T.Kernel(1):
            for i in T.Parallel(4):
                C[i] = T.cast(T.unpack(P[i], index, bits), "int32")

    return main


@pytest.mark.parametrize(("dtype", "bits", "index", "message"), [
    ("float16", 4, 0, "T.unpack of a float16 value: it reads fields of an integer"),
    ("uint8", 3, 0, "T.unpack of 3-bit fields from a uint8 value: the field width must "
                    "divide 8"),
    ("uint8", 4, 2, "T.unpack field 2 of a uint8 value: it holds 2 fields of 4 bits"),
])
def test_unpack_misuse_is_refused_at_the_line(dtype, bits, index, message):
    with pytest.raises(KernelError) as info:
        one_field(dtype, bits, index)
    assert message in str(info.value)
    assert "test_unpack.py" in str(info.value)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_constants_cast_and_unpacked_wrap_as_torch(target):
    """An integer constant cast to an unsigned dtype wraps (TVM's folding of the cast of a
    negative constant stopped the cpu build, 'cannot make uint from negative value -3'), and
    T.unpack of a constant reads its fields (TVM's reinterpret of a constant stopped it, 'A
    zero reinterpret shortcut requires pointer result type'; fuzzer seed 500)."""

    @T.prim_func
    def main(X: T.Tensor((4,), "int32"), W: T.Tensor((4,), "int64"),
             U: T.Tensor((4,), "int64")):
        with T.Kernel(1):
            for j in T.Parallel(4):
                W[j] = T.cast(T.cast(T.int32(-3), "uint32") - T.uint32(2), "int64") + \
                    T.cast(X[j], "int64")
                U[j] = T.cast(T.unpack(T.int64(0), j % 16, 4), "int64") + \
                    T.cast(T.unpack(T.int8(-2), j % 2, 4, signed=True), "int64")

    x = torch.arange(4, dtype=torch.int32)
    w, u = tilewright.compile(main, out_idx=[1, 2], target=target)(x)
    assert torch.equal(w, torch.tensor(2**32 - 5, dtype=torch.int64) + x.long())
    assert torch.equal(u, torch.tensor([-2, -1, -2, -1]))
