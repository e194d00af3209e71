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

An index's interval bound takes each variable at its own extremes, which overshoots when a
loop's range depends on an enclosing loop's variable (a butterfly's ``local[j * (1 << (i + 1))
+ k]`` with ``j < 8 // (1 << (i + 1))``, ``k < (1 << (i + 1)) // 2``: 27 at most by intervals,
7 in fact). Before refusing an access to a tile, the check bounds it again for each value of
the enclosing loops of constant range that other loops' ranges or the index depend on (at most
:data:`CASES` cases together): each case's bound is an interval bound too, so the union of the
cases is never narrower than the accesses it covers.

An index the analysis cannot bound at all (a shift or a product that would leave its type in
iterations that never run) and that no case bounds outside the tile is evaluated in every
iteration of the loops it depends on, when they number at most :data:`ITERATIONS` and every
range, condition and index value is a constant once the loops' variables are: refused if one
value leaves the tile, proven if none does.

A loop whose range depends on a value known only at run time (a length read from a tensor, a
``T.dynamic`` size) is not bounded by the analysis: its accesses are never compile-time errors
(the bound would be the range of the size's type, not of the program), only guarded at run time.

:func:`instrument_bounds` (pass config ``tw.bounds_check``) inserts a ``T.device_assert``
before each statement whose accesses the analysis cannot prove in bounds, so that every
backend stops the kernel at the first access outside its buffer and names the user's line.
Accesses inside a branch of ``T.if_then_else`` are checked only when that branch is taken.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings

import tvm
import tvm_ffi
from tvm import sym as arith
from tvm import tirx

from ..errors import KernelError, span_location
from ..ir import decode, make_call, schema_of_call
from .walk import StmtMutator, rebuild_for

_IF_THEN_ELSE = "tirx.if_then_else"
# the most combinations of enclosing loops' values an access is bounded in, one at a time
CASES = 64
# the most iterations (of every enclosing loop listed) an index no case bounds is evaluated
# in, one by one
ITERATIONS = 4096


class _NotEnumerable(Exception):
    """An index's values cannot be listed: too many iterations, or a range, a condition or the
    index not a constant in some iteration (a value read from memory, a size known at run
    time, a fold TVM refuses)."""


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


def _free_vars(expr) -> set:
    found: list = []
    tvm_ffi.structural_walk(expr, (tirx.Var, found.append))
    return set(found)


def _type_limited(expr, analyzer) -> bool:
    """Whether ``analyzer`` bounds ``expr`` by its type's limits on either side (an
    ``if tx >= 256:`` around a thread index kept in a variable bounds it from below only:
    ``(tx - 256) // 8`` there is not the narrower range the division of the upper limit
    gives)."""
    bound = analyzer.const_int_bound(expr)
    bits = tvm.DataType(str(expr.ty)).bits
    signed = str(expr.ty).startswith("int")
    low = -(1 << (bits - 1)) if signed else 0
    high = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    return bits >= 32 and (bound.min_value <= low or bound.min_value == bound.NEG_INF or
                           bound.max_value >= high or bound.max_value == bound.POS_INF)


def _reads_unbounded(expr, analyzer) -> bool:
    """Whether ``expr`` reads an integer from memory that ``analyzer`` bounds only by its
    type's limits."""
    found = []

    def load(e):
        if not found and str(getattr(e, "ty", "")).startswith(("int", "uint")) and \
                _type_limited(e, analyzer):
            found.append(e)

    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, load))
    return bool(found)


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
        self.conditions: list = []  # of the enclosing ``if`` statements, outermost first

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
        extent = _static(stmt.extent)
        if extent is not None and extent <= 0:
            return stmt  # its body never runs (T.serial(0)): no access in it happens
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
        then_case = self._visit_under(stmt.condition, stmt.then_case)
        else_case = None
        if stmt.else_case is not None:
            else_case = self._visit_under(tirx.Not(stmt.condition), stmt.else_case)
        if then_case.same_as(stmt.then_case) and (
                else_case is None or else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span)

    def _visit_under(self, condition, stmt):
        self.conditions.append(condition)
        try:
            with self.analyzer.constraint_scope(condition):
                return self.visit(stmt)
        finally:
            self.conditions.pop()

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
    def _range(self, expr, analyzer=None) -> tuple[float, float]:
        """The range of ``expr`` (under ``analyzer``, default the walk's); an end at its type's
        limit is unknown (infinite), and so is the whole range of an expression of a value read
        from memory that the analysis cannot bound (an int32 variable, a thread index kept in
        one): ``(tx * 4) // 64`` of such a value is not the narrower range the division of its
        type's limits gives."""
        analyzer = analyzer or self.analyzer
        if _reads_unbounded(expr, analyzer):
            return float("-inf"), float("inf")
        bound = analyzer.const_int_bound(expr)
        lo, hi = bound.min_value, bound.max_value
        bits = tvm.DataType(str(expr.ty)).bits if str(getattr(expr, "ty", "")).startswith(
            "int") else 64
        return (float("-inf") if lo == bound.NEG_INF or lo <= -(1 << (bits - 1)) else lo,
                float("inf") if hi == bound.POS_INF or hi >= (1 << (bits - 1)) - 1 else hi)

    def _split_range(self, expr, coarse: tuple[float, float]) -> tuple[float, float]:
        """The range of ``expr`` as the union of its ranges in each case of :meth:`_cases`;
        ``coarse`` when there is nothing to split or some case is unbounded. Cases in which an
        enclosing loop runs no iteration are left out."""
        lo, hi, split = float("inf"), float("-inf"), False
        for _, case in self._cases(expr):
            split = True
            if case is None:
                continue  # an enclosing loop runs no iteration in this case
            if case[0] == float("-inf") or case[1] == float("inf"):
                return coarse
            lo, hi = min(lo, case[0]), max(hi, case[1])
        return coarse if not split or lo > hi else (lo, hi)

    def _cases(self, expr):
        """``(values, range of expr)`` for each value of the enclosing loops of constant range
        whose variables other enclosing loops' ranges or ``expr`` depend on (those bounding
        other loops first, then the shortest, while the cases number at most :data:`CASES`);
        the range None where an enclosing loop runs no iteration; nothing when no loop is
        split."""
        used = _free_vars(expr)
        bounding: set = set()
        for loop in self.loops:
            bounding |= _free_vars(loop.min) | _free_vars(loop.extent)
        candidates = [loop for loop in self.loops if _static(loop.min) is not None and
                      _static(loop.extent) is not None and _static(loop.extent) > 1 and
                      (loop.loop_var in bounding or loop.loop_var in used)]
        candidates.sort(key=lambda loop: (loop.loop_var not in bounding, _static(loop.extent)))
        chosen: set = set()
        cases = 1
        for loop in candidates:
            if cases * _static(loop.extent) <= CASES:
                chosen.add(loop.loop_var)
                cases *= _static(loop.extent)
        split = [loop for loop in self.loops if loop.loop_var in chosen]
        if not split:
            return
        for values in itertools.product(*(range(_static(loop.min),
                                                _static(loop.min) + _static(loop.extent))
                                          for loop in split)):
            named = dict(zip((loop.loop_var for loop in split), values))
            yield named, self._case_range(expr, named)

    def _leaving_case(self, index, size: int):
        """For a tile index the analysis cannot bound as a whole (a shift or a product that
        leaves its type in some iteration it cannot rule out), the first case of
        :meth:`_cases` in which it is bounded and leaves ``[0, size)``: ``(values, lo, hi)``;
        None when there is none."""
        if _reads_unbounded(index, self.analyzer):
            return None  # a value read from memory: bounded at run time only
        for values, case in self._cases(index):
            if case is not None and float("-inf") < case[0] and case[1] < float("inf") and \
                    (case[0] < 0 or case[1] >= size):
                return values, int(case[0]), int(case[1])
        return None

    def _leaving_value(self, index, size: int):
        """For a tile index no case of :meth:`_cases` bounds: ``(values, value)`` of the first
        iteration (in loop order) whose ``index`` leaves ``[0, size)``, False when every
        iteration's stays inside, None when the iterations cannot be listed (see
        :data:`ITERATIONS`). The loops listed are those the index, the enclosing conditions
        and the listed loops' ranges depend on, and those whose range depends on a listed
        loop's variable (in some iterations they run none); the others are taken to run."""
        relevant = _free_vars(index)
        for condition in self.conditions:
            relevant |= _free_vars(condition)
        changed = True
        while changed:
            changed = False
            for loop in self.loops:
                deps = _free_vars(loop.min) | _free_vars(loop.extent)
                if loop.loop_var in relevant or deps & relevant:
                    grown = relevant | deps | {loop.loop_var}
                    changed, relevant = changed or grown != relevant, grown
        listed = [loop for loop in self.loops if loop.loop_var in relevant]
        if relevant - {loop.loop_var for loop in listed}:
            return None  # a variable no enclosing loop binds (a size, a value of memory)
        count = [0]

        def constant(expr, values: dict) -> int:
            analyzer = arith.Analyzer()
            for var, value in values.items():
                analyzer.bind(var, tirx.const(value, var.ty))
            try:
                folded = analyzer.simplify(expr)
            except (ValueError, tvm.error.InternalError) as exc:  # an overflow, a / 0
                raise _NotEnumerable from exc
            if not isinstance(folded, tirx.IntImm):
                raise _NotEnumerable
            return int(folded.value)

        def walk(level: int, values: dict):
            if level == len(listed):
                if all(constant(c, values) for c in self.conditions):
                    value = constant(index, values)
                    if not 0 <= value < size:
                        return values, value
                return None
            loop = listed[level]
            start = constant(loop.min, values)
            for value in range(start, start + constant(loop.extent, values)):
                count[0] += 1  # every loop's iterations: an outer one may run empty inner ones
                if count[0] > ITERATIONS:
                    raise _NotEnumerable
                found = walk(level + 1, {**values, loop.loop_var: value})
                if found is not None:
                    return found
            return None

        try:
            found = walk(0, {})
        except _NotEnumerable:
            return None
        return found if found is not None else False

    def _case_range(self, expr, values: dict) -> tuple[float, float] | None:
        """The range of ``expr`` with the loop variables in ``values`` at those values (the
        other enclosing loops over their ranges, under the enclosing conditions); None when
        some enclosing loop runs no iteration then."""
        analyzer = arith.Analyzer()
        for loop in self.loops:
            var = loop.loop_var
            if var in values:
                analyzer.bind(var, tvm.ir.Range.from_min_extent(
                    tirx.const(values[var], var.ty), tirx.const(1, var.ty)))
                continue
            if analyzer.const_int_bound(loop.extent).max_value <= 0:
                return None
            analyzer.bind(var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
        with contextlib.ExitStack() as scopes:
            for condition in self.conditions:
                scopes.enter_context(analyzer.constraint_scope(condition))
            return self._range(expr, analyzer)

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
                lo, hi = self._split_range(start, (lo, hi))
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
                    lo, hi = self._split_range(index, (lo, hi))
                    if 0 <= lo and hi < static:
                        continue  # proven by cases
                    raise KernelError(f"{buffer.name}[{', '.join(map(str, node.indices))}] "
                                      f"leaves tile {buffer.name} of shape {_shape(buffer)}: "
                                      f"index {index} of dimension {dim} ranges over "
                                      f"[{int(lo)}, {int(hi)}]", where)
                if _is_tile(buffer) and (lo == float("-inf") or hi == float("inf")):
                    leaving = self._leaving_case(index, static)
                    if leaving is not None:
                        values, lo, hi = leaving
                        when = ", ".join(f"{var} = {value}" for var, value in values.items())
                        raise KernelError(
                            f"{buffer.name}[{', '.join(map(str, node.indices))}] leaves tile "
                            f"{buffer.name} of shape {_shape(buffer)}: index {index} of "
                            f"dimension {dim} ranges over [{lo}, {hi}] when {when}", where)
                    value = None if _reads_unbounded(index, self.analyzer) else \
                        self._leaving_value(index, static)
                    if value is False:
                        continue  # every iteration's index is inside
                    if value is not None:
                        values, value = value
                        when = ", ".join(f"{var} = {v}" for var, v in values.items())
                        raise KernelError(
                            f"{buffer.name}[{', '.join(map(str, node.indices))}] leaves tile "
                            f"{buffer.name} of shape {_shape(buffer)}: index {index} of "
                            f"dimension {dim} is {value} when {when}", where)
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


class _NegativeIndices(_Bounds):
    """:func:`legalize_negative_indices`: the walk's loop ranges and conditions bound each
    index; the accesses are rewritten, not checked."""

    def __init__(self):
        super().__init__(instrument=False)

    def _legal(self, buffer, indices) -> list:
        out = []
        for index, size in zip(indices, buffer.shape):
            static = _static(size)
            if static is not None and "x" not in str(getattr(index, "ty", "")):
                lo, hi = self._range(index)
                if hi < 0 and lo >= -static:
                    index = index + static
            out.append(index)
        return out

    def _loads(self, expr):
        def load(node):
            indices = self._legal(node.source, node.indices)
            if all(a.same_as(b) for a, b in zip(indices, node.indices)):
                return node
            return tirx.BufferLoad(node.source, indices)

        return tvm_ffi.structural_map(expr, (tvm.ir.TensorLoad, load))

    def visit_BufferStore(self, stmt):
        indices = self._legal(stmt.buffer, [self._loads(i) for i in stmt.indices])
        value = self._loads(stmt.value)
        if value.same_as(stmt.value) and all(a.same_as(b) for a, b in
                                             zip(indices, stmt.indices)):
            return stmt
        return tirx.BufferStore(stmt.buffer, value, indices, span=stmt.span)

    def visit_Evaluate(self, stmt):
        if decode(stmt) is not None:
            return stmt  # a tile op: its regions are checked, not rewritten
        value = self._loads(stmt.value)
        return stmt if value.same_as(stmt.value) else tirx.Evaluate(value, span=stmt.span)


def legalize_negative_indices(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each element index that is negative in every iteration and no further
    below zero than its dimension's size counted from the end, as Python and TileLang count
    it (``A[-1]`` is the last element, ``A[-i - 1]`` with ``i < 4`` the last four): the size
    is added. An index only sometimes negative is left to the bounds checks."""
    body = _NegativeIndices().visit(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def check_bounds(func: tirx.PrimFunc) -> None:
    """Raise a :class:`KernelError` at the user's line for an access or tile-op region that
    the module docstring calls an error; warn for a global region wholly outside."""
    _Bounds(instrument=False).visit(func.body)


def instrument_bounds(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with a ``T.device_assert`` before each statement whose element accesses are
    not provably inside their buffers (and the checks of :func:`check_bounds`)."""
    body = _Bounds(instrument=True).visit(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["check_bounds", "instrument_bounds", "legalize_negative_indices"]
