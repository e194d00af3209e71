"""What TileLang's own language tests (testing/python/language, ported by
tools/port_tilelang_tests.py) found missing or different: ``T.let``, ``T.align_up``,
``T.clamp``'s keyword names, chained comparisons, ``T.infinity`` of the float8 formats,
``kernel.run_once()`` and ``get_kernel_source(kernel_only=...)``, tensors whose shape is a
linear expression of a symbol no argument gives whole (``T.Tensor((n * 4,))``), and
``T.Kernel(threads=1)`` without grid dimensions (one block)."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, AssumptionError, KernelError

TARGETS = ["cpu", "interp"]


def let_and_align(n=64, block=16):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((4,), "int32")):
        with T.Kernel(n // block, threads=32) as bx:
            offset = T.int32()
            T.let(offset, bx * block)
            for i in T.Parallel(block):
                B[offset + i] = T.clamp(A[offset + i], min_val=-0.5, max_val=0.5)
            if bx == 0:
                C[0] = T.align_up(37, 16)
                C[1] = T.align_up(T.int32(n) - 3, 8)
                C[2] = T.let(T.int32(), 5, 7)
                C[3] = T.if_then_else(0 < bx + 1 < 2, 1, 0)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_let_align_up_clamp_and_chained_comparisons(target):
    a = torch.randn(64)
    b, c = torch.zeros(64), torch.zeros(4, dtype=torch.int32)
    kernel = tilewright.compile(let_and_align(), target=target)
    kernel(a, b, c)
    assert torch.equal(b, a.clamp(-0.5, 0.5))
    assert c.tolist() == [48, 64, 7, 1]
    assert kernel.get_kernel_source(kernel_only=True) == kernel.get_kernel_source()


def test_run_once_calls_the_kernel_on_made_inputs():
    kernel = tilewright.compile(let_and_align(), target="cpu")
    assert kernel.run_once() is None  # the kernel returns nothing: it writes its arguments


def chained(lo, hi):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                if lo < i < hi:
                    B[i] = A[i] * 2.0
                else:
                    B[i] = A[i] * 0.5

    return main


def test_a_chained_comparison_is_each_pair_compared():
    a = torch.randn(128)
    b = torch.zeros(128)
    tilewright.compile(chained(16, 96), target="cpu")(a, b)
    inside = (torch.arange(128) > 16) & (torch.arange(128) < 96)
    torch.testing.assert_close(b, torch.where(inside, a * 2, a * 0.5))


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e5m2", "float16"])
def test_infinity_of_formats_tvm_has_none_for(dtype):
    @T.prim_func
    def main(A: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            T.fill(A, T.infinity(dtype))

    a = torch.zeros(32, dtype=getattr(torch, dtype))
    tilewright.compile(main, target="cpu")(a)
    assert (a.float() == torch.inf).all()


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float4_e2m1fn"])
def test_infinity_of_a_format_without_one_is_refused(dtype):
    with pytest.raises(KernelError, match=rf"{dtype} has no infinity"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                A[0] = T.cast(T.infinity(dtype), "float32")


def linear_shape():
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n * 3 + 1,), "int32"), B: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=32):
            for i in T.serial(n * 3 + 1):
                A[i] = i + n

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_symbol_solved_from_a_linear_dimension(target):
    kernel = tilewright.compile(linear_shape(), out_idx=[1], target=target)
    a = torch.zeros(13, dtype=torch.int32)
    b = kernel(a)  # n = 4: solved from A's 13 = 3 * n + 1; B (n,) allocated
    assert b.shape == (4,) and a.tolist() == [i + 4 for i in range(13)]
    with pytest.raises(ArgumentError, match=r"dimension 0 must be \(n \* 3\) \+ 1 for an "
                                            r"integer n, got 12"):
        kernel(torch.zeros(12, dtype=torch.int32))


def test_a_symbol_no_dimension_gives_is_still_refused():
    m = T.symbolic("m")

    @T.prim_func
    def main(A: T.Tensor((m * m,), "int32")):
        with T.Kernel(1, threads=32):
            A[0] = 1

    with pytest.raises(ArgumentError, match=r"symbol 'm' is never a whole dimension"):
        tilewright.compile(main, target="cpu")


def assumed():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), l: T.int32):
        with T.Kernel(1, threads=32):
            T.assume(N % 4 == 0 and l >= 0)  # over the parameters: checked at each call
            tx = T.get_thread_binding()
            if tx < N:
                T.assume(tx + l < 1000)  # over computed values: accepted
                A[tx] = T.Select(l > 1, 1.0 + l, 0.0)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_assumptions_over_parameters_are_checked_at_each_call(target):
    kernel = tilewright.compile(assumed(), target=target)
    a = torch.zeros(4)
    kernel(a, 2)
    assert a.tolist() == [3.0] * 4
    with pytest.raises(AssumptionError, match=r"Assume: N % 4 == 0 and l >= 0 does not "
                                              r"hold for this call \(N = 2, l = 1\)"):
        kernel(torch.zeros(2), 1)
    with pytest.raises(AssumptionError, match=r"\(N = 4, l = -1\)"):
        kernel(a, -1)  # the same shapes as the first call: checked again for the scalar
    assert kernel.signature.assumptions == ("(((N % 4) == 0) and (l >= 0))",)


def assumed_in_branches():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), l: T.int32):
        with T.Kernel(1, threads=32):
            if l > 0:
                T.assume(N % 4 == 0)  # binds the calls with l > 0 only
            else:
                T.assume(N < 8)
            for _i in T.serial(l):
                T.assume(N > 100)  # inside a loop (maybe never run): not checked
            tx = T.get_thread_binding()
            if tx < N:
                A[tx] = 1.0 + l

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_an_assumption_in_a_branch_binds_the_calls_that_take_it(target):
    kernel = tilewright.compile(assumed_in_branches(), target=target)
    kernel(torch.zeros(8), 1)
    kernel(torch.zeros(6), 0)  # N % 4 != 0, but the branch is not taken
    with pytest.raises(AssumptionError, match=r"\(N = 6, l = 1\)"):
        kernel(torch.zeros(6), 1)
    with pytest.raises(AssumptionError, match=r"\(N = 8, l = 0\)"):
        kernel(torch.zeros(8), 0)


def reducer_forms(op, M=8, N=16):
    # TileLang's update forms (acc[i] = T.max(acc[i], x), acc[i] = acc[i] + x) and its reads
    # of a finalized reducer's elements
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32"),
             C: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            r = T.alloc_reducer(M, "float32", op=op, replication="all")
            T.clear(r)
            frag = T.alloc_fragment((M, N), "float32")
            T.copy(A, frag)
            for i, j in T.Parallel(M, N):
                if op == "sum":
                    r[i] = r[i] + frag[i, j]
                elif op == "max":
                    r[i] = T.max(r[i], frag[i, j])
                else:
                    r[i] = T.min(frag[i, j], r[i])
            T.finalize_reducer(r)
            T.copy(r, B)
            for i in T.Parallel(M):
                C[i] = r[i] * 2

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op, ref", [("sum", lambda a: a.sum(1)), ("max", lambda a: a.amax(1)),
                                     ("min", lambda a: a.amin(1))])
def test_reducer_update_forms_and_reads_after_finalize(target, op, ref):
    a, b, c = torch.randn(8, 16), torch.zeros(8), torch.zeros(8)
    tilewright.compile(reducer_forms(op), target=target)(a, b, c)
    torch.testing.assert_close(b, ref(a))
    torch.testing.assert_close(c, 2 * ref(a))


def test_a_mismatched_reducer_update_is_refused():
    with pytest.raises(KernelError, match=r"T.min of an element of the max reducer"):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                r = T.alloc_reducer(8, "float32", op="max")
                T.clear(r)
                for i in T.Parallel(8):
                    r[i] = T.min(r[i], A[i])


def test_unroll_forms_and_copy_hints():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), out: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tid = T.get_thread_binding()
            for i in T.unroll(tid % 32):  # a trip count known when run: a plain loop
                out[i] = i
            for k in T.unroll(0, 16, step=4, unroll_factor=2):
                out[32 + k] = 100 + k
            for k in T.serial(1, 10, 3):
                out[48 + k] = 200 + k
            s = T.alloc_shared((4,), "float32")
            T.copy(A[60:64], s, annotations={"prefer_instruction": "tma"})
            T.copy(s, out[60:64])

    a = torch.randn(64)
    out = torch.zeros(64)
    tilewright.compile(main, target="cpu")(a, out)
    want = torch.zeros(64)
    want[:31] = torch.arange(31.0)
    want[[32, 36, 40, 44]] = torch.tensor([100.0, 104, 108, 112])
    want[[49, 52, 55]] = torch.tensor([201.0, 204, 207])
    want[60:] = a[60:]
    assert torch.equal(out, want)
    with pytest.raises(KernelError, match=r"T.copy: prefer_instruction must be one of 'tma', "
                                          r"'cp_async', 'sync'.*got 'fastest'"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.copy(A, B, annotations={"prefer_instruction": "fastest"})


def atomic_add_from_fragment(src_dtype, N=64, threads=1):
    """TileLang's ``atomic_add_mixed_dtype_program``: a ``T.Kernel`` without grid dimensions
    is one block (the ``as`` target binds an empty tuple)."""
    @T.prim_func
    def main(Src: T.Tensor((N,), src_dtype), Out: T.Tensor((N,), "float32"),
             Where: T.Tensor((2,), "int32")):
        with T.Kernel(threads=threads) as bound:
            assert bound == ()
            frag = T.alloc_fragment((N,), src_dtype)
            for i in T.Parallel(N):
                frag[i] = Src[i]
            for i in T.Parallel(N):
                T.atomic_add(Out[i], frag[i])
            Where[0] = T.get_block_binding(0)
            Where[1] = T.get_block_extent(0)

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src_dtype", ["float32", "float16", "bfloat16"])
def test_a_kernel_without_grid_dimensions_is_one_block(target, src_dtype):
    src = torch.arange(1, 65).to(getattr(torch, src_dtype))
    out, where = torch.ones(64), torch.full((2,), -1, dtype=torch.int32)
    tilewright.compile(atomic_add_from_fragment(src_dtype), target=target)(src, out, where)
    assert torch.equal(out, 1 + src.float())  # once: one block
    assert where.tolist() == [0, 1]


def test_a_kernel_has_at_most_three_grid_dimensions():
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, 1, 1, 1, threads=32):
            A[0] = 1.0

    with pytest.raises(KernelError, match=r"T.Kernel takes 0 to 3 grid dimensions, got 4") as e:
        T.prim_func(main)
    assert e.value.location.line == main.__code__.co_firstlineno + 1
