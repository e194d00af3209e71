"""The table of lowering rules, keyed by tile op; each op family's module registers its
rules with :func:`register`."""

from __future__ import annotations

from collections.abc import Callable

from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tvm import tirx

Rule = Callable[[TileOpCall, RuleContext], tirx.Stmt]
RULES: dict[str, Rule] = {}
# expression intrinsics (atomics returning the old value): ir name -> rule(call) -> expr
INTRINSIC_RULES: dict[str, Callable] = {}


def register(name: str):
    """A decorator entering a rule into :data:`RULES` as op ``name``'s."""

    def wrap(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return wrap
