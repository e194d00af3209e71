"""Kernel bounds: sizes past the index type, inputs the generated code cannot address as they
are, accesses outside their buffers, and inputs that require grad."""

from __future__ import annotations

import warnings

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.runtime import call as call_mod


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(call_mod, "_WARNED", set())


@tilewright.jit(out_idx=[-1], target="cpu")
def scale_dynamic():
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 256)) as bx:
            for i in T.Parallel(256):
                if bx * 256 + i < n:
                    C[bx * 256 + i] = A[bx * 256 + i] * 2.0
    return main


@tilewright.jit(target="cpu")
def add_in_place():
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 64)) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    A[bx * 64 + i] = A[bx * 64 + i] + B[bx * 64 + i]
    return main


def test_a_dimension_past_the_index_type_is_an_error_not_garbage():
    kernel = scale_dynamic()
    huge = torch.empty(1, dtype=torch.float32).expand(2**31 + 5)  # no memory behind it
    with pytest.raises(tilewright.ArgumentError, match=r"does not fit the kernel's int32"):
        kernel(huge)


@pytest.mark.parametrize("make", [
    lambda x: x[1:257],           # a storage offset that breaks 64-byte alignment
    lambda x: x[:512:2],          # strided
    lambda x: x.view(2, 500).t().reshape(-1)[:256].contiguous()[3:259],
])
def test_offset_and_strided_inputs_are_copied_not_crashed(make):
    x = torch.randn(1000)
    view = make(x)
    torch.testing.assert_close(scale_dynamic()(view), view * 2.0)


def test_a_written_strided_input_is_written_back():
    base = torch.randn(400)
    a = base[1:401:2]   # 200 elements, stride 2, offset 1
    b = torch.randn(200)
    expected = a + b
    add_in_place()(a, b)
    torch.testing.assert_close(a, expected)


def test_scalar_arguments_are_checked_against_their_dtype():
    @tilewright.jit(out_idx=[-1], target="cpu")
    def shift():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), k: T.int32, C: T.Tensor((8,), "int32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(8):
                    C[i] = A[i] + k
        return main

    kernel = shift()
    a = torch.arange(8, dtype=torch.int32)
    torch.testing.assert_close(kernel(a, 3), a + 3)
    with pytest.raises(tilewright.ArgumentError, match="does not fit its dtype int32"):
        kernel(a, 2**40)
    with pytest.raises(tilewright.ArgumentError, match="integer scalar"):
        kernel(a, 1.5)


def test_requires_grad_inputs_get_a_warning():
    x = torch.randn(64, requires_grad=True)
    with pytest.warns(RuntimeWarning, match="requires grad.*not connected to autograd"):
        scale_dynamic()(x)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        scale_dynamic()(x)


# -- accesses outside their buffers ------------------------------------------------------------
def _compile(func, **kw):
    return tilewright.compile(func, out_idx=[-1], target="cpu", **kw)


def test_a_constant_index_past_the_end_is_a_compile_error():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            C[0] = A[64]  # the line

    with pytest.raises(tilewright.KernelError) as info:
        _compile(main)
    assert "test_kernel_bounds.py" in str(info.value) and "# the line" in str(info.value)
    assert "always outside [0, 64)" in str(info.value)


def test_a_negative_index_counts_from_the_end():
    # as in Python and TileLang's LegalizeNegativeIndex: A[-1] is the last element, and an
    # index negative in every iteration counts from the end; one below minus the size is
    # still an error
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), S: T.Tensor((4, 4), "float32"),
             C: T.Tensor((6,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.serial(4):
                C[i] = A[-i - 1]
            C[4] = A[-16] + S[-1, -4]
            C[-1] = 7

    a, s = torch.arange(16.0), torch.arange(16.0).view(4, 4)
    assert _compile(main)(a, s).tolist() == [15, 14, 13, 12, 0 + 12, 7]

    @T.prim_func
    def below(A: T.Tensor((16,), "float32"), C: T.Tensor((1,), "float32")):
        with T.Kernel(1) as bx:
            C[0] = A[-17]

    with pytest.raises(tilewright.KernelError, match=r"always outside \[0, 16\)"):
        _compile(below)


def test_a_store_that_leaves_its_tile_is_a_compile_error():
    # a shared tile of 4 elements written with 16 (a fragment indexed by exactly the loop's
    # variables takes the loop's extents instead, as TileLang's layout inference gives it)
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
            sinks = T.alloc_shared((4,), "float32")
            for i in T.Parallel(16):
                sinks[i] = A[i]  # the line
            T.copy(sinks, C)

    with pytest.raises(tilewright.KernelError, match=r"leaves tile sinks.*ranges over \[0, 15\]"):
        _compile(main)


def test_a_guarded_tile_access_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
            sinks = T.alloc_fragment((4,), "float32")
            for i in T.Parallel(16):
                if i < 4:
                    sinks[i] = A[i]
            T.copy(sinks, C)

    a = torch.randn(64)
    torch.testing.assert_close(_compile(main)(a), a[:4])


def test_a_copy_wholly_outside_a_tensor_is_a_warning():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((32,), "float32")):
        with T.Kernel(1) as bx:
            s = T.alloc_shared((32,), "float32")
            T.copy(A[96:128], s)  # the line
            T.copy(s, C)

    with pytest.warns(RuntimeWarning, match="lies wholly outside its shape"):
        _compile(main)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_bounds_check_stops_the_kernel_at_the_users_line(target):
    @T.prim_func
    def gather(A: T.Tensor((64,), "float32"), I: T.Tensor((8,), "int32"),
               C: T.Tensor((8,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                C[i] = A[I[i]]  # the gather

    kernel = tilewright.compile(gather, out_idx=[-1], target=target,
                                pass_configs={"tw.bounds_check": True})
    a, good = torch.randn(64), torch.arange(8, dtype=torch.int32)
    torch.testing.assert_close(kernel(a, good), a[good.long()])
    with pytest.raises(RuntimeError, match=r"test_kernel_bounds.py:\d+: index out of bounds"):
        kernel(a, torch.tensor([0, 1, 2, 3, 4, 5, 6, 64], dtype=torch.int32))


def _scaled_tail(n_sym):
    @T.prim_func
    def main(A: T.Tensor((n_sym,), "float32"), C: T.Tensor((n_sym,), "float32")):
        with T.Kernel(T.ceildiv(n_sym, 64)) as bx:
            s = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64], s)
            for i in T.Parallel(64):
                C[bx * 64 + i] = s[i] * 2.0  # the unguarded store
    return main


@pytest.mark.parametrize("target", ["cpu", "interp", "ascend"])
def test_bounds_check_on_every_backend_that_runs_here(target):
    if target not in tilewright.plugin.get_manager().backends():
        pytest.skip(f"backend {target} is not installed")
    kernel = tilewright.compile(_scaled_tail(T.dynamic("n")), out_idx=[-1], target=target,
                                pass_configs={"tw.bounds_check": True})
    a = torch.randn(128)
    torch.testing.assert_close(kernel(a), a * 2.0)
    with pytest.raises(Exception, match=r"test_kernel_bounds.py:\d+: index out of bounds: "
                                        r"C\[bx \* 64 \+ i\]"):
        kernel(torch.randn(100))  # the second block stores past the end


def test_bounds_check_in_generated_cuda():
    if "cuda" not in tilewright.plugin.get_manager().backends():
        pytest.skip("backend cuda is not installed")
    source = tilewright.lower(_scaled_tail(T.dynamic("n")), target="cuda -arch=sm_90a",
                              pass_configs={"tw.bounds_check": True}).source.text
    assert "index out of bounds: C[bx * 64 + i]" in source


def test_an_index_computed_from_a_value_read_at_run_time_is_not_bounded_statically():
    # (x * 4) // 64 of an int32 read from memory: the division of int32's limits is not the
    # index's range (TileLang's dequantisers index shared tiles by the thread index kept in a
    # variable this way); it is guarded at run time under tw.bounds_check
    @T.prim_func
    def main(I: T.Tensor((4,), "int32"), A: T.Tensor((16, 64), "float32"),
             C: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
            tile = T.alloc_shared((16, 64), "float32")
            T.copy(A, tile)
            for i in T.serial(4):
                C[i] = tile[(I[i] * 4) // 64, (I[i] * 4) % 64]

    kernel = _compile(main)
    index = torch.tensor([0, 17, 200, 255], dtype=torch.int32)
    a = torch.randn(16, 64)
    c = kernel(index, a)
    flat = index * 4
    assert torch.equal(c, a[flat // 64, flat % 64])


def test_a_value_read_at_run_time_and_bounded_on_one_side_is_not_bounded_statically():
    # under `if x >= 256`, (x - 256) // 8 of an int32 read from memory is bounded below only:
    # the division of int32's upper limit is not the index's range (TileLang's producer
    # warpgroups index shared tiles by the thread index kept in a variable, (tx - 256) // 8)
    @T.prim_func
    def main(I: T.Tensor((4,), "int32"), A: T.Tensor((16, 64), "float32"),
             C: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
            tile = T.alloc_shared((16, 64), "float32")
            T.copy(A, tile)
            for i in T.serial(4):
                if I[i] >= 256:
                    C[i] = tile[(I[i] - 256) // 64, (I[i] - 256) % 64]

    kernel = _compile(main)
    index = torch.tensor([256, 300, 1000, 1279], dtype=torch.int32)
    a = torch.randn(16, 64)
    c = kernel(index, a)
    flat = index - 256
    assert torch.equal(c, a[flat // 64, flat % 64])


# -- indices non-linear in loops whose ranges depend on enclosing loops -----------------------
def _butterfly(extra_k=0, extra_j=0):
    """TileLang's in-thread Hadamard butterfly over 8 elements (hadamard_transform): chunks of
    c = 2, 4, 8; ``extra_k``/``extra_j`` widen the inner loops past the tile."""
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            local = T.alloc_local((8,), "float32")
            for i in T.serial(8):
                local[i] = A[i]
            for i in T.serial(3):
                for j in T.serial(8 // (1 << (i + 1)) + extra_j):
                    for k in T.serial((1 << (i + 1)) // 2 + extra_k):
                        local[j * (1 << (i + 1)) + k] = local[j * (1 << (i + 1)) + k] + \
                            local[j * (1 << (i + 1)) + k + (1 << (i + 1)) // 2]
                        local[j * (1 << (i + 1)) + k + (1 << (i + 1)) // 2] = \
                            local[j * (1 << (i + 1)) + k] - \
                            2.0 * local[j * (1 << (i + 1)) + k + (1 << (i + 1)) // 2]
            for i in T.serial(8):
                B[i] = local[i]
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_butterfly_over_dependent_loop_ranges_is_in_bounds(target):
    # j * (1 << (i + 1)) + k + ... reaches 27 + 4 by intervals, 7 for each i
    kernel = tilewright.compile(_butterfly(), out_idx=[-1], target=target)
    h = torch.ones(1, 1)
    for _ in range(3):
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    a = torch.randn(8)
    torch.testing.assert_close(kernel(a), h @ a)


@pytest.mark.parametrize(("extra", "reach"), [({"extra_k": 1}, "[1, 8]"),
                                              ({"extra_j": 1}, "[0, 11]")])
def test_a_butterfly_one_past_the_tile_is_still_refused(extra, reach):
    with pytest.raises(tilewright.KernelError) as info:
        _compile(_butterfly(**extra))
    text = str(info.value)
    # at the user's line, with the range the cases give (the intervals' reach 31 or 39)
    assert "leaves tile local of shape (8)" in text
    assert "| local[j * (1 << (i + 1)) + k] = local[j * (1 << (i + 1)) + k] + \\" in text
    assert f"ranges over {reach}" in text


@pytest.mark.parametrize("extra", [0, 1])
def test_a_tile_region_over_dependent_loop_ranges(extra):
    @T.prim_func
    def main(A: T.Tensor((2,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            s = T.alloc_shared((8,), "float32")
            T.clear(s)
            for i in T.serial(3):
                for j in T.serial(8 // (1 << (i + 1)) + extra):
                    T.copy(A[0:2], s[j * (1 << (i + 1)):j * (1 << (i + 1)) + 2])  # the copy
            T.copy(s, B)

    if extra:
        with pytest.raises(tilewright.KernelError, match=r"(?s)leaves its shape \(8\): the "
                                                         r"start ranges over \[0, 8\].*# the copy"):
            _compile(main)
        return
    a = torch.randn(2)
    torch.testing.assert_close(_compile(main)(a), a.repeat(4))


def _powers(count: int):
    """Powers of two into a local tile of 8, under a condition the analysis does not bound the
    exponent with (``i * i < count``): ``1 << i`` over 70 iterations is no int32 range, nor is
    any case of it (70 values are more than the cases the check splits into)."""
    @T.prim_func
    def main(B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            local = T.alloc_local((8,), "float32")
            for i in T.serial(8):
                local[i] = 0.0
            for i in T.serial(70):
                if i * i < count:
                    local[1 << i] = local[1 << i] + 1.0  # the store
            for i in T.serial(8):
                B[i] = local[i]
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_an_index_no_range_bounds_is_proven_iteration_by_iteration(target):
    kernel = tilewright.compile(_powers(9), out_idx=[-1], target=target)  # i = 0, 1, 2
    assert kernel().tolist() == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_an_index_no_range_bounds_is_refused_at_the_iteration_that_leaves():
    # i = 3 stores at 8: accepted before (a write past the tile on every backend)
    with pytest.raises(tilewright.KernelError) as info:
        _compile(_powers(10))
    text = str(info.value)
    assert "leaves tile local of shape (8)" in text and "is 8 when i = 3" in text
    assert "# the store" in text
