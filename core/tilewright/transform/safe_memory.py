"""Element accesses of global memory that may leave the tensor are guarded, as TileLang's.

A tile program indexes global tensors with block and loop indices (``B[bx * 8 + i]``): in the
last block of a size that is not a multiple of the tile, some of those indices pass the end.
TileLang makes every such access safe (its ``LegalizeSafeMemoryAccess``, on every backend):
a load outside the tensor reads 0, a store outside it is not made. Kernels rely on it
(TileLang's own examples store ``Logits[bx, idx]`` for ``idx`` up to the last block's end),
and without it a store past the end overwrites the memory after the tensor.

:func:`legalize_safe_memory` does the same on the tile IR, for every backend, before the
backend's pipeline: with the ranges of the enclosing loops and the conditions of the enclosing
``if`` statements, each index of an element load or store of a global buffer that cannot be
proven inside the buffer's extent gets a guard (``0 <= i``, ``i < n``: only the halves not
proven). A load becomes ``T.if_then_else(inside, A[i], 0)``; a store, ``if inside: B[i] =
...``; an atomic on one element (``T.atomic_add(C[i], v)``, also with ``return_prev``), made
only inside; ``T.atomic_load(A[i])``, made only inside, reads what a load outside reads.
Tile ops' regions are not element accesses: the ops guard their partial tiles themselves
(their reads outside read 0), but for a ``T.copy`` from a tensor with a safe value that may
be read outside it: that copy becomes a ``T.Parallel`` loop of element accesses, guarded as
above, so its padding is the safe value, as TileLang's. The safe values are the
kernel's (its block loop's annotation) and, inside a ``T.sblock`` with its own, the block's
(an ``AttrStmt`` around its body, which the pass removes). Accesses proven inside (a
size that is a multiple of the tile, every constant
shape) are left as they are, so such kernels do not change.

The pass config ``tw.disable_safe_memory`` (TileLang's ``TL_DISABLE_SAFE_MEMORY_ACCESS``,
``"tl.disable_safe_memory_legalize"``) leaves the kernel unguarded; ``tw.bounds_check`` stops the
kernel at the first access outside a buffer instead (:mod:`.bounds`, which runs first).
"""

from __future__ import annotations

import contextlib

import tvm
import tvm_ffi
from tvm import tirx

from ..ir import (
    ATOMIC_LOAD,
    ATOMIC_OPS,
    ATOMIC_PREV,
    SAFE_VALUES_KEY,
    THREAD_BINDING,
    decode,
    is_region,
)
from .lowering_utils import loop_nest, non_unit, region_index
from .walk import StmtMutator, prim_func_pass

DISABLE_KEY = "tw.disable_safe_memory"


def _is_global(buffer) -> bool:
    return str(buffer.scope()) == "global"


def _value(value: float, dtype: str):
    """``value`` as a constant of ``dtype``."""
    if dtype.startswith(("int", "uint", "bool")):
        return tirx.const(int(value), dtype)
    try:
        return tirx.const(value, dtype)
    except Exception:  # a dtype TVM makes no constant of directly (float8 ...)
        return tirx.Cast(dtype, tirx.const(value, "float32"))


def _zero(dtype: str):
    return _value(0.0, dtype)


def _all(conds):
    out = conds[0]
    for c in conds[1:]:
        out = tirx.And(out, c)
    return out


class _Guard(StmtMutator):
    def __init__(self):
        super().__init__()
        self.made = []  # (guarded load, its condition, the load) of the loads guarded here
        self.safe = {}  # a global tensor's name -> what its loads outside it read (the kernel's)

    def visit_For(self, stmt):
        values = stmt.annotations.get(SAFE_VALUES_KEY) if stmt.annotations else None
        if values is None:
            return super().visit_For(stmt)
        outer, self.safe = self.safe, {str(k): float(v) for k, v in values.items()}
        try:
            return super().visit_For(stmt)
        finally:
            self.safe = outer

    def visit_AttrStmt(self, stmt):
        """A ``T.sblock``'s safe values: its body with them over the enclosing ones, the
        scope itself removed (:func:`without_safe_value_scopes`)."""
        if str(stmt.attr_key) != SAFE_VALUES_KEY:
            return super().visit_AttrStmt(stmt)
        outer = self.safe
        self.safe = {**outer, **{str(k): float(v) for k, v in stmt.node.items()}}
        try:
            return self.visit(stmt.body)
        finally:
            self.safe = outer

    # -- conditions --------------------------------------------------------------------------
    def inside(self, buffer, indices, extents=None) -> list:
        """The conditions, not proven here, for ``indices`` (each with its extent, 1 by
        default) to lie inside ``buffer``."""
        conds = []
        for d, (index, size) in enumerate(zip(indices, buffer.shape)):
            dtype = str(index.ty) if hasattr(index, "ty") else "int32"
            size = tirx.Cast(dtype, size) if str(size.ty) != dtype else size
            last = index if extents is None else index + (tirx.Cast(dtype, extents[d]) - 1)
            for cond in (tirx.GE(index, tirx.const(0, dtype)), tirx.LT(last, size)):
                if not self.analyzer.can_prove(cond):
                    conds.append(cond)
        return conds

    # -- expressions -------------------------------------------------------------------------
    def _guard_load(self, load):
        if not _is_global(load.source):
            return load
        conds = self.inside(load.source, load.indices)
        if not conds:
            return load
        cond = _all(conds)
        name, dtype = str(load.source.name), str(load.ty)
        safe = _value(self.safe[name], dtype) if name in self.safe else _zero(dtype)
        guarded = tirx.if_then_else(cond, load, safe)
        self.made.append((guarded, cond, load))
        return guarded

    def _unguarded(self, expr):
        """``(load, condition, the value read outside)`` when ``expr`` is a load this pass
        guarded, else None."""
        return next(((load, cond, g.args[2]) for g, cond, load in self.made
                     if g.same_as(expr)), None)

    def _call(self, call):
        if not isinstance(call.op, tvm.ir.Op) or not call.args:
            return call
        made = self._unguarded(call.args[0])
        if made is None:
            return call
        # a region's start, an element's address and an atomic's destination are not loads
        if is_region(call) or call.op.name == "tirx.address_of":
            return tvm.ir.Call(call.op, [made[0], *call.args[1:]])
        if call.op.name in ATOMIC_PREV or call.op.name == ATOMIC_LOAD:
            inner = tvm.ir.Call(call.op, [made[0], *call.args[1:]], ret_ty=call.ty)
            outside = made[2] if call.op.name == ATOMIC_LOAD else _zero(str(call.ty))
            return tirx.if_then_else(made[1], inner, outside)
        return call

    def expr(self, expr):
        return tvm_ffi.structural_map(expr, [(tvm.ir.TensorLoad, self._guard_load),
                                             (tvm.ir.Call, self._call)])

    # -- statements --------------------------------------------------------------------------
    def visit_SeqStmt(self, stmt):
        """The statements in turn; after ``T.get_thread_binding``, the rest knows its index
        lies in ``[0, threads)``."""
        out, changed = [], False
        with contextlib.ExitStack() as scopes:
            for part in stmt.seq:
                new = self.visit(part)
                changed = changed or not new.same_as(part)
                out.append(new)
                call = decode(part)
                if call is not None and call.name == THREAD_BINDING.name:
                    index = tirx.BufferLoad(call.operands["dst"].buffer,
                                            [tirx.const(0, "int32")])
                    extent = int(call.attrs["threads"].split(",")[int(call.attrs["dim"])])
                    scopes.enter_context(self.analyzer.constraint_scope(tirx.And(
                        index >= 0, index < extent)))
        return tirx.SeqStmt(out) if changed else stmt

    def visit_IfThenElse(self, stmt):
        cond = self.expr(stmt.condition)
        with self.analyzer.constraint_scope(stmt.condition):
            then_case = self.visit(stmt.then_case)
        else_case = None
        if stmt.else_case is not None:
            with self.analyzer.constraint_scope(tirx.Not(stmt.condition)):
                else_case = self.visit(stmt.else_case)
        if cond.same_as(stmt.condition) and then_case.same_as(stmt.then_case) and (
                else_case is None or else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(cond, then_case, else_case, span=stmt.span)

    def visit_BufferStore(self, stmt):
        conds = self.inside(stmt.buffer, stmt.indices) if _is_global(stmt.buffer) else []
        # the value is read only where the store is made (B[i] = A[i] needs one guard)
        with self.analyzer.constraint_scope(_all(conds)) if conds else \
                contextlib.nullcontext():
            value = self.expr(stmt.value)
        indices = [self.expr(i) for i in stmt.indices]
        new = stmt if value.same_as(stmt.value) and all(
            a.same_as(b) for a, b in zip(indices, stmt.indices)) else \
            tirx.BufferStore(stmt.buffer, value, indices, span=stmt.span)
        return tirx.IfThenElse(_all(conds), new, None, span=stmt.span) if conds else new

    def visit_Bind(self, stmt):
        value = self.expr(stmt.value)
        return stmt if value.same_as(stmt.value) else tirx.Bind(stmt.var, value,
                                                                span=stmt.span)

    def visit_Evaluate(self, stmt):
        call = decode(stmt)
        if call is None:
            value = self.expr(stmt.value)
            return stmt if value.same_as(stmt.value) else tirx.Evaluate(value, span=stmt.span)
        if call.name == "copy" and self._padded(call.operands["src"]):
            return self.visit(_element_copy(call, stmt.span))
        # a portable tile op: its expression operands are element accesses; its regions are
        # not. A dialect op's expressions are the dialect's (addresses, descriptors ...).
        args = list(stmt.value.args)
        for i, operand in enumerate(call.schema.operands):
            if operand.kind != "region" and not is_region(args[i]) and \
                    not call.schema.dialect:
                args[i] = self.expr(args[i])
        new = stmt if all(a.same_as(b) for a, b in zip(args, stmt.value.args)) else \
            tirx.Evaluate(tvm.ir.Call(stmt.value.op, args), span=stmt.span)
        if call.name in ATOMIC_OPS and call.attrs.get("element"):
            dst = call.operands["dst"]
            if _is_global(dst.buffer):
                conds = self.inside(dst.buffer, dst.starts, dst.extents)
                if conds:
                    return tirx.IfThenElse(_all(conds), new, None, span=stmt.span)
        return new

    def _padded(self, src) -> bool:
        """Whether a copy from ``src`` may read outside a global tensor whose reads outside
        read a value of the kernel's (``T.annotate_safe_value``) rather than a tile copy's 0."""
        return _is_global(src.buffer) and str(src.buffer.name) in self.safe and \
            bool(self.inside(src.buffer, src.starts, src.extents))

    def visit_While(self, stmt):
        cond = self.expr(stmt.condition)
        body = self.visit(stmt.body)
        if cond.same_as(stmt.condition) and body.same_as(stmt.body):
            return stmt
        return tirx.While(cond, body, span=stmt.span)


def _element_copy(call, span):
    """``T.copy(src, dst)`` as a ``T.Parallel`` loop of element loads and stores, which the
    pass then guards like any other (a load outside ``src`` reads its safe value)."""
    src, dst = call.operands["src"], call.operands["dst"]
    sdims, ddims = non_unit(src), non_unit(dst)
    dtype = str(dst.buffer.dtype)

    def store(loop_vars):
        value = tirx.BufferLoad(src.buffer, region_index(src, loop_vars, sdims))
        return tirx.BufferStore(dst.buffer, value if str(value.ty) == dtype else
                                tirx.Cast(dtype, value), region_index(dst, loop_vars, ddims),
                                span=span)

    return loop_nest([src.extents[d] for d in sdims], store)


def legalize_safe_memory(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its global element accesses guarded (see the module), without the
    scopes of its ``T.sblock`` safe values."""
    body = _Guard().visit(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


class _Unscoped(StmtMutator):
    def visit_AttrStmt(self, stmt):
        if str(stmt.attr_key) == SAFE_VALUES_KEY:
            return self.visit(stmt.body)
        return super().visit_AttrStmt(stmt)


def without_safe_value_scopes(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` without the scopes of its ``T.sblock`` safe values (``AttrStmt``
    :data:`SAFE_VALUES_KEY`, which :mod:`tilewright.language.script_blocks` makes), their
    bodies where they stood: what a kernel left unguarded (``tw.disable_safe_memory``)
    hands its backend, which knows no such scope."""
    body = _Unscoped().visit(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def safe_memory_pass(name: str = "LegalizeSafeMemoryAccess"):
    return prim_func_pass(name, legalize_safe_memory)
