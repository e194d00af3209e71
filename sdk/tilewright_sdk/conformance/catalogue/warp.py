"""Rows of TileLang's warp-level primitives in thread-level code: shuffles, votes, block
predicates, the thread's place in its warp and the bit helpers. Each block has N threads: 64
(two whole warps) or 48 (a warp and a partial one of 16 lanes); a case reads no lane that
does not exist (a GPU leaves that undefined)."""

import tilewright.language as T

from .model import Kernel, rand

WARP = 32
# (name, the call on a thread's value v and lane index) of the shuffle row's outputs; the
# reference's (source lane within the warp or None: the caller's own value) of lane l
SHUFFLES = (
    ("shfl_sync", lambda v, tx: T.shfl_sync(v, 5), lambda lane: 5),
    ("shfl_sync", lambda v, tx: T.shfl_sync(v, tx + 3, 16),
     lambda lane: lane // 16 * 16 + (lane + 3) % 16),
    ("shfl_xor", lambda v, tx: T.shfl_xor(v, 1), lambda lane: lane ^ 1),
    ("shfl_xor", lambda v, tx: T.shfl_xor(v, 4, 8), lambda lane: lane ^ 4),
    ("shfl_down", lambda v, tx: T.shfl_down(v, 1, 16),
     lambda lane: lane + 1 if lane % 16 < 15 else None),
    ("shfl_down", lambda v, tx: T.shfl_down(v, 3, 8),
     lambda lane: lane + 3 if lane % 8 < 5 else None),
    ("shfl_up", lambda v, tx: T.shfl_up(v, 2), lambda lane: lane - 2 if lane >= 2 else None),
    ("shfl_up", lambda v, tx: T.shfl_up(v, 5, 16),
     lambda lane: lane - 5 if lane % 16 >= 5 else None),
    ("tvm_warp_shuffle", lambda v, tx: T.tvm_warp_shuffle(0xFFFFFFFF, v, (tx ^ 2) % 32, 32, 32),
     lambda lane: lane ^ 2),
)


def _shuffles(dtype, M, N):
    """Thread tx of block bx reads X[bx, tx] and writes each shuffle of it to Y[bx, tx, k];
    then, through shared memory and T.sync_warp, its neighbour's value to Y[bx, tx, -1]."""

    @T.prim_func
    def warp_shuffle(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N, len(SHUFFLES) + 1), dtype)):
        with T.Kernel(M, threads=N) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((N,), dtype)
            v = T.alloc_local((1,), dtype)
            v[0] = X[bx, tx]
            for k, (_, call, _) in enumerate(SHUFFLES):
                Y[bx, tx, k] = call(v[0], tx)
            s[tx] = v[0]
            T.sync_warp()
            Y[bx, tx, len(SHUFFLES)] = s[tx ^ 1]

    return warp_shuffle


def _shuffles_ref(x):
    M, N = x.shape
    y = x.new_zeros(M, N, len(SHUFFLES) + 1)
    for t in range(N):
        first, lane = t // WARP * WARP, t % WARP
        for k, (_, _, source) in enumerate(SHUFFLES):
            j = source(lane)
            y[:, t, k] = x[:, t] if j is None else x[:, first + j]
        y[:, t, len(SHUFFLES)] = x[:, t ^ 1]
    return [y]


# the vote row's outputs: (name, call on the thread's value x)
VOTES = (
    ("any_sync", lambda x: T.any_sync(x > 7)),
    ("all_sync", lambda x: T.all_sync(x > -8)),
    ("ballot", lambda x: T.ballot(x > 0)),
    ("ballot_sync", lambda x: T.ballot_sync(x % 2 == 0)),
    ("activemask", lambda x: T.activemask()),
    ("match_any_sync", lambda x: T.match_any_sync(x)),
    ("match_all_sync", lambda x: T.match_all_sync(x - x + 3)),
    ("syncthreads_count", lambda x: T.syncthreads_count(x > 0)),
    ("syncthreads_and", lambda x: T.syncthreads_and(x > -9)),
    ("syncthreads_or", lambda x: T.syncthreads_or(x > 8)),
)


def _votes(dtype, M, N):
    """Thread tx of block bx writes each vote of X[bx, tx] to Y[bx, tx, k] (int64)."""

    @T.prim_func
    def warp_vote(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N, len(VOTES)), "int64")):
        with T.Kernel(M, threads=N) as bx:
            tx = T.get_thread_binding()
            x = T.alloc_local((1,), dtype)
            x[0] = X[bx, tx]
            for k, (_, call) in enumerate(VOTES):
                Y[bx, tx, k] = T.cast(call(x[0]), "int64")

    return warp_vote


def _votes_ref(x):
    import torch

    M, N = x.shape
    y = torch.zeros(M, N, len(VOTES), dtype=torch.int64)
    for b in range(M):
        row = [int(v) for v in x[b]]
        for t in range(N):
            first = t // WARP * WARP
            warp = row[first:first + WARP]

            def bits(pred, lanes=warp):
                return sum(1 << k for k, v in enumerate(lanes) if pred(v))

            live = (1 << len(warp)) - 1
            y[b, t] = torch.tensor([
                int(any(v > 7 for v in warp)), int(all(v > -8 for v in warp)),
                bits(lambda v: v > 0), bits(lambda v: v % 2 == 0), live,
                bits(lambda v, mine=row[t]: v == mine), live,
                sum(v > 0 for v in row), int(all(v > -9 for v in row)),
                int(any(v > 8 for v in row))])
    return [y]


def _indices(dtype, M, N):
    """Thread (tx, ty) of a block of (16, N // 16) threads writes its lane, warp, warp of 16,
    warpgroup of two warps and whether T.shuffle_elect(16) / (0) elects it, then T.__ffs of
    X[bx, t] and T.__fns of it from bit t % 32, its second set bit up and down."""

    @T.prim_func
    def warp_index(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N, 9), "int64")):
        with T.Kernel(M, threads=(16, N // 16)) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            t = ty * 16 + tx
            x = X[bx, t]
            Y[bx, t, 0] = T.cast(T.get_lane_idx(), "int64")
            Y[bx, t, 1] = T.cast(T.get_warp_idx(), "int64")
            Y[bx, t, 2] = T.cast(T.get_warp_idx_sync(16), "int64")
            Y[bx, t, 3] = T.cast(T.get_warp_group_idx(32, 2), "int64")
            Y[bx, t, 4] = T.cast(T.shuffle_elect(16), "int64")
            Y[bx, t, 5] = T.cast(T.shuffle_elect(0), "int64")
            Y[bx, t, 6] = T.cast(T.__ffs(x), "int64")
            Y[bx, t, 7] = T.cast(T.__fns(x, t % 32, 2), "int64")
            Y[bx, t, 8] = T.cast(T.__fns(x, t % 32, -2), "int64")

    return warp_index


def _fns(mask: int, base: int, offset: int) -> int:
    """PTX's fns: the offset-th set bit of 32-bit mask from bit base, or 0xFFFFFFFF."""
    step, count, pos = (1 if offset > 0 else -1), abs(offset), base
    if offset == 0:
        return base if mask >> base & 1 else 0xFFFFFFFF
    while 0 <= pos < 32:
        if mask >> pos & 1:
            count -= 1
            if count == 0:
                return pos
        pos += step
    return 0xFFFFFFFF


def _indices_ref(x):
    import torch

    M, N = x.shape
    y = torch.zeros(M, N, 9, dtype=torch.int64)
    for b in range(M):
        for t in range(N):
            v = int(x[b, t]) & 0xFFFFFFFF
            ffs = (v & -v).bit_length()
            y[b, t] = torch.tensor([t % 32, t // 32, t // 16, t // 64, int(t % 16 == 0),
                                    int(t == 0), ffs, _fns(v, t % 32, 2), _fns(v, t % 32, -2)])
    return [y]


THREADS = {"full": {"M": 2, "N": 64}, "partial": {"M": 2, "N": 48}}
ROWS = (
    Kernel("warp_shuffle", ("Kernel", "Tensor", "prim_func", "alloc_local", "alloc_shared",
                            "get_thread_binding", "shfl_sync", "shfl_xor", "shfl_down",
                            "shfl_up", "sync_warp", "tvm_warp_shuffle"),
           ("get_thread_binding", "shfl_sync", "shfl_xor", "shfl_down", "shfl_up",
            "sync_warp"), _shuffles,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype)], _shuffles_ref,
           THREADS, exact=True,
           dtypes=("float32", "float16", "bfloat16", "int32", "int64", "float64"),
           doc="T.shfl_sync / shfl_xor / shfl_down / shfl_up with widths, out-of-group "
               "sources giving the caller's own value, in whole and partial warps; "
               "T.sync_warp ordering a warp's shared-memory exchange"),
    Kernel("warp_vote", ("Kernel", "Tensor", "prim_func", "alloc_local", "get_thread_binding",
                         "cast", *(name for name, _ in VOTES)),
           ("get_thread_binding", "any_sync", "all_sync", "ballot_sync", "activemask",
            "match_any_sync", "match_all_sync", "syncthreads_count", "syncthreads_and",
            "syncthreads_or"), _votes,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype)], _votes_ref,
           THREADS, exact=True, dtypes=("int32",),
           doc="the warp votes (T.any_sync, all_sync, ballot, ballot_sync, activemask, "
               "match_any_sync, match_all_sync) and block predicates (T.syncthreads_count / "
               "and / or), in whole and partial warps"),
    Kernel("warp_index", ("Kernel", "Tensor", "prim_func", "get_thread_binding", "cast",
                          "get_lane_idx", "get_warp_idx", "get_warp_idx_sync",
                          "get_warp_group_idx", "shuffle_elect", "__ffs", "__fns"),
           ("get_thread_binding",), _indices,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype, -2 ** 31,
                                                 2 ** 31 - 1)], _indices_ref,
           THREADS, exact=True, dtypes=("int32",),
           doc="a thread's lane, warp and warpgroup and T.shuffle_elect in a 2-D block (the "
               "warps of its linear thread number); T.__ffs and T.__fns of 32-bit values"),
)
