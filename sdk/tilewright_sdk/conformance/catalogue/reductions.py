"""Rows for reductions and their relatives: every ``T.reduce_*`` kind with float32 and
same-dtype accumulators over both dimensions and with ``clear=False`` (the bitwise kinds on
every integer dtype), ``T.cumsum`` and ``T.cummax`` in both directions, atomics on tiles and
elements (with ``return_prev``, and TileLang's 2- and 4-wide adds), and reducers."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T

from .model import FLOATS, INTEGERS, Kernel, rand, two_d
from .tiles import BASE

REDUCE = {
    "sum": lambda x, d: x.sum(dim=d),
    "max": lambda x, d: x.amax(dim=d),
    "min": lambda x, d: x.amin(dim=d),
    "abssum": lambda x, d: x.abs().sum(dim=d),
    "absmax": lambda x, d: x.abs().amax(dim=d),
}
COMBINE = {"sum": lambda a, b: a + b, "max": lambda a, b: a.maximum(b),
           "min": lambda a, b: a.minimum(b), "abssum": lambda a, b: a + b,
           "absmax": lambda a, b: a.maximum(b)}
ATOMIC = {
    "add": lambda y, x: y + x.sum(dim=0),
    "max": lambda y, x: y.maximum(x.amax(dim=0)),
    "min": lambda y, x: y.minimum(x.amin(dim=0)),
}
# the integer dtypes of the atomics' tile cases: inputs over the type's range, so the adds
# wrap modulo 2**bits
ATOMIC_INTEGERS = ("int8", "uint8", "int16", "uint16", "int32")


def _atomic_inputs(torch, gen, dtype, M, N, splits=3):
    if dtype in FLOATS:
        return [rand(torch, gen, (splits, M, N), dtype), rand(torch, gen, (M, N), dtype)]
    info = torch.iinfo(getattr(torch, dtype))
    low, high = max(info.min, -(1 << 20)), min(info.max, 1 << 20)
    return [rand(torch, gen, (splits, M, N), dtype, low, high),
            rand(torch, gen, (M, N), dtype, low, high)]


def _atomic_ref(ref):
    """``ref`` of an atomic tile case; on integers computed in int64 and wrapped to the
    accumulator's dtype (torch promotes a narrow sum to int64 and has no uint16 max)."""
    def reference(x, y):
        if y.is_floating_point():
            return [ref(y, x)]
        return [ref(y.long(), x.long()).to(y.dtype)]

    return reference


def _reduce(kind):
    def make(dtype, M, N, bm=4):
        op = getattr(T, f"reduce_{kind}")

        @T.prim_func
        def reduce(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
            with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
                x = T.alloc_fragment((bm, N), "float32")
                y = T.alloc_fragment((bm,), "float32")
                T.copy(X[bx * bm, 0], x)
                op(x, y, dim=1)
                T.copy(y, Y[bx * bm])

        return reduce

    return make


def _reduce_acc(kind):
    """One block reduces the whole (M, N) tile in the tensor's own dtype, over each dimension,
    onto accumulators that start from the given Y0 / Z0 (``clear=False``)."""

    def make(dtype, M, N):
        op = getattr(T, f"reduce_{kind}")

        @T.prim_func
        def reduce_acc(X: T.Tensor((M, N), dtype), Y0: T.Tensor((M,), dtype),
                       Z0: T.Tensor((N,), dtype), Y: T.Tensor((M,), dtype),
                       Z: T.Tensor((N,), dtype)):
            with T.Kernel(1, threads=128) as _bx:
                x = T.alloc_fragment((M, N), dtype)
                y = T.alloc_fragment((M,), dtype)
                z = T.alloc_fragment((N,), dtype)
                T.copy(X[0, 0], x)
                T.copy(Y0[0], y)
                T.copy(Z0[0], z)
                op(x, y, dim=1, clear=False)
                op(x, z, dim=0, clear=False)
                T.copy(y, Y[0])
                T.copy(z, Z[0])

        return reduce_acc

    return make


def _reduce_acc_ref(kind):
    def ref(x, y0, z0):
        return [COMBINE[kind](y0, REDUCE[kind](x, 1)), COMBINE[kind](z0, REDUCE[kind](x, 0))]

    return ref


def _scan(name, acc):
    """``T.<name>`` (a scan) along rows, forward and reverse, and in place down the columns
    of each block's tile, on fragments of ``acc`` (the case's dtype when None)."""

    def make(dtype, M, N, bm=4):
        op = getattr(T, name)
        frag = acc or dtype

        @T.prim_func
        def scan(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype),
                 R: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
                x = T.alloc_fragment((bm, N), frag)
                y = T.alloc_fragment((bm, N), frag)
                T.copy(X[bx * bm, 0], x)
                op(x, y, dim=1)
                T.copy(y, Y[bx * bm, 0])
                op(x, y, dim=1, reverse=True)
                T.copy(y, R[bx * bm, 0])
                op(x, dim=0)  # in place, down the rows of this block's tile
                T.copy(x, C[bx * bm, 0])

        return scan

    return make


def _scan_ref(scan, bm=4):
    def ref(x):
        import torch

        blocks = [scan(b, 0) for b in x.split(bm, dim=0)]
        return [scan(x, 1), scan(x.flip(1), 1).flip(1), torch.cat(blocks)]

    return ref


# scan op -> (its fragments' dtype (None: the case's), the dtypes it runs on, torch's scan)
SCANS = {
    "cumsum": ("float32", FLOATS, lambda x, d: x.cumsum(dim=d)),
    "cummax": (None, (*FLOATS, "int8", "int32"), lambda x, d: x.cummax(dim=d).values),
}
# bitwise reduction -> torch's operation of two tensors
BIT_REDUCE = {"bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b,
              "bitxor": lambda a, b: a ^ b}


def _reduce_bits(dtype, M, N):
    """Every bitwise reduction over each dimension: along rows into a fresh tile, down the
    columns onto accumulators from Z0 (``clear=False``, through ``T.reduce``)."""

    @T.prim_func
    def reduce_bits(X: T.Tensor((M, N), dtype), Z0: T.Tensor((3, N), dtype),
                    Y: T.Tensor((3, M), dtype), Z: T.Tensor((3, N), dtype)):
        with T.Kernel(1, threads=128) as _bx:
            x = T.alloc_fragment((M, N), dtype)
            y = T.alloc_fragment((M,), dtype)
            z = T.alloc_fragment((N,), dtype)
            T.copy(X[0, 0], x)
            for k, kind in enumerate(BIT_REDUCE):  # a Python loop: one pair per kind
                getattr(T, f"reduce_{kind}")(x, y, dim=1)
                T.copy(y, Y[k, 0])
                T.copy(Z0[k, 0], z)
                T.reduce(x, z, kind, 0, False)
                T.copy(z, Z[k, 0])

    return reduce_bits


def _bits_inputs(torch, gen, dtype, M, N):
    """One random word of the dtype's range with a random bit below the sign flipped in one
    element of eight (random words would leave nothing of an 'and' over 20 elements,
    everything of an 'or')."""
    info = torch.iinfo(getattr(torch, dtype))

    def words(shape):
        base = torch.randint(info.min, min(info.max, (1 << 63) - 1), (1,), generator=gen)
        flips = torch.randint(0, info.bits - 1, shape, generator=gen)
        flipped = torch.randint(0, 8, shape, generator=gen) == 0
        return (base ^ torch.bitwise_left_shift(flipped.long(), flips)).to(getattr(torch, dtype))

    return [words((M, N)), words((3, N))]


def _bits_ref(x, z0):
    import torch

    wide = x.long()
    kinds = list(BIT_REDUCE.values())
    rows = [_bits(fn)(wide) for fn in kinds]
    # down the columns, starting from the accumulator: z0's row first
    cols = [_bits(fn)(torch.cat([z0[k:k + 1].long(), wide]).T) for k, fn in enumerate(kinds)]
    return [torch.stack(rows).to(x.dtype), torch.stack(cols).to(x.dtype)]


def _atomic_tile(kind):
    def make(dtype, M, N, splits=3, bm=16, bn=16):
        op = getattr(T, f"atomic_{kind}")

        @T.prim_func
        def atomic(X: T.Tensor((splits, M, N), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits,
                          threads=128) as (bx, by, bz):
                x = T.alloc_fragment((bm, bn), dtype)
                T.copy(X[bz, by * bm, bx * bn], x)
                op(Y[by * bm, bx * bn], x)

        return atomic

    return make


def _atomic_scalar(dtype, N, bn=8):
    @T.prim_func
    def atomic_scalar(X: T.Tensor((N,), dtype), Y: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            for i in T.serial(bn):
                if bx * bn + i < N:
                    T.atomic_add(Y[0], T.cast(X[bx * bn + i], "float32"))

    return atomic_scalar


def _atomic_wide(dtype, N, bn=8, splits=3):
    """TileLang's 2- and 4-wide atomic adds: each of ``splits`` blocks per column strip adds
    its row of X to Y in pairs and to Z in quads."""

    @T.prim_func
    def atomic_wide(X: T.Tensor((splits, N), dtype), Y: T.Tensor((N,), dtype),
                    Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), splits, threads=128) as (bx, bz):
            for p in T.serial(bn // 2):
                T.atomic_addx2(Y[bx * bn + p * 2], X[bz, bx * bn + p * 2])
            for q in T.serial(bn // 4):
                T.atomic_addx4(Z[bx * bn + q * 4:bx * bn + q * 4 + 4],
                               X[bz, bx * bn + q * 4:bx * bn + q * 4 + 4])

    return atomic_wide


def _atomic_prev(dtype, N, blocks=5):
    """One block's serial loop returns each previous value (deterministic: exclusive running
    sum, max and min) and adds X's first eight elements to a row of W two and four at a time,
    keeping the vectors of previous values (a T.Ramp index once); then ``blocks`` blocks draw
    tickets from a counter."""

    @T.prim_func
    def atomic_prev(X: T.Tensor((N,), dtype), Acc: T.Tensor((3,), dtype),
                    P: T.Tensor((3, N), dtype), Counter: T.Tensor((1,), "int32"),
                    Seen: T.Tensor((blocks,), "int32"), W: T.Tensor((2, 8), dtype)):
        with T.Kernel(blocks, threads=128) as bx:
            if bx == 0:
                for t in T.serial(N):
                    P[0, t] = T.atomic_add(Acc[0], X[t], return_prev=True)
                    P[1, t] = T.atomic_max(Acc[1], X[t], return_prev=True)
                    P[2, t] = T.atomic_min(Acc[2], X[t], return_prev=True)
                W[1, 0:2] = T.atomic_addx2(W[0, 0:2], X[0:2], return_prev=True)
                W[1, 2:4] = T.atomic_addx2(W[0, T.Ramp(2, 1, 2)], X[T.Ramp(2, 1, 2)],
                                           return_prev=True)
                W[1, 4:8] = T.atomic_addx4(W[0, 4:8], X[4:8], return_prev=True)
            ticket = T.alloc_var("int32")
            ticket = T.atomic_add(Counter[0], 1, return_prev=True)
            T.atomic_add(Seen[ticket], 1)

    return atomic_prev


def _atomic_prev_inputs(torch, gen, dtype, N, blocks=5):
    x = rand(torch, gen, (N,), dtype)
    acc = torch.tensor([0.0, -100.0, 100.0]).to(x.dtype)
    return [x, acc, torch.zeros(3, N, dtype=x.dtype), torch.zeros(1, dtype=torch.int32),
            torch.zeros(blocks, dtype=torch.int32), rand(torch, gen, (2, 8), dtype)]


def _atomic_prev_ref(x, acc, p, counter, seen, w):
    import torch

    n = x.shape[0]
    add = torch.cat([acc[:1], x]).cumsum(0)
    high = torch.cat([acc[1:2], x]).cummax(0).values
    low = torch.cat([acc[2:3], x]).cummin(0).values
    return [torch.stack([add[n], high[n], low[n]]), torch.stack([add[:n], high[:n], low[:n]]),
            counter + seen.shape[0], torch.ones_like(seen),
            torch.stack([w[0] + x[:8], w[0]])]


def _atomic_bits(dtype, N, blocks=4):
    """The bitwise atomics from ``blocks`` blocks at once, each with a memory order; every
    element read with an acquire load, and each block's first with a release store."""

    @T.prim_func
    def atomic_bits(X: T.Tensor((blocks, N), dtype), Acc: T.Tensor((3,), dtype),
                    Y: T.Tensor((blocks, N), dtype), Flag: T.Tensor((blocks,), dtype)):
        with T.Kernel(blocks, threads=128) as bx:
            for i in T.Parallel(N):
                T.atomic_or(Acc[0], X[bx, i])
                T.atomic_and(Acc[1], X[bx, i], memory_order="acq_rel")
                T.atomic_xor(Acc[2], X[bx, i], memory_order="seq_cst")
                Y[bx, i] = T.atomic_load(X[bx, i], memory_order="acquire")
            T.atomic_store(Flag[bx], X[bx, 0], memory_order="release")

    return atomic_bits


def _atomic_bits_inputs(torch, gen, dtype, N, blocks=4):
    info = torch.iinfo(getattr(torch, dtype))
    x = rand(torch, gen, (blocks, N), dtype, max(info.min, -(1 << 30)), min(info.max, 1 << 30))
    acc = torch.tensor([0, -1, 0]).to(x.dtype)  # -1: every bit set, whatever the width
    return [x, acc, torch.zeros_like(x), torch.zeros(blocks, dtype=x.dtype)]


def _atomic_bits_ref(x, acc, y, flag):
    import functools
    import operator

    import torch

    values = [int(v) for v in x.long().flatten()]
    start = [int(v) for v in acc.long()]
    combined = [functools.reduce(op, values, first) for op, first in
                zip((operator.or_, operator.and_, operator.xor), start)]
    return [torch.tensor(combined).to(acc.dtype), x.clone(), x[:, 0].clone()]


# reducer op -> (dtypes it applies to, torch reference over dim 1)
REDUCERS = {
    "sum": lambda x: x.sum(dim=1),
    "max": lambda x: x.amax(dim=1),
    "min": lambda x: x.amin(dim=1),
}


def _reducers(dtype, M, N, bm=4, bn=8):
    ops = tuple(REDUCERS) if dtype in FLOATS else (*BIT_REDUCE, "sum")
    R = len(ops)

    @T.prim_func
    def reducers(X: T.Tensor((M, N), dtype), Y: T.Tensor((R, M), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            out = T.alloc_fragment((bm,), dtype)
            accs = [T.alloc_reducer((bm,), dtype, op=op) for op in ops]
            for k, acc in enumerate(accs):  # a Python loop: one nest per reducer
                T.reducer_init(acc)
                for c in T.serial(T.ceildiv(N, bn)):
                    for i, j in T.Parallel(bm, bn):
                        if bx * bm + i < M and c * bn + j < N:
                            T.reducer_update(acc[i], X[bx * bm + i, c * bn + j])
                T.finalize_reducer(acc, out)
                T.copy(out, Y[k, bx * bm])

    return reducers


def _reducer_seeds(dtype, M, N, bm=4, bn=8):
    """``T.reducer_init(acc, init)``: each row's reduction seeded with S[k], read from a
    fragment that changes after the init (the value at the init counts, once); and the block's
    whole tile reduced by one epoch per column tile inside a serial loop, each seeded with the
    running result the previous one finalized into the same fragment."""
    ops = tuple(REDUCERS) if dtype in FLOATS else (*BIT_REDUCE, "sum")
    R, blocks = len(ops), (M + bm - 1) // bm

    @T.prim_func
    def reducer_seeds(X: T.Tensor((M, N), dtype), S: T.Tensor((R,), dtype),
                      Y: T.Tensor((R, M), dtype), Z: T.Tensor((R, blocks), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            out = T.alloc_fragment((bm,), dtype)
            seed = T.alloc_fragment((1,), dtype)
            total = T.alloc_fragment((1,), dtype)
            for k, op in enumerate(ops):  # a Python loop: one set of reducers per op
                rows = T.alloc_reducer((bm,), dtype, op=op)
                seed[0] = S[k]
                T.reducer_init(rows, seed[0])
                seed[0] = S[k] + S[k]  # after the init: not the starting value
                for c in T.serial(T.ceildiv(N, bn)):
                    for i, j in T.Parallel(bm, bn):
                        if bx * bm + i < M and c * bn + j < N:
                            T.reducer_update(rows[i], X[bx * bm + i, c * bn + j])
                T.finalize_reducer(rows, out)
                T.copy(out, Y[k, bx * bm])
                tile = T.alloc_reducer((1,), dtype, op=op)
                total[0] = S[k]
                for c in T.serial(T.ceildiv(N, bn)):  # an epoch per iteration
                    T.reducer_init(tile, total[0])
                    for i, j in T.Parallel(bm, bn):
                        if bx * bm + i < M and c * bn + j < N:
                            T.reducer_update(tile[0], X[bx * bm + i, c * bn + j])
                    T.finalize_reducer(tile, total)
                Z[k, bx] = total[0]

    return reducer_seeds


def _reducer_seeds_inputs(torch, gen, dtype, M, N):
    R = len(REDUCERS) if dtype in FLOATS else len(BIT_REDUCE) + 1
    return [rand(torch, gen, (M, N), dtype), rand(torch, gen, (R,), dtype)]


def _reducer_seeds_ref(x, s, bm=4):
    folds = [COMBINE[op] for op in REDUCERS] if x.is_floating_point() else \
        [*BIT_REDUCE.values(), COMBINE["sum"]]
    M, N = x.shape
    rows, blocks = x.new_empty((len(folds), M)), x.new_empty((len(folds), -(-M // bm)))
    for k, fold in enumerate(folds):
        acc = s[k].expand(M)
        for c in range(N):
            acc = fold(acc, x[:, c])
        rows[k] = acc
        for b in range(0, M, bm):
            value = s[k]
            for v in x[b:b + bm].flatten():
                value = fold(value, v)
            blocks[k, b // bm] = value
    return [rows, blocks]


def _bits(fn):
    def reduce(x):
        out = x[:, 0]
        for c in range(1, x.shape[1]):
            out = fn(out, x[:, c])
        return out

    return reduce


def _reducers_ref(x):
    import torch

    if x.is_floating_point():
        return [torch.stack([ref(x) for ref in REDUCERS.values()])]
    bits = [_bits(fn)(x) for fn in BIT_REDUCE.values()]
    return [torch.stack([*bits, x.sum(dim=1).to(x.dtype)])]


def _reduce_cols(dtype, M, N, bn=8):
    @T.prim_func
    def reduce_cols(X: T.Tensor((M, N), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            x = T.alloc_fragment((M, bn), "float32")
            y = T.alloc_fragment((bn,), "float32")
            T.copy(X[0, bx * bn], x)
            T.reduce_sum(x, y, dim=0)
            T.copy(y, Y[bx * bn])

    return reduce_cols


def _reduce_then_store(dtype, M, N):
    """The fuzzer's shrunk program that found an Ascend race: reductions with clear=False of
    one-element tiles, a select reading one, and an element-wise store from global memory."""

    @T.prim_func
    def reduce_then_store(X0: T.Tensor((M, N), dtype), X1: T.Tensor((M, N), dtype),
                          Y: T.Tensor((M, N), dtype), R4: T.Tensor((M, N), dtype),
                          R6: T.Tensor((M, N), dtype)):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            t1 = T.alloc_fragment((1, 1), dtype)
            T.copy(X0[by, bx], t1)
            t2 = T.alloc_fragment((1, 1), dtype)
            T.copy(X1[by, bx], t2)
            t3 = T.alloc_fragment((1,), dtype)
            T.fill(t3, -1)
            T.reduce_sum(t2, t3, dim=0, clear=False)
            for j in T.Parallel(1):
                if bx + j < 1:
                    R4[by, bx + j] = t3[j]
            t5 = T.alloc_fragment((1,), dtype)
            T.fill(t5, -1)
            T.reduce_absmax(t1, t5, dim=0, clear=False)
            for j in T.Parallel(1):
                if bx + j < 1:
                    R6[by, bx + j] = t5[j]
            t7 = T.alloc_fragment((1, 1), dtype)
            for i, j in T.Parallel(1, 1):
                t7[i, j] = T.if_then_else(t2[(i + 1) % 1, j] != T.cast(-2, dtype), t5[j],
                                          T.cast(5, dtype))
            for i, j in T.Parallel(1, 1):
                if by + i < 1 and bx + j < 1:
                    Y[by + i, bx + j] = T.cast(-7, dtype) - X0[by + i, bx + j]

    return reduce_then_store


RED_SHAPES = {"full": {"M": 8, "N": 32}, "partial": {"M": 10, "N": 20}}
FRAG = (*BASE, "alloc_fragment", "copy")


def _rows():
    rows = []
    for kind, ref in REDUCE.items():
        rows.append(Kernel(
            f"reduce_{kind}", (*FRAG, f"reduce_{kind}"), (f"reduce_{kind}", "copy"),
            _reduce(kind), two_d, lambda x, _ref=ref: [_ref(x, 1)], RED_SHAPES,
            reduction=lambda N, **_: N, doc=f"row-wise reduce_{kind} into float32"))
        rows.append(Kernel(
            f"reduce_{kind}_acc", (*FRAG, f"reduce_{kind}"), (f"reduce_{kind}", "copy"),
            _reduce_acc(kind),
            lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                              rand(torch, gen, (M,), dtype),
                                              rand(torch, gen, (N,), dtype)],
            _reduce_acc_ref(kind), {"partial": {"M": 12, "N": 20}},
            reduction=lambda M, N: max(M, N), out_idx=(3, 4), accumulate_in_dtype=True,
            dtypes=(*FLOATS, "int16", "int32"),
            doc=f"reduce_{kind} over each dimension onto a same-dtype accumulator, "
                "clear=False"))
    for kind, ref in ATOMIC.items():
        rows.append(Kernel(
            f"atomic_{kind}", (*FRAG, f"atomic_{kind}"), (f"atomic_{kind}", "copy"),
            _atomic_tile(kind), _atomic_inputs, _atomic_ref(ref),
            {"full": {"M": 16, "N": 16}, "partial": {"M": 20, "N": 24}}, out_idx=(),
            inplace=(1,), reduction=lambda **_: 3, dtypes=(*FLOATS, *ATOMIC_INTEGERS),
            doc=f"three blocks atomic_{kind} a tile into global Y"))
    return rows


NAN_KINDS = ("max", "min", "absmax")


def _reduce_nan(dtype, M, N, bm=4):
    """Rows of X (NaN in some of them) reduced by max, min and absmax, the NaN ignored (the
    default) and propagated (nan_propagate=True), into Y (M, 6)."""

    @T.prim_func
    def reduce_nan(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, 6), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            tile = T.alloc_fragment((bm, N), dtype)
            out = T.alloc_fragment((bm, 6), dtype)
            part = T.alloc_fragment((bm,), dtype)
            T.copy(X[bx * bm, 0], tile)
            for k, propagate in enumerate((False, True)):
                for j, kind in enumerate(NAN_KINDS):
                    T.reduce(tile, part, kind, dim=1, clear=True, nan_propagate=propagate)
                    for i in T.Parallel(bm):
                        out[i, k * 3 + j] = part[i]
            T.copy(out, Y[bx * bm, 0])

    return reduce_nan


def _nan_inputs(torch, gen, dtype, M, N, **_):
    x = rand(torch, gen, (M, N), dtype)
    x[1, 0] = x[2, N - 1] = x[2, N // 2] = x[M - 1, 3] = float("nan")
    return [x]


def _reduce_nan_ref(x):
    ignored = [x.nan_to_num(nan=float("-inf")).amax(dim=1),
               x.nan_to_num(nan=float("inf")).amin(dim=1),
               x.abs().nan_to_num(nan=0.0).amax(dim=1)]
    # torch's amax / amin give NaN for a row holding one
    propagated = [x.amax(dim=1), x.amin(dim=1), x.abs().amax(dim=1)]
    y = x.new_empty(x.shape[0], 6)
    for k, column in enumerate(ignored + propagated):
        y[:, k] = column
    return [y]


ROWS = (
    *_rows(),
    Kernel("reduce_sum_dim0", (*FRAG, "reduce_sum"), ("reduce_sum", "copy"),
           _reduce_cols, two_d,
           lambda x: [x.sum(dim=0)], {"partial": {"M": 12, "N": 20}},
           reduction=lambda M, **_: M, doc="reduction over the first dimension"),
    *(Kernel(name, (*FRAG, name), (name, "copy"), _scan(name, acc), two_d,
             _scan_ref(scan), RED_SHAPES, out_idx=(1, 2, 3), reduction=lambda N, **_: N,
             dtypes=dtypes, doc=f"{name} along rows (forward, reverse) and in place down "
                                "columns")
      for name, (acc, dtypes, scan) in SCANS.items()),
    Kernel("reduce_nan", (*FRAG, "Parallel", "reduce"), ("reduce_max", "reduce_min",
                                                          "reduce_absmax", "copy"),
           _reduce_nan, _nan_inputs, _reduce_nan_ref, {"partial": {"M": 10, "N": 12}},
           out_idx=(1,), reduction=lambda N, **_: N, features=("nan_reductions",),
           doc="max, min and absmax of rows holding NaNs: ignored (IEEE maxNum, the default) "
               "and propagated (nan_propagate=True)"),
    Kernel("reduce_bits", (*FRAG, *(f"reduce_{k}" for k in BIT_REDUCE), "reduce"),
           (*(f"reduce_{k}" for k in BIT_REDUCE), "copy"), _reduce_bits, _bits_inputs,
           _bits_ref, {"partial": {"M": 12, "N": 20}}, out_idx=(2, 3), exact=True,
           dtypes=INTEGERS, doc="bitand, bitor, bitxor over each dimension, into a fresh tile "
                                "and onto accumulators (clear=False)"),
    Kernel("atomic_add_scalar", (*BASE, "serial", "atomic_add", "cast"), ("atomic_add",),
           _atomic_scalar,
           lambda torch, gen, dtype, N: [rand(torch, gen, (N,), dtype), torch.zeros(1)],
           lambda x, y: [y + x.sum()], {"partial": {"N": 20}}, out_idx=(), inplace=(1,),
           reduction=lambda N, **_: N, doc="every element atomically added to Y[0]"),
    Kernel("atomic_add_wide", (*BASE, "serial", "atomic_addx2", "atomic_addx4"), ("atomic_add",),
           _atomic_wide,
           lambda torch, gen, dtype, N: [rand(torch, gen, (3, N), dtype),
                                         rand(torch, gen, (N,), dtype),
                                         rand(torch, gen, (N,), dtype)],
           lambda x, y, z: [y + x.sum(dim=0), z + x.sum(dim=0)], {"full": {"N": 24}},
           out_idx=(), inplace=(1, 2), reduction=lambda **_: 3,
           doc="T.atomic_addx2 / T.atomic_addx4 from three blocks, on elements and slices"),
    Kernel("atomic_prev", (*BASE, "serial", "alloc_var", "atomic_add", "atomic_max",
                           "atomic_min", "atomic_addx2", "atomic_addx4", "Ramp"),
           ("atomic_add", "atomic_max", "atomic_min"), _atomic_prev, _atomic_prev_inputs,
           _atomic_prev_ref, {"partial": {"N": 12}}, out_idx=(), inplace=(1, 2, 3, 4, 5),
           reduction=lambda N, **_: N, dtypes=("float32", "int32", "bfloat16", "float16"),
           features=("atomic_return_prev",),
           doc="atomics with return_prev: running values in one block (the 16-bit floats "
               "too: each atomic made once), the vectors T.atomic_addx2 / x4 return, tickets "
               "across blocks"),
    Kernel("atomic_bits", (*BASE, "Parallel", "atomic_or", "atomic_and", "atomic_xor",
                           "atomic_load", "atomic_store"),
           ("atomic_or", "atomic_and", "atomic_xor", "atomic_store"), _atomic_bits,
           _atomic_bits_inputs, _atomic_bits_ref, {"partial": {"N": 12}}, out_idx=(),
           inplace=(1, 2, 3), dtypes=(*ATOMIC_INTEGERS, "int64"), exact=True,
           doc="atomic or / and / xor from four blocks at once with memory orders, acquire "
               "loads and release stores"),
    Kernel("reduce_then_store", (*FRAG, "fill", "reduce_sum", "reduce_absmax", "Parallel",
                                 "if_then_else", "cast"), ("copy", "fill", "reduce_sum",
                                                            "reduce_absmax"),
           _reduce_then_store,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype)],
           lambda x0, x1: [-7 - x0, x1 - 1, x0.abs().clamp(min=-1)], {"full": {"M": 1, "N": 1}},
           out_idx=(2, 3, 4), dtypes=("int8", "float32"),
           doc="the fuzzer's reproducer of an Ascend race between a reduction and a store"),
    Kernel("reducers", (*FRAG, "serial", "Parallel", "alloc_reducer", "reducer_init",
                        "reducer_update", "finalize_reducer"), ("copy", "fill"), _reducers,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype)], _reducers_ref,
           RED_SHAPES, reduction=lambda N, **_: N, dtypes=("float32", "float16", "int32"),
           accumulate_in_dtype=True,
           doc="T.alloc_reducer for sum, max, min (floats) and bitand, bitor, bitxor, sum "
               "(integers), updated inside T.Parallel with partial tiles"),
    Kernel("reducer_seeds", (*FRAG, "serial", "Parallel", "alloc_reducer", "reducer_init",
                             "reducer_update", "finalize_reducer"), ("copy", "fill"),
           _reducer_seeds, _reducer_seeds_inputs, _reducer_seeds_ref, RED_SHAPES,
           reduction=lambda M, N: 4 * N, out_idx=(2, 3), dtypes=("float32", "float16", "int32"),
           accumulate_in_dtype=True,
           doc="T.reducer_init(acc, init): a starting value combined once per output, taken "
               "where the init stands, and epochs reopened in a serial loop seeded with the "
               "running result"),
)

