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
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping

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


_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: _floordiv, ast.Mod: _floormod,
}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_CALLS: dict[str, Callable[[int, int], int]] = {
    "min": min, "max": max, "truncdiv": _truncdiv, "truncmod": _truncmod,
}

Node = Callable[[Mapping[str, int]], int]


def _bounded(value) -> int:
    value = int(value)
    if not -LIMIT < value < LIMIT:
        raise ExprError(f"value {value} is out of range")
    return value


class Expr:
    """A parsed expression: ``expr(symbols)`` evaluates it; ``names`` are the symbols it reads."""

    def __init__(self, text: str, node: Node, names: frozenset[str]):
        self.text, self._node, self.names = text, node, names

    def __call__(self, symbols: Mapping[str, int]) -> int:
        missing = sorted(n for n in self.names if symbols.get(n) is None)
        if missing:
            raise ExprError(f"{self.text!r} needs {', '.join(missing)}, which no argument gives")
        return self._node(symbols)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


def parse(text, symbols: Iterable[str] | None = None) -> Expr:
    """Parse ``text``; with ``symbols``, every name it reads must be one of them."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ExprError(f"expected an integer expression, got {type(text).__name__}")
    if isinstance(text, int):
        value = _bounded(text)
        return Expr(str(value), lambda _s: value, frozenset())
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression of {len(text)} characters (at most {MAX_LENGTH})")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExprError(f"{text!r} is not an expression") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"{text!r} has more than {MAX_NODES} nodes")
    names: set[str] = set()
    node = _build(tree.body, text, names)
    if symbols is not None:
        unknown = sorted(names - set(symbols))
        if unknown:
            raise ExprError(f"{text!r} reads {', '.join(unknown)}, which is not a shape symbol")
    return Expr(text, node, frozenset(names))


def _build(n: ast.AST, text: str, names: set[str]) -> Node:  # noqa: C901 - one case per node
    if isinstance(n, ast.Constant) and type(n.value) is int:
        value = _bounded(n.value)
        return lambda _s: value
    if isinstance(n, ast.Name):
        name = n.id
        names.add(name)
        return lambda s: _bounded(s[name])
    if isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
        fn, a, b = _BINARY[type(n.op)], _build(n.left, text, names), _build(n.right, text, names)
        return lambda s: _bounded(fn(a(s), b(s)))
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.Not, ast.UAdd)):
        a = _build(n.operand, text, names)
        if isinstance(n.op, ast.USub):
            return lambda s: -a(s)
        if isinstance(n.op, ast.Not):
            return lambda s: int(not a(s))
        return a
    if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _COMPARE:
        fn = _COMPARE[type(n.ops[0])]
        a, b = _build(n.left, text, names), _build(n.comparators[0], text, names)
        return lambda s: int(fn(a(s), b(s)))
    if isinstance(n, ast.BoolOp):
        parts = [_build(v, text, names) for v in n.values]
        if isinstance(n.op, ast.And):
            return lambda s: int(all(p(s) for p in parts))
        return lambda s: int(any(p(s) for p in parts))
    if isinstance(n, ast.IfExp):
        c, t, f = (_build(x, text, names) for x in (n.test, n.body, n.orelse))
        return lambda s: t(s) if c(s) else f(s)
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _CALLS \
            and len(n.args) == 2 and not n.keywords:
        fn = _CALLS[n.func.id]
        a, b = (_build(x, text, names) for x in n.args)
        return lambda s: _bounded(fn(a(s), b(s)))
    raise ExprError(f"{text!r}: {ast.dump(n)[:60]} is not allowed in a shape or grid "
                    "expression")


__all__ = ["LIMIT", "Expr", "ExprError", "parse"]
