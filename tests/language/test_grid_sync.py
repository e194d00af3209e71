"""``T.sync_grid()`` on the backends that run a grid's blocks one after another (cpu,
interp): the kernel runs in phases, each for every block (tilewright.transform.grid_sync);
storage and names the phases share carry over; what cannot is refused at the user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

TARGETS = ["cpu", "interp"]


def normalise(blocks=4, n=8):
    """Phase 1: each block doubles its row into a fragment and writes its sum. Phase 2: each
    block divides its fragment (kept across the barrier) by the sum of every block's sums."""

    @T.prim_func
    def main(X: T.Tensor((blocks, n), "float32"), P: T.Tensor((blocks,), "float32"),
             Y: T.Tensor((blocks, n), "float32")):
        with T.Kernel(blocks, threads=32) as bx:
            acc = T.alloc_fragment((n,), "float32")
            s = T.alloc_var("float32")
            total = T.alloc_var("float32")
            base = bx * n
            for i in T.Parallel(n):
                acc[i] = X[bx, i] * 2
            s = 0
            for i in T.serial(n):
                s += acc[i]
            P[bx] = s
            T.sync_grid()
            total = 0
            for b in T.serial(blocks):
                total += P[b]
            for i in T.Parallel(n):
                Y[bx, i] = acc[i] / total + base

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_storage_and_names_carry_over_the_barrier(target):
    x = torch.rand(4, 8)
    p, y = torch.zeros(4), torch.zeros(4, 8)
    tilewright.compile(normalise(), target=target)(x, p, y)
    torch.testing.assert_close(p, (x * 2).sum(dim=1))
    torch.testing.assert_close(y, x * 2 / (x * 2).sum() + torch.arange(4.0)[:, None] * 8)


def neighbours(blocks=3, threads=64, phases=3):
    """Thread-level code in three phases: each thread writes its element, then reads the
    next block's, then the previous block's (the thread index read in every phase)."""

    @T.prim_func
    def main(A: T.Tensor((blocks, threads), "int32"), W: T.Tensor((blocks, threads), "int32"),
             V: T.Tensor((blocks, threads), "int32"), O: T.Tensor((blocks, threads), "int32")):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            W[bx, tx] = A[bx, tx] + tx
            T.sync_grid()
            V[bx, tx] = W[(bx + 1) % blocks, tx]
            T.sync_grid()
            O[bx, tx] = V[(bx + blocks - 1) % blocks, tx] * 2

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_thread_level_code_in_three_phases(target):
    a = torch.randint(-9, 9, (3, 64), dtype=torch.int32)
    w, v, o = (torch.zeros_like(a) for _ in range(3))
    tilewright.compile(neighbours(), target=target)(a, w, v, o)
    want_w = a + torch.arange(64, dtype=torch.int32)
    assert torch.equal(w, want_w)
    assert torch.equal(v, want_w.roll(-1, 0))
    assert torch.equal(o, want_w * 2)


def test_a_grid_of_run_time_size_without_shared_storage():
    @T.prim_func
    def main(A: T.Tensor((T.dynamic("m"), 16), "float32"), O: T.Tensor((T.dynamic("m"), 16),
                                                                        "float32")):
        m = A.shape[0]
        with T.Kernel(m, threads=32) as bx:
            for j in T.Parallel(16):
                A[bx, j] = A[bx, j] + 1
            T.sync_grid()
            for j in T.Parallel(16):
                O[bx, j] = A[m - 1 - bx, j]

    a = torch.rand(5, 16)
    o = torch.zeros_like(a)
    want = (a + 1).flip(0)
    tilewright.compile(main, target="cpu")(a, o)
    torch.testing.assert_close(o, want)


def _refused(make, message) -> int:
    with pytest.raises(KernelError, match=message) as info:
        tilewright.compile(make(), target="cpu")
    return info.value.location.line


def test_a_barrier_in_a_loop_is_refused_at_its_line():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=32) as bx:
                for k in T.serial(2):
                    A[bx, k] = 1
                    T.sync_grid()

        return main

    assert _refused(make, r"T.sync_grid inside a loop or a branch") == \
        make.__code__.co_firstlineno + 6


def test_a_threads_storage_across_the_barrier_is_refused():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=32) as bx:
                tx = T.get_thread_binding()
                acc = T.alloc_local((1,), "float32")
                acc[0] = A[bx, tx]
                T.sync_grid()
                A[bx, tx] = acc[0] + 1

        return main

    assert _refused(make, r"acc, a thread's storage, is used on both sides of T.sync_grid") \
        == make.__code__.co_firstlineno + 5


@pytest.mark.parametrize("target", TARGETS)
def test_a_name_bound_to_memory_keeps_its_value_across_the_barrier(target):
    # `first` is A[bx, 0] before the barrier; after it the next block has overwritten that
    @T.prim_func
    def main(A: T.Tensor((4, 32), "float32"), O: T.Tensor((4,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            first = A[bx, 0]
            T.sync_grid()
            A[(bx + 1) % 4, 0] = -1
            O[bx] = first

    a = torch.rand(4, 32)
    o = torch.zeros(4)
    want = a[:, 0].clone()
    tilewright.compile(main, target=target)(a, o)
    assert torch.equal(o, want) and (a[:, 0] == -1).all()


def test_a_threads_value_across_the_barrier_is_refused():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=32) as bx:
                tx = T.get_thread_binding()
                mine = A[bx, tx]
                T.sync_grid()
                A[bx, tx] = mine + 1

        return main

    assert _refused(make, r"mine, a thread's value, is used on both sides of T.sync_grid") == \
        make.__code__.co_firstlineno + 5


def test_a_barrier_deeper_in_a_parallel_loop_or_across_a_name_is_refused():
    with pytest.raises(KernelError, match=r"T.sync_grid inside a T.Parallel loop stands in "
                                          r"the loop's body itself"):
        @T.prim_func
        def nested(A: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=32) as bx:
                for i in T.Parallel(32):
                    if i > 2:
                        A[bx, i] = 1
                        T.sync_grid()

    with pytest.raises(KernelError, match=r"'x' is named before a barrier inside a T.Parallel "
                                          r"loop and read after it"):
        @T.prim_func
        def named(A: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=32) as bx:
                for i in T.Parallel(32):
                    x = A[bx, i] * 2
                    T.sync_grid()
                    A[bx, i] = x


@pytest.mark.parametrize("target", TARGETS)
def test_a_two_dimensional_grid_keeps_each_blocks_storage(target):
    # a 2 x 3 grid: each block's fragment lives in its own row of the workspace
    @T.prim_func
    def main(X: T.Tensor((2, 3, 8), "float32"), Y: T.Tensor((2, 3, 8), "float32")):
        with T.Kernel(2, 3, threads=32) as (bx, by):
            tile = T.alloc_fragment((8,), "float32")
            for i in T.Parallel(8):
                tile[i] = X[bx, by, i] + 1
            T.sync_grid()
            for i in T.Parallel(8):
                Y[bx, by, i] = tile[i] * 2

    x = torch.randn(2, 3, 8)
    y = torch.zeros_like(x)
    tilewright.compile(main, target=target)(x, y)
    torch.testing.assert_close(y, (x + 1) * 2)

