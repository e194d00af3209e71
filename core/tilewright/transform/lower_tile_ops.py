"""The tile-op lowering driver: replaces each tile op by what its backend's rule returns.

Rules come from the backend as a table keyed by op name; the driver supplies the context
(loop bounds for guard elision, the user's source line) and turns any failure into one error
that names the op, the backend and the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import sym as arith
from tvm import tirx

from ..errors import KernelError, UnsupportedOpError, span_location
from ..ir import decode
from .walk import StmtMutator, prim_func_pass


@dataclass
class RuleContext:
    """What a lowering rule may consult."""

    backend: str
    analyzer: arith.Analyzer
    loops: list
    options: Any = None

    def can_prove(self, cond) -> bool:
        return bool(self.analyzer.can_prove(cond))


class _Lower(StmtMutator):
    def __init__(self, rules, backend, options):
        super().__init__()
        self.rules, self.backend, self.options = rules, backend, options

    def visit_Evaluate(self, stmt):
        call = decode(stmt)
        if call is None:
            return stmt
        rule = self.rules.get(call.name)
        where = span_location(call.span)
        if rule is None:
            raise UnsupportedOpError(
                f"T.{call.name} is not supported by backend '{self.backend}'; use a backend "
                f"that lowers it or rewrite the kernel without it", where)
        ctx = RuleContext(self.backend, self.analyzer, list(self.loops), self.options)
        try:
            return rule(call, ctx)
        except KernelError as exc:
            if exc.location is None:
                raise type(exc)(exc.message, where) from exc
            raise
        except Exception as exc:
            raise KernelError(f"backend '{self.backend}' failed to lower T.{call.name}: "
                              f"{type(exc).__name__}: {exc}", where) from exc


def lower_tile_ops(rules: dict, backend: str, options=None, name: str = "LowerTileOps"):
    """A pass lowering every tile op with ``rules[op name](call, ctx) -> Stmt``."""

    def run(func: tirx.PrimFunc) -> tirx.PrimFunc:
        body = _Lower(rules, backend, options).visit(func.body)
        return func if body.same_as(func.body) else func.with_body(body)

    return prim_func_pass(name, run)


def lower_intrinsics(rules: dict, name: str = "LowerIntrinsics"):
    """A pass replacing each call of an expression intrinsic (for example ``tw.atomic_add_prev``)
    by ``rules[op name](call) -> PrimExpr``; calls without a rule are left alone."""

    def rewrite(call):
        rule = rules.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        return call if rule is None else rule(call)

    return prim_func_pass(name, lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tvm.ir.Call, rewrite))))
