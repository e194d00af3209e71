"""The static bounds check against brute force: random small loop nests whose ranges depend on
enclosing loops, storing to a tile at a random index (perhaps under an ``if``). The check may
refuse an access that stays inside (a false refusal), but it must never accept one that some
iteration takes outside the tile (a silent out-of-bounds write) -- where its analysis bounds
the index, or where the nest runs at most ``ITERATIONS`` iterations: an index it cannot bound
(a shift or product that leaves int32 in an iteration it cannot rule out, though the iterations
that run stay small) is evaluated in every iteration then; past that it is left to the run-time
check (``tw.bounds_check``) unless some case of the enclosing loops bounds it outside the
tile."""

from __future__ import annotations

import itertools

import pytest
import tvm
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tilewright import KernelError
from tilewright.transform import check_bounds
from tilewright.transform.bounds import ITERATIONS
from tvm import sym as arith
from tvm import tirx

SIZE = 8
LIMIT = 1 << 20  # values past it would wrap in int32 where Python's do not: not drawn
SETTINGS = settings(max_examples=250, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


class _Expr:
    """An integer expression as TIR and as a Python function of the loop variables' values
    (raising OverflowError where a value, the expression's or a part's, leaves +-LIMIT)."""

    def __init__(self, tir, py):
        self.tir, self.py = tir, lambda env: _fit(py(env))


def _fit(value: int) -> int:
    if abs(value) > LIMIT:
        raise OverflowError
    return value


def _const(value: int) -> _Expr:
    return _Expr(tirx.const(value, "int32"), lambda env: value)


def _var(var) -> _Expr:
    return _Expr(var, lambda env: env[var])


@st.composite
def _exprs(draw, variables, depth: int = 2) -> _Expr:
    """An expression of ``variables`` (and small constants) of +, -, *, //, %, <<, min, max."""
    leaves = [_var(v) for v in variables]
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        if leaves and draw(st.booleans()):
            return draw(st.sampled_from(leaves))
        return _const(draw(st.integers(0, 8)))
    op = draw(st.sampled_from(("+", "-", "*", "//", "%", "<<", "min", "max")))
    a = draw(_exprs(variables, depth - 1))
    if op in ("//", "%"):
        c = draw(st.integers(1, 4))
        if op == "//":
            return _Expr(tirx.floordiv(a.tir, c), lambda env: a.py(env) // c)
        return _Expr(tirx.floormod(a.tir, c), lambda env: a.py(env) % c)
    if op == "<<":  # 1 << (v + c), v a loop variable (never negative)
        if not variables:
            return a
        v, c = draw(st.sampled_from(variables)), draw(st.integers(0, 2))
        return _Expr(tirx.shift_left(tirx.const(1, "int32"), v + c),
                     lambda env: 1 << _fit(env[v] + c) if env[v] + c < 21 else _fit(LIMIT + 1))
    b = draw(_exprs(variables, depth - 1))
    if op == "+":
        return _Expr(a.tir + b.tir, lambda env: a.py(env) + b.py(env))
    if op == "-":
        return _Expr(a.tir - b.tir, lambda env: a.py(env) - b.py(env))
    if op == "*":
        return _Expr(a.tir * b.tir, lambda env: a.py(env) * b.py(env))
    if op == "min":
        return _Expr(tirx.min(a.tir, b.tir), lambda env: min(a.py(env), b.py(env)))
    return _Expr(tirx.max(a.tir, b.tir), lambda env: max(a.py(env), b.py(env)))


@st.composite
def _nests(draw):
    """(loops as (var, min, extent), an optional condition, the index): 1 to 3 loops, each
    starting at 0, 1 or an enclosing loop's variable, running an expression of the enclosing
    loops' variables (negative: no iteration)."""
    loops = []
    for depth in range(draw(st.integers(1, 3))):
        var = tirx.Var("ijk"[depth], "int32")
        outer = [v for v, _, _ in loops]
        start = draw(st.sampled_from([_const(0), _const(1), *map(_var, outer)]))
        extent = draw(_exprs(outer)) if outer and draw(st.booleans()) else \
            _const(draw(st.integers(1, 6)))
        loops.append((var, start, extent))
    variables = [v for v, _, _ in loops]
    cond = None
    if draw(st.integers(0, 3)) == 0:
        bound = draw(_exprs(variables, 1))
        cond = (bound, draw(st.integers(0, 8)), draw(st.booleans()))  # bound < c, or >=
    return loops, cond, draw(_exprs(variables, 3))


def _holds(cond, env) -> bool:
    bound, c, less = cond
    return bound.py(env) < c if less else bound.py(env) >= c


def _indices(loops, cond, index):
    """Every index the nest stores at and the number of iterations of all its loops (as the
    check counts them, which lists only the loops the index depends on: never more); None past
    the values drawn (int32 would wrap, or too many iterations to enumerate)."""
    out, count = [], [0]

    def walk(level, env):
        if level == len(loops):
            if cond is None or _holds(cond, env):
                out.append(index.py(env))
            return
        var, start, extent = loops[level]
        lo, n = start.py(env), extent.py(env)
        for value in range(lo, lo + n):
            count[0] += 1
            if count[0] > 20000:
                raise OverflowError
            walk(level + 1, {**env, var: value})

    try:
        walk(0, {})
    except OverflowError:
        return None
    return out, count[0]


def _accepted(loops, cond, index) -> bool:
    local = tirx.decl_buffer((SIZE,), "float32", name="local", scope="local")
    body = tirx.BufferStore(local, tirx.const(1.0, "float32"), [index.tir])
    if cond is not None:
        bound, c, less = cond
        test = tirx.LT(bound.tir, c) if less else tirx.GE(bound.tir, c)
        body = tirx.IfThenElse(test, body, None)
    for var, start, extent in reversed(loops):
        body = tirx.For(var, start.tir, extent.tir, tirx.ForKind.SERIAL, body)
    try:
        check_bounds(tirx.PrimFunc([], body))
    except KernelError:
        return False
    return True


def _bounded(loops, index) -> bool:
    """Whether TVM's analysis bounds ``index`` within int32 over the loops' ranges."""
    analyzer = arith.Analyzer()
    for var, start, extent in loops:
        analyzer.bind(var, tvm.ir.Range.from_min_extent(start.tir, extent.tir))
    bound = analyzer.const_int_bound(index.tir)
    return -(1 << 31) < bound.min_value and bound.max_value < (1 << 31) - 1


@SETTINGS
@given(_nests())
def test_the_check_never_accepts_an_access_that_leaves_the_tile(nest):
    loops, cond, index = nest
    found = _indices(loops, cond, index)
    assume(found is not None)
    values, iterations = found
    assume(_bounded(loops, index) or iterations <= ITERATIONS)
    if not _accepted(loops, cond, index):
        return  # a refusal is never unsafe
    assert all(0 <= v < SIZE for v in values), \
        f"accepted, but the index reaches {sorted(set(values))} (tile of {SIZE})"


def _shl(v, c=0) -> _Expr:
    return _Expr(tirx.shift_left(tirx.const(1, "int32"), v + c),
                 lambda env: 1 << (env[v] + c))


@pytest.mark.parametrize("case", ["max_of_a_shift", "difference_of_shifts"])
def test_an_index_unbounded_as_a_whole_is_refused_where_a_case_bounds_it_outside(case):
    """Nests the property test found (session 23) whose index TVM cannot bound as a whole (a
    shift past int32 in iterations that never run), accepted before; one value of the outer
    loop bounds it, outside the tile."""
    i, j, k = (tirx.Var(n, "int32") for n in "ijk")
    cond = None
    if case == "max_of_a_shift":  # local[max(k + k, 1 << (j + 1))]
        loops = [(i, _const(1), _const(3)), (j, _const(0), _shl(i, 2)),
                 (k, _var(j), _Expr(tirx.floormod(i * j, 3), lambda env: env[i] * env[j] % 3))]
        index = _Expr(tirx.max(k + k, tirx.shift_left(tirx.const(1, "int32"), j + 1)),
                      lambda env: max(2 * env[k], 1 << (env[j] + 1)))
    else:  # if (1 << k) < 6: local[(1 << j) - (1 << i)]
        loops = [(i, _const(0), _const(6)), (j, _var(i), _Expr((i + i) * i,
                                                               lambda env: 2 * env[i] ** 2)),
                 (k, _var(i), _const(2))]
        index = _Expr(tirx.shift_left(tirx.const(1, "int32"), j) -
                      tirx.shift_left(tirx.const(1, "int32"), i),
                      lambda env: (1 << env[j]) - (1 << env[i]))
        cond = (_shl(k), 6, True)
    values, _ = _indices(loops, cond, index)
    assert max(values) >= SIZE and not _bounded(loops, index)
    assert not _accepted(loops, cond, index)


@pytest.mark.parametrize("squares_below,accepted", [(4, True), (16, False)])
def test_an_index_no_case_bounds_is_evaluated_in_every_iteration(squares_below, accepted):
    """``for i in range(70): if i * i < c: local[1 << i]``: TVM bounds neither the index nor
    (70 values, more than CASES) any case of it, and the condition does not bound ``i`` for
    it; the 70 iterations are listed. Before, both were accepted, the second storing at 8."""
    i = tirx.Var("i", "int32")
    loops = [(i, _const(0), _const(70))]
    cond = (_Expr(i * i, lambda env: env[i] ** 2), squares_below, True)
    index = _Expr(tirx.shift_left(tirx.const(1, "int32"), i),
                  lambda env: 1 << env[i] if env[i] < 21 else _fit(LIMIT + 1))
    values, iterations = _indices(loops, cond, index)
    assert not _bounded(loops, index) and iterations == 70
    assert (max(values) < SIZE) == accepted
    assert _accepted(loops, cond, index) == accepted
    if not accepted:
        local = tirx.decl_buffer((SIZE,), "float32", name="local", scope="local")
        body = tirx.IfThenElse(tirx.LT(cond[0].tir, squares_below),
                               tirx.BufferStore(local, tirx.const(1.0, "float32"), [index.tir]),
                               None)
        with pytest.raises(KernelError, match=r"leaves tile local of shape \(8\): index "
                                              r"1 << i of dimension 0 is 8 when i = 3"):
            check_bounds(tirx.PrimFunc([], tirx.For(i, 0, 70, tirx.ForKind.SERIAL, body)))


def test_a_butterfly_is_accepted_exactly_when_it_stays_inside():
    """``local[j * c + k + half * c // 2]``, ``c = 1 << (i + shift)``, ``j < SIZE // c + dj``,
    ``k < c // 2 + dk``: for each ``i`` the index is affine in independent ranges, so the
    check is exact: accepted exactly when every iteration stays inside (the store runs)."""
    i, j, k = (tirx.Var(n, "int32") for n in "ijk")
    verdicts = set()
    for rounds, half, dj, dk, shift in itertools.product((1, 2, 3), (0, 1), (-1, 0, 1),
                                                         (-1, 0, 1), (0, 1)):
        c_tir = tirx.shift_left(tirx.const(1, "int32"), i + 1 + shift)

        def c(env, shift=shift):
            return 1 << (env[i] + 1 + shift)

        loops = [(i, _const(0), _const(rounds)),
                 (j, _const(0), _Expr(tirx.floordiv(SIZE, c_tir) + dj,
                                      lambda env, dj=dj, c=c: SIZE // c(env) + dj)),
                 (k, _const(0), _Expr(tirx.floordiv(c_tir, 2) + dk,
                                      lambda env, dk=dk, c=c: c(env) // 2 + dk))]
        index = _Expr(j * c_tir + k + half * tirx.floordiv(c_tir, 2),
                      lambda env, half=half, c=c: env[j] * c(env) + env[k] + half * (c(env) // 2))
        values, _ = _indices(loops, None, index)
        if not values:
            continue  # a store that never runs may be refused
        inside = all(0 <= v < SIZE for v in values)
        assert _accepted(loops, None, index) == inside, \
            (rounds, half, dj, dk, shift, sorted(set(values)))
        verdicts.add(inside)
    assert verdicts == {True, False}


def test_the_strategies_draw_dependent_ranges():
    # the property above is about nests whose ranges depend on enclosing loops: some are drawn
    # (derandomized: a count over random draws is a property of the seed, 8 of 100 in one
    # make test run)
    seen = []

    @settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(_nests())
    def collect(nest):
        loops, _, _ = nest
        seen.append(any(not isinstance(e.tir, tirx.IntImm) for _, _, e in loops))

    collect()
    assert sum(seen) >= 10
