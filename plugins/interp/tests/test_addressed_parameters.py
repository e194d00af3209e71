"""A ``T.make_tensor`` of a kernel parameter's memory (its ``data_ptr()`` in a ``T.ptr`` table
or a ``T.ptr`` parameter) is that memory: stores through either are seen through the other, on
the CPU and in the interpreter, which holds a bfloat16 or float8 parameter as a float32 copy
and makes the tensor a view of that copy; an overlap that cannot be a view is refused at the
``T.make_tensor`` line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelTypeError

TARGETS = ["cpu", "interp"]


def table(tensors):
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)


def stores_both_ways(dtype, n=32):
    """The first half stored through the tensor made at the parameter's address, the second
    through the parameter; both read through both (Y's rows); a tensor made at the second
    half's address reads it too (Y's last row)."""
    half, size = n // 2, torch.tensor([], dtype=getattr(torch, dtype)).element_size()

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), X_ptrs: T.Tensor([1], T.ptr),
             Y: T.Tensor((3, n), T.float32)):
        with T.Kernel(1, threads=32):
            alias = T.make_tensor(X_ptrs[0], (n,), dtype)
            tail = T.make_tensor(X_ptrs[0] + half * size, (half,), dtype)
            for i in T.Parallel(half):
                alias[i] = T.cast(i, dtype)
            for i in T.Parallel(half):
                X[half + i] = T.cast(-i, dtype)
            for i in T.Parallel(n):
                Y[0, i] = T.cast(X[i], T.float32)
                Y[1, i] = T.cast(alias[i], T.float32)
            for i in T.Parallel(half):
                Y[2, i] = T.cast(tail[i], T.float32) * 2

    return main


def through_a_pointer(dtype, n=32):
    """The same through a ``T.ptr`` parameter passed the tensor's address."""
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), p: T.ptr, Y: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=32):
            alias = T.make_tensor(p, (n,), dtype)
            for i in T.Parallel(n):
                X[i] = T.cast(i * 3, dtype)
            for i in T.Parallel(n):
                Y[i] = T.cast(alias[i], T.float32)
                alias[i] = T.cast(i * 5, dtype)

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn"])
def test_a_tensor_made_at_a_parameters_address_is_its_memory(target, dtype):
    """The interpreter made the tensor a second float32 copy of a bfloat16 / float8
    parameter: each read the other's old values, and the parameter's copy, written back
    last, undid the tensor's stores."""
    torch_dtype = getattr(torch, dtype)
    x = torch.full((32,), 7.0).to(torch_dtype)
    y = tilewright.compile(stores_both_ways(dtype), out_idx=[-1], target=target)(x, table([x]))
    want = torch.cat([torch.arange(16.0), -torch.arange(16.0)])
    assert torch.equal(y[0], want) and torch.equal(y[1], want)
    assert torch.equal(y[2, :16], want[16:] * 2)
    assert torch.equal(x.float(), want)
    y = tilewright.compile(through_a_pointer(dtype), out_idx=[-1], target=target)(x, x)
    assert torch.equal(y, (torch.arange(32.0) * 3).to(torch_dtype).float())
    assert torch.equal(x.float(), (torch.arange(32.0) * 5).to(torch_dtype).float())


def other_view(dtype, n=32, offset=0, count=32):
    @T.prim_func
    def main(X: T.Tensor((n,), T.bfloat16), X_ptrs: T.Tensor([1], T.ptr),
             Y: T.Tensor((count,), T.float32)):
        with T.Kernel(1, threads=32):
            other = T.make_tensor(X_ptrs[0] + offset, (count,), dtype)  # the other view
            for i in T.Parallel(count):
                Y[i] = T.cast(other[i], T.float32)

    return main


@pytest.mark.parametrize("dtype, offset, count, what", [
    ("int16", 64, 16, "16 int16 elements"),  # the bytes as another dtype
    ("bfloat16", 66, 32, "32 bfloat16 elements"),  # past the parameter's end
    ("bfloat16", 65, 4, "4 bfloat16 elements"),  # between two elements
    ("bfloat16", 56, 8, "8 bfloat16 elements"),  # from before its start
])
def test_an_overlap_that_cannot_be_a_view_is_refused_at_its_line(dtype, offset, count, what):
    """The interpreter refuses a tensor made at an address that overlaps a bfloat16
    parameter's memory other than inside it with its dtype: it would be a second copy. The
    parameter is elements 32 to 63 of a larger tensor (bytes 64 to 127: aligned, so the
    kernel gets that memory, not a copy), the address ``offset`` bytes into that tensor."""
    kernel = tilewright.compile(other_view(dtype, offset=offset, count=count), out_idx=[-1],
                                target="interp")
    memory = torch.zeros(96, dtype=torch.bfloat16)
    assert memory.data_ptr() % 64 == 0
    with pytest.raises(KernelTypeError, match=rf"cannot make a tensor of {what} at "
                                              r"0x[0-9a-f]+ that overlaps the bfloat16 "
                                              r"parameter 'X' at 0x[0-9a-f]+ \(64 bytes\)"
                       ) as info:
        kernel(memory[32:64], table([memory]))
    assert info.value.location.line == other_view.__code__.co_firstlineno + 5
