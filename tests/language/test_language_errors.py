"""The errors a kernel author meets (issue 3, item 4), each naming the user's source line, and
ops or launch shapes that a backend cannot take."""

import dataclasses
import types
from importlib import metadata

import numpy as np
import pytest
import tilewright
import tilewright.language as T
import torch
from source_lines import Markers
from tilewright.plugin import (
    ENTRY_POINT_GROUP,
    Capabilities,
    PluginManager,
    hookimpl,
    set_manager,
)

_M = Markers(__file__)
line_of, assert_at = _M.line_of, _M.assert_at


def build(factory, *args, target="cpu"):
    return tilewright.jit(factory, out_idx=[-1], target=target)(*args)


# -- copy and gemm: ranks and shapes ------------------------------------------------------------
def test_copy_rank_mismatch():
    def k():
        @T.prim_func
        def main(A: T.Tensor((4, 8, 2), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bx:
                s = T.alloc_shared((4, 8), "float32")
                T.copy(A[0:4, 0:8, 0:2], s)  # copy-rank
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "copy-rank", "T.copy shape mismatch", "(4, 8, 2)", "(4, 8)")


def test_copy_start_element_cannot_hold_tile():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bx:
                s = T.alloc_shared((4, 8), "float32")
                T.copy(A[8], s)  # copy-start
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "copy-start", "T.copy", "rank 1", "'A'", "(4, 8)")


def test_reinterpret_in_tvms_argument_order():
    def k():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "int32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(4):
                    B[i] = T.reinterpret("int32", A[i])  # reinterpret-order
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "reinterpret-order", "T.reinterpret('int32', ...)", "value comes first")


def test_gemm_rank_mismatch():
    def k():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32"), C: T.Tensor((8, 8), "float32")):
            with T.Kernel(1) as bx:
                a = T.alloc_shared((2, 8, 8), "float32")
                b = T.alloc_shared((8, 8), "float32")
                c = T.alloc_fragment((8, 8), "float32")
                T.gemm(a, b, c)  # gemm-rank
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "gemm-rank", "T.gemm operand A", "2-D", "(2, 8, 8)")


def test_gemm_output_shape_mismatch_with_transpose():
    def k():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32"), C: T.Tensor((8, 8), "float32")):
            with T.Kernel(1) as bx:
                a = T.alloc_shared((16, 32), "float32")
                b = T.alloc_shared((8, 16), "float32")
                c = T.alloc_fragment((32, 16), "float32")
                T.gemm(a, b, c, transpose_A=True, transpose_B=True)  # gemm-shape
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "gemm-shape", "T.gemm shape mismatch", "(32, 8)", "(32, 16)")


# -- reduce output shapes: a ValueError -------------------------------------------------------
@pytest.mark.parametrize("kind,dim,out", [("max", 0, (16,)), ("min", 1, (8, 1)),
                                          ("absmax", -1, (1, 8)), ("abssum", 1, (2, 16))])
def test_reduce_wrong_output_shape(kind, dim, out):
    def k():
        @T.prim_func
        def main(A: T.Tensor((16, 8), "float32"), C: T.Tensor((16,), "float32")):
            with T.Kernel(1) as bx:
                t = T.alloc_fragment((16, 8), "float32")
                r = T.alloc_fragment(out, "float32")
                getattr(T, f"reduce_{kind}")(t, r, dim=dim)  # reduce-out
        return main

    with pytest.raises(ValueError) as info:
        build(k)
    assert isinstance(info.value, tilewright.KernelError)
    assert_at(info.value, "reduce-out", f"T.reduce_{kind}", str(out).replace(",)", ",)"))


def test_reduce_dim_out_of_range():
    def k():
        @T.prim_func
        def main(A: T.Tensor((16, 8), "float32"), C: T.Tensor((16,), "float32")):
            with T.Kernel(1) as bx:
                t = T.alloc_fragment((16, 8), "float32")
                r = T.alloc_fragment((16,), "float32")
                T.reduce_sum(t, r, dim=2)  # reduce-dim
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "reduce-dim", "dim=2", "rank 2")


# -- races in T.Parallel --------------------------------------------------------------------------
def test_parallel_reading_a_neighbour_it_writes_is_a_race():
    def k():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), C: T.Tensor((16,), "float32")):
            with T.Kernel(1) as bx:
                f = T.alloc_fragment((17,), "float32")
                T.copy(A, f[0:16])
                for i in T.Parallel(16):
                    f[i] = f[i + 1] * 2.0  # race-neighbour
                T.copy(f[0:16], C)
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "race-neighbour", "T.Parallel race", "f[i]", "f[i + 1]")


def test_parallel_shifted_column_in_a_2d_nest_is_a_race():
    def k():
        @T.prim_func
        def main(A: T.Tensor((4, 9), "float32"), C: T.Tensor((4, 9), "float32")):
            with T.Kernel(1) as bx:
                f = T.alloc_fragment((4, 9), "float32")
                T.copy(A, f)
                for i, j in T.Parallel(4, 8):
                    f[i, j + 1] = f[i, j]  # race-2d
                T.copy(f, C)
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "race-2d", "T.Parallel race", "f[i, j + 1]", "f[i, j]")


def test_parallel_accumulating_into_one_element_is_a_race():
    def k():
        @T.prim_func
        def main(A: T.Tensor((8, 16), "float32"), C: T.Tensor((8,), "float32")):
            with T.Kernel(1) as bx:
                f = T.alloc_fragment((8, 16), "float32")
                acc = T.alloc_fragment((8,), "float32")
                T.copy(A, f)
                T.clear(acc)
                for i, j in T.Parallel(8, 16):
                    acc[i] = acc[i] + f[i, j]  # race-accumulate
                T.copy(acc, C)
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "race-accumulate", "T.Parallel race", "j", "acc[i]", "T.reduce_")


def test_parallel_elementwise_update_in_place_is_not_a_race():
    def k():
        @T.prim_func
        def main(A: T.Tensor((8, 16), "float32"), C: T.Tensor((8, 16), "float32")):
            with T.Kernel(1) as bx:
                f = T.alloc_fragment((8, 16), "float32")
                T.copy(A, f)
                for i, j in T.Parallel(8, 16):
                    f[i, j] = f[i, j] * 2.0 + f[i, j]
                for i in T.Parallel(8):
                    for j in T.serial(15):
                        f[i, j + 1] = f[i, j + 1] + f[i, j]  # a serial scan per row
                T.copy(f, C)
        return main

    a = torch.randn(8, 16)
    torch.testing.assert_close(build(k)(a), (3 * a).cumsum(1), rtol=1e-5, atol=1e-5)


# -- loops ---------------------------------------------------------------------------------------
def test_pipelined_nested_through_a_serial_loop():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for k in T.Pipelined(4, num_stages=2):
                    for j in T.serial(2):
                        for m in T.Pipelined(8, num_stages=2):  # nested-deep
                            C[k * 16 + j * 8 + m] = A[k * 16 + j * 8 + m]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "nested-deep", "T.Pipelined cannot be nested")


def test_pipelined_inside_parallel():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(4):
                    for m in T.Pipelined(16, num_stages=2):  # pipelined-in-parallel
                        C[i * 16 + m] = A[i * 16 + m]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "pipelined-in-parallel", "T.Pipelined", "T.Parallel")


# -- dynamic dimensions that no argument gives ---------------------------------------------------
def test_a_dynamic_dimension_only_in_an_expression_is_solved_at_call():
    # TileLang reads n from A's n * 2 elements (tools/port_tilelang_tests.py found it); a size
    # no integer n gives is refused naming the dimension
    @tilewright.jit(out_idx=[-1], target="cpu")
    def twice():
        n = T.dynamic("n")

        @T.prim_func
        def main(A: T.Tensor((n * 2,), "float32"), C: T.Tensor((n,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.serial(n):
                    C[i] = A[2 * i] + A[2 * i + 1]
        return main

    kernel = twice()
    a = torch.randn(8)
    torch.testing.assert_close(kernel(a), a[0::2] + a[1::2])
    with pytest.raises(TypeError) as info:
        kernel(torch.randn(7))
    assert isinstance(info.value, tilewright.ArgumentError)
    assert "dimension 0 must be n * 2 for an integer n, got 7" in str(info.value)


def test_a_dynamic_dimension_never_whole_is_read_from_the_expression():
    @tilewright.jit(out_idx=[-1], target="cpu")
    def even_sum():
        n = T.dynamic("n")

        @T.prim_func
        def main(A: T.Tensor((n * 2,), "float32"), C: T.Tensor((1,), "float32")):
            with T.Kernel(1) as bx:
                C[0] = 0.0
                for i in T.serial(n):
                    C[0] = C[0] + A[2 * i]
        return main

    a = torch.randn(10)
    torch.testing.assert_close(even_sum()(a), a[0::2].sum().reshape(1))


def test_eager_dynamic_dimension_only_in_output_is_type_error_at_call():
    @tilewright.jit(target="cpu")
    def widen(A):
        M = T.const("M")
        n = T.dynamic("n")
        A: T.Tensor((M,), T.float32)
        C = T.empty((M, n), T.float32)
        with T.Kernel(1) as bx:
            for i in T.serial(M):
                C[i, 0] = A[i]
        return C

    with pytest.raises(TypeError) as info:
        widen(torch.randn(4))
    assert "'n'" in str(info.value) or " n " in str(info.value), str(info.value)


# -- backends that cannot take a kernel ---------------------------------------------------------
def _backend_like_cpu(name, *, tile_ops=None, features=frozenset()):
    from tilewright_cpu import plugin as cpu

    caps = cpu.BACKEND.capabilities
    return dataclasses.replace(
        cpu.BACKEND, name=name, target_kinds=(name,),
        pipelines={name: cpu.BACKEND.pipelines["cpu"]},
        codegens={name: cpu.BACKEND.codegens["cpu"]},
        capabilities=Capabilities(frozenset(caps.tile_ops if tile_ops is None else tile_ops),
                                  caps.dtypes, caps.memory_scopes, frozenset(features)))


@pytest.fixture(scope="module")
def fake_backends():
    """The CPU plugin plus two fakes reusing its pipeline: ``warpy`` runs whole warps,
    ``nogemm`` has neither GEMM nor atomics."""
    module = types.ModuleType("fake_backends")
    backends = [_backend_like_cpu("warpy", features={"warps"}),
                _backend_like_cpu("nogemm", tile_ops={"copy", "fill"})]
    module.tilewright_backends = hookimpl(lambda: backends)
    module.tilewright_backends.__name__ = "tilewright_backends"
    cpu_ep = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "cpu"]
    manager = PluginManager(entry_points=cpu_ep).load()
    manager.register(module, "fake_backends")
    previous = set_manager(manager)
    yield
    set_manager(previous)


def copy_kernel(threads):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=threads) as bx:  # threads-line
            s = T.alloc_shared((32,), "float32")
            T.copy(A[bx * 32], s)
            T.copy(s, C[bx * 32])
    return main


@pytest.mark.parametrize("threads", [48, (16, 3)])
def test_threads_not_a_multiple_of_32_on_a_warp_backend(fake_backends, threads):
    with pytest.raises(tilewright.KernelError) as info:
        build(copy_kernel, threads, target="warpy")
    assert_at(info.value, "threads-line", "48 threads per block", "'warpy'", "multiple of 32")


def test_warp_backend_runs_a_good_block_size_and_cpu_takes_any(fake_backends):
    a = torch.randn(64)
    torch.testing.assert_close(build(copy_kernel, 64, target="warpy")(a), a)
    torch.testing.assert_close(build(copy_kernel, 48, target="cpu")(a), a)


def test_op_a_backend_cannot_lower_names_op_backend_and_line(fake_backends):
    def k():
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32"), C: T.Tensor((16, 16), "float32")):
            with T.Kernel(1) as bx:
                s = T.alloc_shared((16, 16), "float32")
                f = T.alloc_fragment((16, 16), "float32")
                T.copy(A, s)
                T.clear(f)
                T.gemm(s, s, f)  # no-gemm
                T.copy(f, C)
        return main

    with pytest.raises(tilewright.UnsupportedOpError) as info:
        build(k, target="nogemm")
    assert_at(info.value, "no-gemm", "T.gemm", "'nogemm'")
    assert str(info.value).count("\n") <= 1  # one sentence (and the source excerpt)


def test_expression_intrinsic_a_backend_cannot_lower_names_the_line(fake_backends):
    def k():
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), C: T.Tensor((4,), "int32")):
            with T.Kernel(4) as bx:
                s = T.alloc_shared((1,), "int32")
                T.fill(s, 0)
                C[bx] = T.atomic_add(A[0], 1, return_prev=True)  # no-atomic
        return main

    with pytest.raises(tilewright.UnsupportedOpError) as info:
        build(k, target="nogemm")
    assert_at(info.value, "no-atomic", "atomic_add", "'nogemm'")


def test_postponed_annotations_see_the_factorys_arguments():
    # from __future__ import annotations: T.Tensor((M, N), ...) is a string evaluated with
    # the names the kernel closes over
    import postponed_kernels

    kernel = tilewright.compile(postponed_kernels.scale(64, 96, 3.0), out_idx=[1],
                                target="cpu")
    a = torch.randn(64, 96)
    torch.testing.assert_close(kernel(a), a * 3.0)


def test_a_postponed_annotation_naming_a_local_of_the_factory_only_says_so():
    import postponed_kernels

    with pytest.raises(tilewright.KernelError, match=r"cannot evaluate the annotations of main: "
                       r"name 'rows' is not defined \(the annotations are postponed strings: a "
                       r"name they use must be a global or also be used in the kernel's body\)"):
        postponed_kernels.annotation_only(64, 96, 64)


def test_a_buffer_assigned_to_an_alloc_var_is_refused_at_its_line():
    def k():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=16):
                s = T.alloc_shared((16,), "float32")
                v = T.alloc_var("float32")
                v = s  # var-takes-buffer
                for i in T.Parallel(16):
                    B[i] = v + A[i]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "var-takes-buffer", "v is a T.alloc_var scalar", "s a buffer of shape "
              "[16]", "v = s[i]")


def test_an_alloc_var_name_can_name_a_new_allocation():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            v = T.alloc_var("float32", init=A[0])
            B[0] = v
            v = T.alloc_var("float32", init=A[1])
            B[1] = v
            v = T.alloc_local((2,), "float32")
            v[0], v[1] = A[2], A[3]
            B[2], B[3] = v[1], v[0]

    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.zeros(4)
    tilewright.compile(main, target="cpu")(a, b)
    assert b.tolist() == [1.0, 2.0, 4.0, 3.0]


def test_while_with_a_runtime_condition_on_a_backend_without_while_loops(fake_backends):
    def k():
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), C: T.Tensor((4,), "int32")):
            with T.Kernel(1):
                x = T.alloc_var("int32", init=A[0])
                while x > 1:  # while-line
                    x = x // 2
                C[0] = x
        return main

    with pytest.raises(tilewright.UnsupportedOpError) as info:
        build(k, target="nogemm")
    assert_at(info.value, "while-line", "'nogemm'", "'while' loop", "T.serial")


def test_several_kernel_blocks_on_a_backend_without_kernel_sequence(fake_backends):
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            W = T.alloc_global((64,), "float32")
            with T.Kernel(1, threads=32):
                for i in T.Parallel(64):
                    W[i] = A[i] * 2.0
            with T.Kernel(1, threads=32):  # second-block
                for i in T.Parallel(64):
                    C[i] = W[63 - i]
        return main

    with pytest.raises(tilewright.UnsupportedOpError) as info:
        build(k, target="warpy")
    # the backends that have the feature, from the plugin manager: here the CPU plugin only
    assert_at(info.value, "second-block", "2 'with T.Kernel' blocks", "backend 'warpy'",
              "'kernel_sequence' feature (cpu)")


def test_a_strided_tensor_on_a_backend_without_strided_tensors(fake_backends):
    def k():
        @T.prim_func
        def main(A: T.StridedTensor((4, 8), (T.dynamic("s"), 1), "float32"),
                 C: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=32):  # strided-kernel
                for i, j in T.Parallel(4, 8):
                    C[i, j] = A[i, j] * 2.0  # strided-use
        return main

    def unused():
        @T.prim_func
        def main(A: T.StridedTensor((4, 8), (8, 1), "float32"), C: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=32):  # strided-unused
                for i, j in T.Parallel(4, 8):
                    C[i, j] = 1.0
        return main

    for factory, line in ((k, "strided-use"), (unused, "strided-unused")):
        with pytest.raises(tilewright.UnsupportedOpError) as info:
            build(factory, target="warpy")
        assert_at(info.value, line, "parameter 'A' is a T.StridedTensor", "backend 'warpy'",
                  "declare it with T.Tensor", "'strided_tensors' feature (cpu)")


def test_while_with_a_runtime_condition_cannot_break():
    def k():
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), C: T.Tensor((4,), "int32")):
            with T.Kernel(1):
                x = T.alloc_var("int32", init=A[0])
                while x > 1:  # while-break
                    if x == 7:
                        break
                    x = x // 2
                C[0] = x
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "while-break", "'break' or 'continue'", "compile time")


# -- reducers: the rules of an epoch (TileLang's, each at the offending line) --------------------
@T.macro
def update_before_init(acc, src, out):
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])  # red-update-early
    T.finalize_reducer(acc, out)


@T.macro
def never_finalized(acc, src, out):
    T.reducer_init(acc)  # red-unclosed
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])


@T.macro
def older_update_in_an_epoch_of_reducer_init(acc, src, out):
    T.reducer_init(acc)
    for i in T.Parallel(8):
        acc[0] += src[i]  # red-plus-equals
    T.finalize_reducer(acc, out)


@T.macro
def read_before_finalize(acc, src, out):
    T.reducer_init(acc)
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])
    out[0] = acc[0]  # red-read
    T.finalize_reducer(acc, out)


@T.macro
def read_after_finalize(acc, src, out):
    T.reducer_init(acc)
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])
    T.finalize_reducer(acc, out)
    out[0] = acc[0] * 2.0  # red-read-late


@T.macro
def clear_in_an_epoch_of_reducer_init(acc, src, out):
    T.reducer_init(acc)
    T.clear(acc)  # red-clear
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])
    T.finalize_reducer(acc, out)


@T.macro
def clear_then_finalize_into_a_destination(acc, src, out):
    T.clear(acc)
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])
    T.finalize_reducer(acc, out)  # red-older-dst


@T.macro
def update_outside_parallel(acc, src, out):
    T.reducer_init(acc)
    T.reducer_update(acc[0], src[0])  # red-uniform
    T.finalize_reducer(acc, out)


@T.macro
def init_twice(acc, src, out):
    T.reducer_init(acc)
    T.reducer_init(acc)  # red-init-twice
    T.finalize_reducer(acc, out)


@T.macro
def init_in_parallel(acc, src, out):
    for i in T.Parallel(8):
        T.reducer_init(acc)  # red-init-parallel
        T.reducer_update(acc[0], src[i])
    T.finalize_reducer(acc, out)


@T.macro
def finalize_outside_the_loop_of_the_init(acc, src, out):
    for _ in T.serial(4):
        T.reducer_init(acc)
        for i in T.Parallel(8):
            T.reducer_update(acc[0], src[i])
    T.finalize_reducer(acc, out)  # red-scope-out


@T.macro
def finalize_in_a_loop_the_init_is_not_in(acc, src, out):
    T.reducer_init(acc)
    for _ in T.serial(4):
        for i in T.Parallel(8):
            T.reducer_update(acc[0], src[i])
        T.finalize_reducer(acc, out)  # red-scope-loop


@T.macro
def finalize_in_place_an_epoch_of_reducer_init(acc, src, out):
    T.reducer_init(acc)
    T.finalize_reducer(acc)  # red-in-place


@T.macro
def finalize_twice(acc, src, out):
    T.reducer_init(acc)
    T.finalize_reducer(acc, out)
    T.finalize_reducer(acc, out)  # red-finalize-twice


@T.macro
def update_after_finalize(acc, src, out):
    T.reducer_init(acc)
    T.finalize_reducer(acc, out)
    for i in T.Parallel(8):
        T.reducer_update(acc[0], src[i])  # red-update-late


@T.macro
def finalize_before_init(acc, src, out):
    T.finalize_reducer(acc, out)  # red-finalize-early


@T.macro
def finalize_into_a_reducer(acc, src, out):
    other = T.alloc_reducer((1,), "float32")
    T.reducer_init(other)
    T.reducer_init(acc)
    T.finalize_reducer(acc, other)  # red-into-reducer


@T.macro
def starting_value_of_another_dtype(acc, src, out):
    T.reducer_init(acc, T.float16(1.0))  # red-seed-dtype
    T.finalize_reducer(acc, out)


@T.macro
def never_initialized(acc, src, out):
    out[0] = 0.0


@T.macro
def batch_above_the_outputs(acc, src, out):
    T.reducer_init(acc)
    T.finalize_reducer(acc, out, batch=2)  # red-batch


def reducer_misuse(body):
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((8,), "float32")
            out = T.alloc_fragment((1,), "float32")
            T.copy(A, src)
            acc = T.alloc_reducer((1,), "float32", op="sum")  # red-alloc
            body(acc, src, out)
            T.copy(out, B)
    return main


@pytest.mark.parametrize("body,marker,words", [
    (update_before_init, "red-update-early", ["T.reducer_update on reducer 'acc' before "
                                              "T.reducer_init"]),
    (never_finalized, "red-unclosed", ["reducer 'acc' is initialized but never finalized"]),
    (older_update_in_an_epoch_of_reducer_init, "red-plus-equals",
     ["illegal store to reducer 'acc'", "T.reducer_update(acc[...], x) only"]),
    (read_before_finalize, "red-read", ["illegal read of reducer 'acc'", "before "
                                        "T.finalize_reducer"]),
    (read_after_finalize, "red-read-late", ["illegal read of reducer 'acc' after "
                                            "T.finalize_reducer", "destination"]),
    (clear_in_an_epoch_of_reducer_init, "red-clear", ["illegal store to reducer 'acc'",
                                                      "T.fill / T.clear"]),
    (clear_then_finalize_into_a_destination, "red-older-dst",
     ["illegal T.finalize_reducer(acc, dst)", "finalizes in place"]),
    (update_outside_parallel, "red-uniform", ["reducer 'acc' outside any T.Parallel loop"]),
    (init_twice, "red-init-twice", ["double T.reducer_init on reducer 'acc'"]),
    (init_in_parallel, "red-init-parallel", ["T.reducer_init of reducer 'acc' inside a "
                                             "T.Parallel loop"]),
    (finalize_outside_the_loop_of_the_init, "red-scope-out",
     ["reducer 'acc' is not in the scope of its T.reducer_init"]),
    (finalize_in_a_loop_the_init_is_not_in, "red-scope-loop",
     ["reducer 'acc' is not in the scope of its T.reducer_init"]),
    (finalize_in_place_an_epoch_of_reducer_init, "red-in-place",
     ["without a destination", "T.finalize_reducer(acc, dst)"]),
    (finalize_twice, "red-finalize-twice", ["double T.finalize_reducer on reducer 'acc'"]),
    (update_after_finalize, "red-update-late", ["reducer 'acc' after T.finalize_reducer"]),
    (finalize_before_init, "red-finalize-early", ["T.finalize_reducer on reducer 'acc' before "
                                                  "T.reducer_init"]),
    (finalize_into_a_reducer, "red-into-reducer", ["must be an ordinary fragment, not a "
                                                   "reducer"]),
    (starting_value_of_another_dtype, "red-seed-dtype",
     ["dtype float16 does not match reducer 'acc' of dtype float32"]),
    (never_initialized, "red-alloc", ["reducer 'acc' is allocated but never initialized"]),
    (batch_above_the_outputs, "red-batch", ["batch (2) exceeds total output elements (1)"]),
], ids=lambda v: v.__name__ if isinstance(v, T.Macro) else None)
def test_reducer_misuse_is_refused_at_its_line(body, marker, words):
    with pytest.raises(tilewright.KernelError) as info:
        build(reducer_misuse, body)
    assert_at(info.value, marker, *words)


def test_a_store_of_what_is_no_value_is_refused_at_its_line():
    def k():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                A[0] = "x"  # store-a-string
        return main

    with pytest.raises(tilewright.KernelError) as info:
        k()
    assert_at(info.value, "store-a-string", "expected a value", "got str 'x'")


def test_numpy_scalars_store_their_values():
    """``A[i] = np.int64(3)`` into a float32 tensor converts as Python's 3 does (TVM took the
    numpy integer as int32 and failed: "dtype mismatch on BufferStore")."""
    values = (np.int64(3), np.float32(2.5), np.bool_(True), np.uint8(200))

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            for n, v in enumerate(values):
                A[n] = v

    a = torch.zeros(4)
    tilewright.compile(main, target="cpu")(a)
    assert a.tolist() == [3.0, 2.5, 1.0, 200.0]


@pytest.mark.parametrize("op", ["<<", ">>", "&", "|", "^", "~"])
def test_bitwise_operators_of_floats_are_refused_at_their_line(op):
    """``A[i] & 3`` of a float32 ``A`` stopped deep in TVM ("Expected integer argument as LHS
    of & operator"); ints and bools keep Python's operators."""
    def k():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "int32")):
            with T.Kernel(1):
                ops = {"<<": lambda a: a << 2, ">>": lambda a: a >> 2,  # shifts
                       "&": lambda a: a & 2, "|": lambda a: a | 2,  # and-or
                       "^": lambda a: a ^ 2, "~": lambda a: ~a}  # xor-not
                for i in T.Parallel(16):
                    B[i] = T.cast(ops[op](A[i]), "int32")
        return main

    with pytest.raises(tilewright.KernelError) as info:
        k()
    marker = {"<<": "shifts", ">>": "shifts", "&": "and-or", "|": "and-or"}.get(op, "xor-not")
    assert_at(info.value, marker, f"'{op}' needs integer operands, got float32",
              "T.reinterpret")


def test_a_macro_called_with_arguments_it_does_not_take_is_refused_at_the_call():
    @T.macro
    def scale(x, y, factor=2.0):
        x[0] = y * factor

    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                scale(A)  # macro-call
    assert_at(info.value, "macro-call", "T.macro scale(x, y, factor=2.0)",
              "missing a required argument: 'y'")
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("divisor", ["ceildiv", "floordiv", "floormod"])
def test_a_constant_zero_divisor_is_refused_at_its_line(divisor):
    """``T.ceildiv(n, 0)`` raised Python's ZeroDivisionError, ``A[i] // 0`` TVM's "Divide by
    zero" check; both name the line now."""
    def k(block):
        @T.prim_func
        def main(A: T.Tensor((16,), "int32")):
            with T.Kernel(T.ceildiv(16, block if divisor == "ceildiv" else 1)):  # grid-div
                for i in T.Parallel(16):
                    A[i] = A[i] // block if divisor == "floordiv" else A[i] % block  # elem-div
        return main

    with pytest.raises(tilewright.KernelError) as info:
        k(0)
    assert_at(info.value, "grid-div" if divisor == "ceildiv" else "elem-div", "by zero")


def test_a_message_that_is_no_string_is_refused_at_its_line():
    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                T.print(A[0], msg=5)  # print-number
    assert_at(info.value, "print-number", "T.print's message must be a string, got int 5")
