"""Rows for scalar expressions inside ``T.Parallel``: every math function, float and integer
arithmetic (``//``, ``%``, ``>>`` and comparisons with negative operands), ``T.if_then_else``,
casts between every pair of dtypes, and the dtype limits.

Each row computes many results in one kernel (one output per function or target dtype), so a
backend compiles a few kernels per dtype instead of one per name.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T

from .model import FLOAT8, FLOATS, INTEGERS, SIGNED, TORCH_CASTS, Kernel, eager, rand
from .tiles import BASE

# name -> (uses the positive input, kernel expression, torch reference)
UNARY = {
    "exp": (False, T.exp, lambda x: x.exp()),
    "exp2": (False, T.exp2, lambda x: x.exp2()),
    "log": (True, T.log, lambda x: x.log()),
    "log2": (True, T.log2, lambda x: x.log2()),
    "sqrt": (True, T.sqrt, lambda x: x.sqrt()),
    "rsqrt": (True, T.rsqrt, lambda x: x.rsqrt()),
    "tanh": (False, T.tanh, lambda x: x.tanh()),
    "sigmoid": (False, T.sigmoid, lambda x: x.sigmoid()),
    "sin": (False, T.sin, lambda x: x.sin()),
    "cos": (False, T.cos, lambda x: x.cos()),
    "floor": (False, T.floor, lambda x: x.floor()),
    "ceil": (False, T.ceil, lambda x: x.ceil()),
    "round": (False, T.round, lambda x: x.round()),  # halves to even
    "trunc": (False, T.trunc, lambda x: x.trunc()),
    "abs": (False, T.abs, lambda x: x.abs()),
}

# TileLang's further math functions of C's libm (backend feature ``extended_math``): name ->
# (kernel expression of x (|x| in [0.05, 0.9]) and p (in [1, 4]), torch reference)
LIBM = {
    "exp10": (lambda x, p: T.exp10(x), lambda x, p: torch_pow(10.0, x)),
    "log10": (lambda x, p: T.log10(p), lambda x, p: p.log10()),
    "log1p": (lambda x, p: T.log1p(x), lambda x, p: x.log1p()),
    "tan": (lambda x, p: T.tan(x), lambda x, p: x.tan()),
    "sinh": (lambda x, p: T.sinh(x), lambda x, p: x.sinh()),
    "cosh": (lambda x, p: T.cosh(x), lambda x, p: x.cosh()),
    "asin": (lambda x, p: T.asin(x), lambda x, p: x.asin()),
    "acos": (lambda x, p: T.acos(x), lambda x, p: x.acos()),
    "atan": (lambda x, p: T.atan(x), lambda x, p: x.atan()),
    "asinh": (lambda x, p: T.asinh(x), lambda x, p: x.asinh()),
    "acosh": (lambda x, p: T.acosh(p), lambda x, p: p.acosh()),
    "atanh": (lambda x, p: T.atanh(x), lambda x, p: x.atanh()),
    "erf": (lambda x, p: T.erf(x), lambda x, p: x.erf()),
    "nearbyint": (lambda x, p: T.nearbyint(p), lambda x, p: p.round()),  # halves to even
    "fabs": (lambda x, p: T.fabs(x), lambda x, p: x.abs()),
    "pow": (lambda x, p: T.pow(p, x), lambda x, p: p.pow(x)),
    "fmod": (lambda x, p: T.fmod(p, x), lambda x, p: p.fmod(x)),
    "atan2": (lambda x, p: T.atan2(x, p), lambda x, p: x.atan2(p)),
    "hypot": (lambda x, p: T.hypot(x, p), lambda x, p: x.hypot(p)),
    "copysign": (lambda x, p: T.copysign(p, x), lambda x, p: p.copysign(x)),
}


def torch_pow(base: float, x):
    return x.new_full(x.shape, base).pow(x)


def _libm_inputs(torch, gen, dtype, M, N):
    """x with |x| in [0.05, 0.9] of either sign (the domain of asin, atanh ...; never 0, the
    divisor of fmod), p in [1, 4]."""
    magnitude = rand(torch, gen, (M, N), "float32", 0.05, 0.9)
    sign = rand(torch, gen, (M, N), "int32", 0, 1) * 2 - 1
    return [(magnitude * sign).to(getattr(torch, dtype)),
            rand(torch, gen, (M, N), dtype, 1.0, 4.0)]


# TileLang's fast-math functions: name -> (kernel expression of x (in [-1, 1]) and p (in
# [0.5, 2]), torch reference). FAST_MATH runs on every backend; FAST_LIBM's precise functions
# are libm's (backend feature ``extended_math``).
FAST_MATH = {
    "__exp": (lambda x, p: T.__exp(x), lambda x, p: x.exp()),
    "__log": (lambda x, p: T.__log(p), lambda x, p: p.log()),
    "__log2": (lambda x, p: T.__log2(p), lambda x, p: p.log2()),
    "__cos": (lambda x, p: T.__cos(x), lambda x, p: x.cos()),
    "__sin": (lambda x, p: T.__sin(x), lambda x, p: x.sin()),
}
FAST_LIBM = {
    "__exp10": (lambda x, p: T.__exp10(x), lambda x, p: torch_pow(10.0, x)),
    "__log10": (lambda x, p: T.__log10(p), lambda x, p: p.log10()),
    "__tan": (lambda x, p: T.__tan(x), lambda x, p: x.tan()),
}
# the error the fast-math rows allow beyond a rounding, relative and (outputs near 0: log near
# 1, sin near 0) absolute: 2^-17, above the bounds of CUDA's float32 intrinsics on these
# inputs (the programming guide's table: __expf 2 + floor(|1.173 x|) ulp, __exp10f
# 2 + floor(|2.97 x|) ulp, __logf / __sinf / __cosf 2^-21.41 absolute, __tanf from __sinf and
# __cosf)
FAST_MATH_ERROR = 2.0 ** -17


def _fast_inputs(torch, gen, dtype, M, N):
    return [rand(torch, gen, (M, N), dtype, -1.0, 1.0), rand(torch, gen, (M, N), dtype, 0.5, 2.0)]


# Float arithmetic: name -> (kernel expression of x, y (> 0), torch reference)
FLOAT_BINARY = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "sub": (lambda x, y: x - y, lambda x, y: x - y),
    "mul": (lambda x, y: x * y, lambda x, y: x * y),
    "div": (lambda x, y: x / y, lambda x, y: x / y),
    "neg": (lambda x, y: -x, lambda x, y: -x),
    "max": (T.max, lambda x, y: x.maximum(y)),
    "min": (T.min, lambda x, y: x.minimum(y)),
    "clamp": (lambda x, y: T.clamp(x, 2, 5), lambda x, y: x.clamp(2, 5)),
    "select_lt": (lambda x, y: T.if_then_else(x < y, x, y * 2), lambda x, y: (x < y) * x +
                  (x >= y) * y * 2),
    "select_ge_zero": (lambda x, y: T.if_then_else(x >= 0, y, -y), lambda x, y: (x >= 0) * y -
                       (x < 0) * y),
    "select_eq": (lambda x, y: T.if_then_else(x == x, 1.0, 0.0) + T.if_then_else(x != y, 1.0, 0.0),
                  lambda x, y: 1.0 + (x != y) * 1.0),
}

# The classes of a float: name -> (kernel expression of x, torch reference), 1 or 0; the
# inputs hold NaN and both infinities (_special_inputs).
FLOAT_CLASSES = {
    "isnan": (lambda x, y: T.if_then_else(T.isnan(x), 1.0, 0.0),
              lambda x, y: x.isnan().to(x.dtype)),
    "isinf": (lambda x, y: T.if_then_else(T.isinf(x), 1.0, 0.0),
              lambda x, y: x.isinf().to(x.dtype)),
    "isfinite": (lambda x, y: T.if_then_else(T.isfinite(x), 1.0, 0.0),
                 lambda x, y: x.isfinite().to(x.dtype)),
}


# Integer arithmetic that cannot overflow the narrowest dtype with operands in [-9, 9] (signed)
# or x in [8, 15], y in [0, 7] (unsigned).
INT_BINARY = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "sub": (lambda x, y: x - y, lambda x, y: x - y),
    "mul": (lambda x, y: x * y, lambda x, y: x * y),
    "max": (T.max, lambda x, y: x.maximum(y)),
    "min": (T.min, lambda x, y: x.minimum(y)),
    "abs": (lambda x, y: T.abs(x), lambda x, y: x.abs()),
    "and": (lambda x, y: x & y, lambda x, y: x & y),
    "or": (lambda x, y: x | y, lambda x, y: x | y),
    "xor": (lambda x, y: x ^ y, lambda x, y: x ^ y),
    "truncdiv": (lambda x, y: T.truncdiv(x, 3), lambda x, y: x.div(3, rounding_mode="trunc")),
    "truncmod": (lambda x, y: T.truncmod(x, 5), lambda x, y: x.fmod(5)),
    "bitwise": (lambda x, y: T.bitwise_xor(T.bitwise_and(x, y), T.bitwise_or(x, 3)),
                lambda x, y: (x & y) ^ (x | 3)),
    "bitwise_not": (lambda x, y: T.bitwise_not(x), lambda x, y: ~x),
    "shr": (lambda x, y: x >> 2, lambda x, y: x >> 2),  # arithmetic for negative x
    "shl": (lambda x, y: T.abs(x) << 2, lambda x, y: x.abs() << 2),
    "clamp": (lambda x, y: T.clamp(x, 2, 5), lambda x, y: x.clamp(2, 5)),
    "select_lt": (lambda x, y: T.if_then_else(x < y, x, y), lambda x, y: x.minimum(y)),
    "select_le": (lambda x, y: T.if_then_else(x <= 3, 1, 0), lambda x, y: (x <= 3).long()),
    "select_gt": (lambda x, y: T.if_then_else(x > y, 1, 2), lambda x, y: 2 - (x > y).long()),
    "select_eq": (lambda x, y: T.if_then_else(x == y, 3, 0) + T.if_then_else(x != y, 0, 1),
                  lambda x, y: (x == y).long() * 4),
}

# Floor division and modulo: Python's rules (the quotient rounds toward minus infinity, the
# remainder takes the divisor's sign), for every sign of both operands.
FLOORDIV = {
    "floordiv": (lambda x, y, c: x // y, lambda x, y, c: x.div(y, rounding_mode="floor")),
    "floormod": (lambda x, y, c: x % y, lambda x, y, c: x.remainder(y)),
    "floordiv_const": (lambda x, y, c: x // 4, lambda x, y, c: x.div(4, rounding_mode="floor")),
    "floormod_const": (lambda x, y, c: x % 3, lambda x, y, c: x.remainder(3)),
    "floordiv_neg_const": (lambda x, y, c: x // -4,
                           lambda x, y, c: x.div(-4, rounding_mode="floor")),
    "floormod_neg_const": (lambda x, y, c: x % -3, lambda x, y, c: x.remainder(-3)),
    "T.floordiv": (lambda x, y, c: T.floordiv(x, y),
                   lambda x, y, c: x.div(y, rounding_mode="floor")),
    "T.floormod": (lambda x, y, c: T.floormod(x, y), lambda x, y, c: x.remainder(y)),
    # an index with negative intermediate values: column (c - 3) mod N, a rotation
    "rotate": (lambda x, y, c: c, lambda x, y, c: c),
}


def _elementwise(name, table, dtype, M, N, bm=4, bn=8):
    """A kernel writing ``table[k](x, y)`` to ``Y[k]`` for every entry, with tiles loaded to
    fragments and partial tiles guarded by T.copy."""
    fns = [expr for expr, _ in table.values()]
    F = len(fns)

    @T.prim_func
    def kernel(X: T.Tensor((M, N), dtype), P: T.Tensor((M, N), dtype),
               Y: T.Tensor((F, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), dtype)
            p = T.alloc_fragment((bm, bn), dtype)
            y = T.alloc_fragment((bm, bn), dtype)
            T.copy(X[by * bm, bx * bn], x)
            T.copy(P[by * bm, bx * bn], p)
            for k, fn in enumerate(fns):  # a Python loop: one T.Parallel nest per function
                for i, j in T.Parallel(bm, bn):
                    y[i, j] = fn(x[i, j], p[i, j])
                T.copy(y, Y[k, by * bm, bx * bn])

    kernel.__name__ = name
    return kernel


def _unary_table():
    return {n: ((lambda x, p, _f=fn, _pos=pos: _f(p if _pos else x)), ref)
            for n, (pos, fn, ref) in UNARY.items()}


def _unary_ref(x, p):
    return [_stack([ref(p if pos else x) for pos, _, ref in UNARY.values()])]


def _stack(values):
    import torch

    return torch.stack(values)

# T.max / T.min with a NaN operand on either side: the NaN ignored (IEEE 754's maxNum /
# minNum, torch's fmax / fmin; a NaN only where both are), whatever the operands' order; an
# operand that is an expression (computed once)
NAN_MIN_MAX = {
    "max": (T.max, lambda x, y: x.fmax(y)),
    "max_swapped": (lambda x, y: T.max(y, x), lambda x, y: y.fmax(x)),
    "min": (T.min, lambda x, y: x.fmin(y)),
    "min_swapped": (lambda x, y: T.min(y, x), lambda x, y: y.fmin(x)),
    "max_of_sum": (lambda x, y: T.max(x + y, y * 2), lambda x, y: (x + y).fmax(y * 2)),
}


def _nan_operands(torch, gen, dtype, M, N):
    """Two operands with NaNs among their elements, some at the same place in both."""
    x, y = rand(torch, gen, (M, N), dtype), rand(torch, gen, (M, N), dtype)
    x.view(-1)[::3] = float("nan")
    y.view(-1)[::4] = float("nan")
    return [x, y]


def _table_ref(table):
    return lambda x, p: [_stack([ref(x, p) for _, ref in table.values()])]


# float8 arithmetic and math functions: each row of FLOAT_BINARY and UNARY (one rounding
# each: a math function is its value rounded to the type; T.rsqrt and T.sigmoid are composed,
# each of their operations rounded) and chains of operations, each rounded to the case's type
# (the reference's ``r``): name -> (kernel expression of x, y (> 0), reference of x, y, r)
COMPOSED = {"rsqrt": lambda v, r: 1 / r(v.sqrt()),
            "sigmoid": lambda v, r: 1 / r(1 + r((-v).exp()))}
FLOAT8_ARITH = {
    **{name: (expr, lambda x, y, r, _ref=ref: _ref(x, y))
       for name, (expr, ref) in FLOAT_BINARY.items()},
    **{name: ((lambda x, y, _f=fn, _pos=pos: _f(y if _pos else x)),
              (lambda x, y, r, _n=name, _pos=pos, _ref=ref:
               COMPOSED[_n](y if _pos else x, r) if _n in COMPOSED else _ref(y if _pos else x)))
       for name, (pos, fn, ref) in UNARY.items()},
    "chain": (lambda x, y: (x * y + x) * y - x / y,
              lambda x, y, r: r(r(r(x * y) + x) * y) - r(x / y)),
    "math_chain": (lambda x, y: T.exp(x) * y + T.sqrt(y) - T.tanh(x * y),
                   lambda x, y, r: r(r(r(x.exp()) * y) + r(y.sqrt())) - r(r(x * y).tanh())),
}


def _float8_arith_ref(x, p, dtype):
    import torch

    fp8 = getattr(torch, dtype)

    def r(v):
        return v.to(fp8).double()

    return [_stack([r(ref(x, p, r)) for _, ref in FLOAT8_ARITH.values()])]


# Narrow-float expressions on global tensors in a vectorisable T.Parallel: float32 math of
# widened operands converted back (the common mixed-precision form), math and arithmetic in the
# narrow type itself, and both mixed. Each is the float32 computation rounded once to the type
# per narrow operation (CUDA's hexp & co.; ``r`` in the reference): name -> (kernel expression
# of x, y (> 0) and the dtype, reference of the float32 copies x, y and r). T.rsqrt and
# T.sigmoid of float32 are composed (1 / sqrt, 1 / (1 + exp(-x))), so is their reference.
def _wide(v):
    return T.cast(v, "float32")


NARROW_F32 = {
    "exp": (False, T.exp, lambda v: v.exp()),
    "exp2": (False, T.exp2, lambda v: v.exp2()),
    "log": (True, T.log, lambda v: v.log()),
    "sqrt": (True, T.sqrt, lambda v: v.sqrt()),
    "rsqrt": (True, T.rsqrt, lambda v: 1 / v.sqrt()),
    "tanh": (False, T.tanh, lambda v: v.tanh()),
    "sigmoid": (False, T.sigmoid, lambda v: 1 / (1 + (-v).exp())),
    "abs": (False, T.abs, lambda v: v.abs()),
}
NARROW_MATH = {
    **{f"cast_{name}": ((lambda x, y, d, _f=fn, _pos=pos: T.cast(_f(_wide(y if _pos else x)), d)),
                        (lambda x, y, r, _ref=ref, _pos=pos: r(_ref(y if _pos else x))))
       for name, (pos, fn, ref) in NARROW_F32.items()},
    "cast_exp_mul": (lambda x, y, d: T.cast(T.exp(_wide(x)) * _wide(y), d),
                     lambda x, y, r: r(x.exp() * y)),
    "cast_add": (lambda x, y, d: T.cast(_wide(x) + _wide(y), d), lambda x, y, r: r(x + y)),
    "cast_div": (lambda x, y, d: T.cast(_wide(x) / _wide(y), d), lambda x, y, r: r(x / y)),
    "cast_max": (lambda x, y, d: T.cast(T.max(_wide(x), _wide(y)), d),
                 lambda x, y, r: r(x.maximum(y))),
    "cast_min_exp": (lambda x, y, d: T.cast(T.min(T.exp(_wide(x)), _wide(y)), d),
                     lambda x, y, r: r(x.exp().minimum(y))),
    "cast_fma": (lambda x, y, d: T.cast(_wide(x) * _wide(y) + _wide(x), d),
                 lambda x, y, r: r(x * y + x)),
    "exp": (lambda x, y, d: T.exp(x), lambda x, y, r: r(x.exp())),
    "log": (lambda x, y, d: T.log(y), lambda x, y, r: r(y.log())),
    "tanh": (lambda x, y, d: T.tanh(x), lambda x, y, r: r(x.tanh())),
    "exp_mul": (lambda x, y, d: T.exp(x) * y, lambda x, y, r: r(r(x.exp()) * y)),
    "sqrt_add": (lambda x, y, d: T.sqrt(y) + x, lambda x, y, r: r(r(y.sqrt()) + x)),
    "max_exp": (lambda x, y, d: T.max(T.exp2(x), y), lambda x, y, r: r(x.exp2()).maximum(y)),
    "fma": (lambda x, y, d: x * y + x, lambda x, y, r: r(r(x * y) + x)),
}


def _narrow_math(dtype, N, bn=64):
    """Each :data:`NARROW_MATH` expression of the tensors' elements, then of fragments'."""
    fns = [expr for expr, _ in NARROW_MATH.values()]
    F = len(fns)

    @T.prim_func
    def narrow_math(X: T.Tensor((N,), dtype), P: T.Tensor((N,), dtype),
                    Y: T.Tensor((2 * F, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            x = T.alloc_fragment((bn,), dtype)
            p = T.alloc_fragment((bn,), dtype)
            T.copy(X[bx * bn], x)
            T.copy(P[bx * bn], p)
            for k, fn in enumerate(fns):
                for i in T.Parallel(bn):
                    if bx * bn + i < N:
                        Y[k, bx * bn + i] = fn(X[bx * bn + i], P[bx * bn + i], dtype)
                for i in T.Parallel(bn):
                    if bx * bn + i < N:
                        Y[F + k, bx * bn + i] = fn(x[i], p[i], dtype)

    return narrow_math


def _narrow_math_ref(x, p, dtype):
    import torch

    t = getattr(torch, dtype)

    def r(v):
        return v.to(t).float()

    x32, p32 = x.float(), p.float()
    values = [r(ref(x32, p32, r)).double() for _, ref in NARROW_MATH.values()]
    return [_stack(values + values)]


def _special_inputs(torch, gen, dtype, M, N):
    """Random values with NaN, +inf and -inf at every fifth element (from the first, second and
    third), and a positive second operand."""
    x = rand(torch, gen, (M, N), dtype)
    for start, value in enumerate((float("nan"), float("inf"), -float("inf"))):
        x.view(-1)[start::5] = value
    return [x, rand(torch, gen, (M, N), dtype, 0.25, 4.0)]


def _int_ref(fn):
    """``fn`` on int64 copies, the result in the inputs' dtype: torch has no arithmetic on
    uint16/32/64, and the catalogue's values never overflow the narrowest dtype."""

    def ref(*tensors):
        return [r.to(tensors[0].dtype) for r in fn(*(t.long() for t in tensors))]

    return ref


def _int_inputs(torch, gen, dtype, M, N):
    if dtype.startswith("uint"):
        return [rand(torch, gen, (M, N), dtype, 8, 15), rand(torch, gen, (M, N), dtype, 0, 7)]
    return [rand(torch, gen, (M, N), dtype, -9, 9), rand(torch, gen, (M, N), dtype, -9, 9)]


def _floordiv(dtype, M, N, bm=4, bn=8):
    table = FLOORDIV if dtype in SIGNED else {k: v for k, v in FLOORDIV.items()
                                              if "neg" not in k}
    fns = [expr for expr, _ in table.values()]
    F = len(fns)

    @T.prim_func
    def floordiv(X: T.Tensor((M, N), dtype), D: T.Tensor((M, N), dtype),
                 Y: T.Tensor((F, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for k, fn in enumerate(fns):
                for i, j in T.Parallel(bm, bn):
                    r = by * bm + i
                    c = bx * bn + j
                    if r < M and c < N:
                        Y[k, r, c] = fn(X[r, c], D[r, c], X[r, (c - 3) % N])

    return floordiv


def _floordiv_inputs(torch, gen, dtype, M, N):
    lo = 0 if dtype.startswith("uint") else -9
    d = rand(torch, gen, (M, N), dtype, 1, 5)
    if dtype in SIGNED:  # divisors of both signs, never zero
        sign = torch.randint(0, 2, (M, N), generator=gen).to(d.dtype) * 2 - 1
        d = d * sign
    return [rand(torch, gen, (M, N), dtype, lo, 9), d]


def _floordiv_ref(x, d, dtype):
    table = FLOORDIV if dtype in SIGNED else {k: v for k, v in FLOORDIV.items()
                                              if "neg" not in k}
    rotated = x.roll(3, dims=1)
    return [_stack([ref(x, d, rotated) for _, ref in table.values()])]


def _casts(dtype, targets, bn=8):
    """Eager style: ``X`` (signed values for signed, float and bool targets) and ``U``
    (non-negative values for unsigned targets) cast to every dtype in ``targets``."""

    def casts(X, U):
        n = T.const("n")
        X: T.Tensor((n,), dtype)
        U: T.Tensor((n,), dtype)
        outs = [T.empty((n,), t) for t in targets]
        with T.Kernel(T.ceildiv(n, bn), threads=128) as bx:
            for k, t in enumerate(targets):
                for i in T.Parallel(bn):
                    g = bx * bn + i
                    if g < n:
                        src = U[g] if t.startswith("uint") else X[g]
                        # T.Cast is T.cast with TVM's argument order
                        outs[k][g] = T.Cast(t, src) if k % 2 else T.cast(src, t)
        return tuple(outs)

    return casts


def _cast_inputs(torch, gen, dtype, N, targets):
    if dtype == "bool":
        x = rand(torch, gen, (N,), "bool")
        return [x, x]
    if dtype.startswith("uint"):
        u = rand(torch, gen, (N,), dtype, 0, 100)
        return [u, u]
    if dtype.startswith("int"):
        return [rand(torch, gen, (N,), dtype, -100, 100), rand(torch, gen, (N,), dtype, 0, 100)]
    # quarters: exact in every float dtype up to 60, with a fraction for float -> int to cut
    quarters = rand(torch, gen, (N,), "int32", -240, 240).double() / 4
    return [quarters.to(getattr(torch, dtype)), quarters.abs().to(getattr(torch, dtype))]


def _cast_ref(x, u, targets):
    import torch

    return [(u if t.startswith("uint") else x).to(getattr(torch, t)) for t in targets]


# Floats out of every integer range, both infinities, NaN, zeros of both signs, halves and the
# neighbours of each bound, for the saturating float -> integer conversion
OUT_OF_RANGE = (float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.75, -0.75, -1.5,
                127.0, 128.0, -128.0, -129.0, 200.0, -200.0, 255.0, 256.0, 300.0, 448.0, -448.0,
                1000.0, 32767.0, 32768.0, -32769.0, 40000.0, 65504.0, -65504.0, 57344.0, 1e6,
                3e9, -3e9, 1e20, -1e20)


def _saturating_inputs(torch, gen, dtype, N, targets):
    """:data:`OUT_OF_RANGE` in ``dtype`` (a value it cannot hold rounds, saturates or
    becomes infinite), then random values up to +-400; the same tensor for every target."""
    x = rand(torch, gen, (N,), dtype, -400.0, 400.0)
    x[:len(OUT_OF_RANGE)] = torch.tensor(OUT_OF_RANGE).to(x.dtype)
    return [x, x]


def _saturating_ref(x, u, targets):
    """Each value rounded toward zero and saturated at the target's bounds; NaN gives 0."""
    import torch

    out = []
    for t in targets:
        info = torch.iinfo(getattr(torch, t))
        v = x.trunc().nan_to_num(0.0, info.max, info.min).clamp(info.min, info.max)
        out.append(v.to(getattr(torch, t)))
    return out


SATURATED = ("int8", "uint8", "int16", "int32")


def _wrap_inputs(torch, gen, dtype, N, targets):
    """Integers over the dtype's whole range (within +-2**40), both ends included: a cast to a
    narrower integer dtype wraps them modulo its size."""
    info = torch.iinfo(getattr(torch, dtype))
    lo, hi = max(info.min, -2 ** 40), min(info.max, 2 ** 40)
    x = rand(torch, gen, (N,), dtype, lo, hi)
    x[0], x[1] = lo, hi
    return [x, x]


def _limits(dtype):
    floating = dtype not in INTEGERS

    @T.prim_func
    def limits(Y: T.Tensor((3,), dtype)):
        with T.Kernel(1, threads=32) as _bx:
            Y[0] = T.max_value(dtype)
            Y[1] = T.min_value(dtype)
            Y[2] = T.infinity(dtype) if floating else T.cast(0, dtype)

    return limits


def _limits_ref(dtype):
    import torch

    t = getattr(torch, dtype)
    info = torch.finfo(t) if t.is_floating_point else torch.iinfo(t)
    if t.is_floating_point:
        return [torch.tensor([info.max, info.min, float("inf")], dtype=torch.float64)]
    return [torch.tensor([info.max, info.min, 0], dtype=t)]


MN = {"full": {"M": 16, "N": 32}, "partial": {"M": 12, "N": 20}}
ELEMENTWISE = (*BASE, "alloc_fragment", "copy", "Parallel")

def _int_helpers(dtype, N, bn=8):
    """TileLang's integer helpers in scalar code: T.shift_left / T.shift_right, T.dp4a (four
    8-bit products added to an int32 element), T.index_to_coordinates, and the block index
    through T.get_block_binding."""

    @T.prim_func
    def int_helpers(X: T.Tensor((N, 4), dtype), W: T.Tensor((N, 4), dtype),
                    Y: T.Tensor((4, N), "int32")):
        with T.Kernel(T.ceildiv(N, bn), threads=128):
            acc = T.alloc_local((1,), "int32")
            for i in T.serial(bn):
                g = T.get_block_binding(0) * bn + i
                if g < N:
                    Y[0, g] = T.shift_left(T.cast(X[g, 0], "int32") + 9, 2)
                    Y[1, g] = T.shift_right(T.cast(X[g, 1], "int32"), 1)
                    acc[0] = 5
                    T.dp4a(X[g, 0], W[g, 0], acc[0])
                    Y[2, g] = acc[0]
                    row, col = T.index_to_coordinates(g * 3 + 1, (N, 3))
                    Y[3, g] = row * 10 + col

    return int_helpers


def _int_helpers_ref(x, w):
    x, w = x.long(), w.long()
    g = x.new_tensor(range(x.shape[0]))
    return [x.new_empty(0).new_tensor(
        [((x[:, 0] + 9) << 2).tolist(), (x[:, 1] >> 1).tolist(),
         (5 + (x * w).sum(1)).tolist(), (g * 10 + 1).tolist()]).int()]


def _bit_counts(dtype, N, bn=8):
    """T.clz and T.popcount of 32- and 64-bit integers (a negative value's two's-complement
    bits), in loops spelled as TileLang also does (T.Vectorized, T.Serial) under a T.likely
    guard, over a T.cdiv grid."""

    @T.prim_func
    def bit_counts(X: T.Tensor((N,), dtype), Y: T.Tensor((2, N), dtype)):
        with T.Kernel(T.cdiv(N, bn), threads=128) as bx:
            x = T.alloc_local((bn,), dtype)
            for i in T.Vectorized(bn):
                x[i] = X[T.min(bx * bn + i, N - 1)]
            for i in T.Serial(bn):
                if T.likely(bx * bn + i < N):
                    Y[0, bx * bn + i] = T.clz(x[i])
                    Y[1, bx * bn + i] = T.popcount(x[i])

    return bit_counts


def _bit_count_inputs(torch, gen, dtype, N):
    """Values over the type's range (64-bit ones within 2**62), with 0 and, signed, -1 and
    the lowest value first."""
    bits = int(dtype.lstrip("uint"))
    if dtype.startswith("u"):
        low, high = 0, (1 << min(bits, 62)) - 1
    else:
        low, high = -(1 << min(bits - 1, 62)), (1 << min(bits - 1, 62)) - 1
    x = rand(torch, gen, (N,), "int64", low, high)
    x[0] = 0
    if low < 0:
        x[1], x[2] = -1, -(1 << (bits - 1))
    return [x.to(getattr(torch, dtype))]


def _bit_counts_ref(x):
    import torch

    bits = x.element_size() * 8
    values = [int(v) & ((1 << bits) - 1) for v in x.tolist()]
    return [torch.tensor([[bits - v.bit_length() for v in values],
                          [v.bit_count() for v in values]]).to(x.dtype)]


def _indices(dtype, M, N, threads=(4, 2)):
    """TileLang's plural index functions: T.get_block_bindings / T.get_block_extents of a 2-D
    grid, T.get_thread_bindings / T.get_thread_extents of a 2-D block (its third dimension
    the constant 0 and 1), each thread's record written in a T.Unroll loop."""
    width = 8

    @T.prim_func
    def indices(Y: T.Tensor((M, N, threads[1], threads[0], width), dtype)):
        with T.Kernel(M, N, threads=threads):
            bx, by = T.get_block_bindings()
            gx, gy = T.get_block_extents()
            tx, ty, tz = T.get_thread_bindings()
            nx, ny, nz = T.get_thread_extents()
            record = T.alloc_local((width,), dtype)
            record[0], record[1], record[2], record[3] = bx, by, gx, gy
            record[4], record[5], record[6] = tx * 10 + ty, tz, nx * ny * nz
            record[7] = 0
            for i in T.Unroll(width):
                Y[bx, by, ty, tx, i] = record[i]

    return indices


def _indices_ref(dtype, M, N, threads=(4, 2)):
    import torch

    nx, ny = threads
    out = torch.zeros((M, N, ny, nx, 8), dtype=getattr(torch, dtype))
    for bx in range(M):
        for by in range(N):
            for ty in range(ny):
                for tx in range(nx):
                    out[bx, by, ty, tx, :7] = torch.tensor(
                        [bx, by, M, N, tx * 10 + ty, 0, nx * ny])
    return [out]


ROWS = (
    Kernel("unary_math", (*ELEMENTWISE, *UNARY), ("copy",),
           lambda dtype, M, N: _elementwise("unary_math", _unary_table(), dtype, M, N),
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype, 0.25, 4.0)],
           _unary_ref, {"partial": MN["partial"]}, dtypes=(*FLOATS, "float64"),
           doc="every math function of T (log, sqrt, rsqrt on positive inputs)"),
    Kernel("libm_math", (*ELEMENTWISE, *LIBM), ("copy",),
           lambda dtype, M, N: _elementwise("libm_math", LIBM, dtype, M, N), _libm_inputs,
           _table_ref(LIBM), {"partial": MN["partial"]}, dtypes=(*FLOATS, "float64"),
           features=("extended_math",),
           doc="TileLang's further libm functions: exp10, log10, log1p, trigonometric and "
               "hyperbolic functions and their inverses, erf, nearbyint, fabs, pow, fmod, "
               "atan2, hypot, copysign"),
    Kernel("fast_math", (*ELEMENTWISE, *FAST_MATH), ("copy",),
           lambda dtype, M, N: _elementwise("fast_math", FAST_MATH, dtype, M, N), _fast_inputs,
           _table_ref(FAST_MATH), MN, dtypes=(*FLOATS, "float64"), approximate=FAST_MATH_ERROR,
           doc="TileLang's fast exp, log, log2, cos and sin (CUDA's float32 intrinsics, the "
               "precise functions elsewhere) within the intrinsics' error bounds"),
    Kernel("fast_libm", (*ELEMENTWISE, *FAST_LIBM), ("copy",),
           lambda dtype, M, N: _elementwise("fast_libm", FAST_LIBM, dtype, M, N), _fast_inputs,
           _table_ref(FAST_LIBM), {"partial": MN["partial"]}, dtypes=(*FLOATS, "float64"),
           features=("extended_math",), approximate=FAST_MATH_ERROR,
           doc="TileLang's fast exp10, log10 and tan, whose precise functions are libm's"),
    Kernel("float_arith", (*ELEMENTWISE, "max", "min", "if_then_else"), ("copy",),
           lambda dtype, M, N: _elementwise("float_arith", FLOAT_BINARY, dtype, M, N),
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype, 0.25, 4.0)],
           _table_ref(FLOAT_BINARY), {"partial": MN["partial"]},
           dtypes=(*FLOATS, "float64"),
           doc="+ - * / negation, T.max, T.min and comparisons through T.if_then_else"),
    Kernel("min_max_nan", (*ELEMENTWISE, "max", "min"), ("copy",),
           lambda dtype, M, N: _elementwise("min_max_nan", NAN_MIN_MAX, dtype, M, N),
           _nan_operands, _table_ref(NAN_MIN_MAX), {"partial": MN["partial"]},
           dtypes=(*FLOATS, "float64"), features=("nan_min_max",),
           doc="T.max / T.min ignore a NaN operand on either side (IEEE maxNum / minNum)"),
    Kernel("float8_arith", (*ELEMENTWISE, "max", "min", "clamp", "if_then_else", *UNARY,
                            *FLOAT8), ("copy",),
           lambda dtype, M, N: _elementwise("float8_arith", FLOAT8_ARITH, dtype, M, N),
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype, 0.25, 4.0)],
           _float8_arith_ref, {"partial": MN["partial"]}, dtypes=(*FLOAT8, "bfloat16"),
           ref_args=("dtype",),
           exact=True,
           doc="float8 and bfloat16 + - * / negation, T.max, T.min, comparisons, every math "
               "function and chains of both, each operation rounded to the type (torch's "
               "float8 arithmetic; a math function's float value rounded once): exactly"),
    Kernel("narrow_math", (*ELEMENTWISE, "cast", "max", "min", *NARROW_F32), ("copy",),
           _narrow_math,
           lambda torch, gen, dtype, N: [rand(torch, gen, (N,), dtype),
                                         rand(torch, gen, (N,), dtype, 0.25, 4.0)],
           _narrow_math_ref, {"partial": {"N": 160}},
           dtypes=("float16", "bfloat16", *FLOAT8), ref_args=("dtype",), exact=True,
           doc="float16, bfloat16 and float8 math and arithmetic of tensors' and fragments' "
               "elements in a vector loop: cast(f(cast(x, float32)), dtype), f(x) in the "
               "dtype, and mixed forms; each the float32 computation rounded once per narrow "
               "operation: exactly"),
    Kernel("float_classes", (*ELEMENTWISE, "if_then_else", *FLOAT_CLASSES), ("copy",),
           lambda dtype, M, N: _elementwise("float_classes", FLOAT_CLASSES, dtype, M, N),
           _special_inputs, _table_ref(FLOAT_CLASSES), {"partial": MN["partial"]},
           dtypes=(*FLOATS, "float64"), doc="T.isnan, T.isinf and T.isfinite of NaN, "
           "infinities and finite values"),
    Kernel("int_arith", (*ELEMENTWISE, "max", "min", "abs", "clamp", "if_then_else",
                         "truncdiv", "truncmod", "bitwise_and", "bitwise_or", "bitwise_xor",
                         "bitwise_not"), ("copy",),
           lambda dtype, M, N: _elementwise("int_arith", INT_BINARY, dtype, M, N),
           _int_inputs, _int_ref(_table_ref(INT_BINARY)), {"partial": MN["partial"]},
           dtypes=INTEGERS,
           doc="integer + - * min max abs & | ^ ~ >> <<, T.truncdiv, T.truncmod, T.bitwise_* "
               "and comparisons, negative operands"),
    Kernel("int_floordiv", (*BASE, "Parallel", "floordiv", "floormod"), (), _floordiv,
           _floordiv_inputs,
           lambda x, d, dtype: _int_ref(lambda *t: _floordiv_ref(*t, dtype))(x, d),
           {"partial": MN["partial"]}, dtypes=INTEGERS, ref_args=("dtype",),
           doc="// and % with operands and divisors of both signs, and an index (c - 3) % N"),
    Kernel("cast", (*BASE, "const", "empty", "Parallel", "cast", "Cast", *TORCH_CASTS), (),
           lambda dtype, N, targets: eager(_casts(dtype, targets), n=N), _cast_inputs,
           _cast_ref, {"partial": {"N": 40, "targets": TORCH_CASTS}}, out_idx=(),
           dtypes=TORCH_CASTS, dtype_dims=("targets",), ref_args=("targets",),
           doc="T.cast from the case's dtype to every dtype the backend declares that torch "
               "converts (eager style: T.const, T.empty; float4 in float4_casts)"),
    Kernel("int_cast_wrap", (*BASE, "const", "empty", "Parallel", "cast", "Cast", *INTEGERS),
           (), lambda dtype, N, targets: eager(_casts(dtype, targets), n=N), _wrap_inputs,
           _cast_ref, {"partial": {"N": 40, "targets": INTEGERS}}, out_idx=(),
           dtypes=INTEGERS, dtype_dims=("targets",), ref_args=("targets",),
           doc="T.cast of integers over the whole range of the case's dtype to every integer "
               "dtype: a narrower one wraps them modulo its size, as torch converts"),
    Kernel("float_to_int", (*BASE, "const", "empty", "Parallel", "cast", "Cast", *SATURATED),
           (), lambda dtype, N, targets: eager(_casts(dtype, targets), n=N), _saturating_inputs,
           _saturating_ref, {"partial": {"N": 40, "targets": SATURATED}}, out_idx=(),
           dtypes=(*FLOATS, "float64", *FLOAT8), dtype_dims=("targets",), ref_args=("targets",),
           exact=True,
           doc="T.cast of NaN, infinities and floats out of range to int8, uint8, int16 and "
               "int32: rounded toward zero, saturated at the bounds, NaN gives 0"),
    Kernel("limits", (*BASE, "Parallel", "max_value", "min_value", "infinity"), (),
           lambda dtype: _limits(dtype), lambda torch, gen, dtype: [], _limits_ref,
           {"full": {}}, dtypes=(*FLOATS, "float64", *INTEGERS), ref_args=("dtype",),
           doc="T.max_value, T.min_value and T.infinity of each dtype"),
    Kernel("bit_counts", (*BASE, "alloc_local", "min", "cdiv", "Vectorized", "Serial",
                          "likely", "clz", "popcount"), (), _bit_counts, _bit_count_inputs,
           _bit_counts_ref, {"partial": {"N": 20}}, dtypes=("int32", "uint32", "int64",
                                                           "uint64"), exact=True,
           features=("extended_math",),
           doc="T.clz and T.popcount of 32- and 64-bit integers (negative values' two's "
               "complement, 0, the lowest value), with TileLang's spellings T.cdiv, "
               "T.Vectorized, T.Serial and T.likely"),
    Kernel("int_helpers", (*BASE, "serial", "cast", "get_block_binding", "shift_left",
                           "shift_right", "dp4a", "index_to_coordinates"), (), _int_helpers,
           lambda torch, gen, dtype, N: [rand(torch, gen, (N, 4), dtype, -128, 127),
                                         rand(torch, gen, (N, 4), dtype, -128, 127)],
           _int_helpers_ref, {"partial": {"N": 20}}, dtypes=("int8",), exact=True,
           doc="TileLang's T.shift_left, T.shift_right, T.dp4a, T.index_to_coordinates and "
               "T.get_block_binding"),
    Kernel("indices", (*BASE, "alloc_local", "Unroll", "get_block_bindings",
                       "get_block_extents", "get_thread_bindings", "get_thread_extents"),
           ("get_thread_binding",), _indices, lambda torch, gen, dtype, M, N: [],
           _indices_ref, {"full": {"M": 3, "N": 2}}, out_idx=(0,), ref_args=("dtype", "M", "N"),
           dtypes=("int32",), exact=True,
           doc="TileLang's T.get_block_bindings, T.get_block_extents, T.get_thread_bindings "
               "and T.get_thread_extents of a 2-D grid and block, and T.Unroll"),
)
