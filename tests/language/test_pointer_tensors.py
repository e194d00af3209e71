"""``T.ptr`` and ``T.make_tensor`` as TileLang has them: a tensor of ``data_ptr()`` values
(torch.int64) names other tensors, and ``T.make_tensor(ptrs[g], shape, dtype)`` reads and
writes one of them in place (TileLang's grouped GEMM over pointer tables, at a small size)."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, KernelError


def grouped_gemm(groups, M, N, K, block):
    @T.prim_func
    def main(A_ptrs: T.Tensor([groups], T.ptr), B_ptrs: T.Tensor([groups], T.ptr),
             C_ptrs: T.Tensor([groups], T.ptr)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), groups) as (bx, by, g):
            A = T.make_tensor(A_ptrs[g], (M, K), T.float32)
            B = T.make_tensor(B_ptrs[g], (K, N), T.float32)
            C = T.make_tensor(C_ptrs[g], (M, N), T.float32)
            A_shared = T.alloc_shared((block, K), T.float32)
            B_shared = T.alloc_shared((K, block), T.float32)
            C_local = T.alloc_fragment((block, block), T.float32)
            T.clear(C_local)
            T.copy(A[by * block, 0], A_shared)
            T.copy(B[0, bx * block], B_shared)
            T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block, bx * block])

    return main


def table(tensors):
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_grouped_gemm_through_pointer_tables(target):
    groups, M, N, K = 3, 32, 48, 16
    kernel = tilewright.compile(grouped_gemm(groups, M, N, K, 16), target=target)
    a = [torch.randn(M, K) for _ in range(groups)]
    b = [torch.randn(K, N) for _ in range(groups)]
    c = [torch.full((M, N), float("nan")) for _ in range(groups)]
    assert T.ptr == "handle" and kernel.params[0].dtype == "int64"
    kernel(table(a), table(b), table(c))
    for x, y, z in zip(a, b, c):
        torch.testing.assert_close(z, x @ y, rtol=1e-5, atol=1e-5)


def test_make_tensor_takes_an_address():
    with pytest.raises(KernelError, match=r"T.make_tensor takes an address \(an element of a "
                                          r"T.ptr tensor, int64\), got a float32 value"):
        @T.prim_func
        def wrong(A: T.Tensor((4,), T.float32), B: T.Tensor((4,), T.float32)):
            with T.Kernel(1):
                C = T.make_tensor(A[0], (4,), T.float32)
                for i in T.Parallel(4):
                    B[i] = C[i]


def pointer_parameters():
    # TileLang's matmul with `a_ptr: T.ptr` parameters: the kernel gets addresses, and the
    # tensors' shapes from its scalars
    @T.prim_func
    def main(a_ptr: T.ptr, c_ptr: T.ptr, m: T.int32):
        A = T.make_tensor(a_ptr, (m,), "float32")
        C = T.make_tensor(c_ptr, (m,), "float32")
        with T.Kernel(T.ceildiv(m, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < m:
                    C[bx * 32 + i] = A[bx * 32 + i] * 2

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_pointer_parameters_take_tensors_or_addresses(target):
    kernel = tilewright.compile(pointer_parameters(), target=target)
    a, c = torch.randn(100), torch.zeros(100)
    kernel(a, c, 100)
    assert torch.equal(c, a * 2)
    c.zero_()
    kernel(a.data_ptr(), c.data_ptr(), 100)
    assert torch.equal(c, a * 2)
    assert kernel.signature.params[0].dtype == "handle"
    with pytest.raises(ArgumentError, match=r"is a pointer \(T.ptr\): pass a tensor or its "
                                            r"data_ptr\(\), got float"):
        kernel(1.5, c, 100)
    with pytest.raises(ArgumentError, match=r"is an address \(T.ptr\) the kernel reads on "
                                            r"device 'cpu' .*got one on 'meta'"):
        kernel(torch.empty(100, device="meta"), c, 100)


def pointers_through_a_tile(block=512):
    # no tensor parameter, and a tile of 2 KiB: the CPU allocates it from the heap (TVM's
    # workspace needs a device, which only a tensor parameter gave; the build stopped)
    @T.prim_func
    def main(a_ptr: T.ptr, c_ptr: T.ptr, m: T.int32):
        A = T.make_tensor(a_ptr, (m,), "float32")
        C = T.make_tensor(c_ptr, (m,), "float32")
        with T.Kernel(T.ceildiv(m, block), threads=128) as bx:
            tile = T.alloc_shared((block,), "float32")
            for i in T.Parallel(block):
                tile[i] = T.if_then_else(bx * block + i < m, A[bx * block + i], 0.0)
            for i in T.Parallel(block):
                if bx * block + i < m:
                    C[bx * block + i] = tile[block - 1 - i] + tile[i]

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_kernel_without_tensor_parameters_allocates_its_tiles(target):
    kernel = tilewright.compile(pointers_through_a_tile(), target=target)
    a, c = torch.randn(1024), torch.zeros(1024)
    kernel(a.data_ptr(), c.data_ptr(), 1024)
    want = (a.view(2, 512) + a.view(2, 512).flip(1)).view(-1)
    assert torch.equal(c, want)


def low_precision_through_a_table(dtype, groups=3, n=40):
    @T.prim_func
    def main(X_ptrs: T.Tensor([groups], T.ptr), Y: T.Tensor([groups, n], T.float32)):
        with T.Kernel(groups, threads=32) as g:
            X = T.make_tensor(X_ptrs[g], (n,), dtype)
            for i in T.Parallel(n):
                Y[g, i] = T.cast(X[i], T.float32)
                X[i] = T.cast(X[i] * 3, dtype)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_low_precision_tensors_at_an_address_are_read_and_written(target, dtype):
    """The interpreter holds bfloat16 and float8 values in float32: a tensor it makes at an
    address is a float32 copy whose changed elements go back to the memory when the call
    ends (it refused such a tensor before); each block writes its own tensor."""
    kernel = tilewright.compile(low_precision_through_a_table(dtype), out_idx=[-1],
                                target=target)
    torch_dtype = getattr(torch, dtype)
    xs = [torch.randn(40).to(torch_dtype) for _ in range(3)]
    before = [x.clone() for x in xs]
    y = kernel(table(xs))
    torch.testing.assert_close(y, torch.stack([x.float() for x in before]), rtol=0, atol=0)
    for x, old in zip(xs, before):
        assert torch.equal(x, (old * 3).to(torch_dtype)) if dtype == "bfloat16" else \
            torch.equal(x, (old.float() * 3).to(torch_dtype))


def two_views_of_one_address(dtype, n=32, half=16):
    @T.prim_func
    def main(X_ptrs: T.Tensor([1], T.ptr), Y: T.Tensor([n], T.float32)):
        with T.Kernel(1, threads=32):
            whole = T.make_tensor(X_ptrs[0], (n,), dtype)
            same = T.make_tensor(X_ptrs[0], (2, half), dtype)
            for i in T.Parallel(n):
                whole[i] = T.cast(i, dtype)
            for i, j in T.Parallel(2, half):
                Y[i * half + j] = T.cast(same[i, j], T.float32) + 1
                same[i, j] = T.cast(same[i, j] * 2, dtype)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_two_tensors_at_one_address_see_each_others_stores(target, dtype):
    """Two ``T.make_tensor`` of one address in one block are one memory: the interpreter's
    float32 copy of a bfloat16 tensor is shared by both (each had its own copy before, so the
    second read the values from before the first's stores)."""
    kernel = tilewright.compile(two_views_of_one_address(dtype), out_idx=[-1], target=target)
    x = torch.full((32,), 7.0).to(getattr(torch, dtype))
    y = kernel(table([x]))
    assert y.tolist() == [i + 1.0 for i in range(32)]
    assert x.float().tolist() == [2.0 * i for i in range(32)]


def overlapping_views(n=32):
    @T.prim_func
    def main(X_ptrs: T.Tensor([1], T.ptr), Y: T.Tensor([n], T.float32)):
        with T.Kernel(1, threads=32):
            tail = T.make_tensor(X_ptrs[0] + 2 * (n // 2), (n // 2,), T.bfloat16)
            inside = T.make_tensor(X_ptrs[0] + 2 * (n // 2 + 4), (4,), T.bfloat16)
            whole = T.make_tensor(X_ptrs[0], (n,), T.bfloat16)
            for i in T.Parallel(4):
                inside[i] = T.cast(-1, T.bfloat16)
            for i in T.Parallel(n // 2):
                Y[i] = T.cast(tail[i], T.float32)
            for i in T.Parallel(n):
                Y[i] = Y[i] + T.cast(whole[i], T.float32)

    return main


def test_the_interpreter_refuses_a_copy_that_would_miss_another_ones_stores():
    """A bfloat16 tensor made inside one made before (its dtype) is a view of it; one that
    covers more of the memory than it would be a second copy: refused, naming both."""
    kernel = tilewright.compile(overlapping_views(), out_idx=[-1], target="interp")
    x = torch.zeros(32, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"cannot make a tensor of 32 bfloat16 elements at "
                                        r"0x[0-9a-f]+ that overlaps the bfloat16 one made at "
                                        r"0x[0-9a-f]+ \(32 bytes\)"):
        kernel(table([x]))
    assert torch.equal(x, torch.zeros(32, dtype=torch.bfloat16))  # refused before any store
    y = tilewright.compile(overlapping_views(), out_idx=[-1], target="cpu")(table([x]))
    assert y[4:8].tolist() == [-1.0] * 4 and x[20:24].tolist() == [-1.0] * 4
