"""Thread-level programming in the portable language (``T.get_thread_binding``,
``T.thread_binding``; TileLang's GEMV, top-k and logits-masking kernels): code reading the
thread index runs once per thread on the CPU and the interpreter, each statement for every
thread before the next (tilewright.transform.threads); checked against torch. CUDA compiles
the same kernels (the conformance case ``thread_level``); Ascend refuses the index at the
line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError

TARGETS = ("cpu", "interp")


def splitk_gemv(N, K, bn=8, bk=4):
    """TileLang's split-K GEMV: thread (tn, tk) sums its slice of row tn into a register,
    then adds it atomically into the block's shared row sums, which thread tk == 0 set to 0."""

    @T.prim_func
    def main(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), threads=(bn, bk)) as bx:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            sums = T.alloc_shared((bn,), "float32")
            if tk == 0:
                sums[tn] = 0
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K, bk)):
                k = ko * bk + tk
                acc[0] += A[k].astype("float32") * B[bx * bn + tn, k].astype("float32")
            T.atomic_add(sums[tn], acc[0])
            C[bx * bn + tn] = sums[tn]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_split_k_gemv_sums_each_threads_slice(target):
    kernel = tilewright.compile(splitk_gemv(24, 64), out_idx=[2], target=target)
    a, b = torch.randn(64, dtype=torch.float16), torch.randn(24, 64, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), b.float() @ a.float(), rtol=1e-4, atol=1e-4)


def allreduce_gemv(N, K, bn=4, reduce=8, tile=4):
    """TileLang's GEMV with TVM's thread allreduce: thread (n, k) sums its slices of row n
    into a register; the ``reduce`` threads of a row combine theirs (T.tvm_thread_allreduce
    inside T.attr(T.comm_reducer(...), "reduce_scope", ...)), each getting the row's sum."""

    @T.prim_func
    def main(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((N,), "float32"), M: T.Tensor((N, reduce), "float32")):
        with T.Kernel(T.ceildiv(N, bn), threads=(bn, reduce)) as bx:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            total = T.alloc_local((1,), "float32")
            biggest = T.alloc_local((1,), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K, reduce * tile)):
                for k in T.serial(tile):
                    col = ko * reduce * tile + tk * tile + k
                    acc[0] += A[col].astype("float32") * B[bx * bn + tn, col].astype("float32")
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, "float32")]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], tk,
                                                  dtype="handle"))
            with T.attr(T.comm_reducer(lambda x, y: T.max(x, y), [T.cast(0, "float32")]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, biggest[0], tk,
                                                  dtype="handle"))
            C[bx * bn + tn] = total[0]
            M[bx * bn + tn, tk] = biggest[0] - acc[0]  # >= 0 in every thread

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_thread_allreduce_gives_every_thread_its_groups_sum(target):
    kernel = tilewright.compile(allreduce_gemv(12, 64), out_idx=[2, 3], target=target)
    a, b = torch.randn(64, dtype=torch.float16), torch.randn(12, 64, dtype=torch.float16)
    c, m = kernel(a, b)
    torch.testing.assert_close(c, b.float() @ a.float(), rtol=1e-4, atol=1e-4)
    partial = (b.float() * a.float()).view(12, 2, 8, 4).sum(dim=(1, 3))  # thread k's sum
    torch.testing.assert_close(m, partial.max(dim=1, keepdim=True).values - partial,
                               rtol=1e-4, atol=1e-4)


def warp_sums(threads):
    @T.prim_func
    def main(X: T.Tensor((threads,), "int32"), Y: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            Y[tx] = T.warp_reduce_sum(X[tx])

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("threads", [1, 16, 48, 100])
def test_a_warp_reduction_in_a_partial_last_warp(target, threads):
    """A 1-D block of 48 threads is a warp of 32 and one of 16 (100: three and 4): each
    thread gets the sum over its own warp's threads, as on the GPU."""
    kernel = tilewright.compile(warp_sums(threads), out_idx=[1], target=target)
    x = torch.arange(threads, dtype=torch.int32) * 3 - 7
    want = torch.cat([x[w:w + 32].sum().expand(len(x[w:w + 32]))
                      for w in range(0, threads, 32)]).to(torch.int32)
    assert torch.equal(kernel(x), want)


def per_thread_values(n=16):
    """A shared tile reversed by the threads swapping pairs of elements through the values
    they bound to names before any thread overwrites the tile, then read and written by each
    thread in one statement; per-thread arrays and variables; a loop as long as the thread's
    index; work of the block (copies) between the per-thread parts."""

    @T.prim_func
    def main(A: T.Tensor((n * 4,), "float32"), R: T.Tensor((n,), "float32"),
             R2: T.Tensor((n,), "float32"),
             W: T.Tensor((n * 4,), "float32"), L: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            s = T.alloc_shared((n,), "float32")
            T.copy(A[0:n], s)
            mine = s[tx]
            theirs = s[n - 1 - tx]
            s[tx] = theirs
            s[n - 1 - tx] = mine
            T.copy(s, R[0:n])
            s[tx] = s[n - 1 - tx]  # every thread reads before any writes
            T.copy(s, R2[0:n])
            vals = T.alloc_local((4,), "float32")
            for k in T.serial(4):
                vals[k] = A[tx * 4 + k]
            for k in T.serial(4):
                W[tx * 4 + k] = vals[3 - k] * 2
            count = T.alloc_var("int32")
            count = 0
            for _ in T.serial(tx % 5):
                count += 1
            L[tx] = count

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_bound_values_arrays_and_trip_counts_are_each_threads(target):
    kernel = tilewright.compile(per_thread_values(), out_idx=[1, 2, 3, 4], target=target)
    a = torch.randn(64)
    r, r2, w, counts = kernel(a)
    torch.testing.assert_close(r, a[:16].flip(0))
    torch.testing.assert_close(r2, a[:16])
    torch.testing.assert_close(w, a.view(16, 4).flip(1).reshape(-1) * 2)
    assert counts.tolist() == [t % 5 for t in range(16)]


def storage_in_a_branch():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            tx = T.get_thread_binding()
            if tx < 4:
                tmp = T.alloc_local((2,), "float32")  # each thread's, made in the branch
                tmp[0] = A[tx] * 3
                tmp[1] = tmp[0] + 1
                B[tx] = tmp[1]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_storage_allocated_in_a_branch_on_the_index_is_each_threads(target):
    a, b = torch.arange(8.0), torch.zeros(8)
    tilewright.compile(storage_in_a_branch(), target=target)(a, b)
    assert b.tolist() == [1.0, 4.0, 7.0, 10.0, 0.0, 0.0, 0.0, 0.0]


def two_kernels():
    """Two T.Kernel launches with their own threads (8, then 16), one on a 2-D grid."""

    @T.prim_func
    def main(A: T.Tensor((2, 2, 8), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(2, 2, threads=8) as (bx, by):
            tx = T.get_thread_binding()
            A[by, bx, tx] = tx + bx * 10 + by * 100
        with T.Kernel(1, threads=16):
            tx = T.get_thread_binding()
            B[tx] = tx * 2

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_each_kernel_runs_its_own_threads(target):
    a, b = torch.zeros(2, 2, 8), torch.zeros(16)
    tilewright.compile(two_kernels(), target=target)(a, b)
    t = torch.arange(8.0)
    torch.testing.assert_close(a, torch.stack([torch.stack([t + x * 10 + y * 100
                                                            for x in range(2)])
                                               for y in range(2)]))
    assert b.tolist() == [2.0 * t for t in range(16)]


def roles(n=8, threads=64):
    """TileLang's ``if tx < 32: <tile work> else: <tile work>`` (DeepSeek's mHC kernel):
    each branch's tile work done once, its per-thread statements by the threads taking it."""

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), P: T.Tensor((n,), "float32"),
             Q: T.Tensor((n,), "float32"), D: T.Tensor((threads,), "int32"),
             S: T.Tensor((2,), "float32"), H: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((n,), "float32")
            T.copy(A, s)
            hits = T.alloc_fragment((n,), "float32")  # the block's tile, not a thread's
            T.clear(hits)
            if T.get_thread_binding() < 32:
                for i in T.Parallel(n):
                    hits[i] += 1
                for i in T.Parallel(n):
                    P[i] = P[i] + s[i] * 2
                m = T.alloc_fragment((2, n), "float32")
                for r, i in T.Parallel(2, n):
                    m[r, i] = s[i] * (r + 1)
                sums = T.alloc_fragment((2,), "float32")
                T.reduce_sum(m, sums, dim=1)  # the block's tiles: along the rows of m
                T.copy(sums, S)
                D[T.get_thread_binding()] = 1
            else:
                acc = T.alloc_fragment((n,), "float32")
                for i in T.Parallel(n):
                    acc[i] = s[i] + 1
                T.copy(acc, Q)
                D[T.get_thread_binding()] = 2
            T.copy(hits, H)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_branch_on_the_thread_index_runs_its_tile_work_once(target):
    kernel = tilewright.compile(roles(), target=target)
    a, p = torch.randn(8), torch.randn(8)
    q, d, s = torch.zeros(8), torch.zeros(64, dtype=torch.int32), torch.zeros(2)
    hits = torch.zeros(8)
    expect = p + a * 2
    kernel(a, p, q, d, s, hits)
    assert hits.tolist() == [1.0] * 8
    torch.testing.assert_close(s, torch.stack([a.sum(), 2 * a.sum()]))
    torch.testing.assert_close(p, expect)  # P += ... once, not once per thread
    torch.testing.assert_close(q, a + 1)
    assert d.tolist() == [1] * 32 + [2] * 32


def prefix_sums(n=64, threads=128):
    """A scan across threads (Hillis-Steele, TileLang's top-k selector's cumsum): inside a
    branch the first ``n`` threads take, a loop whose steps exchange values through shared
    memory at named barriers: every statement for every thread of the branch before the
    next; a condition the branch changes the inputs of, taken before it runs."""

    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Y: T.Tensor((n,), "int32"),
             F: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            s = T.alloc_shared((n,), "int32")
            flags = T.alloc_shared((threads,), "int32")
            val = T.alloc_var("int32")
            flags[tx] = tx % 3
            if tx < n:
                s[tx] = X[tx]
            T.sync_threads()
            if tx < n:
                for i in T.serial(6):
                    T.sync_threads(1, n)
                    if tx >= (1 << i):
                        val = s[tx] + s[tx - (1 << i)]
                    T.sync_threads(1, n)
                    if tx >= (1 << i):
                        s[tx] = val
            T.sync_threads()
            if tx < n:
                Y[tx] = s[tx]
            if flags[tx] == 0:
                for _ in T.serial(2):
                    flags[tx] = flags[tx] + 10
            else:
                flags[tx] = -1
            F[tx] = flags[tx]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_scan_across_threads_at_named_barriers(target):
    kernel = tilewright.compile(prefix_sums(), out_idx=[1, 2], target=target)
    x = torch.randint(-50, 50, (64,), dtype=torch.int32)
    y, flags = kernel(x)
    assert y.tolist() == torch.cumsum(x, 0).tolist()
    assert flags.tolist() == [20 if t % 3 == 0 else -1 for t in range(128)]


def clean_logits(rows, cols, threads=32, block=64):
    """TileLang's dsa_hisa logits masking: T.thread_binding inside a pipelined loop over the
    row's column blocks, a value bound from the index, branches on it."""

    @T.prim_func
    def main(Logits: T.Tensor((rows, cols), "float32"), Ks: T.Tensor((rows,), "int32"),
             Ke: T.Tensor((rows,), "int32")):
        with T.Kernel(rows, threads=threads) as bx:
            tx = T.thread_binding(0, threads, thread="threadIdx.x")
            ks = Ks[bx]
            ke = Ke[bx]
            for n in T.Pipelined(T.ceildiv(cols, block)):
                for k in T.serial(block // threads):
                    idx = n * block + k * threads + tx
                    if idx == ks or idx == ke - 1:
                        Logits[bx, idx] = T.infinity("float32")
                    if idx < ks or idx >= ke:
                        Logits[bx, idx] = -T.infinity("float32")

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_thread_binding_masks_each_rows_window(target):
    kernel = tilewright.compile(clean_logits(6, 128), target=target)
    logits = torch.randn(6, 128)
    ks = torch.tensor([0, 3, 10, 50, 64, 100], dtype=torch.int32)
    ke = torch.tensor([128, 40, 11, 90, 65, 128], dtype=torch.int32)
    expect = logits.clone()
    col = torch.arange(128)[None, :]
    expect[(col == ks[:, None]) | (col == ke[:, None] - 1)] = float("inf")
    expect[(col < ks[:, None]) | (col >= ke[:, None])] = float("-inf")
    kernel(logits, ks, ke)
    torch.testing.assert_close(logits, expect)


def test_tile_work_in_a_loop_as_long_as_the_thread_index_is_refused():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            tx = T.get_thread_binding()
            for _ in T.serial(tx):
                for i in T.Parallel(8):
                    A[i] = A[i] + 1

    with pytest.raises(KernelError, match=r"test_thread_level.py:\d+: a loop whose trip count "
                                          r"depends on the thread index"):
        tilewright.compile(main, target="cpu")


def test_the_thread_index_is_checked_where_it_is_read():
    with pytest.raises(KernelError, match=r"T.get_thread_binding\(1\): the kernel has "
                                          r"threads=\(32, 1\)"):
        @T.prim_func
        def one_dim(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                A[T.get_thread_binding(1)] = 0

    with pytest.raises(KernelError, match=r"the range must be 0..32"):
        @T.prim_func
        def wrong_range(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                A[T.thread_binding(0, 16)] = 0

    with pytest.raises(KernelError, match="cannot be used inside a T.Parallel loop"):
        @T.prim_func
        def in_parallel(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(8):
                    A[i] = T.get_thread_binding()


def test_ascend_refuses_the_thread_index_at_the_line():
    pytest.importorskip("tilewright_ascend")
    with pytest.raises(UnsupportedOpError, match=r"test_thread_level.py:\d+: "
                                                 r"T.get_thread_binding is not supported by "
                                                 r"backend 'ascend'"):
        tilewright.lower(splitk_gemv(16, 32), target="ascend")
