"""TileLang's other atomics: the bitwise kinds (``T.atomic_or`` / ``atomic_and`` /
``atomic_xor``, integers only), ``T.atomic_load`` and ``T.atomic_store`` with their memory
orders (and the orders of the read-modify-writes, names checked at the user's line as TileLang
does), the vectors of previous values ``T.atomic_addx2`` / ``atomic_addx4(...,
return_prev=True)`` return (TileLang's ``test_tilelang_language_atomic`` kernels among them),
``T.Ramp`` indices and ``use_tma``. Run on the CPU backend, whose blocks run concurrently, and
the interpreter, against Python's reductions and torch."""

import functools
import operator

import pytest
import tilewright
import tilewright.language as T
import torch
from source_lines import Markers
from tilewright.errors import KernelError, UnsupportedOpError

TARGETS = ["cpu", "interp"]
_M = Markers(__file__)
PYTHON_COMBINE = {"or": operator.or_, "and": operator.and_, "xor": operator.xor}
START = {"or": 0, "and": -1, "xor": 0}


def bitwise(kind, blocks, n, dtype, order):
    """Every element of X combined into Out[i % 3] from blocks running at once."""
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def kernel(X: T.Tensor((blocks * n,), dtype), Out: T.Tensor((3,), dtype)):
        with T.Kernel(blocks, threads=32) as bx:
            for i in T.Parallel(n):
                op(Out[i % 3], X[bx * n + i], memory_order=order)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["or", "and", "xor"])
@pytest.mark.parametrize("dtype,order", [("int32", None), ("int8", "relaxed"),
                                         ("int16", "acq_rel"), ("int64", "seq_cst"),
                                         ("uint32", "release"), ("uint8", "acquire")])
def test_bitwise_atomics_from_many_blocks(target, kind, dtype, order):
    blocks, n = 16, 32
    info = torch.iinfo(getattr(torch, dtype))
    x = torch.randint(max(info.min, -2 ** 40), min(info.max, 2 ** 40), (blocks * n,),
                      generator=torch.Generator().manual_seed(1), dtype=getattr(torch, dtype))
    start = torch.tensor([START[kind]] * 3).to(getattr(torch, dtype))
    out = start.clone()
    kernel = tilewright.compile(bitwise(kind, blocks, n, dtype, order), target=target)
    kernel(x, out)
    for slot in range(3):
        values = [int(v) for v in x.view(blocks, n)[:, slot::3].flatten()]
        want = functools.reduce(PYTHON_COMBINE[kind], values, int(start[slot]))
        assert int(out[slot]) == torch.tensor(want).to(getattr(torch, dtype)).item()


def load_store(dtype):
    """TileLang's atomic load/store kernel: each element read with atomic_load and written
    with atomic_store, under a bounds check."""
    @T.prim_func
    def kernel(A: T.Tensor((64, 64), dtype), B: T.Tensor((64, 64), dtype)):
        with T.Kernel(4, 4, threads=32) as (bx, by):
            for i, j in T.Parallel(16, 16):
                idx_i, idx_j = bx * 16 + i, by * 16 + j
                if idx_i < 64 and idx_j < 64:
                    val = T.atomic_load(A[idx_i, idx_j])
                    T.atomic_store(B[idx_i, idx_j], val)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "int64"])
def test_atomic_load_store_copy(target, dtype):
    a = (torch.randn(64, 64) * 50).to(getattr(torch, dtype))
    b = torch.zeros_like(a)
    tilewright.compile(load_store(dtype), target=target)(a, b)
    assert torch.equal(b, a)


def published(blocks):
    """Block b stores its value with a release store and reads it back with an acquire load,
    then adds a ticket: the flags and counts every backend must agree on."""
    @T.prim_func
    def kernel(X: T.Tensor((blocks,), T.int32), Flag: T.Tensor((blocks,), T.int32),
               Seen: T.Tensor((blocks,), T.int32), Count: T.Tensor((1,), T.int32)):
        with T.Kernel(blocks, threads=32) as bx:
            T.atomic_store(Flag[bx], X[bx] * 2, memory_order="release")
            Seen[bx] = T.atomic_load(Flag[bx], memory_order="acquire") + 1
            T.atomic_add(Count[0], 1, memory_order="acq_rel")

    return kernel


@pytest.mark.parametrize("target", TARGETS)
def test_release_store_acquire_load_in_block_code(target):
    blocks = 24
    x = torch.arange(blocks, dtype=torch.int32) - 5
    flag, seen, count = (torch.zeros(n, dtype=torch.int32) for n in (blocks, blocks, 1))
    tilewright.compile(published(blocks), target=target)(x, flag, seen, count)
    assert torch.equal(flag, x * 2)
    assert torch.equal(seen, x * 2 + 1)
    assert int(count) == blocks  # block code: one atomic per block, not one per thread


def wide_prev(lanes, dtype, ramp):
    op = getattr(T, f"atomic_addx{lanes}")

    @T.prim_func
    def kernel(Dst: T.Tensor((2 * lanes,), dtype), Val: T.Tensor((2 * lanes,), dtype),
               Prev: T.Tensor((2 * lanes,), dtype)):
        with T.Kernel(1, threads=32):
            Prev[0:lanes] = op(Dst[0:lanes], Val[0:lanes], return_prev=True)
            if ramp:
                Prev[lanes:2 * lanes] = op(Dst[T.Ramp(lanes, 1, lanes)],
                                           Val[T.Ramp(lanes, 1, lanes)], return_prev=True)
            else:
                dst, val = Dst[lanes:2 * lanes], Val[lanes:2 * lanes]
                Prev[lanes:2 * lanes] = op(dst, val, return_prev=True)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ramp", [False, True])
def test_wide_atomic_add_returns_the_previous_lanes(target, lanes, dtype, ramp):
    """Each lane added once (a vector of previous values computed once: the bfloat16 case
    made each atomic twice on the CPU before its bindings were held, see
    lowering_bfloat16.hold_narrow_bindings)."""
    td = getattr(torch, dtype)
    dst = torch.arange(1, 2 * lanes + 1).to(td)
    val = (torch.arange(1, 2 * lanes + 1) * 10).to(td)
    prev = torch.zeros(2 * lanes, dtype=td)
    start = dst.clone()
    tilewright.compile(wide_prev(lanes, dtype, ramp), target=target)(dst, val, prev)
    assert torch.equal(prev, start)
    assert torch.equal(dst, start + val)


def test_wide_atomic_add_returns_a_vector_of_the_destination_dtype():
    seen = {}

    @T.prim_func
    def kernel(Dst: T.Tensor((4,), T.float16), Val: T.Tensor((4,), T.float16)):
        with T.Kernel(1, threads=32):
            seen["x2"] = T.atomic_addx2(Dst[0:2], Val[0:2], return_prev=True)
            seen["x4"] = T.atomic_addx4(Dst[0], Val[0], return_prev=True)

    assert kernel is not None
    assert str(seen["x2"].ty) == "float16x2" and str(seen["x4"].ty) == "float16x4"


def tma_add(dtype):
    """TileLang's TMA atomic-add kernel (a shared tile added into global memory 16 times)."""
    @T.prim_func
    def kernel(Out: T.Tensor((16, 16), dtype)):
        with T.Kernel(1, threads=32):
            tile = T.alloc_shared((16, 16), dtype)
            T.fill(tile, 1)
            for _ in range(16):
                T.atomic_add(Out, tile, use_tma=True)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
def test_use_tma_adds_the_same_values(target):
    out = torch.zeros(16, 16)
    tilewright.compile(tma_add("float32"), target=target)(out)
    assert torch.equal(out, torch.full((16, 16), 16.0))


@pytest.mark.parametrize("order", ["release", "acq_rel", "invalid"])
def test_atomic_load_refuses_an_order_a_load_cannot_have(order):
    with pytest.raises(ValueError, match="atomic_load does not support memory_order") as err:
        @T.prim_func
        def kernel(S: T.Tensor((1,), T.int32), O: T.Tensor((1,), T.int32)):
            with T.Kernel(1, threads=32):
                O[0] = T.atomic_load(S[0], memory_order=order)  # load-order
    assert isinstance(err.value, KernelError)
    _M.assert_at(err.value, 'load-order')
    assert "expected one of ['acquire', 'consume', 'relaxed', 'seq_cst']" in str(err.value)


@pytest.mark.parametrize("order", ["consume", "acquire", "acq_rel", "invalid"])
def test_atomic_store_refuses_an_order_a_store_cannot_have(order):
    with pytest.raises(ValueError, match="atomic_store does not support memory_order"):
        @T.prim_func
        def kernel(D: T.Tensor((1,), T.int32)):
            with T.Kernel(1, threads=32):
                T.atomic_store(D[0], 1, memory_order=order)


@pytest.mark.parametrize("order", ["relaxed", "consume", "acquire", "seq_cst"])
def test_atomic_load_takes_the_orders_of_a_load(order):
    @T.prim_func
    def kernel(S: T.Tensor((1,), T.int32), O: T.Tensor((1,), T.int32)):
        with T.Kernel(1, threads=32):
            O[0] = T.atomic_load(S[0], memory_order=order)

    out = torch.zeros(1, dtype=torch.int32)
    tilewright.compile(kernel, target="cpu")(torch.tensor([41], dtype=torch.int32), out)
    assert int(out) == 41


def test_a_read_modify_write_refuses_an_unknown_order():
    with pytest.raises(ValueError, match=r"T.atomic_add does not support "
                                         r"memory_order='acquire_release'"):
        @T.prim_func
        def kernel(D: T.Tensor((1,), T.int32)):
            with T.Kernel(1, threads=32):
                T.atomic_add(D[0], 1, memory_order="acquire_release")


def test_bitwise_atomics_refuse_floats_at_the_line():
    with pytest.raises(TypeError, match=r"T.atomic_or takes integer elements; 'D' is "
                                        r"float32") as err:
        @T.prim_func
        def kernel(D: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=32):
                T.atomic_or(D[0], 1.0)  # float-or
    _M.assert_at(err.value, 'float-or')


def test_atomic_store_takes_one_element():
    with pytest.raises(KernelError, match=r"T.atomic_store takes one element \(A\[i, j\]\), "
                                          r"got a region of 'D'"):
        @T.prim_func
        def kernel(D: T.Tensor((4,), T.int32)):
            with T.Kernel(1, threads=32):
                T.atomic_store(D[0:2], 1)


def test_use_tma_is_an_add_only():
    with pytest.raises(KernelError, match="T.atomic_max has no use_tma"):
        @T.prim_func
        def kernel(D: T.Tensor((16,), T.float32)):
            with T.Kernel(1, threads=32):
                tile = T.alloc_shared((16,), T.float32)
                T.fill(tile, 1)
                T.atomic_max(D, tile, use_tma=True)


def test_ramp_index_must_name_consecutive_lanes():
    with pytest.raises(KernelError, match=r"a T.Ramp index names 2 consecutive elements "
                                          r"\(stride 1, 2 lanes\), got stride 2"):
        @T.prim_func
        def kernel(D: T.Tensor((4,), T.float32), V: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=32):
                T.atomic_addx2(D[T.Ramp(0, 2, 2)], V[0:2])


@pytest.mark.parametrize("which", ["or", "store", "load"])
def test_ascend_refuses_what_its_atomic_copies_lack_at_the_line(which):
    @T.prim_func
    def kernel(A: T.Tensor((64,), T.int32), F: T.Tensor((4,), T.int32)):
        with T.Kernel(2, threads=32) as bx:
            if which == "or":
                T.atomic_or(F[0], A[bx])  # asc-or
            elif which == "store":
                T.atomic_store(F[0], A[bx])  # asc-store
            else:
                F[1] = T.atomic_load(A[bx])  # asc-load

    with pytest.raises(UnsupportedOpError, match=f"T.atomic_{which} is not supported by "
                                                 "backend 'ascend'") as err:
        tilewright.lower(kernel, "ascend")
    _M.assert_at(err.value, f"asc-{which}")


def unused_previous_values(dtype="int32"):
    """Atomics whose previous value the kernel leaves unused: named and never read (in block
    code, under a condition on the thread, in T.Parallel), written as a bare statement, and
    inside an expression statement. Each counts one: a block's, a thread's, an iteration's."""
    @T.prim_func
    def kernel(C: T.Tensor((7,), dtype)):
        with T.Kernel(3, threads=32) as bx:
            old = T.atomic_add(C[0], 1, return_prev=True)  # noqa: F841 - the point
            tx = T.get_thread_binding()
            if tx == 0:
                mine = T.atomic_add(C[1], 1, return_prev=True)  # noqa: F841
            for _i in T.Parallel(32):
                each = T.atomic_add(C[2], 1, return_prev=True)  # noqa: F841
            T.atomic_add(C[3], 1, return_prev=True)
            T.atomic_add(C[4], 1, return_prev=True) + 1
            for _i in T.Parallel(32):
                T.atomic_add(C[5], 1, return_prev=True) * 2
            T.atomic_max(C[6], bx, return_prev=True, memory_order="acq_rel")

    return kernel


UNUSED_COUNTS = [3, 3, 96, 3, 3, 96, 2]


def folded_previous_values(dtype="int32"):
    """Atomics returning their previous value in an expression that TVM folds to a constant
    as it is built (``x * 0``, ``0 * x``, ``x % 1``): in a thread's store, named in block
    code, as an expression statement in block code and in T.Parallel."""
    @T.prim_func
    def kernel(C: T.Tensor((5,), dtype), D: T.Tensor((3, 32), dtype)):
        with T.Kernel(3, threads=32) as bx:
            tx = T.get_thread_binding()
            D[bx, tx] = T.atomic_add(C[0], 1, return_prev=True) * 0 + tx
            zero = T.atomic_add(C[1], 1, return_prev=True) % 1  # noqa: F841 - the point
            0 * T.atomic_add(C[2], 2, return_prev=True)
            for _i in T.Parallel(32):
                T.atomic_add(C[3], 1, return_prev=True) * 0
            if tx == 1:
                D[bx, 0] = T.atomic_max(C[4], bx + 1, return_prev=True) * 0 + 1

    return kernel


FOLDED_COUNTS = [96, 3, 6, 96, 3]
FOLDED_D = [[1] + list(range(1, 32))] * 3


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_atomic_in_an_expression_folded_to_a_constant_is_still_made(target, dtype):
    """Before: TVM folded ``T.atomic_add(C[0], 1, return_prev=True) * 0`` to 0 as the
    expression was built, and the atomic was lost on every backend (C stayed 0)."""
    c = torch.zeros(5, dtype=getattr(torch, dtype))
    d = torch.full((3, 32), -1, dtype=getattr(torch, dtype))
    tilewright.compile(folded_previous_values(dtype), target=target)(c, d)
    assert c.tolist() == FOLDED_COUNTS and d.tolist() == FOLDED_D


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "bfloat16"])
def test_an_atomic_whose_previous_value_is_unused_is_made_once_where_it_stands(target, dtype):
    """Before: a name bound to the previous value in block code made the atomic once per
    thread on cpu and interp (CUDA once per block), in T.Parallel once per thread and
    iteration (3072 for 96), and a bare statement or an expression statement made none."""
    c = torch.zeros(7, dtype=getattr(torch, dtype))
    tilewright.compile(unused_previous_values(dtype), target=target)(c)
    assert c.tolist() == UNUSED_COUNTS


def nested_previous_values(dtype):
    """Atomics whose value is another's previous value: in block code, in T.Parallel, folded
    away there (``* 0``) and stored."""
    @T.prim_func
    def kernel(C: T.Tensor((6,), dtype), D: T.Tensor((3, 4), dtype)):
        with T.Kernel(3, threads=32) as bx:
            T.atomic_max(C[0], T.atomic_add(C[1], 1, return_prev=True))
            for i in T.Parallel(4):
                T.atomic_add(C[2], T.atomic_add(C[3], 1, return_prev=True) * 0 + 1)
                D[bx, i] = T.atomic_add(C[4], T.atomic_add(C[5], 2, return_prev=True) * 0 + 1,
                                        return_prev=True) * 0 + i

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "bfloat16"])
def test_an_atomic_of_another_atomics_previous_value_makes_each_once(target, dtype):
    """Before, on the CPU: the inner atomic was made twice (C[1] counted 6 for 3 blocks), and
    a bfloat16 one folded away failed to build ("value.ty() == var->ty": the binding that kept
    it bound a bfloat16 variable to the float32 value TVM's legalisation made)."""
    c = torch.zeros(6, dtype=getattr(torch, dtype))
    d = torch.full((3, 4), -1, dtype=getattr(torch, dtype))
    tilewright.compile(nested_previous_values(dtype), target=target)(c, d)
    assert c.tolist() == [2, 3, 12, 12, 12, 24]  # the max of the tickets 0, 1, 2 is 2
    assert d.tolist() == [[0, 1, 2, 3]] * 3


def stored_values(dtype):
    """Each element stored atomically as a value computed from a tile and a tensor."""
    @T.prim_func
    def kernel(A: T.Tensor((8, 8), dtype), B: T.Tensor((8, 8), dtype)):
        with T.Kernel(2, threads=32) as bx:
            tile = T.alloc_fragment((4, 8), dtype)
            T.copy(A[bx * 4, 0], tile)
            for i, j in T.Parallel(4, 8):
                T.atomic_store(B[bx * 4 + i, j], tile[i, j] * A[bx * 4 + i, j] + 1,
                               memory_order="release")

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_atomic_store_of_a_computed_value(target, dtype):
    """Before, on the CPU: a bfloat16 value failed to build ("Load/Store of buffer tile
    occurred before its declaration": the bfloat16 passes left the store's operand, rounded
    with a binding, reading the tile)."""
    a = (torch.randint(-8, 9, (8, 8), generator=torch.Generator().manual_seed(2)) / 2).to(
        getattr(torch, dtype))  # exact products and sums: the same whether fused or not
    b = torch.zeros_like(a)
    tilewright.compile(stored_values(dtype), target=target)(a, b)
    assert torch.equal(b, a * a + 1)


def stored_through_float8(dtype):
    """Each element of A converted to float8 and back, stored atomically into B and added
    atomically into C."""
    @T.prim_func
    def kernel(A: T.Tensor((32,), dtype), B: T.Tensor((32,), dtype),
               C: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            tile = T.alloc_fragment((32,), dtype)
            T.copy(A, tile)
            for i in T.Parallel(32):
                T.atomic_store(B[i], T.cast(T.cast(tile[i], "float8_e4m3fn"), dtype))
                T.atomic_add(C[i], T.cast(T.cast(tile[i], "float8_e4m3fn"), dtype))

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int8", "int32", "float32"])
def test_atomics_of_a_value_converted_through_float8(target, dtype):
    """Before, on the CPU: the build failed ("Detected bound for f8_code conflicts with
    memorization": the float8 lowering left the atomic's operand binding its code, bound
    twice); found by the differential fuzzer (seed 0)."""
    a = torch.arange(-16, 16).to(getattr(torch, dtype))
    b, c = torch.zeros_like(a), torch.zeros_like(a)
    tilewright.compile(stored_through_float8(dtype), target=target)(a, b, c)
    want = a.to(torch.float8_e4m3fn).to(getattr(torch, dtype))
    assert torch.equal(b, want) and torch.equal(c, want)
