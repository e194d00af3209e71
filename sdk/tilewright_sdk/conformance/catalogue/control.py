"""Rows for the kernel frame and control flow: loop kinds (``T.serial`` with a start,
``T.unroll``, ``range``, ``T.parallel``, ``T.vectorized``), ``T.Persistent``, ``T.macro``,
Python names rebound to a second tile, dynamic and symbolic shapes, per-thread storage
(``T.alloc_local``, ``T.alloc_var``), several T.Kernel blocks, views of tiles (``T.reshape``,
``T.view``, ``T.reinterpret``), the im2col gather, and blocks branching on data
(``T.any_of`` / ``T.all_of``)."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T

from .model import Kernel, rand, two_d
from .tiles import BASE


def _loops(dtype, M, N, bn=8):
    """Row r of Y: a running sum of X[r] over T.serial(1, N) after X[r, 0], doubled by an
    unrolled loop, plus a ``range`` loop counting to 3 into a T.alloc_var."""

    @T.prim_func
    def loops(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(M, threads=32) as bx:
            acc = T.alloc_local((1,), "float32")
            count = T.alloc_var("int32", init=0)
            acc[0] = T.cast(X[bx, 0], "float32")
            for c in T.serial(1, N):
                acc[0] = acc[0] + T.cast(X[bx, c], "float32")
            for _ in T.unroll(2):
                acc[0] = acc[0] * 2.0
            for _ in range(3):
                count = count + 1
            Y[bx] = T.cast(acc[0] + T.cast(count, "float32"), dtype)

    return loops


def _persistent(dtype, M, N, workers=3, bm=8, bn=8):
    @T.prim_func
    def persistent(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(workers, threads=128) as wid:
            tile = T.alloc_fragment((bm, bn), dtype)
            for by, bx in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], workers, wid,
                                       group_size=2):
                T.copy(A[by * bm, bx * bn], tile)
                for i, j in T.Parallel(bm, bn):
                    tile[i, j] = tile[i, j] * 3.0
                T.copy(tile, B[by * bm, bx * bn])

    return persistent


@T.macro
def _scale_rows(tile, weights, bm, bn):
    """A macro: multiplies each row of ``tile`` by its weight."""
    for i, j in T.Parallel(bm, bn):
        tile[i, j] = tile[i, j] * weights[i]


def _macro(dtype, M, N, bm=8, bn=16):
    @T.prim_func
    def macro(A: T.Tensor((M, N), dtype), W: T.Tensor((M,), dtype),
              B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_fragment((bm, bn), dtype)
            w = T.alloc_fragment((bm,), dtype)
            T.copy(A[by * bm, bx * bn], tile)
            T.copy(W[by * bm], w)
            _scale_rows(tile, w, bm, bn)
            _scale_rows(tile, w, bm, bn)
            T.copy(tile, B[by * bm, bx * bn])

    return macro


def _named_value(dtype, M, N, bm=4, bn=8):
    @T.macro
    def order_pairs(tile: T.SharedBuffer((bm, bn), dtype)):
        """Each pair of neighbouring columns in ascending order, by a compare-and-swap through
        a name bound to an element (``v`` keeps the element's value when the next line
        overwrites it); the parameter carries TileLang's tile annotation."""
        T.sync_threads()
        for i, j in T.Parallel(bm, bn):
            p = j ^ 1
            if j < p and tile[i, j] > tile[i, p]:
                v = tile[i, j]
                tile[i, j] = tile[i, p]
                tile[i, p] = v
        T.sync_threads()

    @T.prim_func
    def named_value(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_shared((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], tile)
            order_pairs(tile)
            T.copy(tile, B[by * bm, bx * bn])

    return named_value


def _pairs_ref(a):
    m, n = a.shape
    return [a.reshape(m, n // 2, 2).sort(dim=-1).values.reshape(m, n)]


def _rebind(dtype, M, N, bm=8, bn=16):
    """``x`` names a first tile, then a second one: each use sees the tile bound at that
    point."""

    @T.prim_func
    def rebind(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
               C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], x)
            first = x
            x = T.alloc_fragment((bm, bn), dtype)
            T.copy(B[by * bm, bx * bn], x)
            for i, j in T.Parallel(bm, bn):
                x[i, j] = x[i, j] - first[i, j]
            T.copy(x, C[by * bm, bx * bn])

    return rebind


def _dynamic(dtype, bm=8, bn=16):
    M, N = T.symbolic("m"), T.dynamic("n")

    @T.prim_func
    def dynamic(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_shared((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], tile)
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M and bx * bn + j < N:
                    B[by * bm + i, bx * bn + j] = tile[i, j] + 1.0

    return dynamic


def _data_guard(dtype, M, N, bm=4, bn=8):
    """A branch on tile data inside T.Parallel: elements where it fails keep the fill."""

    @T.prim_func
    def data_guard(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), dtype)
            y = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], x)
            T.fill(y, 0.5)
            for i, j in T.Parallel(bm, bn):
                if x[i, j] > 0:
                    y[i, j] = x[i, j]
            T.copy(y, B[by * bm, bx * bn])

    return data_guard


def _kernel_sequence(dtype, M, N, bm=4, bn=8):
    """Two T.Kernel launches in order, sharing a T.alloc_global workspace: the second reads
    rows the first wrote from other blocks (row M - 1 - r)."""

    @T.prim_func
    def kernel_sequence(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        W = T.alloc_global((M, N), dtype)
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                r = by * bm + i
                c = bx * bn + j
                if r < M and c < N:
                    W[r, c] = A[r, c] * 2.0
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                r = by * bm + i
                c = bx * bn + j
                if r < M and c < N:
                    B[r, c] = W[M - 1 - r, c] + 1.0

    return kernel_sequence


def _pdl_sequence(dtype, M, N, bm=4, bn=8):
    """:func:`_kernel_sequence` as a programmatic dependent launch: the first kernel lets the
    second start (T.pdl_trigger) after its stores, the second computes its own part before it
    waits for the first (T.pdl_sync) and reads the workspace after; both ask for two resident
    blocks per multiprocessor."""

    @T.prim_func
    def pdl_sequence(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        W = T.alloc_global((M, N), dtype)
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            T.annotate_min_blocks_per_sm(2)
            for i, j in T.Parallel(bm, bn):
                r = by * bm + i
                c = bx * bn + j
                if r < M and c < N:
                    W[r, c] = A[r, c] * 2.0
            T.pdl_trigger()
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            T.annotate_min_blocks_per_sm(2)
            own = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], own)
            T.pdl_sync()
            for i, j in T.Parallel(bm, bn):
                r = by * bm + i
                c = bx * bn + j
                if r < M and c < N:
                    B[r, c] = W[M - 1 - r, c] + own[i, j]

    return pdl_sequence


def _views(dtype, M, N, bm=4, bn=8):
    """Y = -X + 1 through views: a tile seen flat (T.reshape) and as bytes of its shape
    (T.view), each element's sign flipped through its bits (T.reinterpret to the unsigned
    integer of its width), with the loop forms T.parallel and T.vectorized."""
    bits = {"float32": "uint32", "float16": "uint16", "bfloat16": "uint16"}[dtype]
    sign = {"uint32": 0x80000000, "uint16": 0x8000}[bits]

    @T.prim_func
    def views(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_shared((bm, bn), dtype)
            T.copy(X[by * bm, bx * bn], x)
            flat = T.reshape(x, (bm * bn,))
            same = T.view(x, (bm, bn))
            for k in T.parallel(bm * bn):
                flat[k] = T.reinterpret(T.reinterpret(flat[k], bits) ^ T.cast(sign, bits),
                                        dtype)
            for i in T.serial(bm):
                for j in T.vectorized(bn):
                    same[i, j] = same[i, j] + T.cast(1.0, dtype)
            T.copy(x, Y[by * bm, bx * bn])

    return views


def _jumps(dtype, M, N, high=1.5):
    """Per row of X: the values skipped when negative (``continue``), the scan stopped at the
    first above ``high`` (``break``, its column into P; N when none: the loop's ``else``), the
    rest summed into S. The conditions are known only at run time."""

    @T.prim_func
    def jumps(X: T.Tensor((M, N), dtype), S: T.Tensor((M,), dtype),
              P: T.Tensor((M,), "int32")):
        with T.Kernel(M, threads=32) as bx:
            total = T.alloc_var("float32", init=0.0)
            stop = T.alloc_var("int32", init=-1)
            for j in T.serial(N):
                if X[bx, j] < 0:
                    continue
                if X[bx, j] > high:
                    stop = j
                    break
                total = total + T.cast(X[bx, j], "float32")
            else:
                stop = N
            S[bx] = T.cast(total, dtype)
            P[bx] = stop

    return jumps


def _jumps_ref(x, high=1.5):
    sums, stops = [], []
    for row in x.tolist():
        total, stop = 0.0, len(row)
        for j, v in enumerate(row):
            if v < 0:
                continue
            if v > high:
                stop = j
                break
            total += v
        sums.append(total)
        stops.append(stop)
    return [x.new_tensor(sums), x.new_tensor(stops).int()]


def _im2col(dtype, N, H, W, C, kernel=3, stride=2, dilation=1, pad=1, bm=16, bk=16):
    """The im2col matrix of an (N, H, W, C) image, tile by tile, through T.im2col and its
    former name T.c2d_im2col (one output each)."""
    oh = (H + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (W + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    rows, cols = N * oh * ow, kernel * kernel * C

    @T.prim_func
    def im2col(img: T.Tensor((N, H, W, C), dtype), A: T.Tensor((rows, cols), dtype),
               B: T.Tensor((rows, cols), dtype)):
        with T.Kernel(T.ceildiv(cols, bk), T.ceildiv(rows, bm), threads=128) as (bx, by):
            a = T.alloc_shared((bm, bk), dtype)
            b = T.alloc_shared((bm, bk), dtype)
            T.im2col(img, a, by, bx, kernel, stride, dilation, pad)
            T.c2d_im2col(img, b, by, bx, kernel, stride, dilation, pad)
            T.copy(a, A[by * bm, bx * bk])
            T.copy(b, B[by * bm, bx * bk])

    return im2col


def _im2col_ref(img, kernel=3, stride=2, dilation=1, pad=1):
    n, h, w, c = img.shape
    padded = img.new_zeros((n, h + 2 * pad, w + 2 * pad, c))
    padded[:, pad:pad + h, pad:pad + w] = img
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    windows = [padded[:, kh * dilation:kh * dilation + stride * (oh - 1) + 1:stride,
                      kw * dilation:kw * dilation + stride * (ow - 1) + 1:stride]
               for kh in range(kernel) for kw in range(kernel)]
    m = img.new_empty((n, oh, ow, kernel * kernel, c))  # one row per pixel, columns (kh, kw, c)
    for k, window in enumerate(windows):
        m[:, :, :, k] = window
    m = m.reshape(n * oh * ow, kernel * kernel * c)
    return [m, m]


# per block of rows: (its mask, its counts): every combination of the three tests below
FLAG_PATTERNS = (((0, 0, 0), (1, 2, 3)), ((0, 1, 0), (0, 2, 3)), ((1, 1, 0), (4, 0, 1)),
                 ((1, 1, 1), (7, 8, 9)), ((1, 0, 1), (1, 1, 0)))


def _any_all_of(dtype, M, N, bm=4, bn=8):
    """Blocks branch on T.any_of / T.all_of of a whole row of a global bool mask, of a region
    of it, and of a shared int32 tile (its elements != 0)."""

    @T.prim_func
    def any_all_of(X: T.Tensor((M, N), dtype), Mask: T.Tensor((T.ceildiv(M, bm), 3), "bool"),
                   Counts: T.Tensor((T.ceildiv(M, bm), 3), "int32"),
                   Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), dtype)
            counts = T.alloc_shared((3,), "int32")
            T.copy(X[by * bm, bx * bn], x)
            T.copy(Counts[by, 0], counts)
            if T.any_of(Mask[by, :]):
                for i, j in T.Parallel(bm, bn):
                    x[i, j] = x[i, j] * 2
            if T.all_of(Mask[by, 0:2]):
                for i, j in T.Parallel(bm, bn):
                    x[i, j] = x[i, j] + 1
            if T.all_of(counts):
                for i, j in T.Parallel(bm, bn):
                    x[i, j] = x[i, j] - 3
            T.copy(x, Y[by * bm, bx * bn])

    return any_all_of


def _any_all_of_inputs(torch, gen, dtype, M, N, bm=4):
    blocks = -(-M // bm)
    rows = [FLAG_PATTERNS[b % len(FLAG_PATTERNS)] for b in range(blocks)]
    return [rand(torch, gen, (M, N), dtype), torch.tensor([m for m, _ in rows]).bool(),
            torch.tensor([c for _, c in rows], dtype=torch.int32)]


def _any_all_of_ref(x, mask, counts, bm=4):
    y = x.clone()
    for b in range(mask.shape[0]):
        rows = y[b * bm:(b + 1) * bm]
        if mask[b].any():
            rows *= 2
        if mask[b, :2].all():
            rows += 1
        if (counts[b] != 0).all():
            rows -= 3
    return [y]


def _thread_level(dtype, M, N, bm=8, bk=4):
    """TileLang's split-K GEMV by thread-level code: thread (r, k) of a block sums columns
    k, k + 4, ... of row r times V in a register, adds it atomically into the block's shared
    row sums (set to 0 by the threads k == 0), and the threads of column 0 swap the sums of
    rows r and bm - 1 - r through values bound to names before storing them."""

    @T.prim_func
    def thread_level(X: T.Tensor((M, N), dtype), V: T.Tensor((N,), dtype),
                     Y: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=(bm, bk)) as bx:
            r = T.get_thread_binding(0)
            k = T.thread_binding(0, bk, thread="threadIdx.y")
            acc = T.alloc_local((1,), "float32")
            sums = T.alloc_shared((bm,), "float32")
            if k == 0:
                sums[r] = 0
            T.clear(acc)
            for ko in T.serial(T.ceildiv(N, bk)):
                if ko * bk + k < N and bx * bm + r < M:
                    acc[0] += T.cast(X[bx * bm + r, ko * bk + k], "float32") * \
                        T.cast(V[ko * bk + k], "float32")
            T.atomic_add(sums[r], acc[0])
            mine = sums[r]
            theirs = sums[bm - 1 - r]
            if k == 0:
                sums[bm - 1 - r] = mine
                sums[r] = theirs
            if k == 0 and bx * bm + bm - 1 - r < M:
                Y[bx * bm + bm - 1 - r] = T.cast(sums[r], dtype)

    return thread_level


def _thread_level_ref(x, v, bm=8):
    return [x @ v]


def _let_align(dtype, M, N, bn=8):
    """Each block's first column bound with T.let (T.assume: not negative); X plus each
    column rounded up to a multiple of 4 (T.align_up, through a T.Select)."""

    @T.prim_func
    def let_align(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=32) as bx:
            col = T.int32()
            T.let(col, bx * bn)
            T.assume(col >= 0)
            for i, j in T.Parallel(M, bn):
                if col + j < N:
                    Y[i, col + j] = X[i, col + j] + T.cast(
                        T.Select(col + j > 0, T.align_up(col + j, 4), 0), dtype)

    return let_align


def _let_align_ref(x):
    columns = (x.new_ones(x.shape[1]).cumsum(0) - 1 + 3) // 4 * 4
    return [x + columns]


@T.macro
def _doubled_into(y: T.Ref, x):
    y = x * 2  # noqa: F841 - stores into the caller's element


def _match_buffer(dtype, M, N, bn=16):
    """TVM script's parameters: ``T.handle`` addresses made tensors by ``T.match_buffer``
    (``T.func_attr`` naming the kernel), each output element stored through a ``T.Ref``
    macro parameter."""

    @T.prim_func
    def match_buffer(X_ptr: T.handle, Y_ptr: T.handle):
        T.func_attr({"global_symbol": "matched", "tir.noalias": True})
        X = T.match_buffer(X_ptr, (M, N), dtype)
        Y = T.match_buffer(Y_ptr, (M, N), dtype)
        with T.Kernel(T.ceildiv(N, bn), threads=32) as bx:
            for i, j in T.Parallel(M, bn):
                if bx * bn + j < N:
                    _doubled_into(Y[i, bx * bn + j], X[i, bx * bn + j])

    return match_buffer


WARP_KINDS = ("sum", "max", "min")
WARP_BITS = ("bitand", "bitor")


def _warp_reduce(dtype, M, N):
    """Each thread of a block of N (64: two warps; 48: a warp and a partial one of 16 threads)
    reads X[bx, tx] and writes its warp's sum, max and min of it (integers: also the bitwise
    and / or) to Y[bx, tx, k]."""
    kinds = WARP_KINDS + (WARP_BITS if dtype.startswith("int") else ())
    threads = N

    @T.prim_func
    def warp_reduce(X: T.Tensor((M, threads), dtype),
                    Y: T.Tensor((M, threads, len(kinds)), dtype)):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), dtype)
            v[0] = X[bx, tx]
            for k, kind in enumerate(kinds):
                Y[bx, tx, k] = getattr(T, f"warp_reduce_{kind}")(v[0])

    return warp_reduce


def _warp_reduce_ref(x):
    kinds = WARP_KINDS + (WARP_BITS if not x.is_floating_point() else ())
    y = x.new_zeros(*x.shape, len(kinds))
    for first in range(0, x.shape[1], 32):  # each warp's threads (the last may be fewer)
        warp = x[:, first:first + 32]
        for k, kind in enumerate(kinds):
            if kind == "sum":
                part = warp.sum(dim=1)
            elif kind in ("max", "min"):
                part = warp.amax(dim=1) if kind == "max" else warp.amin(dim=1)
            else:
                part = warp[:, 0].clone()
                for lane in range(1, warp.shape[1]):
                    part = part & warp[:, lane] if kind == "bitand" else part | warp[:, lane]
            y[:, first:first + 32, k] = part[:, None]
    return [y]


def _pointer_params(dtype, N, block=256):
    """TileLang's ``T.ptr`` parameters: addresses (the caller passes tensors), tensors made on
    them with ``T.make_tensor`` before the kernel, a block of 1 KiB staged through a tile."""

    @T.prim_func
    def pointer_params(x_ptr: T.ptr, y_ptr: T.ptr, n: T.int32):
        X = T.make_tensor(x_ptr, (n,), dtype)
        Y = T.make_tensor(y_ptr, (n,), dtype)
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            tile = T.alloc_shared((block,), dtype)
            for i in T.Parallel(block):
                tile[i] = T.if_then_else(bx * block + i < n, X[bx * block + i], 0)
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Y[bx * block + i] = tile[i] * 2 + tile[block - 1 - i]

    return pointer_params


def _pointer_inputs(torch, gen, dtype, N):
    return [rand(torch, gen, (N,), dtype), torch.zeros(N, dtype=getattr(torch, dtype)), N]


def _pointer_ref(x, y, n, block=256):
    padded = x.new_zeros(-(-n // block) * block)
    padded[:n] = x
    tiles = padded.view(-1, block)
    return [(tiles * 2 + tiles.flip(1)).view(-1)[:n]]


def _sync_grid(dtype, M, N, bm=4):
    """A persistent two-phase kernel: each block doubles its rows into a fragment and writes
    their sums; after the grid barrier (T.sync_grid) each block reads every block's sums and
    divides its fragment, kept across the barrier, by their total."""

    @T.prim_func
    def sync_grid(X: T.Tensor((M, N), dtype), P: T.Tensor((T.ceildiv(M, bm),), "float32"),
                  Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            tile = T.alloc_fragment((bm, N), "float32")
            part = T.alloc_var("float32")
            total = T.alloc_var("float32")
            row0 = bx * bm
            for i, j in T.Parallel(bm, N):
                tile[i, j] = T.if_then_else(row0 + i < M, T.cast(X[row0 + i, j], "float32") * 2,
                                            0)
            part = 0
            for i in T.serial(bm):
                for j in T.serial(N):
                    part += tile[i, j]
            P[bx] = part
            T.sync_grid()
            total = 0
            for b in T.serial(T.ceildiv(M, bm)):
                total += P[b]
            for i, j in T.Parallel(bm, N):
                if row0 + i < M:
                    Y[row0 + i, j] = T.cast(tile[i, j] / total, dtype)

    return sync_grid


def _sync_grid_parallel(dtype, N, block=64):
    """TileLang's cooperative test: T.sync_grid in a T.Parallel loop's body cuts the loop
    there; X plus its reverse, each element read from another block after the barrier."""

    @T.prim_func
    def sync_grid_parallel(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            mine = T.alloc_fragment((block,), dtype)
            n_idx = bx * block
            for i in T.Parallel(block):
                Y[n_idx + i] = X[n_idx + i]
            T.sync_grid()
            for i in T.Parallel(block):
                mine[i] = Y[N - n_idx - i - 1]
                T.sync_grid()
                Y[n_idx + i] = Y[n_idx + i] + mine[i]

    return sync_grid_parallel


def _sync_grid_ref(x, bm=4):
    doubled = x * 2
    rows = doubled.new_zeros(-(-x.shape[0] // bm) * bm)
    rows[: x.shape[0]] = doubled.sum(dim=1)
    return [rows.view(-1, bm).sum(dim=1), doubled / doubled.sum()]


def _thread_allreduce(dtype, M, N, reduce=8, rows=4, tile=4):
    """TileLang's GEMV by TVM's thread allreduce: thread (k, r) sums its slices of row r of X
    times V in a register; the ``reduce`` threads of a row combine their sums
    (T.tvm_thread_allreduce in T.attr(T.comm_reducer(...), "reduce_scope", ...)) and their
    largest partial sum, which every one of them gets."""

    @T.prim_func
    def thread_allreduce(X: T.Tensor((M, N), dtype), V: T.Tensor((N,), dtype),
                         Y: T.Tensor((M,), dtype), Z: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, rows), threads=(reduce, rows)) as bx:
            k = T.get_thread_binding(0)
            r = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            total = T.alloc_local((1,), "float32")
            most = T.alloc_local((1,), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(N, reduce * tile)):
                for j in T.serial(tile):
                    col = ko * reduce * tile + k * tile + j
                    if col < N and bx * rows + r < M:
                        acc[0] += T.cast(X[bx * rows + r, col], "float32") * \
                            T.cast(V[col], "float32")
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, "float32")]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], k,
                                                  dtype="handle"))
            with T.attr(T.comm_reducer(lambda x, y: T.max(x, y), [T.cast(0, "float32")]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, most[0], k,
                                                  dtype="handle"))
            if k == 0 and bx * rows + r < M:
                Y[bx * rows + r] = T.cast(total[0], dtype)
                Z[bx * rows + r] = T.cast(most[0], dtype)

    return thread_allreduce


def _thread_allreduce_ref(x, v, reduce=8, tile=4):
    M, N = x.shape
    cols = x * v
    slices = -(-N // (reduce * tile)) * reduce * tile
    padded = cols.new_zeros(M, slices)
    padded[:, :N] = cols
    # thread k's columns: ko * reduce * tile + k * tile + j
    partial = padded.view(M, -1, reduce, tile).sum(dim=(1, 3))
    return [cols.sum(dim=1), partial.max(dim=1).values]


def _safe_value(dtype, M, N, bn=8):
    """A kernel reading one element past its block's end of a row: the last block's loads
    that pass the tensor read the value T.annotate_safe_value gives it, not 0, and its
    stores that pass the output are not made."""

    @T.prim_func
    def safe_value(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), M, threads=128) as (bx, by):
            T.annotate_safe_value({X: 3})
            for j in T.serial(bn):
                Y[by, bx * bn + j] = X[by, bx * bn + j + 1]

    return safe_value


def _safe_value_ref(x, bn=8):
    y = x.new_full(x.shape, 3)
    y[:, :-1] = x[:, 1:]
    return [y]


def _thread_scan(dtype, M, N, threads=128):
    """Row bx of Y: the running sums of X's row by the first N threads of the block (a scan
    across threads, TileLang's top-k cumsum): a loop exchanging values through shared memory
    at named barriers, inside a branch on the thread index."""

    @T.prim_func
    def thread_scan(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((N,), dtype)
            val = T.alloc_var(dtype)
            if tx < N:
                s[tx] = X[bx, tx]
            T.sync_threads()
            if tx < 64:
                for i in T.serial(6):
                    T.sync_threads(1, 64)
                    if tx >= (1 << i) and tx < N:
                        val = s[tx] + s[tx - (1 << i)]
                    T.sync_threads(1, 64)
                    if tx >= (1 << i) and tx < N:
                        s[tx] = val
            T.sync_threads()
            if tx < N:
                Y[bx, tx] = s[tx]

    return thread_scan


MN = {"partial": {"M": 12, "N": 20}}
TILE = (*BASE, "alloc_fragment", "copy", "Parallel")

ROWS = (
    Kernel("any_all_of", (*TILE, "alloc_shared", "any_of", "all_of"), ("copy",), _any_all_of,
           _any_all_of_inputs, _any_all_of_ref, {"partial": {"M": 18, "N": 20}},
           dtypes=("float32", "float16", "bfloat16", "int32"),
           doc="blocks branch on T.any_of / T.all_of of a global mask row, a region of it and "
               "a shared int32 tile"),
    Kernel("thread_level", (*BASE, "serial", "alloc_local", "alloc_shared", "cast",
                            "get_thread_binding", "thread_binding", "atomic_add"),
           ("get_thread_binding", "atomic_add"), _thread_level,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (N,), dtype)],
           _thread_level_ref, {"partial": {"M": 20, "N": 30}},
           reduction=lambda N, **_: N, dtypes=("float32", "float16", "bfloat16"),
           doc="thread-level code (T.get_thread_binding, T.thread_binding): a split-K GEMV "
               "summing in registers, atomics into shared memory, a swap through names"),
    Kernel("let_align", (*BASE, "Parallel", "let", "align_up", "assume", "Select", "int32",
                         "cast"), (),
           _let_align, two_d, _let_align_ref, {"partial": {"M": 5, "N": 21}},
           doc="a variable bound with T.let; T.align_up of a column index"),
    Kernel("match_buffer", (*BASE, "Parallel", "handle", "match_buffer", "func_attr", "macro",
                            "Ref"), (), _match_buffer, two_d, lambda x: [x * 2], MN,
           out_idx=(1,), doc="T.handle parameters made tensors by T.match_buffer, "
                             "T.func_attr, output elements stored through a T.Ref parameter"),
    Kernel("warp_reduce", (*BASE, "alloc_local", "get_thread_binding",
                           *(f"warp_reduce_{k}" for k in WARP_KINDS + WARP_BITS)),
           ("get_thread_binding", "tvm_thread_allreduce"), _warp_reduce,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype)],
           _warp_reduce_ref, {"full": {"M": 3, "N": 64}, "partial": {"M": 2, "N": 48}},
           reduction=lambda **_: 32, dtypes=("float32", "int32"),
           doc="T.warp_reduce_sum/max/min (and bitand/bitor of integers) over each warp, the "
               "last one of a block of 48 threads partial"),
    Kernel("pointer_params", (*BASE, "Parallel", "alloc_shared", "if_then_else", "ptr",
                              "make_tensor", "int32"), (), _pointer_params, _pointer_inputs,
           _pointer_ref, {"partial": {"N": 600}}, out_idx=(), inplace=(1,),
           features=("pointer_params",), dtypes=("float32", "float16", "bfloat16", "int32"),
           doc="T.ptr parameters (the caller's tensors passed as addresses) made tensors with "
               "T.make_tensor before the kernel"),
    Kernel("sync_grid", (*BASE, "Parallel", "serial", "alloc_fragment", "alloc_var", "cast",
                         "if_then_else", "sync_grid"), ("sync_grid",), _sync_grid, two_d,
           _sync_grid_ref, {"partial": {"M": 10, "N": 6}}, out_idx=(1, 2),
           reduction=lambda M, N, **_: M * N,
           doc="a grid barrier between a persistent kernel's phases (T.sync_grid), with a "
               "fragment kept across it"),
    Kernel("sync_grid_parallel", (*BASE, "Parallel", "alloc_fragment", "sync_grid"),
           ("sync_grid",), _sync_grid_parallel,
           lambda torch, gen, dtype, N: [rand(torch, gen, (N,), dtype)],
           lambda x: [x + x.flip(0)], {"full": {"N": 256}}, out_idx=(1,),
           doc="a grid barrier in a T.Parallel loop's body, which cuts the loop there"),
    Kernel("thread_allreduce", (*BASE, "serial", "alloc_local", "clear", "cast",
                                "get_thread_binding", "attr", "comm_reducer", "evaluate",
                                "tvm_thread_allreduce", "reinterpret", "uint64", "uint32"),
           ("get_thread_binding", "tvm_thread_allreduce", "fill"), _thread_allreduce,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (N,), dtype)],
           _thread_allreduce_ref, {"partial": {"M": 10, "N": 70}}, out_idx=(2, 3),
           reduction=lambda N, **_: N, dtypes=("float32", "float16", "bfloat16"),
           doc="TVM's thread allreduce (sum and max) of a GEMV's per-thread partial sums"),
    Kernel("safe_value", (*BASE, "serial", "annotate_safe_value"), (), _safe_value, two_d,
           _safe_value_ref, {"partial": {"M": 3, "N": 20}},
           dtypes=("float32", "float16", "int32"), exact=True,
           doc="global loads past the tensor's end read T.annotate_safe_value's value"),
    Kernel("thread_scan", (*BASE, "serial", "alloc_shared", "alloc_var", "get_thread_binding",
                           "sync_threads"),
           ("get_thread_binding", "named_barrier"), _thread_scan,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype)],
           lambda x: [x.cumsum(dim=1)], {"partial": {"M": 3, "N": 50}},
           dtypes=("int32", "int64"), exact=True,
           doc="a scan across threads at named barriers (T.sync_threads(id, count)) inside a "
               "branch on the thread index"),
    Kernel("loops", (*BASE, "serial", "unroll", "alloc_local", "alloc_var", "cast"), (),
           _loops, two_d,
           lambda x: [(x.sum(dim=1) * 4 + 3)], {"partial": {"M": 6, "N": 10}},
           reduction=lambda N, **_: N,
           doc="T.serial(start, stop), T.unroll, range, T.alloc_local and T.alloc_var"),
    Kernel("persistent", (*TILE, "Persistent"), ("copy",), _persistent, two_d,
           lambda a: [a * 3], {"partial": {"M": 36, "N": 20}},
           doc="three resident blocks walk a 5x3 tile domain in panels of two rows"),
    Kernel("macro", (*TILE, "macro"), ("copy",), _macro,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M,), dtype)],
           lambda a, w: [a * w[:, None] * w[:, None]], MN,
           doc="a T.macro expanded twice in one kernel"),
    Kernel("rebind", TILE, ("copy",), _rebind,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype)],
           lambda a, b: [b - a], MN, doc="a Python name rebound to a second tile"),
    Kernel("named_value", (*BASE, "alloc_shared", "copy", "Parallel", "macro", "SharedBuffer",
                           "sync_threads"), ("copy",), _named_value, two_d, _pairs_ref,
           {"partial": {"M": 6, "N": 20}},
           doc="a compare-and-swap through a name bound to a tile element, in a T.macro with "
               "TileLang's tile annotations between T.sync_threads"),
    Kernel("data_guard", (*TILE, "fill"), ("copy", "fill"), _data_guard, two_d,
           lambda a: [a.clamp(min=0) + (a <= 0) * 0.5], MN,
           doc="an if on tile values inside T.Parallel"),
    Kernel("kernel_sequence", (*BASE, "alloc_global", "Parallel"), (), _kernel_sequence,
           two_d, lambda a: [a.flip(0) * 2 + 1], MN, features=("kernel_sequence",),
           doc="two T.Kernel launches in order sharing a T.alloc_global workspace"),
    Kernel("pdl_sequence", (*BASE, "alloc_global", "alloc_fragment", "copy", "Parallel",
                            "pdl_trigger", "pdl_sync", "annotate_min_blocks_per_sm"),
           ("copy", "pdl_trigger", "pdl_sync"), _pdl_sequence, two_d,
           lambda a: [a.flip(0) * 2 + a], MN, features=("kernel_sequence",),
           doc="two launches ordered by TileLang's programmatic dependent launch "
               "(T.pdl_trigger, T.pdl_sync), each asking for two blocks per multiprocessor"),
    Kernel("views", (*BASE, "alloc_shared", "copy", "reshape", "view", "reinterpret",
                     "parallel", "serial", "vectorized", "cast"), ("copy",), _views, two_d,
           lambda a: [1 - a], MN,
           doc="T.reshape and T.view of a tile, T.reinterpret of its bits, T.parallel and "
               "T.vectorized loops"),
    Kernel("loop_jumps", (*BASE, "serial", "alloc_var", "cast"), (), _jumps, two_d,
           _jumps_ref, {"partial": {"M": 6, "N": 12}}, out_idx=(-2, -1),
           reduction=lambda N, **_: N, dtypes=("float32", "bfloat16"),
           doc="run-time break and continue in a T.serial loop, and the loop's else"),
    Kernel("im2col", (*BASE, "alloc_shared", "copy", "im2col", "c2d_im2col"), ("copy",),
           _im2col,
           lambda torch, gen, dtype, N, H, W, C: [rand(torch, gen, (N, H, W, C), dtype)],
           _im2col_ref, {"partial": {"N": 2, "H": 9, "W": 7, "C": 5}}, out_idx=(-2, -1),
           doc="the im2col gather of a convolution (stride 2, padding 1, 3x3 window)"),
    Kernel("dynamic", (*BASE, "alloc_shared", "copy", "Parallel", "symbolic", "dynamic"),
           ("copy",), lambda dtype, M, N: _dynamic(dtype), two_d, lambda a: [a + 1.0],
           {"dynamic": {"M": 20, "N": 36}},
           doc="T.symbolic and T.dynamic sizes read from the arguments at every call"),
)
