"""T.reduce_*, T.cumsum / T.cummax and T.alloc_reducer on the CPU backend, against torch."""

import pytest
import tilewright
import tilewright.language as T
import torch
from language_helpers import DTYPES, check, rand

REFERENCE = {
    "sum": lambda x, d: x.sum(d),
    "max": lambda x, d: x.amax(d),
    "min": lambda x, d: x.amin(d),
    "abssum": lambda x, d: x.abs().sum(d),
    "absmax": lambda x, d: x.abs().amax(d),
}


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_2d(kind, M, N, dim, keep, dtype, bm=8):
    """Each block reduces a (bm, N) tile of rows; partial row tiles at the bottom."""
    out_shape = (M, N) if dim in (0, -2) else (M,)
    red_shape = {(0, False): (N,), (0, True): (1, N), (1, False): (bm,), (1, True): (bm, 1),
                 (-1, False): (bm,), (-2, False): (N,)}[(dim, keep)]
    op = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor(out_shape, "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            tile = T.alloc_fragment((bm, N), dtype)
            red = T.alloc_fragment(red_shape, "float32")
            T.copy(A[bx * bm, 0], tile)
            op(tile, red, dim=dim)
            if dim in (0, -2):  # column results: broadcast to every row of the block
                for i, j in T.Parallel(bm, N):
                    if bx * bm + i < M:
                        B[bx * bm + i, j] = red[0, j] if keep else red[j]
            else:
                for i in T.Parallel(bm):
                    if bx * bm + i < M:
                        B[bx * bm + i] = red[i, 0] if keep else red[i]
    return main


def _reference(kind, a, dim, bm):
    x = a.double()
    if dim in (1, -1):
        return REFERENCE[kind](x, 1)
    out = torch.empty_like(x)
    for r in range(0, x.shape[0], bm):
        rows = x[r:r + bm]
        if len(rows) < bm:  # the guarded tail reads of the last block give zeros
            rows = torch.cat([rows, rows.new_zeros(bm - len(rows), x.shape[1])])
        out[r:r + bm] = REFERENCE[kind](rows, 0)
    return out


@pytest.mark.parametrize("kind", list(REFERENCE))
@pytest.mark.parametrize("dim,keep", [(1, False), (0, True)])
def test_reduce_kinds_and_ranks(kind, dim, keep):
    a = rand(13, 24)  # 13 rows: the second block has a partial tile
    check(reduce_2d(kind, 13, 24, dim, keep, "float32")(a), _reference(kind, a, dim, 8),
          k=24 if dim == 1 else 8)


@pytest.mark.parametrize("dim,keep", [(-1, False), (-2, False), (1, True), (0, False)])
def test_reduce_negative_dims_and_keepdim(dim, keep):
    a = rand(16, 10)
    check(reduce_2d("sum", 16, 10, dim, keep, "float32")(a), _reference("sum", a, dim, 8),
          k=10)


@pytest.mark.parametrize("dtype", DTYPES[1:])
@pytest.mark.parametrize("kind", ["sum", "absmax"])
def test_reduce_low_precision_inputs_accumulate_in_float32(dtype, kind):
    a = rand(9, 32, dtype=dtype)  # 32 wide: the vectorised last-axis path
    check(reduce_2d(kind, 9, 32, 1, False, dtype)(a), REFERENCE[kind](a.double(), 1), k=32)


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_into_scalar(N, kind, dtype):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((1,), dtype)):
        with T.Kernel(1) as bx:
            tile = T.alloc_fragment((N,), dtype)
            out = T.alloc_fragment((1,), dtype)
            T.copy(A, tile)
            getattr(T, f"reduce_{kind}")(tile, out, dim=0)
            T.copy(out, B)
    return main


@pytest.mark.parametrize("kind,dtype", [("max", "bfloat16"), ("min", "float16"),
                                        ("abssum", "float32")])
def test_reduce_1d_to_one_element(kind, dtype):
    a = rand(21, dtype=dtype)
    check(reduce_into_scalar(21, kind, dtype)(a), REFERENCE[kind](a.double(), 0).reshape(1),
          k=21)


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_3d(dim, keep):
    out = [2, 6, 8]
    out[dim] = 1
    out = tuple(out) if keep else tuple(e for d, e in enumerate(out) if d != dim)

    @T.prim_func
    def main(A: T.Tensor((2, 6, 8), "float32"), B: T.Tensor(out, "float32")):
        with T.Kernel(1) as bx:
            t = T.alloc_fragment((2, 6, 8), "float32")
            r = T.alloc_fragment(out, "float32")
            T.copy(A, t)
            T.reduce_sum(t, r, dim=dim)
            T.copy(r, B)
    return main


@pytest.mark.parametrize("dim,keep", [(1, False), (1, True), (0, False)])
def test_reduce_3d_tiles(dim, keep):
    a = rand(2, 6, 8)
    check(reduce_3d(dim, keep)(a), a.double().sum(dim, keepdim=keep), k=6)


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_no_clear(M, N, kind):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            tile = T.alloc_fragment((M, N), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.copy(A, tile)
            T.fill(acc, 0.5)
            for _ in T.serial(2):  # the tile twice, on top of 0.5
                getattr(T, f"reduce_{kind}")(tile, acc, dim=1, clear=False)
            T.copy(acc, B)
    return main


@pytest.mark.parametrize("kind", ["sum", "min", "absmax"])
def test_reduce_clear_false_in_a_loop(kind):
    a = rand(6, 16)
    x = a.double()
    want = {"sum": 0.5 + 2 * x.sum(1), "min": x.amin(1).clamp(max=0.5),
            "absmax": x.abs().amax(1).clamp(min=0.5)}[kind]
    check(reduce_no_clear(6, 16, kind)(a), want, k=32)


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_dynamic_rows(N, bm=4):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, N), "float32"), B: T.Tensor((m,), "float32")):
        with T.Kernel(T.ceildiv(m, bm)) as bx:
            tile = T.alloc_fragment((bm, N), "float32")
            red = T.alloc_fragment((bm,), "float32")
            T.copy(A[bx * bm, 0], tile)
            T.reduce_max(tile, red, dim=1)
            T.copy(red, B[bx * bm])
    return main


def test_reduce_dynamic_shape_one_kernel():
    kernel = reduce_dynamic_rows(12)
    for m in (1, 4, 7, 30):
        a = rand(m, 12)
        check(kernel(a), a.amax(1))
    assert reduce_dynamic_rows(12) is kernel


# -- bitwise reductions ------------------------------------------------------------------------
BITS = {"bitand": torch.bitwise_and, "bitor": torch.bitwise_or, "bitxor": torch.bitwise_xor}


def _fold(fn, x, dim, start=None):
    parts = list(x.unbind(dim))
    out = parts.pop(0) if start is None else start
    for p in parts:
        out = fn(out, p)
    return out


@tilewright.jit(out_idx=[-1], target="cpu")
def reduce_bits(kind, M, N, dim, dtype, acc, clear):
    shape = (M,) if dim == 1 else (N,)

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), Y0: T.Tensor(shape, acc), Y: T.Tensor(shape, acc)):
        with T.Kernel(1) as _bx:
            tile = T.alloc_fragment((M, N), dtype)
            red = T.alloc_fragment(shape, acc)
            T.copy(A, tile)
            T.copy(Y0, red)
            getattr(T, f"reduce_{kind}")(tile, red, dim=dim, clear=clear)
            T.copy(red, Y)
    return main


@pytest.mark.parametrize("kind", list(BITS))
@pytest.mark.parametrize("dtype,acc,N,dim,clear", [
    ("int32", "int32", 24, 1, True),     # the vectorised last axis
    ("int8", "int32", 13, 1, False),     # widened, onto an accumulator
    ("uint8", "uint8", 16, 0, True),     # down the columns
    ("int64", "int64", 40, 1, False),
    ("uint16", "uint16", 9, 0, False),
])
def test_reduce_bitwise(kind, dtype, acc, N, dim, clear):
    info = torch.iinfo(getattr(torch, dtype))
    g = torch.Generator().manual_seed(N)
    base = torch.randint(max(info.min, -2 ** 40), min(info.max, 2 ** 40), (1,), generator=g)
    # one word with a bit flipped here and there: neither 0 nor all ones after and/or
    flips = torch.randint(0, min(info.bits - 1, 40), (6, N), generator=g)
    mask = torch.randint(0, 6, (6, N), generator=g) == 0
    a = (base ^ (mask.long() << flips)).to(getattr(torch, dtype))
    y0 = a.long()[0].to(getattr(torch, acc)) if dim == 0 else \
        a.long()[:, 0].to(getattr(torch, acc)) ^ 5
    got = reduce_bits(kind, 6, N, dim, dtype, acc, clear)(a, y0)
    want = _fold(BITS[kind], a.long(), dim, None if clear else y0.long())
    assert torch.equal(got.long(), want.to(getattr(torch, acc)).long())


def _kernel_error(body_op, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((4, 8), dtype), B: T.Tensor((4,), dtype)):
        with T.Kernel(1) as _bx:
            tile = T.alloc_fragment((4, 8), dtype)
            red = T.alloc_fragment((4,), dtype)
            T.copy(A, tile)
            body_op(tile, red)
            T.copy(red, B)
    return main


@pytest.mark.parametrize("op,message", [
    (lambda t, r: T.reduce_bitor(t, r, dim=1), "T.reduce_bitor takes integer tiles; 'tile' is "
                                               "float32"),
    (lambda t, r: T.reduce(t, r, "prod", 1, True), "reduce_type must be one of sum, max"),
    (lambda t, r: T.reduce_max(t, r, dim=1, batch=0), "batch must be >= 1, got 0"),
    (lambda t, r: T.reduce_max(t, r, dim=1, batch=8), "exceeds total output elements"),
    (lambda t, r: T.reduce_max(t, r, dim=1, batch=3), "must evenly divide total output"),
    (lambda t, r: T.reduce_sum(t, r, dim=1, annotations={"nan_propagate": True}),
     "nan_propagate applies to the reductions that compare"),
    (lambda t, r: T.reduce_sum(t, r, dim=1, annotations={"fast": object()}),
     "annotation 'fast' is kept on the op, so its value must be"),
    (lambda t, r: T.reduce_sum(t, r, dim=1, annotations="fast"),
     "annotations must be a dict, got str"),
])
def test_reduce_options_refused_at_the_line(op, message):
    with pytest.raises(tilewright.KernelError, match=message.replace("(", r"\(")) as err:
        _kernel_error(op)
    assert "test_reduce_scan.py" in str(err.value)


def test_reduce_hints_of_tilelang_change_nothing():
    """``batch`` and the ``enable_fadd2`` annotation schedule TileLang's all-reduce, and any
    other key (a backend's own hint) is accepted as T.copy's are; here the result is the
    reduction's."""
    kernel = tilewright.compile(_kernel_error(
        lambda t, r: T.reduce(t, r, "sum", 1, True, batch=2,
                              annotations={"enable_fadd2": False, "nan_propagate": False,
                                           "fast": 1})),
        target="cpu")
    a, out = rand(4, 8), torch.empty(4)
    kernel(a, out)
    check(out, a.double().sum(1), k=8)


def test_a_misspelt_reduce_annotation_warns_at_the_line():
    with pytest.warns(RuntimeWarning, match="did you mean 'nan_propagate'"):
        _kernel_error(lambda t, r: T.reduce_max(t, r, dim=1,
                                                annotations={"nan_propagte": True}))


# -- cumsum / cummax --------------------------------------------------------------------------
SCANS = {"cumsum": lambda x, d: x.cumsum(d), "cummax": lambda x, d: x.cummax(d).values}


@tilewright.jit(out_idx=[-1], target="cpu")
def scan_2d(name, M, N, dim, reverse, in_place, dtype, acc="float32"):
    op = getattr(T, name)

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1) as bx:
            src = T.alloc_shared((M, N), dtype)
            dst = T.alloc_fragment((M, N), acc)
            T.copy(A, src)
            if in_place:
                T.copy(src, dst)
                op(dst, dim=dim, reverse=reverse)
            else:
                op(src, dst, dim=dim, reverse=reverse)
            T.copy(dst, B)
    return main


@pytest.mark.parametrize("name", list(SCANS))
@pytest.mark.parametrize("dim,reverse,in_place,dtype", [
    (0, False, False, "float32"), (1, False, True, "float32"), (-1, True, False, "float32"),
    (0, True, True, "float32"), (1, False, False, "float16"), (0, False, True, "bfloat16")])
def test_scan(name, dim, reverse, in_place, dtype):
    a = rand(7, 11, dtype=dtype)
    x = a.double().flip(dim) if reverse else a.double()
    want = SCANS[name](x, dim)
    want = want.flip(dim) if reverse else want
    check(scan_2d(name, 7, 11, dim, reverse, in_place, dtype)(a), want, k=11)


@pytest.mark.parametrize("dtype", ["int8", "int32", "bfloat16"])
def test_cummax_in_the_tiles_dtype(dtype):
    """A running maximum in the tile's own dtype is exact (bfloat16 has no infinity in TVM:
    the first element starts each row)."""
    a = (torch.randn(5, 9) * 50).to(getattr(torch, dtype))
    got = scan_2d("cummax", 5, 9, 1, True, False, dtype, dtype)(a)
    assert torch.equal(got, a.flip(1).cummax(1).values.flip(1))


@tilewright.jit(out_idx=[-1], target="cpu")
def cumsum_tiles(M, bm=8):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            tile = T.alloc_fragment((bm,), "float32")
            T.copy(A[bx * bm], tile)
            T.cumsum(tile, dim=0)
            T.copy(tile, B[bx * bm])
    return main


def test_cumsum_partial_tiles_per_block():
    a = rand(19)
    want = torch.cat([c.double().cumsum(0) for c in a.split(8)])
    check(cumsum_tiles(19)(a), want, k=8)


# -- alloc_reducer -----------------------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def reducer_rows(M, N, op, dtype, bm=4, bn=8):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            acc = T.alloc_reducer((bm,), dtype, op=op)
            out = T.alloc_fragment((bm,), dtype)
            T.reducer_init(acc)
            for k in T.serial(T.ceildiv(N, bn)):
                for i, j in T.Parallel(bm, bn):
                    r, c = bx * bm + i, k * bn + j
                    if r < M and c < N:
                        T.reducer_update(acc[i], X[r, c])
            T.finalize_reducer(acc, out)
            T.copy(out, Y[bx * bm])
    return main


@pytest.mark.parametrize("op,dtype", [("sum", "float32"), ("max", "bfloat16"),
                                      ("min", "float16"), ("sum", "bfloat16")])
def test_reducer_float_ops_with_tails(op, dtype):
    a = rand(10, 21, dtype=dtype)
    x = a.double()
    want = {"sum": x.sum(1), "max": x.amax(1), "min": x.amin(1)}[op]
    check(reducer_rows(10, 21, op, dtype)(a), want, k=21)


@pytest.mark.parametrize("op", ["bitand", "bitor", "bitxor", "max", "sum"])
def test_reducer_integer_ops(op):
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(0, 1 << 12, (6, 13), generator=gen, dtype=torch.int32)
    want = a[:, 0].clone()
    for c in range(1, 13):
        col = a[:, c]
        want = {"bitand": want & col, "bitor": want | col, "bitxor": want ^ col,
                "max": torch.maximum(want, col), "sum": want + col}[op]
    assert torch.equal(reducer_rows(6, 13, op, "int32")(a), want)


@tilewright.jit(out_idx=[-1], target="cpu")
def reducer_tilelang_style(M, N, op, bm=4, bn=8):
    # TileLang's forms: T.clear / T.fill start the epoch, acc[i] += x, finalize then T.copy
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            acc = T.alloc_reducer((bm,), "float32", op=op)
            if op == "sum":
                T.clear(acc)
            else:
                T.fill(acc, -1.0)
            for k in T.serial(T.ceildiv(N, bn)):
                for i, j in T.Parallel(bm, bn):
                    if op == "sum":
                        acc[i] += X[bx * bm + i, k * bn + j]
                    else:
                        T.reducer_update(acc[i], X[bx * bm + i, k * bn + j])
            T.finalize_reducer(acc)
            T.copy(acc, Y[bx * bm])
    return main


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reducer_in_tilelang_style(op):
    a = rand(8, 16)
    want = a.double().sum(1) if op == "sum" else a.double().amax(1).clamp(min=-1.0)
    check(reducer_tilelang_style(8, 16, op)(a), want, k=16)


def older_form_twice(M=4, N=8):
    # TileLang's older form opens a second epoch after the first is finalized in place: the
    # elements read after each finalize are that epoch's merged values
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Y: T.Tensor((2, M), "float32")):
        with T.Kernel(1, threads=128):
            t = T.alloc_fragment((M, N), "float32")
            T.copy(A, t)
            acc = T.alloc_reducer((M,), "float32", op="sum", replication="all")
            T.clear(acc)
            for i, j in T.Parallel(M, N):
                acc[i] += t[i, j]
            T.finalize_reducer(acc)
            for i in T.Parallel(M):
                Y[0, i] = acc[i]
            T.clear(acc)
            for i, j in T.Parallel(M, N):
                acc[i] += t[i, j] * 2.0
            T.finalize_reducer(acc)
            T.copy(acc, Y[1, 0])
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_reducer_older_form_reopens_after_its_finalize(target):
    a, y = rand(4, 8), torch.zeros(2, 4)
    tilewright.compile(older_form_twice(), target=target)(a, y)
    check(y, torch.stack([a.double().sum(1), 2 * a.double().sum(1)]), k=8)


def test_reducer_fill_other_than_identity_of_a_sum_and_copy_before_finalize():
    def bad(what):
        @T.prim_func
        def main(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
            with T.Kernel(1):
                acc = T.alloc_reducer((4,), "float32", op="sum")
                if what == "fill":
                    T.fill(acc, 1.0)
                else:
                    T.clear(acc)
                    T.copy(acc, Y)
        return main

    with pytest.raises(tilewright.KernelError, match="must use its identity"):
        bad("fill")
    with pytest.raises(tilewright.KernelError, match="is a reducer"):
        bad("copy")


def test_tilelang_schedule_arguments_of_scans_and_reducers_are_accepted():
    """TileLang 0.1.15's ``T.cumsum(..., annotations=)`` / ``T.cummax`` and
    ``T.finalize_reducer(acc, batch=, annotations=)``: hints of its CUDA lowering, accepted
    here; a batch below 1 is refused at the line."""

    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), S: T.Tensor((4, 8), "float32"),
             R: T.Tensor((4,), "float32")):
        with T.Kernel(1) as _bx:
            tile = T.alloc_fragment((4, 8), "float32")
            T.copy(A, tile)
            acc = T.alloc_reducer((4,), "float32", op="max")
            T.reducer_init(acc)
            for i, j in T.Parallel(4, 8):
                T.reducer_update(acc[i], tile[i, j])
            out = T.alloc_fragment((4,), "float32")
            T.finalize_reducer(acc, out, batch=2, annotations={})
            T.copy(out, R)
            T.cummax(tile, dim=1, annotations={"test.scan": "cummax"})
            T.copy(tile, S)

    a, s, r = rand(4, 8), torch.empty(4, 8), torch.empty(4)
    tilewright.compile(main, target="cpu")(a, s, r)
    assert torch.equal(r, a.amax(1)) and torch.equal(s, a.cummax(1).values)
    with pytest.raises(tilewright.KernelError, match="batch must be >= 1, got 0"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1) as _bx:
                acc = T.alloc_reducer((4,), "float32")
                T.reducer_init(acc)
                T.finalize_reducer(acc, batch=0)


# -- T.reducer_init(acc, init): a starting value, combined once ---------------------------------
FOLDS = {"sum": lambda a, b: a + b, "max": torch.maximum, "min": torch.minimum,
         "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b,
         "bitxor": lambda a, b: a ^ b}


def _fold_from(op, start, values):
    out = start
    for v in values:
        out = FOLDS[op](out, v)
    return out


def seeded(op, dtype, seed, M=4, N=16):
    # one scalar over the whole tile (the threads' partials meet) and one per row, each
    # seeded with `seed`
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Total: T.Tensor((1,), dtype),
             Rows: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((M, N), dtype)
            T.copy(X, tile)
            total = T.alloc_reducer((1,), dtype, op=op)
            rows = T.alloc_reducer((M,), dtype, op=op)
            T.reducer_init(total, seed)
            T.reducer_init(rows, seed)
            for i, j in T.Parallel(M, N):
                T.reducer_update(total[0], tile[i, j])
                T.reducer_update(rows[i], tile[i, j])
            t = T.alloc_fragment((1,), dtype)
            r = T.alloc_fragment((M,), dtype)
            T.finalize_reducer(total, t)
            T.finalize_reducer(rows, r)
            T.copy(t, Total)
            T.copy(r, Rows)
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("op,dtype,seed", [
    ("sum", "float32", 100.0), ("max", "float32", 0.5), ("min", "float32", -0.25),
    ("sum", "int32", -7), ("bitand", "int32", 0x0FF0), ("bitor", "int32", 1 << 20),
    ("bitxor", "int32", 0x5A5A)])
def test_reducer_starting_value_counts_once(target, op, dtype, seed):
    if dtype == "float32":
        x = rand(4, 16)
    else:
        x = torch.randint(0, 1 << 16, (4, 16), generator=torch.Generator().manual_seed(1),
                          dtype=torch.int32)
    total, rows = torch.zeros(1, dtype=x.dtype), torch.zeros(4, dtype=x.dtype)
    tilewright.compile(seeded(op, dtype, seed), target=target)(x, total, rows)
    start = torch.tensor(seed, dtype=x.dtype)
    want_total = _fold_from(op, start, x.flatten())
    want_rows = torch.stack([_fold_from(op, start, row) for row in x])
    torch.testing.assert_close(total, want_total.reshape(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(rows, want_rows, rtol=1e-5, atol=1e-4)


def seed_taken_at_init(out_dtype):
    # TileLang's test: the seed's source changes after the init; its value at the init counts
    # (converted into a destination of another dtype after the seed is combined)
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), out_dtype)):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((8,), "float32")
            T.copy(A, src)
            seed = T.alloc_fragment((1,), "float32")
            seed[0] = 5.0
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc, seed[0])
            seed[0] = 100.0
            for i in T.Parallel(8):
                T.reducer_update(acc[0], src[i])
            result = T.alloc_fragment((1,), out_dtype)
            T.finalize_reducer(acc, result)
            T.copy(result, B)
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_reducer_starting_value_is_its_value_at_the_init(target, out_dtype):
    a = torch.arange(1.0, 9.0) / 64
    b = torch.zeros(1, dtype=getattr(torch, out_dtype))
    tilewright.compile(seed_taken_at_init(out_dtype), target=target)(a, b)
    assert b.item() == (a.sum() + 5.0).to(b.dtype).item()


def online_logsumexp(loop, K=512, BK=128):
    # an epoch per tile inside the loop (TileLang's online softmax), the max seeded with the
    # running maximum; a pipelined loop stages each tile through shared memory
    @T.prim_func
    def main(A: T.Tensor((K,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            staged = T.alloc_shared((BK,), "float32")
            tile = T.alloc_fragment((BK,), "float32")
            running_max = T.alloc_fragment((1,), "float32")
            running_sum = T.alloc_fragment((1,), "float32")
            running_max[0] = -T.infinity("float32")
            running_sum[0] = 0.0
            tiles = T.Pipelined(K // BK, num_stages=2) if loop == "pipelined" else \
                T.serial(K // BK)
            for k in tiles:
                T.copy(A[k * BK], staged)
                T.copy(staged, tile)
                new_max = T.alloc_reducer((1,), "float32", op="max")
                T.reducer_init(new_max, running_max[0])
                for i in T.Parallel(BK):
                    T.reducer_update(new_max[0], tile[i])
                m = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(new_max, m)
                new_sum = T.alloc_reducer((1,), "float32", op="sum")
                T.reducer_init(new_sum, T.exp(running_max[0] - m[0]) * running_sum[0])
                for i in T.Parallel(BK):
                    T.reducer_update(new_sum[0], T.exp(tile[i] - m[0]))
                T.finalize_reducer(new_sum, running_sum)
                running_max[0] = m[0]
            B[0] = T.log(running_sum[0]) + running_max[0]
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("loop", ["serial", "pipelined"])
def test_reducer_epochs_reopen_in_a_loop_seeded_with_running_values(target, loop):
    a = rand(512)
    b = torch.zeros(1)
    tilewright.compile(online_logsumexp(loop), target=target)(a, b)
    torch.testing.assert_close(b, torch.logsumexp(a, 0).reshape(1), rtol=1e-5, atol=1e-5)


def epoch_in_branches(M=8):
    # TileLang's legal shapes: a whole epoch in a block-uniform branch, and a finalize in an
    # if nested in the epoch's scope (skipped, it leaves the partials unread)
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), S: T.Tensor((2,), "int32"),
             B: T.Tensor((2, 2), "float32")):
        with T.Kernel(2, threads=128) as bx:
            src = T.alloc_fragment((M,), "float32")
            T.copy(A, src)
            result = T.alloc_fragment((1,), "float32")
            result[0] = 0.0
            if bx == 0:
                whole = T.alloc_reducer((1,), "float32")
                T.reducer_init(whole, T.cast(bx + 1, "float32"))
                for i in T.Parallel(M):
                    T.reducer_update(whole[0], src[i])
                T.finalize_reducer(whole, result)
            B[bx, 0] = result[0]
            acc = T.alloc_reducer((1,), "float32", op="max")
            T.reducer_init(acc, -1.0)
            if S[bx] >= 0:
                for i in T.Parallel(M):
                    T.reducer_update(acc[0], src[i] * T.cast(S[bx], "float32"))
                T.finalize_reducer(acc, result)
                B[bx, 1] = result[0]
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_reducer_epoch_in_a_branch_and_finalize_in_a_nested_branch(target):
    a = torch.arange(1.0, 9.0) - 6
    s = torch.tensor([-1, 2], dtype=torch.int32)
    b = torch.full((2, 2), 77.0)
    tilewright.compile(epoch_in_branches(), target=target)(a, s, b)
    want = torch.tensor([[a.sum() + 1, 77.0], [0.0, (a * 2).amax()]])
    torch.testing.assert_close(b, want)
