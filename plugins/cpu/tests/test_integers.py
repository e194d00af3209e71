"""Unsigned integer arithmetic wraps modulo ``2**bits`` on the CPU backend, as torch computes it
(the exact result in int64, then wrapped): every operation on ``uint8``, ``uint16``, ``uint32``
and ``uint64`` values that wrap below zero, values the compiler knows the bounds of (from block
and thread indices) and values it does not (a tensor's), conversions to and from them, and
values TVM knows when it builds a one-block grid. TVM's LLVM code generator marked uint32 and
uint64 arithmetic "no unsigned wrap" (poison where it wrapped), its LowerIntrin divided an
unsigned value it bounded below 0 as a signed one, and its constant folding stopped on 0U - 1U
and Cast(uint8, -2); and it stopped on the int32 bounds of an integer converted to float16
inside a bound (Let) value."""

import operator

import pytest
import tilewright
import tilewright.language as T
import torch

N = 8  # values: index = bx * 4 + j of a (2, 4) grid of blocks and threads

# operands, each (tile expression of the index and the input x, Python value of the index and x)
OPERANDS = {
    "u": (lambda i, x, dt: T.cast(i, dt) - T.cast(3, dt), lambda i, x: i - 3),
    "v": (lambda i, x, dt: T.cast(5, dt) - T.cast(i, dt), lambda i, x: 5 - i),
    "w": (lambda i, x, dt: T.cast(i, dt) - T.cast(9, dt), lambda i, x: i - 9),  # never 0
    "x": (lambda i, x, dt: x, lambda i, x: x),  # a tensor's value, never 0
    "3": (lambda i, x, dt: T.cast(3, dt), lambda i, x: 3),
    "s": (lambda i, x, dt: T.cast(i % 4, dt), lambda i, x: i % 4),  # a shift
}
GENERAL = [("u", "v"), ("u", "3"), ("3", "u"), ("x", "u"), ("u", "x")]
DIVISORS = [("u", "w"), ("u", "3"), ("v", "w"), ("3", "w"), ("x", "w"), ("u", "x")]
SHIFTS = [("u", "3"), ("v", "s"), ("x", "s"), ("w", "s")]

# name: (tile operation, Python operation on the wrapped operands, operand pairs)
BINARY = {
    "add": (operator.add, operator.add, GENERAL),
    "sub": (operator.sub, operator.sub, GENERAL),
    "mul": (operator.mul, operator.mul, GENERAL),
    "floordiv": (operator.floordiv, operator.floordiv, DIVISORS),
    "floormod": (operator.mod, operator.mod, DIVISORS),
    "min": (T.min, min, GENERAL),
    "max": (T.max, max, GENERAL),
    "lshift": (operator.lshift, operator.lshift, SHIFTS),
    "rshift": (operator.rshift, operator.rshift, SHIFTS),
    "and": (operator.and_, operator.and_, GENERAL),
    "or": (operator.or_, operator.or_, GENERAL),
    "xor": (operator.xor, operator.xor, GENERAL),
    **{name: (op, op, GENERAL) for name, op in (
        ("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge),
        ("eq", operator.eq), ("ne", operator.ne))},
}
DTYPES = ["uint8", "uint16", "uint32"]


@tilewright.jit(out_idx=[-1], target="cpu")
def binary(dtype, name):
    op, _, pairs = BINARY[name]
    rows = len(pairs)

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((rows, N), dtype)):
        with T.Kernel(2, threads=128) as bx:
            for j in T.Parallel(4):
                i = bx * 4 + j
                for r, (a, b) in enumerate(pairs):
                    Y[r, i] = T.cast(op(OPERANDS[a][0](i, X[i], dtype),
                                        OPERANDS[b][0](i, X[i], dtype)), dtype)
    return main


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unsigned_binary_operation(dtype, name):
    _, op, pairs = BINARY[name]
    bits = int(dtype[4:])
    x = torch.randint(1, 2 ** bits, (N,), generator=torch.Generator().manual_seed(bits))
    got = binary(dtype, name)(x.to(getattr(torch, dtype))).long() % 2 ** bits
    want = torch.tensor([[int(op(OPERANDS[a][1](i, v) % 2 ** bits,
                                 OPERANDS[b][1](i, v) % 2 ** bits)) % 2 ** bits
                          for i, v in enumerate(x.tolist())] for a, b in pairs])
    assert got.tolist() == want.tolist(), [f"{a} {name} {b}" for (a, b), g, w in
                                           zip(pairs, got.tolist(), want.tolist()) if g != w]


# the values converted: the wrapping ones above, and values of signed types converted to the
# unsigned type (negative ones included)
SOURCES = {
    **{name: OPERANDS[name] for name in ("u", "v", "x")},
    "int32": (lambda i, x, dt: T.cast(i - 3, dt), lambda i, x: i - 3),
    "int64": (lambda i, x, dt: T.cast(T.cast(i - 3, "int64"), dt), lambda i, x: i - 3),
}
TARGETS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "float32"]


def converted(value: int, dtype: str) -> float:
    """``value`` converted to ``dtype`` as torch converts it."""
    if dtype.startswith("float"):
        return torch.tensor(value, dtype=torch.float64).to(getattr(torch, dtype)).item()
    bits = int(dtype.lstrip("uint"))
    value %= 2 ** bits
    return value - 2 ** bits if dtype.startswith("int") and value >= 2 ** (bits - 1) else value


@tilewright.jit(out_idx=[-1], target="cpu")
def conversion(dtype, target):
    out = "float32" if target.startswith("float") else "int64"

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((len(SOURCES), N), out)):
        with T.Kernel(2, threads=128) as bx:
            for j in T.Parallel(4):
                i = bx * 4 + j
                for r, (source, _) in enumerate(SOURCES.values()):
                    Y[r, i] = T.cast(T.cast(source(i, X[i], dtype), target), out)
    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unsigned_conversion(dtype, target):
    bits = int(dtype[4:])
    x = torch.randint(1, 2 ** bits, (N,), generator=torch.Generator().manual_seed(bits))
    got = conversion(dtype, target)(x.to(getattr(torch, dtype)))
    want = [[converted(value(i, v) % 2 ** bits, target) for i, v in enumerate(x.tolist())]
            for _, value in SOURCES.values()]
    assert got.tolist() == want, [name for name, g, w in zip(SOURCES, got.tolist(), want)
                                  if g != w]


@tilewright.jit(out_idx=[-1], target="cpu")
def inverted(dtype):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((3, N), dtype)):
        with T.Kernel(2, threads=128) as bx:
            for j in T.Parallel(4):
                i = bx * 4 + j
                for r, operand in enumerate("uvx"):
                    Y[r, i] = ~OPERANDS[operand][0](i, X[i], dtype)
    return main


@pytest.mark.parametrize("dtype", DTYPES)
def test_unsigned_bitwise_not(dtype):
    bits = int(dtype[4:])
    x = torch.randint(1, 2 ** bits, (N,), generator=torch.Generator().manual_seed(bits))
    got = inverted(dtype)(x.to(getattr(torch, dtype))).long() % 2 ** bits
    want = [[~(OPERANDS[o][1](i, v) % 2 ** bits) % 2 ** bits
             for i, v in enumerate(x.tolist())] for o in "uvx"]
    assert got.tolist() == want


# expressions whose value TVM knows when it builds a one-block grid (bx = 0), each with its
# value (of the expression's type, wrapped); TVM's constant folding stopped on some, and
# computed others as if signed
KNOWN = {
    "uint32 (bx - 1) // 3": (lambda bx, j: (T.cast(bx, "uint32") - T.cast(1, "uint32")) //
                             T.cast(3, "uint32"), (2 ** 32 - 1) // 3),
    "uint16 (bx - 1) % 7": (lambda bx, j: (T.cast(bx, "uint16") - T.cast(1, "uint16")) %
                            T.cast(7, "uint16"), (2 ** 16 - 1) % 7),
    "uint8(int64(bx + j - 2))": (lambda bx, j: T.cast(T.cast(bx + j - 2, "int64"), "uint8"),
                                 254),
    "uint32(bx - 3) * 5": (lambda bx, j: T.cast(bx - 3, "uint32") * T.cast(5, "uint32"),
                           (-15) % 2 ** 32),
    "uint8 (bx - 1 < 1)": (lambda bx, j: T.cast(T.cast(bx, "uint8") - T.cast(1, "uint8") <
                                                T.cast(1, "uint8"), "uint8"), 0),
    # uint64 values read back as int64: the same bits
    "uint64 (bx - 1) // 3": (lambda bx, j: (T.cast(bx, "uint64") - T.cast(1, "uint64")) //
                             T.cast(3, "uint64"), (2 ** 64 - 1) // 3),
    "uint64(bx + j) - 1": (lambda bx, j: T.cast(bx + j, "uint64") - T.cast(1, "uint64"), -1),
    "uint64(bx + 3) * (bx - 5)": (lambda bx, j: T.cast(bx + 3, "uint64") *
                                  (T.cast(bx, "uint64") - T.cast(5, "uint64")), -15),
    "uint64 (bx - 1 < 1)": (lambda bx, j: T.cast(T.cast(bx, "uint64") - T.cast(1, "uint64") <
                                                 T.cast(1, "uint64"), "uint64"), 0),
    "uint64(bx + j - 3)": (lambda bx, j: T.cast(bx + j - 3, "uint64"), -3),
    "uint64(int64(bx - 3))": (lambda bx, j: T.cast(T.cast(bx - 3, "int64"), "uint64"), -3),
}


@tilewright.jit(out_idx=[-1], target="cpu")
def known(name):
    expr = KNOWN[name][0]
    dtype = name.split(maxsplit=1)[0].split("(")[0]

    @T.prim_func
    def main(Y: T.Tensor((1, 1), "int64")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            y = T.alloc_fragment((1, 1), "int64")
            for i, j in T.Parallel(1, 1):
                y[i, j] = T.cast(T.cast(expr(bx, j), dtype), "int64")
            T.copy(y, Y)
    return main


@pytest.mark.parametrize("name", KNOWN)
def test_unsigned_values_known_when_building(name):
    assert known(name)().tolist() == [[KNOWN[name][1]]]


def uint64_operands(seed: int) -> list[int]:
    """Eight ``uint64`` values from the whole range (half of them from 2**63 on)."""
    gen = torch.Generator().manual_seed(seed)
    high = torch.randint(0, 2 ** 32, (N,), generator=gen).tolist()
    low = torch.randint(1, 2 ** 32, (N,), generator=gen).tolist()
    return [h << 32 | v for h, v in zip(high, low)]


def as_uint64(values: list[int]) -> torch.Tensor:
    return torch.tensor([v - 2 ** 64 if v >= 2 ** 63 else v for v in values],
                        dtype=torch.int64).view(torch.uint64)


@pytest.mark.parametrize("name", BINARY)
def test_uint64_binary_operation(name):
    # TVM's LLVM codegen marks uint64 +, - and * "no unsigned wrap": a wrapping one was poison
    # and LLVM optimised its uses as if it had not wrapped
    _, op, pairs = BINARY[name]
    x = uint64_operands(64)
    got = binary("uint64", name)(as_uint64(x)).view(torch.int64).tolist()
    want = [[int(op(OPERANDS[a][1](i, v) % 2 ** 64, OPERANDS[b][1](i, v) % 2 ** 64)) % 2 ** 64
             for i, v in enumerate(x)] for a, b in pairs]
    assert [[g % 2 ** 64 for g in row] for row in got] == want, \
        [f"{a} {name} {b}" for (a, b), g, w in zip(pairs, got, want)
         if [v % 2 ** 64 for v in g] != w]


@tilewright.jit(out_idx=[-1], target="cpu")
def uint64_hash(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "uint64"), Y: T.Tensor((n,), "uint64")):
        with T.Kernel(1, threads=128) as bx:
            h = T.alloc_fragment((n,), "uint64")
            T.copy(X, h)
            for _ in T.serial(3):
                for j in T.Parallel(n):
                    h[j] = (h[j] ^ (h[j] >> T.uint64(29))) * T.uint64(0xBF58476D1CE4E5B9) + \
                        T.uint64(0x9E3779B97F4A7C15)
            for j in T.Parallel(n):
                Y[j] = h[j] - X[j]
    return main


def test_uint64_multiply_add_chain_wraps():
    # constants from 2**63 on, and every operation wraps
    x = uint64_operands(7)
    want = []
    for v in x:
        h = v
        for _ in range(3):
            h = ((h ^ (h >> 29)) * 0xBF58476D1CE4E5B9 + 0x9E3779B97F4A7C15) % 2 ** 64
        want.append((h - v) % 2 ** 64)
    got = uint64_hash(N)(as_uint64(x)).view(torch.int64).tolist()
    assert [g % 2 ** 64 for g in got] == want


@tilewright.jit(out_idx=[-1], target="cpu")
def float16_tanh_of_saturated():
    @T.prim_func
    def main(X: T.Tensor((1, 2), "float16"), Y: T.Tensor((1, 2), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            y = T.alloc_fragment((1, 2), "float16")
            for i, j in T.Parallel(1, 2):
                # a saturated conversion to int32 converted back to float16, bound by tanh
                y[i, j] = T.tanh(T.cast(T.cast(T.cast(bx * 2 + j, "float16"), "int32"),
                                        "float16") + X[i, j])
            T.copy(y, Y)
    return main


def test_a_float16_of_a_saturated_int32_in_tanh():
    # TVM's LLVM codegen converted the bounds of the tanh's bound argument to float16 and
    # stopped on the saturated int32's ("Literal value -2.14748e+09 exceeds minimum of
    # float16", fuzzer seed 406)
    x = torch.randn(1, 2).half()
    torch.testing.assert_close(float16_tanh_of_saturated()(x),
                               torch.tanh(torch.arange(2).half() + x))


@tilewright.jit(out_idx=[-1], target="cpu")
def float16_of(n, dtype):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for j in T.Parallel(n):
                Y[j] = T.cast(X[j], "float16")
    return main


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint16", "uint32"])
def test_integers_converted_to_float16(dtype):
    """An integer converted to float16 rounds to the nearest float16, infinity from 65520
    on (the conversion clamps the value into float16's range first)."""
    edges = [0, 1, 2047, 2049, 65503, 65504, 65505, 65519, 65520, 65521, 70000, 2 ** 16 - 1]
    if dtype != "uint16":
        edges += [2 ** 31 - 1]
    if dtype.startswith("int"):
        edges += [-v for v in edges] + [-2 ** 31]
    ints = torch.tensor(edges, dtype=torch.int64).to(getattr(torch, dtype))
    got = float16_of(len(edges), dtype)(ints)
    assert got.tolist() == ints.long().to(torch.float16).tolist()
