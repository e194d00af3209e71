"""A small statement mutator for the statement kinds tile programs contain.

Passes subclass :class:`StmtMutator` and override ``visit_<Kind>``; unchanged subtrees are
returned as they are. Loop ranges are tracked in ``self.analyzer`` so rules can prove bounds.
"""

from __future__ import annotations

import threading

import tvm
import tvm_ffi
from tvm import sym as arith
from tvm import tirx


class StmtMutator:
    def __init__(self):
        self.analyzer = arith.Analyzer()
        self.loops: list[tirx.For] = []

    def visit(self, stmt):
        method = getattr(self, f"visit_{type(stmt).__name__}", None)
        return method(stmt) if method is not None else stmt

    def visit_SeqStmt(self, stmt):
        new = [self.visit(s) for s in stmt.seq]
        if all(a.same_as(b) for a, b in zip(new, stmt.seq)):
            return stmt
        flat = []
        for s in new:
            flat.extend(s.seq if isinstance(s, tirx.SeqStmt) else [s])
        return flat[0] if len(flat) == 1 else tirx.SeqStmt(flat)

    def visit_For(self, stmt):
        self.analyzer.bind(stmt.loop_var, tvm.ir.Range.from_min_extent(stmt.min, stmt.extent))
        self.loops.append(stmt)
        try:
            body = self.visit(stmt.body)
        finally:
            self.loops.pop()
        if body.same_as(stmt.body):
            return stmt
        return rebuild_for(stmt, body=body)

    def visit_IfThenElse(self, stmt):
        then_case = self.visit(stmt.then_case)
        else_case = self.visit(stmt.else_case) if stmt.else_case is not None else None
        if then_case.same_as(stmt.then_case) and (
                else_case is None or else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span)

    def visit_While(self, stmt):
        body = self.visit(stmt.body)
        if body.same_as(stmt.body):
            return stmt
        return tirx.While(stmt.condition, body, span=stmt.span)

    def visit_AttrStmt(self, stmt):
        body = self.visit(stmt.body)
        if body.same_as(stmt.body):
            return stmt
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, span=stmt.span)


def replace_buffers(node, buffers: dict, variables: dict | None = None):
    """``node`` with each buffer in ``buffers`` (its loads, stores and allocation) replaced by
    its value there, and each variable in ``variables`` by its value."""

    def load(ld):
        new = buffers.get(ld.source)
        return tirx.BufferLoad(new, list(ld.indices)) if new is not None else ld

    def store(st):
        new = buffers.get(st.buffer)
        return tirx.BufferStore(new, st.value, list(st.indices), span=st.span) \
            if new is not None else st

    def alloc(a):
        new = buffers.get(a.buffer)
        return tirx.AllocBuffer(new, span=a.span) if new is not None else a

    rules = [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store), (tirx.AllocBuffer, alloc)]
    if variables:
        rules.append((tirx.Var, lambda v: variables.get(v, v)))
    return tvm_ffi.structural_map(node, rules)


def rebuild_for(loop, **changes):
    """A copy of ``loop`` with some fields changed."""
    fields = {
        "loop_var": loop.loop_var, "min": loop.min, "extent": loop.extent, "kind": loop.kind,
        "body": loop.body, "thread_binding": loop.thread_binding,
        "annotations": dict(loop.annotations), "span": loop.span,
    }
    fields.update(changes)
    return tirx.For(fields["loop_var"], fields["min"], fields["extent"], fields["kind"],
                    fields["body"], thread_binding=fields["thread_binding"],
                    annotations=fields["annotations"], span=fields["span"])


_failure = threading.local()


def prim_func_pass(name: str, fn):
    """A TVM pass named ``name`` that maps every PrimFunc with ``fn(func) -> func``.

    An exception raised by ``fn`` crosses TVM's C++ pass manager, which turns it into a plain
    RuntimeError; the original is kept so :func:`reraise_pass_error` can restore it.
    """

    def transform(func, mod, ctx):
        try:
            return fn(func)
        except Exception as exc:
            _failure.error = exc
            raise

    return tirx.transform.prim_func_pass(transform, opt_level=0, name=name)


def reraise_pass_error(exc: BaseException) -> None:
    """Raise the original exception of a Python pass that failed inside TVM, if any."""
    original = getattr(_failure, "error", None)
    _failure.error = None
    if original is not None and original is not exc:
        raise original.with_traceback(None) from None
