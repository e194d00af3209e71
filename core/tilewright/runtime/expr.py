"""Integer expressions over shape symbols, parsed and evaluated without ``eval``.

Launch grids and output shapes are written as small Python-syntax expressions
(``(n + 127) // 128``, ``min(m, 4)``, ``(a if n > 0 else b)``) in signatures, cache entries and
exported bundles. Those files may come from anywhere, so they are parsed into a tree of the
few node kinds listed below and evaluated by walking it; any other syntax (attribute access,
subscripts, lambdas, strings, names that are not shape symbols) is refused when the file is
read, before a kernel is loaded.

Accepted: integer literals; names from the given symbol set; ``+ - * // %``; unary ``-`` and
``not``; comparisons; ``and``/``or``; ``x if c else y``; calls of ``min``, ``max``,
``truncdiv`` and ``truncmod`` (TIR's truncating ``Div``/``Mod``) with two arguments. Values are
Python ints bounded by :data:`LIMIT`; exceeding it, or dividing by zero, is an
:class:`ExprError`.

:meth:`Expr.evaluate` computes the same expression with other :class:`Semantics`: a torch fake
implementation passes one whose operations build symbolic sizes (``torch.SymInt``) without
turning them into Python ints or branching on them, so tracing a dynamic-shape kernel does not
specialise it. This module itself needs only the standard library.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

LIMIT = 1 << 63  # every value, intermediate ones included, stays within (-LIMIT, LIMIT)
MAX_LENGTH = 2000  # characters of one expression
MAX_NODES = 200


class ExprError(ValueError):
    """An expression outside the accepted grammar, or one whose value is out of range."""


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def _floormod(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("modulo by zero")
    return a % b


def _truncdiv(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _truncmod(a: int, b: int) -> int:
    return a - b * _truncdiv(a, b)


Thunk = Callable[[], object]


@dataclass(frozen=True)
class Semantics:
    """What each operation of an expression computes. ``value`` checks a literal or a symbol's
    value; ``compare`` maps an ``ast`` comparison type to a function; ``ite``, ``and_`` and
    ``or_`` get their operands as thunks so a semantics may short-circuit (Python ints do:
    ``n > 0 and 8 // n`` never divides by zero)."""

    value: Callable[[object], object]
    add: Callable
    sub: Callable
    mul: Callable
    floordiv: Callable
    mod: Callable
    neg: Callable
    not_: Callable
    compare: Mapping[type, Callable]
    and_: Callable[[list[Thunk]], object]
    or_: Callable[[list[Thunk]], object]
    ite: Callable[[object, Thunk, Thunk], object]
    calls: Mapping[str, Callable]


def _bounded(value) -> int:
    value = int(value)
    if not -LIMIT < value < LIMIT:
        raise ExprError(f"value {value} is out of range")
    return value


def _checked(fn):
    return lambda a, b: _bounded(fn(a, b))


def _as_int(fn):
    return lambda a, b: int(fn(a, b))


COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
               ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


INTS = Semantics(
    value=_bounded, add=_checked(operator.add), sub=_checked(operator.sub),
    mul=_checked(operator.mul), floordiv=_checked(_floordiv), mod=_checked(_floormod),
    neg=operator.neg, not_=lambda a: int(not a),
    compare={k: _as_int(f) for k, f in COMPARISONS.items()},
    and_=lambda parts: int(all(p() for p in parts)),
    or_=lambda parts: int(any(p() for p in parts)),
    ite=lambda c, t, f: t() if c else f(),
    calls={"min": _checked(min), "max": _checked(max), "truncdiv": _checked(_truncdiv),
           "truncmod": _checked(_truncmod)},
)
"""Python ints within :data:`LIMIT` (what :meth:`Expr.__call__` computes)."""
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
           ast.Mod: "mod"}

Node = Callable[[Mapping[str, object]], object]


class Expr:
    """A parsed expression: ``expr(symbols)`` evaluates it; ``names`` are the symbols it reads."""

    def __init__(self, text: str, tree: ast.AST | None, names: frozenset[str], value=None):
        self.text, self.names = text, names
        self._tree, self._value = tree, value
        self._nodes: dict[int, Node] = {}
        self._node = self._compiled(INTS)

    def _compiled(self, semantics: Semantics) -> Node:
        node = self._nodes.get(id(semantics))
        if node is None:
            if self._tree is None:
                value = self._value
                node = lambda _s: value
            else:
                node = _build(self._tree, self.text, semantics)
            self._nodes[id(semantics)] = node
        return node

    def shown(self) -> str:
        """The expression as a user would write it, with only the parentheses it needs
        (``N % 4 == 0`` for the stored ``((N % 4) == 0)``)."""
        return self.text if self._tree is None else ast.unparse(self._tree)

    def _needs(self, symbols: Mapping[str, object]) -> None:
        missing = sorted(n for n in self.names if symbols.get(n) is None)
        if missing:
            raise ExprError(f"{self.text!r} needs {', '.join(missing)}, which no argument gives")

    def __call__(self, symbols: Mapping[str, int]) -> int:
        self._needs(symbols)
        return self._node(symbols)

    def evaluate(self, symbols: Mapping[str, object], semantics: Semantics):
        """The value under ``semantics`` (a literal stays a Python int)."""
        self._needs(symbols)
        return self._compiled(semantics)(symbols)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


def solve_linear(expr: Expr, unknown: str, target: int, symbols: Mapping[str, int]):
    """The integer value of symbol ``unknown`` for which ``expr`` (the other symbols it reads
    given by ``symbols``) equals ``target``, when ``expr`` is ``a * unknown + b`` with ``a``
    not 0 (``n * 4``, ``n + 1``, ``3 * n + 1``; seen at three points); None when it is not
    such an expression or no integer gives ``target``."""
    try:
        values = [expr({**symbols, unknown: x}) for x in (0, 1, 2)]
    except ExprError:
        return None
    a, b = values[1] - values[0], values[0]
    if a == 0 or values[2] - values[1] != a or (target - b) % a:
        return None
    value = (target - b) // a
    try:
        return value if expr({**symbols, unknown: value}) == target else None
    except ExprError:
        return None


def parse(text, symbols: Iterable[str] | None = None) -> Expr:
    """Parse ``text``; with ``symbols``, every name it reads must be one of them."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ExprError(f"expected an integer expression, got {type(text).__name__}")
    if isinstance(text, int):
        value = _bounded(text)
        return Expr(str(value), None, frozenset(), value)
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression of {len(text)} characters (at most {MAX_LENGTH})")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExprError(f"{text!r} is not an expression") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"{text!r} has more than {MAX_NODES} nodes")
    names: set[str] = set()
    _names(tree.body, text, names)
    if symbols is not None:
        unknown = sorted(names - set(symbols))
        if unknown:
            raise ExprError(f"{text!r} reads {', '.join(unknown)}, which is not a shape symbol")
    return Expr(text, tree.body, frozenset(names))


def _names(n: ast.AST, text: str, names: set[str]) -> None:
    """Check that ``n`` is in the grammar (else an :class:`ExprError`); collect its names."""
    if isinstance(n, ast.Constant) and type(n.value) is int:
        _bounded(n.value)
        return
    if isinstance(n, ast.Name):
        names.add(n.id)
        return
    if isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
        children = (n.left, n.right)
    elif isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.Not, ast.UAdd)):
        children = (n.operand,)
    elif isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in INTS.compare:
        children = (n.left, n.comparators[0])
    elif isinstance(n, ast.BoolOp):
        children = tuple(n.values)
    elif isinstance(n, ast.IfExp):
        children = (n.test, n.body, n.orelse)
    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
            n.func.id in INTS.calls and len(n.args) == 2 and not n.keywords:
        children = tuple(n.args)
    else:
        raise ExprError(f"{text!r}: {ast.dump(n)[:60]} is not allowed in a shape or grid "
                        "expression")
    for child in children:
        _names(child, text, names)


def _thunk(node: Node, symbols) -> Thunk:
    return lambda: node(symbols)


def _build(n: ast.AST, text: str, sem: Semantics) -> Node:  # noqa: C901 - one case per node
    """A closure computing ``n`` (checked by :func:`_names`) under ``sem``."""
    if isinstance(n, ast.Constant):
        value = _bounded(n.value)
        return lambda _s: value
    if isinstance(n, ast.Name):
        name, check = n.id, sem.value
        return lambda s: check(s[name])
    if isinstance(n, ast.BinOp):
        fn, a, b = getattr(sem, _BINARY[type(n.op)]), _build(n.left, text, sem), \
            _build(n.right, text, sem)
        return lambda s: fn(a(s), b(s))
    if isinstance(n, ast.UnaryOp):
        a = _build(n.operand, text, sem)
        if isinstance(n.op, ast.USub):
            neg = sem.neg
            return lambda s: neg(a(s))
        if isinstance(n.op, ast.Not):
            not_ = sem.not_
            return lambda s: not_(a(s))
        return a
    if isinstance(n, ast.Compare):
        fn = sem.compare[type(n.ops[0])]
        a, b = _build(n.left, text, sem), _build(n.comparators[0], text, sem)
        return lambda s: fn(a(s), b(s))
    if isinstance(n, ast.BoolOp):
        parts = [_build(v, text, sem) for v in n.values]
        fn = sem.and_ if isinstance(n.op, ast.And) else sem.or_
        return lambda s: fn([_thunk(p, s) for p in parts])
    if isinstance(n, ast.IfExp):
        c, t, f = (_build(x, text, sem) for x in (n.test, n.body, n.orelse))
        ite = sem.ite
        return lambda s: ite(c(s), lambda: t(s), lambda: f(s))
    fn = sem.calls[n.func.id]
    a, b = (_build(x, text, sem) for x in n.args)
    return lambda s: fn(a(s), b(s))


__all__ = ["COMPARISONS", "INTS", "LIMIT", "Expr", "ExprError", "Semantics", "parse"]
