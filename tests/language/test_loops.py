"""Loops: T.Parallel, T.Pipelined (num_stages, order, stage), T.serial, T.unroll, range and
T.Persistent on the CPU backend."""

import pytest
import tilewright
import tilewright.language as T
import torch
import tvm_ffi
from language_helpers import check, rand
from tvm import tirx


@tilewright.jit(out_idx=[-1], target="cpu")
def parallel_3d(B, M, N, bn=16):
    @T.prim_func
    def main(X: T.Tensor((B, M, N), "float32"), Y: T.Tensor((B, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn)) as bx:
            for b, i, j in T.Parallel(B, M, bn, coalesced_width=4):
                if bx * bn + j < N:
                    Y[b, i, bx * bn + j] = X[b, i, bx * bn + j] * T.cast(b + 1, "float32") - i
    return main


def test_parallel_three_dims_with_tail():
    x = rand(2, 3, 21)
    want = x * torch.tensor([1.0, 2.0])[:, None, None] - torch.arange(3.0)[None, :, None]
    check(parallel_3d(2, 3, 21)(x), want)


@tilewright.jit(out_idx=[-1], target="cpu")
def pipelined_sum(N, bk, num_stages, order=None, stage=None, start=0):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((bk,), "float32")):
        with T.Kernel(1) as bx:
            buf = T.alloc_shared((bk,), "float32")
            acc = T.alloc_fragment((bk,), "float32")
            T.clear(acc)
            for k in T.Pipelined(start, T.ceildiv(N, bk), num_stages=num_stages, order=order,
                                 stage=stage):
                T.copy(X[k * bk], buf)
                for i in T.Parallel(bk):
                    acc[i] += buf[i]
            T.copy(acc, Y)
    return main


def _chunk_sums(x, bk, start=0):
    padded = torch.zeros(-(-len(x) // bk) * bk, dtype=torch.float64)
    padded[:len(x)] = x.double()
    return padded.reshape(-1, bk)[start:].sum(0)


@pytest.mark.parametrize("num_stages,order,stage", [(0, None, None), (1, None, None),
                                                    (3, None, None), (2, [0, 1], [0, 1]),
                                                    (2, [1, 0], [1, 0])])
def test_pipelined_stages_order_stage_keep_results(num_stages, order, stage):
    x = rand(70)
    kernel = pipelined_sum(70, 8, num_stages, order, stage)
    check(kernel(x), _chunk_sums(x, 8), k=9)
    text = kernel.get_tir().script()
    assert f'"tw.num_stages": {num_stages}' in text
    if order is not None:
        assert '"tw.order"' in text and '"tw.stage"' in text


def test_pipelined_start_stop_form():
    x = rand(40)
    check(pipelined_sum(40, 8, 2, start=2)(x), _chunk_sums(x, 8, start=2), k=3)


@tilewright.jit(out_idx=[-1], target="cpu")
def serial_unroll_range(N, lo, hi):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((3,), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_local((3,), "float32")
            T.clear(acc)
            for k in T.serial(lo, hi):
                acc[0] += X[k]
            for k in T.unroll(4):
                acc[1] += X[k] * T.float32(k + 1)
            for k in range(lo, N):
                acc[2] = T.max(acc[2], X[k])
            T.copy(acc, Y)
    return main


def test_serial_unroll_and_range_loops():
    x = rand(12)
    y = serial_unroll_range(12, 3, 9)(x)
    x64 = x.double()
    want = torch.stack([x64[3:9].sum(), (x64[:4] * torch.arange(1.0, 5.0).double()).sum(),
                        x64[3:].max().clamp(min=0)])
    check(y, want, k=6)
    text = serial_unroll_range(12, 3, 9).get_tir().script()
    assert '"tw.loop": "unroll"' in text and "T.unroll(" in text


@tilewright.jit(out_idx=[-1], target="cpu")
def serial_dynamic(bm=4):
    n = T.dynamic("n")

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1) as bx:
            run = T.alloc_var("float32", init=0.0)
            for k in T.serial(n):  # a loop whose extent is a call-time size
                run = run + X[k]
                Y[k] = run
    return main


def test_serial_over_dynamic_extent():
    kernel = serial_dynamic()
    for n in (1, 5, 40):
        x = rand(n)
        check(kernel(x), x.double().cumsum(0), k=n)
    assert serial_dynamic() is kernel


@tilewright.jit(target="cpu")
def persistent_visits(m_blocks, n_blocks, workers, group_size):
    @T.prim_func
    def main(Count: T.Tensor((m_blocks, n_blocks), "int32"),
             Owner: T.Tensor((m_blocks, n_blocks), "int32")):
        with T.Kernel(workers) as wid:
            for bx, by in T.Persistent([m_blocks, n_blocks], workers, wid, group_size=group_size):
                T.atomic_add(Count[bx, by], 1)
                Owner[bx, by] = wid
    return main


@pytest.mark.parametrize("m,n,workers,group", [(5, 7, 4, 8), (13, 3, 5, 4), (2, 2, 7, 8),
                                               (9, 10, 6, 2), (6, 4, 8, 8), (32, 16, 128, 16)])
def test_persistent_2d_visits_every_tile_once(m, n, workers, group):
    count = torch.zeros(m, n, dtype=torch.int32)
    owner = torch.full((m, n), -1, dtype=torch.int32)
    persistent_visits(m, n, workers, group)(count, owner)
    assert torch.equal(count, torch.ones_like(count))
    # tiles are dealt round robin: worker loads differ by at most one
    loads = torch.bincount(owner.flatten(), minlength=workers)
    assert int(loads.max() - loads.min()) <= 1, loads


@pytest.mark.parametrize("m,n,workers,group,rounds", [
    (32, 16, 128, 16, 4),  # the 4096^3 GEMM's tiles on 128 workers: 4 whole rounds
    (6, 4, 8, 8, 3),  # whole rounds fewer than the panel's rows
    (32, 16, 132, 16, 16),  # a partial last round: 4 rounds, rounded up to the panel's 16
    (5, 7, 4, 8, 16),
])
def test_persistent_rounds_are_whole_when_the_workers_divide_the_tiles(m, n, workers, group,
                                                                     rounds):
    loops = []
    tvm_ffi.structural_walk(persistent_visits.fn(m, n, workers, group).body, (
        tirx.For, lambda loop: loops.append(loop) if "tw.persistent" in loop.annotations
        else None))
    assert [int(loop.extent) for loop in loops] == [rounds]


def test_persistent_2d_walks_panels_of_group_size_rows():
    m, n, workers, group = 6, 5, 1, 2
    kernel = persistent_order(m, n, workers, group)
    order = torch.full((m, n), -1, dtype=torch.int32)
    counter = torch.zeros(1, dtype=torch.int32)
    kernel(order, counter)
    # one worker: the visiting order walks 2-row panels column by column
    want = torch.empty(m, n, dtype=torch.int32)
    t = 0
    for panel in range(0, m, group):
        for col in range(n):
            for row in range(panel, min(panel + group, m)):
                want[row, col] = t
                t += 1
    assert torch.equal(order, want)


@tilewright.jit(target="cpu")
def persistent_order(m_blocks, n_blocks, workers, group_size):
    @T.prim_func
    def main(Order: T.Tensor((m_blocks, n_blocks), "int32"), Counter: T.Tensor((1,), "int32")):
        with T.Kernel(workers) as wid:
            for bx, by in T.Persistent([m_blocks, n_blocks], workers, wid, group_size=group_size):
                Order[bx, by] = T.atomic_add(Counter[0], 1, return_prev=True)
    return main


@tilewright.jit(out_idx=[-1], target="cpu")
def persistent_1d(M, workers, bm=8):
    @T.prim_func
    def main(X: T.Tensor((M,), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(workers) as wid:
            tile = T.alloc_fragment((bm,), "float32")
            for t in T.Persistent([T.ceildiv(M, bm)], workers, wid):
                T.copy(X[t * bm], tile)
                for i in T.Parallel(bm):
                    tile[i] = tile[i] + T.float32(1)
                T.copy(tile, Y[t * bm])
    return main


def test_persistent_1d_with_partial_last_tile():
    x = rand(43)
    check(persistent_1d(43, 3)(x), x + 1)


def empty_loops(extent):
    """Loops of every kind that run no iteration (a constant extent of 0 or below, and
    ``range(5, 2)``) beside a store that runs."""

    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(extent):
                A[i] = 1.0
            for k in T.Pipelined(extent, num_stages=2):
                A[k] = 2.0
            for k in T.serial(extent):
                A[k] = 3.0
            for k in T.unroll(extent):
                A[k] = 4.0
            for k in range(5, 2):
                A[k] = 6.0
            A[3] = 5.0

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("extent", [0, -4])
def test_loops_without_iterations_run_none(target, extent):
    """A constant extent below zero is no iteration, as Python's range; neither is an access
    out of bounds (the bounds check refused T.serial(0)'s A[k], "always outside [0, 16)")."""
    a = torch.zeros(16)
    tilewright.compile(empty_loops(extent), target=target)(a)
    assert a.tolist() == [0.0] * 3 + [5.0] + [0.0] * 12
