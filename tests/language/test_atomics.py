"""T.atomic_add / atomic_max / atomic_min: scalars, tiles and return_prev, across blocks that
run concurrently on the CPU backend's worker threads."""

import pytest
import tilewright
import tilewright.language as T
import torch
import tvm_ffi
from language_helpers import TORCH, check, rand
from source_lines import Markers
from tilewright.ir import decode
from tvm import tirx

_M = Markers(__file__)
TORCH_COMBINE = {"add": lambda a, x: a + x, "max": torch.maximum, "min": torch.minimum}


@tilewright.jit(target="cpu")
def scalar_atomics(kind, blocks, bn, dtype):
    """Every (block, lane) adds/maxes/mins its input element into Out[lane % 3]."""
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def main(X: T.Tensor((blocks * bn,), dtype), Out: T.Tensor((3,), dtype)):
        with T.Kernel(blocks) as bx:
            for i in T.serial(bn):
                op(Out[i % 3], X[bx * bn + i])
    return main


@pytest.mark.parametrize("kind,dtype", [("add", "float32"), ("max", "float32"),
                                        ("min", "float32"), ("add", "int32"),
                                        ("max", "int32"), ("add", "float16"),
                                        ("min", "bfloat16")])
def test_scalar_atomics_from_many_blocks(kind, dtype):
    blocks, bn = 64, 6
    if dtype == "int32":
        x = torch.randint(-50, 50, (blocks * bn,), dtype=torch.int32,
                          generator=torch.Generator().manual_seed(0))
    else:
        x = rand(blocks * bn, dtype=dtype)
    start = torch.tensor([0.5, -0.5, 0.0]).to(TORCH[dtype])
    out = start.clone()
    scalar_atomics(kind, blocks, bn, dtype)(x, out)
    want = start.double() if dtype != "int32" else start.long()
    for n in range(blocks * bn):
        v = x[n].double() if dtype != "int32" else x[n].long()
        want[n % bn % 3] = TORCH_COMBINE[kind](want[n % bn % 3], v)
    if dtype == "int32":
        assert torch.equal(out.long(), want)
    elif kind == "add" and dtype == "float16":
        # every one of 128 additions rounds to float16
        check(out, want, rtol=128 * 2.0 ** -11, atol=128 * 2.0 ** -11)
    else:
        check(out, want, k=blocks * bn // 3)


@tilewright.jit(target="cpu")
def tile_atomic_add(M, N, splits, bm, bn, dtype):
    """Each split block adds a (bm, bn) tile of its slice into C: a split-K-style sum."""
    @T.prim_func
    def main(A: T.Tensor((splits, M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits) as (bx, by, bz):
            tile = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[bz, by * bm, bx * bn], tile)
            T.atomic_add(C[by * bm, bx * bn], tile)  # partial tiles: out-of-range skipped
    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_tile_atomic_add_partial_tiles(dtype):
    a = rand(5, 11, 13, dtype=dtype)
    c = torch.ones(11, 13).to(TORCH[dtype])
    tile_atomic_add(11, 13, 5, 8, 8, dtype)(a, c)
    check(c, 1 + a.double().sum(0), k=5)


@tilewright.jit(target="cpu")
def tile_atomic_minmax(M, splits, kind):
    @T.prim_func
    def main(A: T.Tensor((splits, M), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(splits) as bz:
            getattr(T, f"atomic_{kind}")(C[0:M], A[bz, 0:M])
    return main


@pytest.mark.parametrize("kind", ["max", "min"])
def test_tile_atomic_max_min_with_slices(kind):
    a = rand(16, 20)
    c = torch.zeros(20)
    tile_atomic_minmax(20, 16, kind)(a, c)
    want = a.amax(0).clamp(min=0) if kind == "max" else a.amin(0).clamp(max=0)
    check(c, want)


@tilewright.jit(target="cpu")
def tickets(blocks):
    """Each block takes a ticket with atomic_add(..., return_prev=True)."""
    @T.prim_func
    def main(Counter: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks,), "int32"),
             Prev: T.Tensor((blocks,), "float32"), Best: T.Tensor((1,), "float32"),
             X: T.Tensor((blocks,), "float32")):
        with T.Kernel(blocks) as bx:
            Ticket[bx] = T.atomic_add(Counter[0], 1, return_prev=True)
            Prev[bx] = T.atomic_max(Best[0], X[bx], return_prev=True)
    return main


def test_return_prev_gives_each_block_a_distinct_old_value():
    n = 200
    counter = torch.tensor([10], dtype=torch.int32)
    ticket = torch.zeros(n, dtype=torch.int32)
    prev, best = torch.zeros(n), torch.tensor([-100.0])
    x = rand(n)
    tickets(n)(counter, ticket, prev, best, x)
    assert int(counter) == 10 + n
    assert sorted(ticket.tolist()) == list(range(10, 10 + n))
    assert float(best) == float(x.max())
    # every old value of Best is either the start or some block's value, and at most max
    assert all(p == -100.0 or p in set(x.tolist()) for p in prev.tolist())
    assert float(prev.max()) <= float(x.max())


def named_tickets(blocks):
    """``p`` names one atomic's previous value, used twice; ``q``'s is never used."""
    @T.prim_func
    def main(Counter: T.Tensor((2,), "int32"), A: T.Tensor((2 * blocks,), "int32"),
             B: T.Tensor((2 * blocks,), "int32")):
        with T.Kernel(blocks) as bx:
            p = T.atomic_add(Counter[0], 1, return_prev=True)
            A[p] = bx
            B[p] = bx
            q = T.atomic_add(Counter[1], 1, return_prev=True)  # noqa: F841 - runs unused
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_named_atomic_runs_once_where_it_is_named(target):
    """The name is bound to the value (TileLang's let binding): one atomic per block whether
    the name is used twice or never (before: one atomic per use, so two and none)."""
    n = 40
    counter = torch.zeros(2, dtype=torch.int32)
    a, b = torch.full((2 * n,), -1, dtype=torch.int32), torch.full((2 * n,), -1, dtype=torch.int32)
    tilewright.compile(named_tickets(n), target=target)(counter, a, b)
    assert counter.tolist() == [n, n]
    assert sorted(a[:n].tolist()) == list(range(n)) and torch.equal(a, b)
    assert (a[n:] == -1).all()


def test_a_named_atomic_used_after_its_block_is_refused_at_its_line():
    """Before, the atomic moved to the use, out of the ``if``: every block ran it."""
    def kernel():
        @T.prim_func
        def main(Counter: T.Tensor((1,), "int32"), A: T.Tensor((8,), "int32")):
            with T.Kernel(8) as bx:
                if bx < 4:
                    p = T.atomic_add(Counter[0], 1, return_prev=True)  # atomic-in-if
                A[p] = bx
        return main

    with pytest.raises(tilewright.KernelError) as info:
        kernel()
    _M.assert_at(info.value, "atomic-in-if", "'p' names the value of an atomic",
                 "used after that block")


@tilewright.jit(target="cpu")
def atomic_min_prev(blocks):
    @T.prim_func
    def main(Best: T.Tensor((1,), "int32"), Prev: T.Tensor((blocks,), "int32")):
        with T.Kernel(blocks) as bx:
            Prev[bx] = T.atomic_min(Best[0], blocks - bx, return_prev=True)
    return main


def test_atomic_min_return_prev_integer():
    best = torch.tensor([1000], dtype=torch.int32)
    prev = torch.zeros(50, dtype=torch.int32)
    atomic_min_prev(50)(best, prev)
    assert int(best) == 1
    assert int(prev.max()) == 1000 and int(prev.min()) >= 1


@tilewright.jit(target="cpu")
def histogram(bins, bn=16):
    n = T.dynamic("n")

    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Hist: T.Tensor((bins,), "int32"),
             W: T.Tensor((n,), "float32"), Total: T.Tensor((bins,), "float32")):
        with T.Kernel(T.ceildiv(n, bn)) as bx:
            for i in T.serial(bn):
                if bx * bn + i < n:
                    T.atomic_add(Hist[X[bx * bn + i] % bins], 1)
                    T.atomic_add(Total[X[bx * bn + i] % bins], W[bx * bn + i])
    return main


def test_atomics_with_data_dependent_addresses_and_dynamic_size():
    kernel = histogram(5)
    gen = torch.Generator().manual_seed(4)
    for n in (3, 16, 101):
        x = torch.randint(0, 1000, (n,), generator=gen, dtype=torch.int32)
        w = rand(n, seed=n)
        hist, total = torch.zeros(5, dtype=torch.int32), torch.zeros(5)
        kernel(x, hist, w, total)
        assert torch.equal(hist, torch.bincount(x % 5, minlength=5).int())
        check(total, torch.zeros(5, dtype=torch.float64).index_add_(0, (x % 5).long(),
                                                                     w.double()), k=n)
    assert histogram(5) is kernel


def test_an_element_and_a_one_element_region_are_told_apart_in_the_ir():
    """``A[i]`` is an element's atomic, ``A[i:i+1]`` a tile op of one element: the same region,
    told apart by the ``element`` attribute (a backend's thread-level code makes only the
    element's each thread's own)."""
    @T.prim_func
    def main(Y: T.Tensor((4,), "int32")):
        with T.Kernel(1):
            T.atomic_add(Y[1], 1)
            T.atomic_max(Y[2:3], 1)

    calls = []
    tvm_ffi.structural_walk(main.body, (tirx.Evaluate, lambda s: calls.append(decode(s))))
    atomics = [(c.name, c.attrs["element"]) for c in calls if c is not None]
    assert atomics == [("atomic_add", True), ("atomic_max", False)]


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_wide_atomic_adds_inside_parallel_loops(target):
    """TileLang's T.atomic_addx2 / T.atomic_addx4 from a T.Parallel loop (its test's form):
    each thread adds the pair or quad starting at its element."""

    @T.prim_func
    def main(A: T.Tensor((8, 16), "float32"), B: T.Tensor((8, 16), "float32"),
             C: T.Tensor((8, 16), "float32")):
        with T.Kernel(2, 2, threads=32) as (bx, by):
            for i, j in T.Parallel(4, 4):
                T.atomic_addx2(B[bx * 4 + i, by * 8 + j * 2], A[bx * 4 + i, by * 8 + j * 2])
            for i, j in T.Parallel(4, 2):
                T.atomic_addx4(C[bx * 4 + i, by * 8 + j * 4], A[bx * 4 + i, by * 8 + j * 4])

    a, b, c = torch.randn(8, 16), torch.ones(8, 16), torch.zeros(8, 16)
    tilewright.compile(main, target=target)(a, b, c)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, a)


def previous_values(M, N, bm, bn, dtype):
    """TileLang's atomic-return-prev test: each element's atomic add keeps the value it
    replaced, stored into a tensor of the same dtype."""
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             old: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), threads=32) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                r, c = bx * bm + i, by * bn + j
                if r < M and c < N:
                    old[r, c] = T.atomic_add(B[r, c], A[r, c], return_prev=True)

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_previous_value_converted_to_a_16_bit_type_is_one_atomic(target, dtype):
    """The CPU made a bfloat16 atomic twice when its previous value was stored (TVM's bfloat16
    legalisation writes the conversion with its operand twice): B gained 2A and old read the
    value after the first add (TileLang's test_atomic_return_prev_16bit found it)."""
    t = getattr(torch, dtype)
    a, b, old = torch.full((32, 32), 5.0, dtype=t), torch.full((32, 32), 2.0, dtype=t), \
        torch.zeros(32, 32, dtype=t)
    tilewright.compile(previous_values(32, 32, 8, 8, dtype), target=target)(a, b, old)
    assert old.unique().tolist() == [2.0] and b.unique().tolist() == [7.0]
