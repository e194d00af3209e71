"""Kernels the differential fuzzer (tilewright_sdk.fuzz) found crashing inside TVM's build on
the CPU backend: comparisons of an unsigned value with 0 (LowerIntrin aborted the process on
``if u < 0`` of a let-bound unsigned value) or 1 (constant folding stopped on ``0U - 1U``); a
loop-invariant bfloat16 value stored by a vector loop (BF16StorageLegalize left a ``Broadcast``
of bfloat16); atomics into 8- and 16-bit integers (no runtime helper: the process died on an
undefined symbol); a bfloat16 operation in a branch of an operand T.if_then_else (its tile read
kept its bfloat16 buffer); a vectorised bfloat16 reduction (every lane took the last lane's
partial result); a reinterpret (T.unpack of a signed value) of an operand TVM folded to 0 (its
LLVM code generator took it for a null pointer); a vectorised division of a division by negative
constants (LowerIntrin's bound of a vector comparison); T.clz of a value LLVM knew to be 0
(poison); T.tanh of a lane of a bfloat16 vector (a bfloat16 conversion in a binding)."""

import pytest
import tilewright
import tilewright.language as T
import torch


@tilewright.jit(out_idx=[-1], target="cpu")
def sign_test(test):
    @T.prim_func
    def main(X: T.Tensor((1, 1), "uint8"), Y: T.Tensor((1, 1), "uint8")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((1, 1), "uint8")
            T.copy(X[by, bx], x)
            y = T.alloc_fragment((1, 1), "uint8")
            for i, j in T.Parallel(1, 1):  # `by + i` also here: one let binding for both
                y[i, j] = T.if_then_else(x[i, j] > T.uint8(6), T.cast(by + i, "uint8"), x[i, j])
            for i, j in T.Parallel(1, 1):
                if test(T.cast(by + i, "uint8")):
                    y[i, j] = y[i, j] + T.uint8(3)
            T.copy(y, Y[by, bx])
    return main


TESTS = {"u < 0": (lambda u: u < T.uint8(0), 0), "0 > u": (lambda u: T.uint8(0) > u, 0),
         "u >= 0": (lambda u: u >= T.uint8(0), 3), "0 <= u": (lambda u: T.uint8(0) <= u, 3)}


@pytest.mark.parametrize("name", TESTS)
def test_unsigned_compared_with_zero(name):
    test, added = TESTS[name]
    kernel = sign_test(test)
    for value in (3, 9):
        x = torch.tensor([[value]], dtype=torch.uint8)
        torch.testing.assert_close(kernel(x), torch.where(x > 6, 0, x) + added)


@tilewright.jit(out_idx=[-1], target="cpu")
def below_one():
    @T.prim_func
    def main(X: T.Tensor((1, 1), "uint8"), Y: T.Tensor((1, 1), "uint8")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((1, 1), "uint8")
            T.copy(X[by, bx], x)
            y = T.alloc_shared((1, 1), "uint8")
            T.fill(y, 0)
            for i in T.Parallel(1):
                for j in T.Parallel(1):
                    if T.cast(bx + j, "uint8") < T.uint8(1):
                        y[i, j] = x[i, j]
            T.copy(y, Y[by, bx])
    return main


def test_unsigned_compared_with_one():
    # TVM's constant folding stopped on 0U - 1U ("Minuend's value is 0U", seed 6): unsigned
    # comparisons are made in int64
    x = torch.tensor([[7]], dtype=torch.uint8)
    torch.testing.assert_close(below_one()(x), x)


@tilewright.jit(out_idx=[-1], target="cpu")
def guarded_tanh():
    @T.prim_func
    def main(X: T.Tensor((1, 9), "float32"), Y: T.Tensor((1, 9), "float32")):
        with T.Kernel(2, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((1, 8), "float32")
            T.copy(X[by, bx * 8], x)
            acc = T.alloc_fragment((1, 8), "float32")
            T.fill(acc, 0)
            n = T.alloc_var("int32", init=0)
            while n < 1:
                for i, j in T.Parallel(1, 8):
                    acc[i, j] = acc[i, j] + x[i, j]
                n = n + 1
            for i, j in T.Parallel(1, 8):
                if by + i < 1 and bx * 8 + j < 9:
                    Y[by + i, bx * 8 + j] = T.tanh(T.cast(bx * 8 + j, "float32"))
    return main


def test_a_binding_in_a_loop_the_lowering_copies():
    # the float32 tanh binds its argument; a loop the lowering made twice held the same
    # binding twice, and TVM's analyzer stopped ("Trying to update var 'tanh_x' with a
    # different const bound", seed 304): ConvertSSA after the loop lowering renames it
    y = guarded_tanh()(torch.zeros(1, 9))
    torch.testing.assert_close(y, torch.arange(9.0).tanh()[None])


@tilewright.jit(out_idx=[-1], target="cpu")
def invariant_store(guarded):
    @T.prim_func
    def main(X: T.Tensor((2, 16), "bfloat16"), Y: T.Tensor((2, 16), "bfloat16")):
        with T.Kernel(1, 2, threads=128) as (bx, by):
            for i, j in T.Parallel(1, 16):
                if guarded:
                    if by + i < 2:
                        Y[by + i, j] = X[by, 0]
                else:
                    Y[by + i, j] = T.bfloat16(0.5) + X[0, 1]
    return main


@pytest.mark.parametrize("guarded", [False, True])
def test_a_loop_invariant_bfloat16_store(guarded):
    x = torch.randn(2, 16).to(torch.bfloat16)
    expected = x[:, :1].expand(2, 16) if guarded else (0.5 + x[0, 1].float()).to(
        torch.bfloat16).expand(2, 16)
    torch.testing.assert_close(invariant_store(guarded)(x), expected)


@tilewright.jit(out_idx=[-1], target="cpu")
def staged_bfloat16(M, N, K):
    @T.prim_func
    def main(X: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "bfloat16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((M, K), "bfloat16")
            b = T.alloc_shared((K, N), "bfloat16")
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for _ko in T.serial(1):
                for i, j in T.Parallel(M, K):
                    a[i, j] = X[i, j] * T.float32(1.0 / 3.0)
                T.copy(B, b)
                T.gemm(a, b, acc)
            T.copy(acc, C)
    return main


def test_values_stored_into_a_bfloat16_tile_are_rounded():
    """A bfloat16 tile written by T.Parallel holds bfloat16 values when T.gemm reads it (TVM's
    BF16ComputeLegalize kept it in float32 without rounding), NaN and infinities included."""
    x, b = torch.randn(32, 32), torch.randn(32, 32).to(torch.bfloat16)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    expected = (x * (1.0 / 3.0)).to(torch.bfloat16).float() @ b.float()
    torch.testing.assert_close(staged_bfloat16(32, 32, 32)(x, b), expected, rtol=0, atol=0,
                               equal_nan=True)


@T.prim_func
def swap_bfloat16_ends(X: T.Tensor((8,), "bfloat16")):
    with T.Kernel(1):
        t = T.alloc_shared((8,), "bfloat16")
        T.copy(X, t)
        first = t[0]  # kept: t[0] is overwritten before `first` is used
        t[0] = t[7]
        t[7] = first
        T.copy(t, X)


def test_a_named_bfloat16_element_builds_and_keeps_its_value():
    # TVM's bfloat16 legalisation did not rewrite the load inside the binding: "Load/Store of
    # buffer t occurred before its declaration" (the CPU now holds it in a float32 local)
    x = torch.arange(8.0).bfloat16()
    tilewright.compile(swap_bfloat16_ends, target="cpu")(x)
    assert x.tolist() == [7.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0]


@tilewright.jit(out_idx=[-1], target="cpu")
def atomic_sum(dtype, tile):
    @T.prim_func
    def main(X: T.Tensor((6, 8), dtype), Z: T.Tensor((2, 4), dtype)):
        with T.Kernel(2, 3, threads=128) as (bx, by):
            x = T.alloc_fragment((2, 4), dtype)
            T.copy(X[by * 2, bx * 4], x)
            if tile:
                T.atomic_add(Z[0, 0], x)
            else:
                for i, j in T.Parallel(2, 4):
                    T.atomic_add(Z[i, j], x[i, j])
    return main


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("tile", [True, False], ids=["tile", "element"])
def test_atomic_add_of_8_and_16_bit_integers(dtype, tile):
    """The runtime had no tw_atomic_add_int8 (nor of other 8- and 16-bit integers): loading
    the kernel killed the process with 'undefined symbol' (fuzzer, seed 1)."""
    x = torch.randint(0, 20, (6, 8)).to(getattr(torch, dtype))
    want = x.long().reshape(3, 2, 2, 4).sum(dim=(0, 2))
    torch.testing.assert_close(atomic_sum(dtype, tile)(x).long(), want)


def test_atomic_add_of_float8_is_refused():
    with pytest.raises(tilewright.KernelError, match="atomic_add into float8_e4m3fn"):
        atomic_sum("float8_e4m3fn", True)


SELECTIONS = {  # an operation on a T.if_then_else with an operation in a branch
    "times": (lambda x, c: T.if_then_else(c, x, x + x) * T.bfloat16(2),
              lambda x: torch.where(x < 0, x, x + x) * 2),
    "plus_abs": (lambda x, c: T.if_then_else(c, x, T.abs(x)) + x,
                 lambda x: torch.where(x < 0, x, x.abs()) + x),
}


@tilewright.jit(out_idx=[-1], target="cpu")
def bfloat16_selection(name):
    expr = SELECTIONS[name][0]

    @T.prim_func
    def main(X: T.Tensor((4, 8), "bfloat16"), Y: T.Tensor((4, 8), "bfloat16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((4, 8), "bfloat16")
            T.copy(X[0, 0], x)
            y = T.alloc_fragment((4, 8), "bfloat16")
            for i, j in T.Parallel(4, 8):
                y[i, j] = expr(x[i, j], x[i, j] < T.bfloat16(0))
            T.copy(y, Y[0, 0])
    return main


@pytest.mark.parametrize("name", SELECTIONS)
def test_an_operation_on_a_bfloat16_selection(name):
    """A bfloat16 operation in a branch of a T.if_then_else that is an operand failed TVM's
    build ('Load/Store of buffer x occurred before its declaration'; fuzzer, seed 2)."""
    x = torch.randn(4, 8).to(torch.bfloat16)
    torch.testing.assert_close(bfloat16_selection(name)(x), SELECTIONS[name][1](x))


@tilewright.jit(out_idx=[-1], target="cpu")
def bfloat16_row_reduce(kind):
    op = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor((4, 32), "bfloat16"), R: T.Tensor((4,), "bfloat16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            x = T.alloc_fragment((4, 32), "bfloat16")
            T.copy(X[0, 0], x)
            r = T.alloc_fragment((4,), "bfloat16")
            op(x, r, dim=1)
            T.copy(r, R[0])
    return main


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_a_vectorised_bfloat16_reduction_keeps_every_lane(kind):
    """The per-lane partial results' rounding bindings went through one local element in the
    vectorised lane loop: every lane got the last lane's value (a row of 32 summed to 45.75
    instead of -0.89; fuzzer, seed 5)."""
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    got = bfloat16_row_reduce(kind)(x)
    if kind == "max":
        torch.testing.assert_close(got, x.amax(dim=1), rtol=0, atol=0)
    else:  # rounded to bfloat16 after each addition, in another order than torch's
        torch.testing.assert_close(got.float(), x.float().sum(dim=1), rtol=0.02, atol=0.1)


@tilewright.jit(out_idx=[-1], target="cpu")
def division_of_a_division(n, inner, outer):
    @T.prim_func
    def main(X: T.Tensor((1, n), "int32"), Y: T.Tensor((1, n), "int32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            t1 = T.alloc_fragment((1, n), "int32")
            T.copy(X[by, bx], t1)
            for i, j in T.Parallel(1, n):
                if by + i < 1 and bx + j < n:
                    Y[by + i, bx + j] = t1[i, j] + outer(inner(t1[i, j], T.int32(-1)),
                                                         T.abs(t1[i, j]) + T.int32(1))
    return main


FLOOR = {"//": (lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="floor")),
         "%": (lambda a, b: a % b, torch.remainder)}


@pytest.mark.parametrize("n", [1, 16])
@pytest.mark.parametrize("inner", FLOOR)
@pytest.mark.parametrize("outer", FLOOR)
def test_a_division_of_a_division(n, inner, outer):
    # TVM's LowerIntrin binds the remainder of a division by a divisor of unknown sign (rmod)
    # in the expression, and its LLVM codegen bound the inner division's binding twice
    # ("Binding of variable rmod as I.Range(0, 1) conflicts with previous binding", seed 308)
    kernel = division_of_a_division(n, FLOOR[inner][0], FLOOR[outer][0])
    x = torch.arange(-40, 40, dtype=torch.int32).reshape(-1, 1).expand(-1, n).contiguous()
    ys = torch.cat([kernel(row[None]) for row in x])
    torch_inner, torch_outer = FLOOR[inner][1], FLOOR[outer][1]
    expected = x + torch_outer(torch_inner(x, torch.tensor(-1, dtype=torch.int32)), x.abs() + 1)
    torch.testing.assert_close(ys, expected)


def vector_division_of_a_division(dtype, inner, outer):
    @T.prim_func
    def main(X: T.Tensor((8, 16), dtype), Y: T.Tensor((8, 16), dtype)):
        with T.Kernel(1, threads=128) as bx:
            t = T.alloc_fragment((8, 16), dtype)
            T.copy(X[0, 0], t)
            s = T.alloc_shared((8, 16), dtype)
            for i, j in T.Parallel(8, 16):
                s[i, j] = outer(t[i, j] * inner(T.cast(j - 6, dtype), T.cast(-7, dtype)),
                                T.cast(-4, dtype))
            T.copy(s, Y[0, 0])
    return main


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("inner", FLOOR)
@pytest.mark.parametrize("outer", FLOOR)
def test_a_vectorised_division_of_a_division_by_negative_constants(dtype, inner, outer):
    # seed 2 of the fuzzer's atomics and vectors: CSE bound the inner division's correction,
    # a vector comparison, and LowerIntrin's bound of it stopped the build ("IntImm can only
    # take scalar, but boolx8 was supplied")
    x = (torch.arange(128).reshape(8, 16) % 21 - 10).to(getattr(torch, dtype))  # no overflow
    kernel = tilewright.compile(vector_division_of_a_division(dtype, FLOOR[inner][0],
                                                              FLOOR[outer][0]),
                                out_idx=[-1], target="cpu")
    j = torch.arange(16, dtype=torch.int64) - 6
    expected = FLOOR[outer][1](x.long() * FLOOR[inner][1](j, torch.tensor(-7)), torch.tensor(-4))
    assert torch.equal(kernel(x).long(), expected)


def unpacked_index(M, N):
    @T.prim_func
    def main(Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            t = T.alloc_fragment((M, N), "float32")
            for i, j in T.Parallel(M, N):
                t[i, j] = T.cast(T.unpack(T.cast(i + j, "int32"), j % 8, 4), "float32")
            T.copy(t, Y[0, 0])
    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 8), (16, 8)])
def test_fields_of_an_index_unpacked(target, shape):
    # seed 409: in a loop of one iteration TVM folded the operand of the unpack's reinterpret
    # to 0, which its LLVM code generator takes for a null pointer ("A zero reinterpret
    # shortcut requires pointer result type")
    kernel = tilewright.compile(unpacked_index(*shape), out_idx=[-1], target=target)
    i, j = torch.arange(shape[0])[:, None], torch.arange(shape[1])[None, :]
    torch.testing.assert_close(kernel(), (((i + j) >> (4 * (j % 8))) & 15).float())


def reinterpreted_index(source, dtype, offset):
    @T.prim_func
    def main(Y: T.Tensor((1, 1), dtype)):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            t = T.alloc_fragment((1, 1), dtype)
            for i, j in T.Parallel(1, 1):
                t[i, j] = T.reinterpret(T.cast(bx + i + j + offset, source), dtype)
            T.copy(t, Y[0, 0])
    return main


REINTERPRETS = [("int8", "uint8"), ("uint8", "int8"), ("int16", "uint16"), ("int16", "float16"),
                ("int32", "uint32"), ("uint32", "int32"), ("int32", "float32"),
                ("uint32", "float32"), ("int64", "uint64"), ("uint64", "int64"),
                ("int64", "float64"), ("uint64", "float64")]


@pytest.mark.parametrize("target", ["cpu", "interp"])
@pytest.mark.parametrize("source,dtype,offset", [
    (source, dtype, offset) for source, dtype in REINTERPRETS for offset in (0, 5, -3)
    if offset >= 0 or not source.startswith("uint")])  # no negative value of an unsigned type
def test_a_constant_reinterpreted(source, dtype, offset, target):
    # every operand is a constant once TVM knows the one-block grid and the loops of one
    # iteration; a zero one stopped the CPU's build
    kernel = tilewright.compile(reinterpreted_index(source, dtype, offset), out_idx=[-1],
                                target=target)
    want = torch.tensor([[offset]], dtype=getattr(torch, source)).view(getattr(torch, dtype))
    assert kernel().view(torch.uint8).tolist() == want.view(torch.uint8).tolist()


M_SYM, N_SYM = T.symbolic("m"), T.dynamic("n")


@tilewright.jit(out_idx=[-1], target="cpu")
def min_of_a_conversion():
    # the NaN rule of T.min bound its operand T.cast(j - 2, bfloat16) in a Let, which TVM's
    # bfloat16 legalisation left to LLVM's code generator: the process died (fuzzer, seed 0);
    # the CPU makes the rule one llvm.minnum call
    @T.prim_func
    def main(X: T.Tensor((M_SYM, N_SYM), "bfloat16"), Y: T.Tensor((M_SYM, N_SYM), "bfloat16")):
        with T.Kernel(T.ceildiv(N_SYM, 2), T.ceildiv(M_SYM, 8), threads=128) as (bx, by):
            for i, j in T.Parallel(8, 2):
                if by * 8 + i < M_SYM and bx * 2 + j < N_SYM:
                    Y[by * 8 + i, bx * 2 + j] = T.min(X[by * 8 + i, (bx * 2 + j - 2) % N_SYM],
                                                      T.cast(bx * 2 + j - 2, "bfloat16"))
    return main


def test_a_min_of_a_bfloat16_conversion():
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(3)).bfloat16()
    x[0, 1] = float("nan")
    col = torch.arange(6)
    want = torch.fmin(x[:, (col - 2) % 6], (col - 2).bfloat16().expand(8, 6))
    torch.testing.assert_close(min_of_a_conversion()(x), want)


@tilewright.jit(out_idx=[-1], target="cpu")
def clz_of_zeros(dtype, n):
    # T.clz of elements of a tile filled with 0 (every one, or every other one, the rest read
    # from an input: a vector count over a mix of known zeros and unknown values)
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((2, n), dtype)):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_shared((n,), dtype)
            T.fill(t, 0)
            for i in T.Parallel(n):
                Y[0, i] = T.clz(t[i])
            for i in T.Parallel(n):
                if i % 2 == 1:
                    t[i] = X[i]
            for i in T.Parallel(n):
                Y[1, i] = T.clz(t[i])
    return main


@pytest.mark.parametrize("n", [1, 16])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64"])
def test_clz_of_a_known_zero(dtype, n):
    # TVM's LLVM lowering of T.clz is llvm.ctlz with is_zero_poison set: the count of an
    # element of a tile filled with 0 stored whatever the output held, not 64 (int64; fuzzer,
    # seed 41)
    bits = int(dtype.lstrip("uint"))
    x = torch.tensor([1 << (k % (bits - 1)) for k in range(n)]).to(getattr(torch, dtype))
    y = clz_of_zeros(dtype, n)(x)
    counts = [bits - 1 - k % (bits - 1) if k % 2 else bits for k in range(n)]
    assert y.tolist() == [[bits] * n, counts]


@tilewright.jit(out_idx=[-1], target="cpu")
def tanh_of_a_lane(add: bool):
    # T.tanh (whose lowering binds its operand) of a lane of a bfloat16 vector built from a
    # tensor's elements, the vector added to itself or not
    @T.prim_func
    def main(X: T.Tensor((4,), "bfloat16"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(4):
                v = T.bfloat16x2(X[i], X[3 - i])
                Y[i] = T.cast(T.tanh(T.extract_lane(v + v if add else v, 1)), "float32")
    return main


@pytest.mark.parametrize("add", [False, True])
def test_tanh_of_a_lane_of_a_bfloat16_vector(add):
    # the conversion of the bound lane to float32 was left to TVM's bfloat16 legalisation,
    # which does not reach into a Let: "BF16 needs to be storaged lowered first" (fuzzer,
    # seed 43)
    x = torch.tensor([0.75, -1.5, 0.125, 2.0], dtype=torch.bfloat16)
    lane = x.flip(0) * (2 if add else 1)
    want = torch.tanh(lane.float()).bfloat16().float()
    torch.testing.assert_close(tanh_of_a_lane(add)(x), want, rtol=2 ** -7, atol=0)
