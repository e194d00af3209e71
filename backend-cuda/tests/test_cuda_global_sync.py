"""Barriers for global memory shared between a block's threads: a ``T.Parallel`` loop that
reads (or overwrites) elements of a global tensor that other threads of the block wrote (or
read) in an earlier statement sees the block's program order, as the CPU reference runs it.
The host emulation runs a block's threads one after another between barriers, so a missing
``__syncthreads()`` gives a wrong answer there. An element each thread reads back itself
needs none."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import tilewright_cuda.language as TC
import torch
from tilewright_sdk.conformance.catalogue import cases

ROWS, N = 4, 128


def _run(func, tmp_path, *args, target="cuda -arch=sm_80") -> str:
    lowered = tilewright.lower(func, target)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    text = lowered.source.text
    return text[text.find('extern "C" __global__'):]


def flip_after_write():
    @T.prim_func
    def flip(A: T.Tensor((ROWS, N), "float32"), B: T.Tensor((ROWS, N), "float32"),
             C: T.Tensor((ROWS, N), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            for i in T.Parallel(N):
                B[bx, i] = A[bx, i] + 1
            for i in T.Parallel(N):
                C[bx, i] = B[bx, N - 1 - i]

    return flip


def write_after_flip():
    @T.prim_func
    def war(A: T.Tensor((ROWS, N), "float32"), B: T.Tensor((ROWS, N), "float32"),
            C: T.Tensor((ROWS, N), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            for i in T.Parallel(N):
                C[bx, i] = B[bx, N - 1 - i]
            for i in T.Parallel(N):
                B[bx, i] = A[bx, i]

    return war


def write_twice():
    @T.prim_func
    def waw(A: T.Tensor((ROWS, N), "float32"), B: T.Tensor((ROWS, N), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            for i in T.Parallel(N):
                B[bx, i] = A[bx, i]
            for i in T.Parallel(N):
                B[bx, N - 1 - i] = A[bx, i] * 2

    return waw


def own_elements(width=4 * N):
    @T.prim_func
    def own(A: T.Tensor((ROWS, width), "float32"), B: T.Tensor((ROWS, width), "float32"),
            C: T.Tensor((ROWS, width), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            for i in T.Parallel(width):
                B[bx, i] = A[bx, i] + 1
            for i in T.Parallel(width):
                C[bx, i] = B[bx, i] * 2

    return own


def pipelined_flips(steps=4):
    @T.prim_func
    def flips(A: T.Tensor((ROWS, steps * N), "float32"), B: T.Tensor((ROWS, N), "float32"),
              C: T.Tensor((ROWS, N), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            S = T.alloc_shared((N,), "float32")
            for k in T.Pipelined(steps, num_stages=2):
                T.copy(A[bx, k * N:(k + 1) * N], S)
                for i in T.Parallel(N):
                    C[bx, i] = B[bx, N - 1 - i] + S[i]
                for i in T.Parallel(N):
                    B[bx, i] = C[bx, i]

    return flips


def _inputs(*shapes):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=gen) for s in shapes]


@pytest.mark.emulator
def test_read_of_another_threads_global_write_gets_a_barrier(tmp_path):
    (a,) = _inputs((ROWS, N))
    b, c = torch.full((ROWS, N), float("nan")), torch.full((ROWS, N), float("nan"))
    source = _run(flip_after_write(), tmp_path, a, b, c)
    torch.testing.assert_close(c, (a + 1).flip(1))
    assert source.count("__syncthreads()") == 1


@pytest.mark.emulator
def test_overwrite_of_another_threads_global_read_gets_a_barrier(tmp_path):
    a, b = _inputs((ROWS, N), (ROWS, N))
    c = torch.full((ROWS, N), float("nan"))
    want_c = b.flip(1)
    source = _run(write_after_flip(), tmp_path, a, b, c)
    torch.testing.assert_close(c, want_c)
    torch.testing.assert_close(b, a)
    assert source.count("__syncthreads()") == 1


@pytest.mark.emulator
def test_overwrite_of_another_threads_global_write_gets_a_barrier(tmp_path):
    (a,) = _inputs((ROWS, N))
    b = torch.full((ROWS, N), float("nan"))
    source = _run(write_twice(), tmp_path, a, b)
    torch.testing.assert_close(b, (a * 2).flip(1))
    assert source.count("__syncthreads()") == 1


@pytest.mark.emulator
def test_a_threads_own_global_elements_get_no_barrier(tmp_path):
    """``C[bx, i] = B[bx, i]`` after ``B[bx, i] = ...``: every element (four a thread, one
    float4) is read back by the thread that wrote it."""
    (a,) = _inputs((ROWS, 4 * N))
    b, c = torch.full((ROWS, 4 * N), float("nan")), torch.full((ROWS, 4 * N), float("nan"))
    source = _run(own_elements(), tmp_path, a, b, c)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, (a + 1) * 2)
    assert "__syncthreads()" not in source


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_pipelined_loop_orders_global_elements_across_threads(arch, tmp_path):
    """Each step reads the row the previous step wrote, flipped (a back-edge read of other
    threads' writes), and overwrites it after the flipped read (a write after other threads'
    reads): barriers inside the pipelined loop."""
    steps = 4
    a, b = _inputs((ROWS, steps * N), (ROWS, N))
    c = torch.full((ROWS, N), float("nan"))
    want = b.clone()
    for k in range(steps):
        want = want.flip(1) + a[:, k * N:(k + 1) * N]
    _run(pipelined_flips(steps), tmp_path, a, b, c, target=f"cuda -arch={arch}")
    torch.testing.assert_close(c, want)
    torch.testing.assert_close(b, want)


def constant_elements():
    @T.prim_func
    def consts(Y: T.Tensor((3,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            Y[0] = 1.0
            Y[1] = 2.0
            Y[2] = Y[0] + Y[1]

    return consts


def first_threads_updates(steps=12):
    @T.prim_func
    def updates(X: T.Tensor((steps,), "float32"), Acc: T.Tensor((2,), "float32"),
                P: T.Tensor((2 * steps,), "float32")):
        with T.Kernel(1, threads=64) as _bx:
            for t in T.serial(steps):
                P[t] = T.atomic_add(Acc[0], X[t], return_prev=True)
                P[t + steps] = T.atomic_max(Acc[1], X[t], return_prev=True)

    return updates


@pytest.mark.emulator
def test_constant_global_elements_are_told_apart(tmp_path):
    """Block code's stores to ``Y[0]`` and ``Y[1]`` touch different elements (no barrier);
    the read of both after them reads what other threads wrote (a barrier)."""
    y = torch.full((3,), float("nan"))
    source = _run(constant_elements(), tmp_path, y)
    torch.testing.assert_close(y, torch.tensor([1.0, 2.0, 3.0]))
    assert source.count("__syncthreads()") == 1


@pytest.mark.emulator
def test_first_threads_global_updates_need_no_barrier_between_them(tmp_path):
    """Block code's atomics run by the first thread only (transforms.block_code): one thread
    orders its own accesses, so the loop has no barrier."""
    steps = 12
    (x,) = _inputs((steps,))
    acc = torch.tensor([0.0, -1e30])
    p = torch.full((2 * steps,), float("nan"))
    source = _run(first_threads_updates(steps), tmp_path, x, acc, p)
    sums = torch.cumsum(torch.cat([torch.zeros(1), x]), 0)
    torch.testing.assert_close(p[:steps], sums[:steps])
    torch.testing.assert_close(acc[0], sums[steps])
    assert "__syncthreads()" not in source


def compaction(n=512, threads=128):
    @T.prim_func
    def compact(X: T.Tensor((n,), "int32"), Out: T.Tensor((n,), "int32"),
                Count: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=threads) as _bx:
            tx = TC.get_thread_binding()
            cnt = T.alloc_shared((1,), "int32")
            if tx == 0:
                cnt[0] = 0
            for s in T.serial(n // threads):
                v = X[s * threads + tx]
                if v % 3 == 0:
                    pos = T.atomic_add(cnt[0], 1, return_prev=True)
                    Out[pos] = v
            if tx == 0:
                Count[0] = cnt[0]

    return compact


@pytest.mark.emulator
def test_global_stores_at_tickets_need_no_barrier_between_them(tmp_path):
    """``pos = T.atomic_add(cnt[0], 1, return_prev=True); Out[pos] = v`` in a loop: stores at
    tickets of one counter write distinct elements of the global ``Out`` (analysis.tickets),
    so the loop has no barrier."""
    n = 512
    x = torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(0),
                      dtype=torch.int32)
    out = torch.full((n,), -1, dtype=torch.int32)
    count = torch.zeros(1, dtype=torch.int32)
    source = _run(compaction(n), tmp_path, x, out, count)
    want = sorted(x[x % 3 == 0].tolist())
    assert int(count[0]) == len(want)
    assert sorted(out[:len(want)].tolist()) == want
    loop = source[source.find("for (int s = 0"):source.find("Count_ptr[0] =")]
    assert "Out_ptr[pos]" in loop
    assert loop.count("__syncthreads()") == 1, loop  # after the loop, before cnt's read


def offset_rows(width=64):
    @T.prim_func
    def rows(A: T.Tensor((ROWS * width,), "float32"), Y: T.Tensor((2, ROWS * width), "float32"),
             Z: T.Tensor((ROWS * width,), "float32")):
        with T.Kernel(ROWS, threads=N) as bx:
            for i in T.Parallel(width):
                Y[0, bx * width + i] = A[bx * width + i]
            for i in T.Parallel(width):
                Y[1, bx * width + i] = Y[0, bx * width + i] + 1
            for i in T.Parallel(width):
                Z[bx * width + i] = Y[1, bx * width + width - 1 - i]

    return rows


@pytest.mark.emulator
def test_global_elements_a_row_apart_get_no_barrier(tmp_path):
    """``Y[k, bx * 64 + tx]`` (``tx * 1 + u``, ``u`` the same in every thread): rows 0 and 1
    lie 256 elements apart, more than 128 threads reach, so the second loop's read of its
    own row-0 element and write of row 1 need no barrier; the third loop's flipped read of
    row 1 does."""
    width = 64
    (a,) = _inputs((ROWS * width,))
    y = torch.full((2, ROWS * width), float("nan"))
    z = torch.full((ROWS * width,), float("nan"))
    source = _run(offset_rows(width), tmp_path, a, y, z)
    torch.testing.assert_close(y[0], a)
    torch.testing.assert_close(y[1], a + 1)
    torch.testing.assert_close(z, (a + 1).view(ROWS, width).flip(1).reshape(-1))
    assert source.count("__syncthreads()") == 1



@pytest.mark.emulator
@pytest.mark.parametrize("case", cases(["sync_grid_parallel"]), ids=lambda c: c.id)
def test_a_grid_barrier_in_a_parallel_loop(case, tmp_path):
    # TileLang's test_tilelang_language_cooperative: the barrier cuts the T.Parallel loop,
    # the kernel is launched cooperatively
    source = hostemu.run_case(case, "cuda -arch=sm_90a", tmp_path)
    assert source.count("tw_grid_sync();") == 2
