"""Portable kernels that the Ascend backend once got wrong, checked on the emulator against the
CPU reference backend (or torch)."""

import tilewright
import tilewright.language as T
import torch


def _both(func, *tensors, out_idx=(-1,)):
    """The kernel's outputs on the cpu backend and on the Ascend emulator."""
    outs = []
    for target in ("cpu", "ascend"):
        kernel = tilewright.compile(func, out_idx=list(out_idx), target=target)
        outs.append(kernel(*[t.clone() for t in tensors]))
    return outs


def rebound_tile(M=32, N=32, bm=16, bn=16, dtype="float32"):
    """``t`` names two tiles: the frontend gives both buffers the name ``t``."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            t = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], t)
            u = T.alloc_fragment((bm, bn), dtype)
            for i, j in T.Parallel(bm, bn):
                u[i, j] = t[i, j] * 2.0
            t = T.alloc_fragment((bm, bn), dtype)
            for i, j in T.Parallel(bm, bn):
                t[i, j] = u[i, j] + 1.0
            T.copy(t, B[by * bm, bx * bn])

    return main


def test_a_python_variable_rebound_to_a_second_tile():
    a = torch.randn(32, 32)
    cpu, ascend = _both(rebound_tile(), a)
    torch.testing.assert_close(cpu, a * 2 + 1)
    torch.testing.assert_close(ascend, cpu)


def test_the_seeds_first_ascend_example_fills_all_of_ub():
    """``vec_add(M, N, 128, 256)`` in float: three 64 KiB UB tiles, all 192 KiB of UB. The 256
    bytes the vendor's ASC_UB_SIZE keeps back belong to the Matmul library's message slot,
    which generated code never uses."""
    import ascend_kernels as K

    a, b = torch.randn(256, 512), torch.randn(256, 512)
    kernel = tilewright.compile(K.vec_add(256, 512, 128, 256), out_idx=[-1], target="ascend")
    torch.testing.assert_close(kernel(a, b), a + b)


def floor_index(N=16, dtype="float32"):
    """Floor division and modulo of negative operands in an index and as data."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[(i - 3) // 4 + 1] + T.cast((i - 3) % 4, dtype)

    return main


def test_floor_division_and_modulo_of_negative_operands():
    a = torch.randn(16)
    cpu, ascend = _both(floor_index(), a)
    i = torch.arange(16)
    torch.testing.assert_close(cpu, a[(i - 3) // 4 + 1] + ((i - 3) % 4).float())
    torch.testing.assert_close(ascend, cpu)


def row_sum_kernel(M=8, N=1001, bn=1024):
    """One column tile wider than the tensor: the copy leaves lanes 1001-1023 to padding."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, bn), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X[0, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, Y[0])

    return main


def test_a_partial_column_tile_reduces_to_the_row_sum():
    """DataCopyPad without padding fills the lanes up to the 32-byte boundary with the row's
    first element (DataCopyPad（GMToUB非对齐数据搬运）.md): the copy must pad with zeros."""
    x = torch.randn(8, 1001)
    kernel = tilewright.compile(row_sum_kernel(), out_idx=[-1], target="ascend")
    torch.testing.assert_close(kernel(x), x.sum(1), rtol=1e-4, atol=1e-3)
    assert "DataCopyPadExtParams<float>(true, 0, " in kernel.get_kernel_source()


def tall_softmax(M=600, N=8, dtype="float32"):
    """600 rows in one block: more rows than one reduction instruction repeats (255)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), dtype)
            m = T.alloc_fragment((M,), dtype)
            s = T.alloc_fragment((M,), dtype)
            T.copy(X[0, 0], x)
            T.reduce_max(x, m, dim=1)
            for i, j in T.Parallel(M, N):
                x[i, j] = T.exp(x[i, j] - m[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, Y[0, 0])

    return main


def test_reductions_of_more_rows_than_a_repeat_holds_are_split():
    import re

    x = torch.randn(600, 8)
    kernel = tilewright.compile(tall_softmax(), out_idx=[-1], target="ascend")
    torch.testing.assert_close(kernel(x), torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    repeats = [int(r) for r in re.findall(r"WholeReduce\w+\([^;]*?, \d+, (\d+), 1, 1, \d+",
                                          kernel.get_kernel_source())]
    assert repeats and max(repeats) <= 255 and sum(repeats) == 2 * 600, repeats


def reversed_and_printed(M=16, N=32, dtype="float32"):
    """``2 - a`` (a scalar minus a tile) and T.print of a float."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((M, N), dtype)
            T.copy(A[0, 0], a)
            for i, j in T.Parallel(M, N):
                a[i, j] = 2.0 - a[i, j]
            T.print(T.cast(bx, "float32") + 0.5, msg="half")
            T.copy(a, B[0, 0])

    return main


def test_reversed_subtraction_and_float_print(capfd):
    a = torch.randn(16, 32)
    kernel = tilewright.compile(reversed_and_printed(), out_idx=[-1], target="ascend")
    torch.testing.assert_close(kernel(a), 2.0 - a)
    assert "half: 0.500000 (float32)" in capfd.readouterr().out
    source = kernel.get_kernel_source()
    assert "TW_CAST(float, -1)" in source and "(double)" not in source


def test_bfloat16_reductions_compute_in_float32():
    """A2's vector unit reduces half and float only (ReduceRepeat.md): a bfloat16 tile is
    reduced through a float32 copy."""
    import re

    x = torch.randn(10, 20).bfloat16()
    kernel = tilewright.compile(tall_softmax(M=10, N=20, dtype="bfloat16"), out_idx=[-1],
                                target="ascend")
    torch.testing.assert_close(kernel(x).float(), torch.softmax(x.float(), 1), rtol=2e-2,
                               atol=2e-2)
    source = kernel.get_kernel_source()
    types = dict((name, ty) for ty, name in re.findall(r"LocalTensor<(\w+)> (\w+) =", source))
    reduced = re.findall(r"WholeReduce\w+\((\w+)[\[,]", source)
    assert reduced and all(types[name] in ("float", "half") for name in reduced), reduced


def branch_per_iteration(M=64, N=32, bm=16, dtype="float32"):
    """A serial loop whose body is one branch holding a whole load, compute and store: the
    branch depends on itself from one iteration to the next."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_fragment((bm, N), dtype)
            for k in T.serial(M // bm):
                if k % 2 == 0:
                    T.copy(A[k * bm, 0], t)
                    for i, j in T.Parallel(bm, N):
                        t[i, j] = t[i, j] * 2.0
                    T.copy(t, B[k * bm, 0])
                else:
                    T.copy(A[k * bm, 0], t)
                    for i, j in T.Parallel(bm, N):
                        t[i, j] = t[i, j] + 1.0
                    T.copy(t, B[k * bm, 0])

    return main


def test_a_branch_that_depends_on_itself_across_iterations():
    """Each loop-carried flag is set again only after its wait cleared it: a set of a raised
    flag is undefined behaviour (SetFlag-WaitFlag(ISASI).md), which the emulator reports."""
    a = torch.randn(64, 32)
    cpu, ascend = _both(branch_per_iteration(), a)
    torch.testing.assert_close(ascend, cpu)


def decayed_rows(M=64, N=32, bm=16, dtype="float32"):
    """acc = acc / 2 + A_k: the vector instruction that writes acc in one iteration and the
    one that reads it in the next are ordered by a vector-pipe barrier."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((bm, N), dtype)):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_fragment((bm, N), dtype)
            acc = T.alloc_fragment((bm, N), dtype)
            T.clear(acc)
            for k in T.serial(M // bm):
                T.copy(A[k * bm, 0], t)
                for i, j in T.Parallel(bm, N):
                    acc[i, j] = acc[i, j] * 0.5 + t[i, j]
            T.copy(acc, B[0, 0])

    return main


def test_a_loop_carried_vector_dependency_gets_a_vector_barrier():
    a = torch.randn(64, 32)
    cpu, ascend = _both(decayed_rows(), a)
    torch.testing.assert_close(ascend, cpu)


def cleared_then_copied_gemm(M=16, N=16, K=16, dtype="float16"):
    """``T.clear(C)``, the operands' copies, then one ``T.gemm`` (no K loop)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            c = T.alloc_fragment((M, N), "float32")
            T.clear(c)
            a = T.alloc_shared((M, K), dtype)
            T.copy(A[0, 0], a)
            b = T.alloc_shared((N, K), dtype)
            T.copy(B[0, 0], b)
            T.gemm(a, b, c, transpose_B=True)
            T.copy(c, C[0, 0])

    return main


def test_a_clear_waits_for_its_gemm_past_the_operand_copies():
    """A T.clear followed by copies, not by the GEMM, was dropped: the GEMM accumulated onto
    whatever L0C held (fuzzer, ascend seed 1)."""
    gen = torch.Generator().manual_seed(2)
    a, b = (torch.randn(16, 16, generator=gen).to(torch.float16) for _ in range(2))
    kernel = tilewright.compile(cleared_then_copied_gemm(), out_idx=[-1], target="ascend")
    assert "cmatrixInitVal = (true)" in kernel.get_kernel_source()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def gemm_and_rotated_rows(M=2, N=8):
    """A split kernel (a GEMM on the cube) whose vector part reads a tile at another row."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), G: T.Tensor((M, M), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X[0, 0], x)
            c = T.alloc_fragment((M, M), "float32")
            T.clear(c)
            T.gemm(x, x, c, transpose_B=True)
            T.copy(c, G[0, 0])
            y = T.alloc_shared((M, N), "float32")
            for i, j in T.Parallel(M, N):
                y[i, j] = x[(i + 1) % M, j]
            T.copy(y, Y[0, 0])

    return main


def test_a_vector_tile_read_at_another_row_keeps_the_rows_on_one_core():
    """The row split of a split kernel gave up inside a TVM map by raising, which arrived as
    a bare RuntimeError, not as a fallback to one vector core (fuzzer, ascend seed 2)."""
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(3))
    g, y = tilewright.compile(gemm_and_rotated_rows(), out_idx=[1, 2], target="ascend")(x)
    torch.testing.assert_close(g, x @ x.T, rtol=2e-3, atol=2e-3)  # tf32-like cube rounding
    torch.testing.assert_close(y, x.roll(-1, dims=0))


def column_store(M=3, bm=2):
    """Each block stores its ``(bm,)`` tile down a column of ``R`` under a row guard."""

    @T.prim_func
    def main(X: T.Tensor((M, 1), "float32"), R: T.Tensor((M, 1), "float32")):
        with T.Kernel(1, T.ceildiv(M, bm), threads=128) as (bx, by):
            t = T.alloc_fragment((bm,), "float32")
            for i in T.Parallel(bm):
                t[i] = X[T.min(by * bm + i, M - 1), 0] + 1.0
            for i in T.Parallel(bm):
                if by * bm + i < M:
                    R[by * bm + i, bx] = t[i]

    return main


def test_a_guarded_column_store_writes_only_the_rows_inside():
    """A guarded store of a tile down a one-column tensor copied min(bm, rows left) rows of bm
    elements each: it wrote past the tensor's end (the emulator: 'DataCopyPad touches 8 GM
    bytes outside every tensor argument'; fuzzer, ascend seed 2)."""
    x = torch.randn(3, 1, generator=torch.Generator().manual_seed(4))
    r = tilewright.compile(column_store(), out_idx=[1], target="ascend")(x)
    torch.testing.assert_close(r, x + 1.0)


def unsigned_branch(dtype="int32"):
    """A branch on a uint8 cast of an index that is 0 in a one-wide loop (the fuzzer's seed
    139): TVM's simplifier folds ``(uint8)0 < 1`` through ``0U - 1U`` and stopped on its own
    check inside the Ascend code generator."""

    @T.prim_func
    def main(A: T.Tensor((1, 1), dtype), B: T.Tensor((1, 1), dtype)):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            t = T.alloc_fragment((1, 1), dtype)
            u = T.alloc_fragment((1, 1), dtype)
            T.copy(A[by, bx], t)
            for i in T.Parallel(1):
                for j in T.Parallel(1):
                    if T.cast(bx + j, "uint8") < T.uint8(1):
                        u[i, j] = t[i, j] + 1
                    else:
                        u[i, j] = t[i, j]
            T.copy(u, B[by, bx])

    return main


def test_a_branch_on_an_unsigned_zero_compiles():
    a = torch.tensor([[41]], dtype=torch.int32)
    cpu, ascend = _both(unsigned_branch(), a)
    assert cpu.item() == ascend.item() == 42


def gemm_with_an_unused_tile():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            a = T.alloc_shared((32, 32), "float16")
            b = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            _spare = T.alloc_shared((8,), "float32")  # allocated, never used
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * 32, k * 32], a)
                T.copy(B[k * 32, bx * 32], b)
                T.gemm(a, b, acc)
            T.copy(acc, C[by * 32, bx * 32])

    return main


def test_an_unused_tile_leaves_a_cube_kernel_on_the_cube():
    """An allocated tile no statement uses counted as vector work: the cube-only GEMM went to
    the vector scope ('T.copy runs on the AIC core but is inside T.Scope('V')')."""
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    cpu, ascend = _both(gemm_with_an_unused_tile(), a, b)
    torch.testing.assert_close(ascend, cpu, rtol=1e-3, atol=1e-3)
