"""``T.StridedTensor[shape, strides, dtype]``: a kernel parameter that is a non-contiguous
tensor, addressed with the strides it declares (constants, or ``T.dynamic`` symbols read from
the argument's ``stride()`` at every call), on the CPU backend and the interpreter. Element
access, slices and ``T.copy`` read and write the argument's own memory (no copy), checked
against torch; a wrong argument is an ``ArgumentError`` naming the parameter, what it must be
and what it is (TileLang's ``tilelang_copy_with_stride`` among them, ``T.Var`` telling its
symbolic stride from a number). An ordinary ``T.Tensor`` still takes a non-contiguous argument
as a contiguous copy (``tests/reliability/test_kernel_bounds.py``)."""

import json

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, KernelError, TilewrightError
from tilewright.runtime.signature import KernelSignature

TARGETS = ["cpu", "interp"]


def blocks(M, N, bm=8, bn=16, dtype=T.float32):
    """B = A * 2 + s through shared tiles: A a column block of a wider matrix (its row stride
    the symbol s), B every other column of a wider buffer (column stride 2, a constant), both
    tiled with partial tiles at the edges."""
    s, t = T.dynamic("s, t")

    @T.prim_func
    def main(A: T.StridedTensor((M, N), (s, 1), dtype),
             B: T.StridedTensor((M, N), (t, 2), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            F = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm:by * bm + bm, bx * bn:bx * bn + bn], S)
            for i, j in T.Parallel(bm, bn):
                F[i, j] = S[i, j] * 2 + s
            T.copy(F, B[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_copies_read_and_write_the_arguments_with_their_strides(target):
    kernel = tilewright.compile(blocks(20, 26), target=target)
    wide = torch.randn(20, 33)
    a = wide[:, 4:30]
    back = torch.full((20, 60), -7.0)
    b = back[:, 1:53:2]
    kernel(a, b)
    torch.testing.assert_close(b, a * 2 + 33)
    gaps = back.clone()
    gaps[:, 1:53:2] = -7.0
    assert torch.equal(gaps, torch.full((20, 60), -7.0))  # nothing else written
    # another row stride: the same kernel, s read again
    wider = torch.randn(20, 40)
    kernel(wider[:, :26], b)
    torch.testing.assert_close(b, wider[:, :26] * 2 + 40)


def tilelang_copy_with_stride(M, N, NN, block_M, block_N, dtype=T.float16):
    """TileLang's test_tilelang_language_copy kernel: the first N columns of an (M, NN)
    matrix, its row stride NN a number or a T.dynamic symbol, copied element by element."""
    @T.prim_func
    def main(A: T.StridedTensor((M, N), (NN, 1), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                B[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j]

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stride", [2048, "NN"])
def test_tilelangs_copy_with_a_constant_or_dynamic_stride(target, stride):
    M = N = 1024
    NN = T.dynamic(stride) if isinstance(stride, str) else stride
    assert isinstance(NN, T.Var) == isinstance(stride, str)
    kernel = tilewright.compile(tilelang_copy_with_stride(M, N, NN, 128, 128), out_idx=[1],
                                target=target)
    if isinstance(NN, T.Var):
        NN = N * 2
    a = torch.randn(M, NN, dtype=torch.float16)
    assert torch.equal(kernel(a[:, :N]), a[:, :N])


@pytest.mark.parametrize("target", TARGETS)
def test_a_transposed_view_and_constant_strides(target):
    @T.prim_func
    def main(A: T.StridedTensor[(6, 4), (1, 6), T.float32],
             B: T.StridedTensor((6, 4), T.dynamic("r, c"), T.float32),
             C: T.Tensor((6, 4), T.float32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(6, 4):
                C[i, j] = A[i, j] - B[i, j]

    kernel = tilewright.compile(main, out_idx=-1, target=target)
    a, b = torch.randn(4, 6).t(), torch.randn(4, 6).t()
    torch.testing.assert_close(kernel(a, b), a - b)
    b = torch.randn(6, 4)  # contiguous fits symbolic strides too
    torch.testing.assert_close(kernel(a, b), a - b)


@pytest.mark.parametrize("target", TARGETS)
def test_eager_kernel_with_symbols_in_shape_and_strides(target):
    @tilewright.jit(target=target)
    def rows(x, step: int = 2):
        m = T.dynamic("m")
        s = T.dynamic("s")
        n = T.const("n")
        x: T.StridedTensor((m, n), (s, 1), T.float32)
        y = T.empty((m, n), T.float32)
        with T.Kernel(m, threads=32) as bx:
            for j in T.Parallel(n):
                y[bx, j] = x[bx, j] + s * step
        return y

    base = torch.randn(10, 12)
    torch.testing.assert_close(rows(base[::2, 3:9]), base[::2, 3:9] + 48)
    torch.testing.assert_close(rows(base[1:4, :6]), base[1:4, :6] + 24)


@pytest.mark.parametrize("target", TARGETS)
def test_a_t_const_stride_is_read_from_the_argument(target):
    @tilewright.jit(target=target)
    def rows(x):
        m, n, s = T.const("m, n, s")
        x: T.StridedTensor((m, n), (s, 1), T.float32)
        y = T.empty((m, n), T.float32)
        with T.Kernel(m, threads=32) as bx:
            for j in T.Parallel(n):
                y[bx, j] = x[bx, j] + s
        return y

    base = torch.randn(10, 12)
    torch.testing.assert_close(rows(base[::2, 3:9]), base[::2, 3:9] + 24)
    torch.testing.assert_close(rows(base[:, :5]), base[:, :5] + 12)


@pytest.mark.parametrize("target", TARGETS)
def test_an_axis_of_extent_one_may_have_any_stride(target):
    @T.prim_func
    def main(A: T.StridedTensor((1, 8), (64, 1), T.float32), B: T.Tensor((1, 8), T.float32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(1, 8):
                B[i, j] = A[i, j] + 1

    kernel = tilewright.compile(main, out_idx=-1, target=target)
    a = torch.randn(3, 10)[1:2, 2:]
    assert a.stride() == (10, 1)
    torch.testing.assert_close(kernel(a), a + 1)


@pytest.mark.parametrize("target", TARGETS)
def test_a_misaligned_written_strided_tensor_is_passed_as_an_aligned_copy(target):
    """The code may assume the data aligned (CUDA's 16-byte chunks): the call passes an
    aligned copy with the same strides (the stride symbols keep their values) and copies the
    written elements back, leaving the elements between them as they were."""
    kernel = tilewright.compile(blocks(12, 20), target=target)
    a_base, b_base = torch.randn(12 * 33 + 1), torch.randn(12 * 45 + 1)
    a = a_base[1:].view(12, 33)[:, 4:24]  # 4 bytes past an aligned start
    b = b_base[1:].view(12, 45)[:, 1:41:2]  # column stride 2
    assert a.data_ptr() % 16 and b.data_ptr() % 16
    untouched = b_base.clone()
    kernel(a, b)
    torch.testing.assert_close(b, a * 2 + 33)
    written = torch.zeros(12 * 45 + 1, dtype=torch.bool)
    written[1:].view(12, 45)[:, 1:41:2] = True
    assert torch.equal(b_base[~written], untouched[~written])


@pytest.mark.parametrize("target", TARGETS)
def test_float4_strided_tensor_writes_its_values_and_nothing_between_rows(target):
    """TileLang's subtype test: float4 values stored through a strided view of a buffer with
    padding after each row (its strides counted in values, two a byte)."""
    rows, cols, pad = 4, 16, 3

    @T.prim_func
    def main(src: T.Tensor((rows, cols), T.float32),
             dst: T.StridedTensor((rows, cols), (T.dynamic("s"), 1), T.float4_e2m1fn)):
        with T.Kernel(rows, threads=32) as i:
            for k in T.serial(cols):
                dst[rows - 1 - i, k] = src[i, k]

    kernel = tilewright.compile(main, target=target)
    back = torch.zeros(rows, cols // 2 + pad, dtype=torch.uint8)
    dst = back[:, :cols // 2]
    src = torch.tensor([0.5, 1.0, -6.0, 3.0] * (rows * cols // 4)).reshape(rows, cols)
    kernel(src, dst)
    codes = torch.stack((dst & 15, dst >> 4), dim=-1).reshape(rows, cols)
    table = {0.5: 1, 1.0: 2, -6.0: 15, 3.0: 5}
    expected = torch.tensor([[table[v] for v in row] for row in src.flip(0).tolist()],
                            dtype=torch.uint8)
    assert torch.equal(codes, expected)
    assert not back[:, cols // 2:].any()


@pytest.mark.parametrize("target", TARGETS)
def test_int4_strided_tensor_is_read_and_written_in_place(target):
    @T.prim_func
    def main(A: T.StridedTensor((3, 8), (T.dynamic("s"), 1), T.int4),
             B: T.Tensor((3, 8), T.int32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(3, 8):
                B[i, j] = T.cast(A[i, j], "int32")
            for i, j in T.Parallel(3, 8):
                A[i, j] = A[i, j] + 1

    def values(packed):  # two signed nibbles a byte, the low one first
        return torch.stack((((packed & 15) ^ 8) - 8, packed >> 4), -1).reshape(3, 8)

    kernel = tilewright.compile(main, out_idx=-1, target=target)
    back = torch.randint(-128, 128, (3, 7), generator=torch.Generator().manual_seed(1),
                         dtype=torch.int8)
    before = back.clone()
    a = back[:, 1:5]
    old = values(a)
    assert torch.equal(kernel(a), old.int())
    assert torch.equal(values(a), (old + 9) % 16 - 8)  # wraps as a 4-bit store does
    assert torch.equal(back[:, 0], before[:, 0]) and torch.equal(back[:, 5:], before[:, 5:])


@pytest.mark.parametrize("target", TARGETS)
def test_strides_that_contradict_the_declaration_are_refused(target):
    kernel = tilewright.compile(blocks(8, 16), target=target)
    a = torch.randn(8, 20)[:, :16]
    with pytest.raises(ArgumentError, match=r"argument 1 \('B'\) of kernel main must have "
                                            r"strides \(t, 2\), got \(16, 1\) \(stride 1\)"):
        kernel(a, torch.zeros(8, 16))
    with pytest.raises(ArgumentError, match=r"argument 0 \('A'\) of kernel main must have shape "
                                            r"\(8, 16\), got \(8, 20\)"):
        kernel(torch.randn(8, 20), torch.zeros(8, 32)[:, ::2])


def test_a_symbol_must_have_one_value():
    s = T.dynamic("s")

    @T.prim_func
    def main(A: T.StridedTensor((4, 4), (s, 1), T.float32),
             B: T.StridedTensor((4, 4), (s, 1), T.float32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(4, 4):
                B[i, j] = A[i, j]

    kernel = tilewright.compile(main, target="cpu")
    kernel(torch.randn(4, 8)[:, :4], torch.zeros(4, 8)[:, 2:6])
    with pytest.raises(ArgumentError, match=r"argument 1 \('B'\) of kernel main: stride 0 is "
                                            r"s = 6, but s = 8 already"):
        kernel(torch.randn(4, 8)[:, :4], torch.zeros(4, 6)[:, :4])


def test_a_float4_stride_counts_values():
    @T.prim_func
    def main(A: T.StridedTensor((2, 4), (16, 1), T.float4_e2m1fn),
             B: T.Tensor((2, 4), T.float32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(2, 4):
                B[i, j] = A[i, j]

    kernel = tilewright.compile(main, out_idx=-1, target="cpu")
    kernel(torch.zeros(2, 8, dtype=torch.uint8)[:, :2])  # 8 bytes a row: 16 values
    with pytest.raises(ArgumentError, match=r"must have strides \(16, 1\), got \(8, 1\) "
                                            r"\(stride 0\) \(counted in float4_e2m1fn values"):
        kernel(torch.zeros(2, 4, dtype=torch.uint8)[:, :2])
    with pytest.raises(ArgumentError, match=r"along its last dimension, which must be "
                                            r"contiguous \(stride 1\)"):
        kernel(torch.zeros(2, 8, dtype=torch.uint8)[:, ::4])


@pytest.mark.parametrize("strides, message", [
    ((4, 1, 1), r"shape \(4, 8\) has 2 dimension\(s\) but strides \(4, 1, 1\) give 3"),
    ((8.0, 1), r"stride 0 is the float 8.0"),
    ((-8, 1), r"stride 0 is negative"),
])
def test_declarations_are_checked(strides, message):
    with pytest.raises(KernelError, match=message):
        T.StridedTensor((4, 8), strides, T.float32)


def test_float4_strides_must_keep_bytes_whole():
    with pytest.raises(KernelError, match=r"the last stride must be 1 and the others "
                                          r"multiples of 2"):
        T.StridedTensor((4, 8), (9, 1), T.float4_e2m1fn)
    with pytest.raises(KernelError, match=r"the last stride must be 1"):
        T.StridedTensor((4, 8), (16, 2), T.float4_e2m1fn)


def test_a_strided_output_is_refused():
    @T.prim_func
    def main(A: T.Tensor((4,), T.float32), B: T.StridedTensor((4,), (2,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(4):
                B[i] = A[i]

    with pytest.raises(TilewrightError, match=r"out_idx names 'B', a T.StridedTensor"):
        tilewright.compile(main, out_idx=-1, target="cpu")


def test_a_view_of_a_strided_tensor_is_refused():
    with pytest.raises(KernelError, match=r"'A' is a T.StridedTensor, whose elements are not "
                                          "consecutive"):
        @T.prim_func
        def main(A: T.StridedTensor((4, 4), (8, 1), T.float32)):
            flat = T.Tensor((16,), T.float32, A.data)
            with T.Kernel(1, threads=32):
                flat[0] = 1.0


def test_the_signature_keeps_strides_and_their_symbols():
    kernel = tilewright.compile(blocks(8, 16), target="cpu")
    data = kernel.signature.to_json()
    assert data["stride_symbols"] == (("s", 0, 0), ("t", 1, 0))
    assert [p["strides"] for p in data["params"]] == [("s", 1), ("t", 2)]
    again = KernelSignature.from_json(json.loads(json.dumps(data)))
    assert again == kernel.signature
    tampered = json.loads(json.dumps(data))
    tampered["stride_symbols"][0][2] = 1
    with pytest.raises(ValueError, match=r"symbol 's': stride 1"):
        KernelSignature.from_json(tampered)


def test_an_exported_kernel_passes_strides(tmp_path):
    kernel = tilewright.compile(blocks(8, 16), target="cpu")
    loaded = tilewright.runtime.load(kernel.export(tmp_path / "bundle"))
    a, b = torch.randn(8, 20)[:, 2:18], torch.zeros(8, 40)[:, 3:35:2]
    loaded(a, b)
    torch.testing.assert_close(b, a * 2 + 20)


def test_the_profiler_makes_inputs_with_constant_strides():
    @T.prim_func
    def main(A: T.StridedTensor((4, 6), (1, 4), T.float32), B: T.Tensor((4, 6), T.float32)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(4, 6):
                B[i, j] = A[i, j] * 3

    kernel = tilewright.compile(main, out_idx=-1, target="cpu")
    profiler = kernel.get_profiler()
    profiler.assert_allclose(lambda a: a * 3)
    assert profiler.supply(kernel.signature.params[0]).stride() == (1, 4)


@pytest.mark.parametrize("target", TARGETS)
def test_print_shows_the_elements_of_a_strided_tensor(target, capfd):
    @T.prim_func
    def main(A: T.StridedTensor((2, 3), (1, 2), T.int32)):
        with T.Kernel(1, threads=1):
            T.print(A)

    tilewright.compile(main, target=target)(torch.arange(6, dtype=torch.int32).reshape(3, 2).t())
    out = capfd.readouterr().out
    assert "[[0 2 4]\n [1 3 5]]" in out
