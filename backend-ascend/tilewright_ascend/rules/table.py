"""The one table of lowering rules: tile op name -> ``rule(emitter, call)``, and the copy rules
keyed by data path. Rules register with the :func:`rule` and :func:`copy_rule` decorators in
their family modules; :mod:`. <tilewright_ascend.rules>` imports every family."""

from __future__ import annotations

RULES: dict = {}
COPY_RULES: dict = {}  # (source scope, destination scope) -> rule(em, src, dst, what)


def rule(*names: str):
    """Register the decorated function as the rule of the tile ops ``names``."""

    def register(fn):
        for name in names:
            if name in RULES:
                raise RuntimeError(f"tile op {name!r} has two Ascend lowering rules")
            RULES[name] = fn
        return fn

    return register


def copy_rule(*paths: tuple[str, str]):
    """Register the decorated function as the rule of ``T.copy`` along ``paths``."""

    def register(fn):
        for p in paths:
            COPY_RULES[p] = fn
        return fn

    return register
