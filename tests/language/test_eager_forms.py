"""The forms of TileLang's eager kernels (its test_tilelang_language_eager_jit.py): ``T.const``
names separated by spaces, a ``T.Kernel`` opened by a ``T.macro`` the kernel calls, tensors
annotated in the signature, ``get_tir`` with ``T.Tensor`` placeholders, ``T.empty(M, N,
dtype=)`` and ``T.ptr`` parameters of an eager kernel; parameters annotated with a dtype
(``p: T.ptr``, ``n: T.int32``) are given at run time, TileLang's "dynamic" scalars."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, KernelError


@T.macro
def copy_rows(A, B):
    M, N = A.shape
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                B[bx * 32 + i, j] = A[bx * 32 + i, j] * 2


@tilewright.jit(target="cpu")
def spaced_consts(A, B):
    M, N = T.const("M N")
    A: T.Tensor[[M, N], T.float32]
    B: T.Tensor[[M, N], T.float32]
    copy_rows(A, B)  # the T.Kernel is the macro's


@tilewright.jit(target="cpu")
def signature_tensors(A: T.Tensor[[64, 16], T.float32], B: T.Tensor[[64, 16], T.float32]):
    copy_rows(A, B)


@T.macro
def doubled(A):
    M, N = A.shape
    B = T.empty(M, N, dtype=A.dtype)
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                B[bx * 32 + i, j] = A[bx * 32 + i, j] * 2
    return B


@tilewright.jit(target="cpu")
def returned(A):
    M = T.const("M")
    A: T.Tensor[[M, 16], T.float32]
    return doubled(A)


@tilewright.jit(target="cpu")
def through_pointers(A: T.ptr, B: T.ptr, M: int, N: int):
    A = T.make_tensor(A, (M, N), T.float32)
    B = T.make_tensor(B, (M, N), T.float32)
    copy_rows(A, B)


def test_eager_kernels_opened_by_a_macro():
    a = torch.randn(70, 16)
    for kernel in (spaced_consts, signature_tensors):
        x = a[:64] if kernel is signature_tensors else a
        b = torch.zeros_like(x)
        kernel(x, b)
        assert torch.equal(b, x * 2)
    assert torch.equal(returned(a), a * 2)


def test_get_tir_takes_tensor_placeholders_and_par_compile_builds_them():
    funcs = [k.get_tir(T.Tensor((64, 16), T.float32), T.Tensor((64, 16), T.float32))
             for k in (spaced_consts, signature_tensors)]
    kernels = tilewright.par_compile(funcs, target="cpu")
    a = torch.randn(64, 16)
    for kernel in kernels:
        b = torch.zeros_like(a)
        kernel(a, b)
        assert torch.equal(b, a * 2)
    with pytest.raises(KernelError, match=r"'A' is annotated as 2-d float32, but the call gave "
                                          r"T.Tensor\(64,\) float32"):
        spaced_consts.get_tir(T.Tensor((64,), T.float32), T.Tensor((64, 16), T.float32))


def test_pointer_parameters_of_an_eager_kernel():
    a, b = torch.randn(40, 8), torch.zeros(40, 8)
    through_pointers(a, b, 40, 8)
    assert torch.equal(b, a * 2)
    # TileLang's par_compile of configs with T.ptr() placeholders
    (kernel,) = through_pointers.par_compile([{"A": T.ptr(), "B": T.ptr(), "M": 40, "N": 8}])
    b.zero_()
    kernel(a, b)
    assert torch.equal(b, a * 2)


@tilewright.jit(target="cpu")
def scale_prefix(P: T.ptr, n: T.int32, scale: T.float32, size: int):
    A = T.make_tensor(P, (size,), T.float32)
    with T.Kernel(1):
        for i in T.Parallel(size):
            if i < n:
                A[i] = A[i] * scale


def test_dtype_annotated_parameters_are_given_at_run_time():
    """An address as an int (``data_ptr()``, was compiled in as a constant: a crash in TVM
    for any real address) or as a tensor, and scalars, all without recompiling; ``size``
    (``int``) is a compile-time value."""
    for n, scale, by_address in ((10, 2.0, True), (20, 3.0, False), (64, 0.5, True)):
        a = torch.randn(64)
        expected = a.clone()
        expected[:n] *= scale
        scale_prefix(a.data_ptr() if by_address else a, n, scale, 64)
        assert torch.equal(a, expected)
    assert len(scale_prefix._kernels) == 1
    tir = scale_prefix.get_tir(T.ptr(), 5, 1.0, 64).script()
    assert "def scale_prefix(P: T.handle, n: T.int32, scale: T.float32)" in tir


def test_const_names_must_be_names():
    @tilewright.jit(target="cpu")
    def bad(A):
        M, N = T.const("M, 2N")
        A: T.Tensor[[M, N], T.float32]
        copy_rows(A, A)

    with pytest.raises(KernelError, match=r"T.const: '2N' is not a name"):
        bad(torch.zeros(4, 4))


@T.prim_func
def handle_params(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (16, 16), dtype=T.float32, align=16)
    B = T.match_buffer(B_ptr, (16, 16), T.float32)
    with T.Kernel(1):
        for i, j in T.Parallel(16, 16):
            B[i, j] = A[j, i] + 1


@tilewright.jit(target="cpu")
def last_to_first(A: T.ptr, is_2d=False):
    """TileLang's eager-JIT tutorial: a T.ptr parameter made a tensor whose T.const sizes the
    tensor passed gives."""
    if is_2d:
        M, N = T.const("M, N")
        A = T.match_buffer(A, [M, N], T.float32)
        with T.Kernel(1):
            A[0, 0] = A[M - 1, N - 1]
    else:
        L = T.const("L")
        A = T.match_buffer(A, [L], T.float32)
        with T.Kernel(1):
            A[0] = A[L - 1]


def test_match_buffer_makes_a_handle_parameter_a_tensor():
    kernel = tilewright.compile(handle_params, target="cpu")
    assert [p.name for p in kernel.signature.inputs] == ["A_ptr", "B_ptr"]
    a, b = torch.randn(16, 16), torch.zeros(16, 16)
    kernel(a, b)
    assert torch.equal(b, a.T + 1)
    for x in (torch.randn(64, 96), torch.randn(5, 7), torch.randn(50)):
        last_to_first(x, is_2d=x.dim() == 2)
        assert x.flatten()[0] == x.flatten()[-1]
    with pytest.raises(KernelError, match=r"T.match_buffer makes a tensor parameter of a "
                                          r"T.handle / T.ptr parameter: pass the tensor itself"):
        last_to_first(4096)

    @tilewright.jit(target="cpu")
    def unannotated(P):
        A = T.make_tensor(P, (4,), T.float32)
        with T.Kernel(1):
            A[0] = 1.0

    with pytest.raises(KernelError, match=r"T.make_tensor takes an address given at run time.*"
                                          r"got the Python int 4096: annotate"):
        unannotated(4096)


def test_parse_cache_key_follows_what_decides_the_kernel():
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    assert spaced_consts.parse_cache_key(a, b) == spaced_consts.parse_cache_key(b, a)
    assert spaced_consts.parse_cache_key(a, b) != \
        spaced_consts.parse_cache_key(a.half(), b.half())
    assert scale_prefix.parse_cache_key(1, 2, 3.0, 64) == \
        scale_prefix.parse_cache_key(5, 6, 7.0, 64)  # run-time arguments: their types only
    assert scale_prefix.parse_cache_key(1, 2, 3.0, 64) != \
        scale_prefix.parse_cache_key(1, 2, 3.0, 32)


def test_func_attr_names_the_kernel_and_takes_tvms_noalias_promise():
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32)):
        T.func_attr({"global_symbol": "renamed", "tir.noalias": True})
        with T.Kernel(1):
            for i in T.Parallel(8):
                A[i] = A[i] + 1

    kernel = tilewright.compile(main, target="cpu")
    assert kernel.signature.name == "renamed"
    a = torch.zeros(8)
    kernel(a)
    assert torch.equal(a, torch.ones(8))
    with pytest.raises(KernelError, match=r"T.func_attr: attribute\(s\) 'target' are not "
                                          r"supported \(supported: global_symbol, tir.noalias"):
        @T.prim_func
        def bad(A: T.Tensor((8,), T.float32)):
            T.func_attr({"target": "cuda"})
            with T.Kernel(1):
                A[0] = 1.0


@tilewright.jit(target="cpu")
def add_rows(A, B, M, N):
    """TileLang's eager-JIT tutorial's dynamic sizes: ``M: T.int32`` in the body."""
    M: T.int32
    N: T.int32
    A: T.Tensor[[M, N], T.float32]
    B: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, 4), threads=32) as bx:
        for i, j in T.Parallel(4, N):
            if bx * 4 + i < M:
                B[bx * 4 + i, j] = A[bx * 4 + i, j] + M


def test_body_annotated_scalars_are_given_at_run_time():
    for m in (5, 9, 13):
        a, b = torch.randn(m, 8), torch.zeros(m, 8)
        add_rows(a, b, m, 8)
        assert torch.equal(b, a + m)
    assert len(add_rows._kernels) == 1
    with pytest.raises(ArgumentError, match=r"kernel add_rows: M = 6, but the tensors' shapes "
                                            r"give M = 5"):
        add_rows(torch.randn(5, 8), torch.zeros(5, 8), 6, 8)
