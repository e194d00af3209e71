"""Layout and scheduling annotations (recorded, never changing results) and the debug ops
T.print and T.device_assert on the CPU backend."""


import pytest
import tilewright
import tilewright.language as T
import torch
from language_helpers import check, rand
from source_lines import Markers
from tvm import tirx

_M = Markers(__file__)
THIS, line_of = _M.path, _M.line_of


def swizzled(buf):
    rows, cols = buf.shape
    return T.Layout((rows, cols), lambda i, j: (i, (j + i) % cols))


@tilewright.jit(out_idx=[-1], target="cpu")
def annotated_gemm(M, N, K, bm=16, bn=16, bk=8, swizzle=True):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({
                A_s: swizzled(A_s),
                B_s: T.Layout((bk, bn), lambda *idx: idx),
                C_f: T.Fragment((bm, bn), forward_thread_fn=lambda i, j: (i * bn + j) // 2,
                                forward_index_fn=lambda i, j: ((i * bn + j) % 2,)),
            })
            T.use_swizzle(panel_size=2, order="col", enable=swizzle)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])
    return main


@pytest.mark.parametrize("swizzle", [True, False])
def test_annotations_are_recorded_and_keep_results(swizzle):
    a, b = rand(40, 20, dtype="float16"), rand(20, 35, dtype="float16", seed=1)
    kernel = annotated_gemm(40, 35, 20, swizzle=swizzle)
    check(kernel(a, b), a.double() @ b.double(), k=20)
    text = kernel.get_tir().script()
    assert '"tw.layouts"' in text and "A_s" in text
    assert ('"tw.swizzle"' in text) == swizzle


def test_layout_objects_map_indices():
    layout = T.Layout((4, 8), lambda i, j: (i, (j + i) % 8))
    assert layout.map(1, 7) == (1, 0)
    frag = T.Fragment((4, 8), forward_thread_fn=lambda i, j: i, forward_index_fn=lambda i, j: j)
    assert frag.map(2, 5) == (5,) and frag.forward_thread_fn(2, 5) == 2
    assert len(frag.index_map()) == 1


# -- T.print ----------------------------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def printing(M, blocks=2):
    @T.prim_func
    def main(A: T.Tensor((blocks, M), "float32"), B: T.Tensor((blocks, M), "float32")):
        with T.Kernel(blocks) as bx:
            tile = T.alloc_fragment((M,), "float32")
            T.copy(A[bx, 0:M], tile)
            T.print(tile, msg="tile")
            T.print(bx * 10 + 1, msg="scalar")
            T.print(A[bx, 1:3], msg="part")  # a slice prints only its region
            for i in T.Parallel(M):
                if i == M - 1:
                    T.print(tile[i], msg="last")
                B[bx, i] = tile[i]
    return main


def test_print_tags_values_with_block_and_iteration(capfd):
    a = torch.arange(8.0).reshape(2, 4) + 0.5
    out = printing(4)(a)
    check(out, a)
    text = capfd.readouterr().out
    for b in (0, 1):
        assert f"[block ({b},)] tile: tile shape (4,) float32" in text
        assert f"[block ({b},)] scalar: {b * 10 + 1} (int32)" in text
        assert f"[block ({b},)] part: A[{b}:{b + 1}, 1:3] shape (1, 2) float32\n" \
               f"[[{a[b, 1].item()} {a[b, 2].item()}]]" in text
        assert f"[block ({b},) iteration (3,)] last: {a[b, 3].item()} (float32)" in text
    assert "[0.5 1.5 2.5 3.5]" in text and "[4.5 5.5 6.5 7.5]" in text


@tilewright.jit(out_idx=[-1], target="cpu")
def print_low_precision(dtype):
    @T.prim_func
    def main(A: T.Tensor((2, 3), dtype), B: T.Tensor((2, 3), dtype)):
        with T.Kernel(1) as bx:
            s = T.alloc_shared((2, 3), dtype)
            T.copy(A, s)
            T.print(s, msg=dtype)
            T.copy(s, B)
    return main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_print_tile_of_16_bit_floats(capfd, dtype):
    a = torch.tensor([[1.0, -2.0, 0.25], [3.0, 4.5, -0.125]]).to(getattr(torch, dtype))
    print_low_precision(dtype)(a)
    text = capfd.readouterr().out
    assert f"{dtype}: s shape (2, 3) {dtype}" in text
    assert "-0.125" in text and "4.5" in text and "0.25" in text


# -- T.device_assert ----------------------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def checked_sqrt(M, bm=8):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            for i in T.Parallel(bm):
                if bx * bm + i < M:
                    T.device_assert(A[bx * bm + i] >= T.float32(0), "negative input")  # assert
                    B[bx * bm + i] = T.sqrt(A[bx * bm + i])
    return main


def test_device_assert_passes_and_fails_with_the_line():
    kernel = checked_sqrt(20)
    a = rand(20).abs()
    check(kernel(a), a.double().sqrt())
    a[17] = -1.0
    with pytest.raises(RuntimeError) as info:
        kernel(a)
    text = str(info.value)
    assert f"{THIS.name}:{line_of('assert')}" in text and "negative input" in text, text
    a[17] = 4.0  # the kernel keeps working after a failed assertion
    check(kernel(a), a.double().sqrt())


def asserting(M, block=8):
    @T.prim_func
    def main(A: T.Tensor((M,), "int32"), B: T.Tensor((M,), "int32")):
        assert M % block == 0, f"M = {M} must be a multiple of {block}"  # static-assert
        with T.Kernel(M // block) as bx:
            for i in T.Parallel(block):
                assert A[bx * block + i] >= 0, "negative input"  # python-assert
                B[bx * block + i] = A[bx * block + i] * 2

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_python_assert_checks_python_values_now_and_run_time_values_in_the_kernel(target):
    """``assert`` of a Python value is Python's (its message evaluated on failure only); of a
    run-time value, ``T.device_assert`` (TVM stopped at it: "Cannot use and / or / not
    operator to Expr")."""
    with pytest.raises(AssertionError, match="M = 20 must be a multiple of 8"):
        asserting(20)
    kernel = tilewright.compile(asserting(16), target=target)
    a = torch.arange(16, dtype=torch.int32)
    b = torch.zeros(16, dtype=torch.int32)
    kernel(a, b)
    assert torch.equal(b, a * 2)
    a[5] = -3
    with pytest.raises(RuntimeError) as info:
        kernel(a, b)
    text = str(info.value)
    assert f"{THIS.name}:{line_of('python-assert')}" in text and "negative input" in text, text


def test_each_kernel_block_has_its_own_annotations():
    # T.use_swizzle in the first block of a kernel sequence does not reach the second
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            T.use_swizzle(panel_size=2)
            A[bx] = 1
        with T.Kernel(2, threads=32) as bx:
            A[bx + 2] = 2

    first, second = [s for s in main.body.seq if isinstance(s, tirx.For)]
    assert "tw.swizzle" in first.annotations and "tw.swizzle" not in second.annotations


def test_an_assert_of_a_run_time_value_outside_the_kernel_block_is_refused_at_its_line():
    N = T.dynamic("N")

    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((N,), "int32")):
            assert N % 4 == 0, "N must be a multiple of 4"  # host-assert
            with T.Kernel(1):
                A[0] = 1
    text = str(info.value)
    assert f"{THIS.name}:{line_of('host-assert')}" in text, text
    assert "inside 'with T.Kernel(...)'" in text, text
