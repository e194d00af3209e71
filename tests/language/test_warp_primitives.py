"""TileLang's warp-level primitives (tilewright.language.warp) on the CPU and the interpreter,
which run thread-level code in lockstep: shuffles with widths, out-of-group sources and
partial warps, of every dtype they move; votes and block predicates, under a condition on the
thread index with a partial mask; lane and warp indices of 1-D and 2-D blocks; __ffs and
__fns; and TileLang's own kernels (test_tilelang_language_warp_vote.py, warp_sync.py,
get_warp_info.py) ported by their imports, each against torch-computed expectations, exactly.
Bad input is refused at the user's line; Ascend, which has no warps, refuses them."""

import pytest
import tilewright
import tilewright as tilelang
import tilewright.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError
from tvm import tirx

TARGETS = ("cpu", "interp")


def run(func, target, *args):
    tilewright.compile(func, target=target)(*args)
    return args


def shuffle_kernel(dtype, n, call):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            B[tx] = call(A[tx], tx)

    return main


def expected_shuffle(a, source):
    """B[t] = a[the source of lane t % 32 in its warp] (None: its own)."""
    out = a.clone()
    for t in range(a.shape[0]):
        j = source(t % 32)
        if j is not None and t // 32 * 32 + j < a.shape[0]:
            out[t] = a[t // 32 * 32 + j]
    return out


SHUFFLES = {
    "idx": (lambda v, tx: T.shfl_sync(v, 7), lambda lane: 7),
    "idx-negative": (lambda v, tx: T.shfl_sync(v, -1, 8), lambda lane: lane // 8 * 8 + 7),
    "idx-lane": (lambda v, tx: T.shfl_sync(v, 31 - tx % 32), lambda lane: 31 - lane),
    "xor-16": (lambda v, tx: T.shfl_xor(v, 16), lambda lane: lane ^ 16),
    # a later group's lane: the caller's own; an earlier one's: read
    "xor-width": (lambda v, tx: T.shfl_xor(v, 12, 8),
                  lambda lane: lane ^ 12 if lane ^ 12 <= lane // 8 * 8 + 7 else None),
    "down": (lambda v, tx: T.shfl_down(v, 4), lambda lane: lane + 4 if lane < 28 else None),
    "down-33": (lambda v, tx: T.shfl_down(v, 33, 16),  # the offset modulo 32
                lambda lane: lane + 1 if lane % 16 < 15 else None),
    "up": (lambda v, tx: T.shfl_up(v, 3, 4), lambda lane: lane - 3 if lane % 4 >= 3 else None),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", list(SHUFFLES))
def test_shuffles_pick_the_lanes_ptx_picks(mode, target):
    call, source = SHUFFLES[mode]
    a = torch.arange(64, dtype=torch.int32) * 3 - 50
    (_, b) = run(shuffle_kernel("int32", 64, call), target, a, torch.zeros_like(a))
    assert torch.equal(b, expected_shuffle(a, source))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8",
                                   "int16", "int64", "uint32", "bool"])
def test_shuffles_move_every_dtype_exactly_in_a_partial_warp(dtype, target):
    """48 threads: the second warp has 16 lanes; a source past them is the caller's own."""
    torch_dtype = getattr(torch, dtype)
    if torch_dtype.is_floating_point:
        a = torch.randn(48, generator=torch.Generator().manual_seed(0)).to(torch_dtype)
    elif dtype == "bool":
        a = torch.arange(48) % 3 == 0
    else:
        a = torch.arange(48).to(torch_dtype) * 5
    if dtype == "int64":
        a = a * (1 << 40)
    func = shuffle_kernel(dtype, 48, lambda v, tx: T.shfl_down(v, 2))
    (_, b) = run(func, target, a, torch.zeros_like(a))
    assert torch.equal(b, expected_shuffle(a, lambda lane: lane + 2 if lane < 30 else None))


@pytest.mark.parametrize("target", TARGETS)
def test_a_tree_of_shuffles_in_a_loop_sums_a_warp(target):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), "float32")
            v[0] = A[tx]
            for i in T.unroll(5):
                v[0] += T.shfl_down(v[0], 16 >> i)
            B[tx] = T.shfl_sync(v[0], 0)

    a = torch.arange(64, dtype=torch.float32)
    (_, b) = run(main, target, a, torch.zeros_like(a))
    assert torch.equal(b, a.reshape(2, 32).sum(1).repeat_interleave(32))


def guarded_votes():
    """Lanes 0..15 of each warp vote with mask 0xFFFF; the others store -1."""

    @T.prim_func
    def main(A: T.Tensor((64,), "int32"), B: T.Tensor((64, 5), "int64")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx % 32 < 16:
                B[tx, 0] = T.cast(T.ballot_sync(A[tx] > 0, 0xFFFF), "int64")
                B[tx, 1] = T.cast(T.activemask(), "int64")
                B[tx, 2] = T.cast(T.any_sync(A[tx] > 7, 0xFFFF), "int64")
                B[tx, 3] = T.cast(T.all_sync(A[tx] > -9, 0x00FF), "int64")
                B[tx, 4] = T.cast(T.shfl_up(A[tx], 1, 16, 0xFFFF), "int64")
            else:
                for k in T.serial(5):
                    B[tx, k] = -1

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_votes_of_the_threads_a_condition_selects(target):
    a = torch.randint(-9, 10, (64,), dtype=torch.int32,
                      generator=torch.Generator().manual_seed(3))
    (_, b) = run(guarded_votes(), target, a, torch.zeros((64, 5), dtype=torch.int64))
    want = torch.full((64, 5), -1, dtype=torch.int64)
    for t in range(64):
        first = t // 32 * 32
        if t % 32 >= 16:
            continue
        half = [int(v) for v in a[first:first + 16]]
        want[t] = torch.tensor([sum(1 << k for k, v in enumerate(half) if v > 0), 0xFFFF,
                                int(any(v > 7 for v in half)),
                                int(all(v > -9 for v in half[:8])),
                                int(a[t - 1]) if t % 16 else int(a[t])])
    assert torch.equal(b, want)


@pytest.mark.parametrize("target", TARGETS)
def test_lane_and_warp_indices_of_a_2d_block(target):
    @T.prim_func
    def main(A: T.Tensor((3, 40), "int32")):
        with T.Kernel(1, threads=(40, 3)):
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            A[ty, tx] = (T.get_lane_idx() + 100 * T.get_warp_idx() +
                         1000 * T.get_warp_group_idx(16, 2) +
                         10000 * T.cast(T.shuffle_elect(24), "int32"))

    (a,) = run(main, target, torch.zeros((3, 40), dtype=torch.int32))
    t = torch.arange(120, dtype=torch.int32).reshape(3, 40)
    assert torch.equal(a, t % 32 + 100 * (t // 32) + 1000 * (t // 32) + 10000 * (t % 24 == 0))


@pytest.mark.parametrize("target", TARGETS)
def test_ffs_and_fns_of_64_and_32_bits(target):
    @T.prim_func
    def main(A: T.Tensor((6,), "int64"), B: T.Tensor((6, 5), "int64")):
        with T.Kernel(1, threads=1):
            for i in T.serial(6):
                B[i, 0] = T.cast(T.__ffs(A[i]), "int64")
                B[i, 1] = T.cast(T.__ffs(T.cast(A[i], "int32")), "int64")
                B[i, 2] = T.cast(T.__fns(T.cast(A[i], "uint32"), 4, 1), "int64")
                B[i, 3] = T.cast(T.__fns(T.cast(A[i], "uint32"), 31, -3), "int64")
                B[i, 4] = T.cast(T.__fns(T.cast(A[i], "uint32"), 5, 0), "int64")

    values = [0, 1, 0x30, -(1 << 40), 0x80000020, 0xF0F0F0F0]
    (_, b) = run(main, target, torch.tensor(values), torch.zeros((6, 5), dtype=torch.int64))

    def fns(mask, base, offset):
        if offset == 0:
            return base if mask >> base & 1 else 0xFFFFFFFF
        found = [p for p in (range(base, 32) if offset > 0 else range(base, -1, -1))
                 if mask >> p & 1]
        return found[abs(offset) - 1] if len(found) >= abs(offset) else 0xFFFFFFFF

    def ffs(v):
        return (v & -v).bit_length()

    want = [[ffs(v & (1 << 64) - 1), ffs(v & 0xFFFFFFFF), fns(v & 0xFFFFFFFF, 4, 1),
             fns(v & 0xFFFFFFFF, 31, -3), fns(v & 0xFFFFFFFF, 5, 0)] for v in values]
    assert b.tolist() == want


# -- TileLang's tests, their imports changed ------------------------------------------------------
PREDICATE_INTRINSICS = [T.any_sync, T.all_sync, T.ballot_sync, T.ballot, T.syncthreads_count,
                        T.syncthreads_and, T.syncthreads_or]


@pytest.mark.parametrize("intrinsic", PREDICATE_INTRINSICS)
def test_predicate_intrinsics_reject_float(intrinsic):
    predicate = tirx.FloatImm("float32", 0.5)
    with pytest.raises(TypeError, match="requires an integer or boolean predicate"):
        intrinsic(predicate)


def vote_kernel(dtype, body):
    @T.prim_func
    def main(B: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            B[tx] = body(tx)

    return main


TILELANG_VOTES = {
    "any_sync": ("int32", lambda tx: T.any_sync(tx == 0), [1] * 32),
    "all_sync": ("int32", lambda tx: T.all_sync(1), [1] * 32),
    "ballot_sync": ("int64", lambda tx: T.cast(T.ballot_sync(tx == 0), "int64"), [1] * 32),
    "ballot": ("int64", lambda tx: T.cast(T.ballot(1), "int64"), [0xFFFFFFFF] * 32),
    "ffs_ballot_sync": ("int32", lambda tx: T.__ffs(T.ballot_sync(tx >= 7)) - 1, [7] * 32),
    "fns_ballot_sync": ("int32", lambda tx: T.cast(T.__fns(T.cast(T.ballot_sync(tx >= 7),
                                                                   "uint32"), 0, 3), "int32"),
                        [9] * 32),
    "activemask": ("int64", lambda tx: T.cast(T.activemask(), "int64"), [0xFFFFFFFF] * 32),
    "syncthreads_count": ("int32", lambda tx: T.syncthreads_count(tx < 16), [16] * 32),
    "syncthreads_and_true": ("int32", lambda tx: T.syncthreads_and(1), [1] * 32),
    "syncthreads_and_false": ("int32", lambda tx: T.syncthreads_and(tx != 0), [0] * 32),
    "syncthreads_or_true": ("int32", lambda tx: T.syncthreads_or(tx == 0), [1] * 32),
    "syncthreads_or_false": ("int32", lambda tx: T.syncthreads_or(0), [0] * 32),
    "match_any_sync": ("int32", lambda tx: T.cast(T.match_any_sync(T.if_then_else(
        tx < 16, 1, 2)), "int32"), [0x0000FFFF] * 16 + [0xFFFF0000 - (1 << 32)] * 16),
    "match_all_sync_true": ("int32", lambda tx: T.cast(T.match_all_sync(7), "int32"),
                            [-1] * 32),
    "match_all_sync_false": ("int32", lambda tx: T.cast(T.match_all_sync(tx), "int32"),
                             [0] * 32),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(TILELANG_VOTES))
def test_tilelangs_vote_kernels(name, target):
    dtype, body, want = TILELANG_VOTES[name]
    (b,) = run(vote_kernel(dtype, body), target, torch.zeros(32, dtype=getattr(torch, dtype)))
    assert b.tolist() == want


@tilelang.jit
def kernel_with_warp_sync():
    @T.prim_func
    def main(A: T.Tensor((1,), "int32"), B: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            if tx == 0:
                A[0] = -1  # TileLang's kernel first sleeps (CUDA's __nanosleep)
            T.sync_warp()
            if tx == 1:
                B[0] = A[0]

    return main


@tilelang.jit
def kernel_with_shfl_sync():
    @T.prim_func
    def main(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            val = tx * 10
            broadcast = T.shfl_sync(val, 31)
            A[tx] = broadcast

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_tilelangs_warp_sync_and_shfl_sync(target):
    a, b = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    tilewright.compile(kernel_with_warp_sync.get_tir(), target=target)(a, b)
    assert b[0] == -1
    a = torch.zeros(32, dtype=torch.int32)
    tilewright.compile(kernel_with_shfl_sync.get_tir(), target=target)(a)
    assert torch.all(a == 310)


@tilelang.jit(out_idx=[-1])
def _get_warp_info_kernel(kind: str, num_threads: int = 128, warp_size=None,
                          warps_per_group=None, thread_extent: int = 64):
    @T.prim_func
    def warp_info_kernel(A: T.Tensor((num_threads,), T.int32)):
        with T.Kernel(1, threads=num_threads) as _:
            tx = T.get_thread_binding()
            if kind == "lane":
                A[tx] = T.get_lane_idx(warp_size)
            elif kind == "warp_sync":
                A[tx] = T.get_warp_idx_sync(warp_size)
            elif kind == "warp":
                A[tx] = T.get_warp_idx(warp_size)
            elif kind == "group":
                A[tx] = T.get_warp_group_idx(warp_size, warps_per_group)
            else:
                A[tx] = T.shuffle_elect(thread_extent)

    return warp_info_kernel


WARP_INFO = [  # TileLang's test_get_*: (kind, keywords, expectation of the thread index)
    ("lane", {}, lambda t: t % 32),
    ("lane", {"num_threads": 256, "warp_size": 64}, lambda t: t % 64),
    ("warp_sync", {}, lambda t: t // 32),
    ("warp_sync", {"num_threads": 256, "warp_size": 16}, lambda t: t // 16),
    ("warp", {}, lambda t: t // 32),
    ("warp", {"num_threads": 320, "warp_size": 20}, lambda t: t // 20),
    ("group", {}, lambda t: t // 128),
    ("group", {"num_threads": 512, "warp_size": 32, "warps_per_group": 5}, lambda t: t // 160),
    ("elect", {"num_threads": 256, "thread_extent": 64}, lambda t: (t % 64 == 0).int()),
    ("elect", {"num_threads": 128, "thread_extent": 0}, lambda t: (t == 0).int()),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", WARP_INFO, ids=[f"{c[0]}-{i}" for i, c in enumerate(WARP_INFO)])
def test_tilelangs_warp_info_kernels(case, target):
    kind, keywords, want = case
    func = _get_warp_info_kernel.get_tir(kind=kind, **keywords)
    n = keywords.get("num_threads", 128)
    a = torch.zeros(n, dtype=torch.int32)
    tilewright.compile(func, target=target)(a)
    assert torch.equal(a, want(torch.arange(n, dtype=torch.int32)).to(torch.int32))


# -- what is refused ----------------------------------------------------------------------------
def _lower(body, target="cpu", threads=64):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), M: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            body(A, M, tx)

    return tilewright.lower(main, target)


def _store(call):
    def body(A, M, tx):
        A[tx] = call(A, M, tx)

    return body


REFUSED = {
    "float predicate": (lambda A, M, tx: T.any_sync(A[tx]),
                        r"T\.any_sync requires an integer or boolean predicate, got float32"),
    "width 3": (lambda A, M, tx: T.shfl_xor(A[tx], 1, 3),
                r"T\.shfl_xor: width must be a constant power of two from 1 to 32, got 3"),
    "width 64": (lambda A, M, tx: T.shfl_down(A[tx], 1, 64), r"width must be .* got 64"),
    "run-time mask": (lambda A, M, tx: T.shfl_sync(A[tx], 0, 32, M[0]),
                      r"T\.shfl_sync: the member mask must be a constant of 32 bits"),
    "empty mask": (lambda A, M, tx: T.ballot_sync(tx > 0, 0), r"member mask must be"),
    "float lane": (lambda A, M, tx: T.shfl_up(A[tx], A[tx]), r"an integer lane or offset"),
    "vector value": (lambda A, M, tx: T.shfl_sync(T.Ramp(A[tx], 1.0, 2), 0),
                     r"T\.shfl_sync moves a scalar"),
    "ffs of a float": (lambda A, M, tx: T.__ffs(A[tx]), r"T\.__ffs takes an integer"),
    "warp group without warp size": (lambda A, M, tx: T.get_warp_group_idx(None, 2),
                                     r"takes warp_size when given warps_per_group"),
    "negative elect": (lambda A, M, tx: T.shuffle_elect(-1), r"T\.shuffle_elect takes"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_bad_input_is_refused_at_the_line(name):
    call, message = REFUSED[name]
    with pytest.raises(KernelError, match=r"test_warp_primitives\.py:\d+: .*" + message):
        _lower(_store(call))


def test_a_float_predicate_is_a_type_error():
    with pytest.raises(TypeError, match="requires an integer or boolean predicate"):
        _lower(_store(lambda A, M, tx: T.syncthreads_count(A[tx])))


def test_a_wrong_argument_count_is_refused_at_the_line():
    with pytest.raises(KernelError, match=r"test_warp_primitives\.py:\d+: .*shfl_sync"):
        _lower(_store(lambda A, M, tx: T.shfl_sync(A[tx])))


def test_a_warp_primitive_in_a_parallel_loop_is_refused_at_the_line():
    with pytest.raises(KernelError, match=r"test_warp_primitives\.py:\d+: T\.shfl_sync cannot "
                                          r"be used inside a T\.Parallel loop"):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.get_thread_binding()
                for i in T.Parallel(64):
                    A[i] = T.shfl_sync(A[i], 0)


def test_a_shuffle_in_a_loop_of_a_thread_dependent_trip_count_is_refused():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), "float32")
            v[0] = A[tx]
            for _ in T.serial(tx % 4):
                v[0] = T.shfl_xor(v[0], 1)
            A[tx] = v[0]

    with pytest.raises(KernelError, match=r"test_warp_primitives\.py:\d+: a loop whose trip "
                                          r"count depends on the thread index holds a warp"):
        tilewright.lower(main, "cpu")


def test_ascend_refuses_a_warp_primitive_at_its_line():
    pytest.importorskip("tilewright_ascend")

    @T.prim_func
    def main(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            A[0] = T.syncthreads_count(1)

    with pytest.raises(UnsupportedOpError, match=r"test_warp_primitives\.py:\d+: "
                                                 r"T\.syncthreads_count is not supported by "
                                                 r"backend 'ascend'"):
        tilewright.lower(main, target="ascend")


def block_vote_under_a_condition():
    @T.prim_func
    def main(A: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx < 32:
                A[tx] = T.syncthreads_or(tx == 3)

    return main


def test_a_block_predicate_under_a_condition_on_the_thread_is_refused_at_its_line():
    with pytest.raises(KernelError, match=r"test_warp_primitives\.py:\d+: T\.syncthreads_or "
                                          r"under a condition on the thread index: it is a "
                                          r"barrier of the whole block"):
        tilewright.lower(block_vote_under_a_condition(), "cpu")


@pytest.mark.parametrize("target", TARGETS)
def test_a_shuffle_reading_a_lane_outside_its_mask_gets_the_callers_value(target):
    """Lanes 0..7 (mask 0xFF) shuffle down by 4: lanes 4..7 would read lanes 8..11."""

    @T.prim_func
    def main(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            B[tx] = 0
            if tx < 8:
                B[tx] = T.shfl_down(A[tx], 4, 32, 0xFF)

    a = torch.arange(32, dtype=torch.int32) + 100
    (_, b) = run(main, target, a, torch.zeros_like(a))
    assert b.tolist() == [104, 105, 106, 107, 104, 105, 106, 107] + [0] * 24
