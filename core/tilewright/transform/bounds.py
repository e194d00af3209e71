"""Bounds of element accesses and tile-op regions in a tile program, before any backend runs.

:func:`check_bounds` runs on every compile. With the loop ranges and the conditions of the
enclosing ``if`` statements, it bounds every index of every element access (``A[i, j]``) and
the region of every tile op:

- an access or region that lies outside its buffer for every iteration (a constant index past
  the end, say) is a compile-time error at the user's line;
- an access to a tile (shared, fragment or local memory: its shape is the kernel's own) that
  leaves it for some iterations is an error too -- it would overwrite a neighbouring tile;
- a tile-op region of a global tensor that lies wholly outside it is a warning (partial tiles of
  global tensors are legal: copies guard them).

A loop whose range depends on a value known only at run time (a length read from a tensor, a
``T.dynamic`` size) is not bounded by the analysis: its accesses are never compile-time errors
(the bound would be the range of the size's type, not of the program), only guarded at run time.

:func:`instrument_bounds` (pass config ``tw.bounds_check``) inserts a ``T.device_assert``
before each statement whose accesses the analysis cannot prove in bounds, so that every
backend stops the kernel at the first access outside its buffer and names the user's line.
Accesses inside a branch of ``T.if_then_else`` are checked only when that branch is taken.
"""

from __future__ import annotations

import warnings

import tvm
import tvm_ffi
from tvm import sym as arith
from tvm import tirx

from ..errors import KernelError, span_location
from ..ir import decode, make_call, schema_of_call
from .walk import StmtMutator, rebuild_for

_IF_THEN_ELSE = "tirx.if_then_else"


def _is_tile(buffer) -> bool:
    return buffer.scope() not in ("global", "")


def _static(extent) -> int | None:
    return int(extent.value) if isinstance(extent, tirx.IntImm) else None


def _shape(buffer) -> str:
    return "(" + ", ".join(str(s) for s in buffer.shape) + ")"


def _accesses(expr, found: list, conds: tuple = ()) -> None:
    """Append (load, conditions under which it is evaluated) for each load in ``expr``."""
    def visit(node):
        if isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op):
            if node.op.name == _IF_THEN_ELSE:
                cond, then, other = node.args
                _accesses(cond, found, conds)
                _accesses(then, found, (*conds, cond))
                _accesses(other, found, (*conds, tirx.Not(cond)))
                return tvm_ffi.WalkResult.SKIP
            if schema_of_call(node) is not None:
                return tvm_ffi.WalkResult.SKIP  # regions: checked as the op's regions
        elif isinstance(node, tvm.ir.TensorLoad):
            found.append((node, conds))
        return None

    tvm_ffi.structural_walk(expr, visit, order="pre")


class _Nest:
    """The ``T.Parallel`` loops around a statement, and the checks hoisted in front of them."""

    def __init__(self):
        self.ranges: dict = {}
        self.conditional = 0
        self.asserts: list = []
        self.seen: set[str] = set()


def _unbounded(interval) -> bool:
    return str(interval.min_value) == "neg_inf" or str(interval.max_value) == "pos_inf"


class _Bounds(StmtMutator):
    """Checks (and, with ``instrument``, guards) accesses. A guard for an access in a
    ``T.Parallel`` nest, outside any condition of the nest, is hoisted in front of the nest as
    a check of the index's range over the nest's loops (backends keep parallel bodies free of
    other statements); others stay next to their statement."""

    def __init__(self, instrument: bool):
        super().__init__()
        self.instrument = instrument
        self.nest: _Nest | None = None

    # -- context ------------------------------------------------------------------------
    def _run_time(self, stmt) -> bool:
        """Whether the loop's range depends on a value known only at run time (a size read
        from a tensor, a ``T.dynamic`` size): its analyser bound is only the type's range."""
        loops = {loop.loop_var for loop in self.loops}
        if self.nest is not None:
            loops |= set(self.nest.ranges)
        free = []
        for expr in (stmt.min, stmt.extent):
            tvm_ffi.structural_walk(expr, (tirx.Var, free.append))
        return any(v not in loops for v in free)

    def visit_For(self, stmt):
        parallel = stmt.annotations.get("tw.loop") == "parallel" if stmt.annotations else False
        if not parallel and self._run_time(stmt):
            # unbound: its accesses are not proven out of range at compile time, only
            # guarded at run time (tw.bounds_check)
            self.loops.append(stmt)
            try:
                body = self.visit(stmt.body)
            finally:
                self.loops.pop()
            return stmt if body.same_as(stmt.body) else rebuild_for(stmt, body=body)
        if not parallel:
            return super().visit_For(stmt)
        outer = self.nest is None
        if outer:
            self.nest = _Nest()
        nest = self.nest
        nest.ranges[stmt.loop_var] = arith.IntervalSet(stmt.min, stmt.min + stmt.extent - 1)
        try:
            loop = super().visit_For(stmt)
        finally:
            if outer:
                self.nest = None
        if not outer or not nest.asserts:
            return loop
        return tirx.SeqStmt([*nest.asserts, loop])

    def visit_IfThenElse(self, stmt):
        if self.nest is not None:
            self.nest.conditional += 1
            try:
                return self._visit_if(stmt)
            finally:
                self.nest.conditional -= 1
        return self._visit_if(stmt)

    def _visit_if(self, stmt):
        with self.analyzer.constraint_scope(stmt.condition):
            then_case = self.visit(stmt.then_case)
        else_case = None
        if stmt.else_case is not None:
            with self.analyzer.constraint_scope(tirx.Not(stmt.condition)):
                else_case = self.visit(stmt.else_case)
        if then_case.same_as(stmt.then_case) and (
                else_case is None or else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span)

    # -- statements -----------------------------------------------------------------------
    def visit_BufferStore(self, stmt):
        where = span_location(stmt.span)
        found: list = [(stmt, ())]
        _accesses(stmt.value, found)
        for index in stmt.indices:
            _accesses(index, found)
        return self._checked(stmt, found, where)

    def visit_Evaluate(self, stmt):
        where = span_location(stmt.span)
        call = decode(stmt)
        found: list = []
        if call is None:
            _accesses(stmt.value, found)
            return self._checked(stmt, found, where)
        for region in call.regions("read") + call.regions("write"):
            self._region(call.name, region, where)
        for value in call.operands.values():
            if not hasattr(value, "buffer"):
                _accesses(value, found)
        return self._checked(stmt, found, where)

    # -- checks ---------------------------------------------------------------------------
    def _range(self, expr) -> tuple[float, float]:
        """The range of ``expr``; an end at its type's limit is unknown (infinite), and so is
        the whole range of an expression of a value read from memory that the analysis cannot
        bound (an int32 variable, a thread index kept in one): ``(tx * 4) // 64`` of such a
        value is not the narrower range the division of its type's limits gives."""
        if self._reads_unbounded(expr):
            return float("-inf"), float("inf")
        bound = self.analyzer.const_int_bound(expr)
        lo, hi = bound.min_value, bound.max_value
        bits = tvm.DataType(str(expr.ty)).bits if str(getattr(expr, "ty", "")).startswith(
            "int") else 64
        return (float("-inf") if lo == bound.NEG_INF or lo <= -(1 << (bits - 1)) else lo,
                float("inf") if hi == bound.POS_INF or hi >= (1 << (bits - 1)) - 1 else hi)

    def _reads_unbounded(self, expr) -> bool:
        found = []

        def load(e):
            if not found and str(getattr(e, "ty", "")).startswith(("int", "uint")) and \
                    self._type_limited(e):
                found.append(e)

        tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, load))
        return bool(found)

    def _type_limited(self, expr) -> bool:
        """Whether the analysis bounds ``expr`` by its type's limits on either side (an
        ``if tx >= 256:`` around a thread index kept in a variable bounds it from below
        only: ``(tx - 256) // 8`` there is not the narrower range the division of the upper
        limit gives)."""
        bound = self.analyzer.const_int_bound(expr)
        bits = tvm.DataType(str(expr.ty)).bits
        signed = str(expr.ty).startswith("int")
        low = -(1 << (bits - 1)) if signed else 0
        high = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
        return bits >= 32 and (bound.min_value <= low or bound.min_value == bound.NEG_INF or
                               bound.max_value >= high or bound.max_value == bound.POS_INF)

    def _region(self, op: str, region, where) -> None:
        buffer = region.buffer
        for dim, (start, extent, size) in enumerate(zip(region.starts, region.extents,
                                                        buffer.shape)):
            size, length = _static(size), _static(extent)
            if size is None or length is None:
                continue
            lo, hi = self._range(start)
            if hi + length <= 0 or lo >= size:
                message = (f"T.{op}: the region of {buffer.name} starting at {start} "
                           f"(dimension {dim}, {length} wide) lies wholly outside its shape "
                           f"{_shape(buffer)}")
                if _is_tile(buffer):
                    raise KernelError(message, where)
                warnings.warn(f"{where}: {message}" if where else message, RuntimeWarning,
                              stacklevel=2)
                return
            if _is_tile(buffer) and (lo < 0 or hi + length > size) and lo > float("-inf") \
                    and hi < float("inf"):
                raise KernelError(f"T.{op}: the region of tile {buffer.name} starting at "
                                  f"{start} (dimension {dim}, {length} wide) leaves its shape "
                                  f"{_shape(buffer)}: the start ranges over [{int(lo)}, "
                                  f"{int(hi)}]", where)

    def _access_in_bounds(self, node, conds, where):
        """The condition under which the access is in bounds, after the static checks; None
        when the analysis proves it always is."""
        buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
        parts = []
        for dim, (index, size) in enumerate(zip(node.indices, buffer.shape)):
            if "x" in str(getattr(index, "ty", "")):
                continue  # vector accesses appear only after lowering
            static = _static(size)
            if static is not None and not conds:
                lo, hi = self._range(index)
                if hi < 0 or lo >= static:
                    raise KernelError(f"{buffer.name}[{', '.join(map(str, node.indices))}] is "
                                      f"out of bounds: index {index} of dimension {dim} is "
                                      f"always outside [0, {static})", where)
                if _is_tile(buffer) and (lo < 0 or hi >= static) and lo > float("-inf") and \
                        hi < float("inf"):
                    raise KernelError(f"{buffer.name}[{', '.join(map(str, node.indices))}] "
                                      f"leaves tile {buffer.name} of shape {_shape(buffer)}: "
                                      f"index {index} of dimension {dim} ranges over "
                                      f"[{int(lo)}, {int(hi)}]", where)
            cond = tirx.And(index >= 0, index < size)
            if not self.analyzer.can_prove(cond):
                parts.append(cond)
        if not parts:
            return None
        ok = parts[0]
        for part in parts[1:]:
            ok = tirx.And(ok, part)
        for cond in conds:
            ok = tirx.Or(tirx.Not(cond), ok)
        return ok

    def _hoisted(self, node, ok):
        """``ok`` over the whole parallel nest, free of its loop variables; None if the
        access's range is not known in closed form."""
        parts = []
        buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
        for index, size in zip(node.indices, buffer.shape):
            interval = self.analyzer.int_set(index, self.nest.ranges)
            if _unbounded(interval):
                return None
            parts.append(tirx.And(interval.min_value >= 0, interval.max_value < size))
        out = parts[0]
        for part in parts[1:]:
            out = tirx.And(out, part)
        return self.analyzer.simplify(out)

    def _checked(self, stmt, found: list, where):
        asserts = []
        for node, conds in found:
            ok = self._access_in_bounds(node, conds, where)
            if ok is None or not self.instrument:
                continue
            buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
            text = (f"{where}: " if where else "") + \
                f"index out of bounds: {buffer.name}[{', '.join(map(str, node.indices))}] " \
                f"outside its shape {_shape(buffer)}"
            hoisted = self._hoisted(node, ok) if self.nest is not None and not conds and \
                not self.nest.conditional else None
            if hoisted is not None:
                if text not in self.nest.seen:
                    self.nest.seen.add(text)
                    self.nest.asserts.append(make_call("device_assert", {"cond": hoisted},
                                                       {"msg": text}, span=stmt.span))
                continue
            asserts.append(make_call("device_assert", {"cond": ok}, {"msg": text},
                                     span=stmt.span))
        if not asserts:
            return stmt
        return tirx.SeqStmt([*asserts, stmt])


def check_bounds(func: tirx.PrimFunc) -> None:
    """Raise a :class:`KernelError` at the user's line for an access or tile-op region that
    the module docstring calls an error; warn for a global region wholly outside."""
    _Bounds(instrument=False).visit(func.body)


def instrument_bounds(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with a ``T.device_assert`` before each statement whose element accesses are
    not provably inside their buffers (and the checks of :func:`check_bounds`)."""
    body = _Bounds(instrument=True).visit(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["check_bounds", "instrument_bounds"]
