"""``T.SimtVF(threads=N)`` as the code of one SIMT thread, with the barriers between threads.

The scope (``AttrStmt(tid, SIMT_KEY, N, body)``, :mod:`..language.vf`) keeps its statements
in order; each becomes what thread ``tid`` runs (:mod:`..facts.simt`):

- a ``T.Parallel`` nest of ``E`` iterations: the iterations numbered row-major, thread
  ``tid`` runs iterations ``tid``, ``tid + N``, ... (a serial loop of ``ceil(E / N)`` steps,
  guarded where ``N`` does not divide ``E``), each with the nest's variables recovered from
  its number;
- any other statement (indexed by ``T.get_thread_binding()``): as written, by every thread.

``tid`` is the thread's linear index; in a block of two or three dimensions the indices along
them (``T.get_thread_binding(d)``, expressions of ``tid``) are, for the analyses below, the
variables of the block's dimensions (``tid = x + y * X + z * X * Y``), each its own thread
variable.

Between two statements, a barrier (``asc_syncthreads()``) is inserted where the later one
touches a UB tile that an earlier one since the last barrier touched, one of them writing,
and the same thread is not proven to touch each element in both (the same nest shape and
the same indices; or the same index ``tid + c`` in one dimension). Within one statement no
barrier can order the threads: a tile written there must be written at an index that tells
the threads apart (a nest variable, or each dimension's index, plus something the threads
share) and read
there at that same index; anything else is an error at the statement's line. Tiles allocated
inside the scope are allocated before it; the threads touch UB tiles and GM tensors
(:data:`..facts.simt.GM`), which these rules treat alike.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode
from tvm import sym, tirx

from ..facts.keys import SIMT_KEY
from ..facts.simt import BARRIER, GM, GM_DTYPES, UB, block_of

_ANALYZER = sym.Analyzer()


class _Access:
    """One load or store of a thread's statement: ``owner`` says which thread runs it
    (``("nest", extents, variables)`` or ``("thread", extents, axes)``: the variables of the
    block's dimensions of more than one thread, the indices written in them)."""

    def __init__(self, buffer, indices, write: bool, owner):
        self.buffer, self.indices, self.write, self.owner = buffer, list(indices), write, owner


def barrier() -> tirx.Stmt:
    """The SIMT barrier statement."""
    return tirx.Evaluate(tirx.call_extern("int32", BARRIER))


def is_barrier(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
        len(stmt.value.args) == 1 and isinstance(stmt.value.args[0], tvm.ir.StringImm) and \
        str(stmt.value.args[0].value) == BARRIER


def _uses(e, variables) -> bool:
    found = []
    tvm_ffi.structural_walk(e, (tirx.Var, lambda v: found.append(v) if any(
        v.same_as(x) for x in variables) else None))
    return bool(found)


def _subst(e, mapping: dict):
    return tvm_ffi.structural_map(e, (tirx.Var, lambda v: next(
        (new for old, new in mapping.items() if old.same_as(v)), v)))


def _accesses(stmt, owner, index=lambda i: i) -> list[_Access]:
    found = []

    def add(buffer, indices, write):
        found.append(_Access(buffer, [index(i) for i in indices], write, owner))

    tvm_ffi.structural_walk(stmt, [
        (tvm.ir.TensorLoad, lambda x: add(x.source, x.indices, False)),
        (tirx.BufferStore, lambda x: add(x.buffer, x.indices, True))])
    return found


def _loop_vars(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.For, lambda f: found.append(f.loop_var)))
    return found


def _owned(index, by, threads, varying, extent: int) -> bool:
    """Whether ``index`` is ``by + c`` with ``c`` the same for every thread (no thread
    variable in it; a variable of ``varying`` only in a multiple of ``by``'s ``extent``, so
    that ``by`` is ``index`` modulo ``extent``)."""
    rest = _ANALYZER.simplify(index - by)
    if _uses(rest, [by, *threads]):
        return False
    return not _uses(rest, varying) or _ANALYZER.can_prove(tirx.floormod(rest, extent) == 0)


def _distinct(access, varying) -> bool:
    """Whether the threads touch different elements with ``access``: each thread variable
    is one index, offset by what the threads share or by a multiple of the variable's extent
    (``varying``: the statement's other loop variables)."""
    _, extents, variables = access.owner
    return all(any(_owned(i, v, variables, varying, e) for i in access.indices)
               for v, e in zip(variables, extents))


def _same_thread(a: _Access, b: _Access) -> bool:
    """Whether one thread makes both accesses of each element they share."""
    if a.owner[0] != b.owner[0]:
        return False
    if a.owner[0] == "nest":
        (_, ext_a, vars_a), (_, ext_b, vars_b) = a.owner, b.owner
        if ext_a != ext_b:
            return False
        mapping = dict(zip(vars_b, vars_a))
        return all(_ANALYZER.can_prove(x == _subst(y, mapping))
                   for x, y in zip(a.indices, b.indices))
    _, extents, axes = a.owner
    return all(any(_ANALYZER.can_prove(x == y) and _owned(x, v, axes, [], e)
                   for x, y in zip(a.indices, b.indices)) for v, e in zip(axes, extents))


def _conflict(earlier: list[_Access], later: list[_Access]) -> bool:
    return any(x.buffer.same_as(y.buffer) and (x.write or y.write) and not _same_thread(x, y)
               for x in earlier for y in later)


def _parallel_nest(stmt):
    loops, body = [], stmt
    while isinstance(body, tirx.For) and str(body.annotations.get("tw.loop", "")) == "parallel":
        loops.append(body)
        body = body.body
    return loops, body


class _Simt:
    def __init__(self, tid, block: tuple):
        self.tid, self.threads = tid, math.prod(block)
        self.allocs: list = []
        self.analyzer = sym.Analyzer()
        self.analyzer.bind(tid, tvm.ir.Range.from_min_extent(0, self.threads))
        # the block's dimensions of more than one thread: tid in their variables
        axes, extents, linear, stride = [], [], tirx.const(0, "int32"), 1
        for name, extent in zip("xyz", block):
            if extent > 1:
                axis = tirx.Var(f"thread_{name}", "int32")
                self.analyzer.bind(axis, tvm.ir.Range.from_min_extent(0, extent))
                axes.append(axis)
                extents.append(extent)
                linear = linear + axis * stride
            stride *= extent
        # one dimension of more than one thread: tid is its index
        self.linear = {tid: linear} if len(axes) > 1 else {}
        self.owner = ("thread", tuple(extents), tuple(axes)) if len(axes) > 1 else \
            ("thread", (self.threads,), (tid,))

    def in_axes(self, index):
        """``index`` (of ``tid``) in the variables of the block's dimensions."""
        return self.analyzer.simplify(_subst(index, self.linear)) if self.linear else index

    def statements(self, body) -> list:
        out = []
        for s in body.seq if isinstance(body, tirx.SeqStmt) else [body]:
            if isinstance(s, tirx.AllocBuffer):
                self.allocs.append(s)
            else:
                out.append(s)
        return out

    def thread_code(self, stmt):
        """What thread ``tid`` runs of ``stmt``, and its accesses."""
        where = span_location(stmt.span)
        call = decode(stmt)
        if call is not None:
            raise KernelError(f"T.SimtVF holds T.Parallel nests and element statements; "
                              f"T.{call.name} is the vector core's: put it before or after the "
                              "scope", span_location(call.span) or where)
        loops, body = _parallel_nest(stmt)
        inner = _loop_vars(body if loops else stmt)
        nested = []
        tvm_ffi.structural_walk(body if loops else stmt, (tirx.For, lambda f: nested.append(
            f) if str(f.annotations.get("tw.loop", "")) == "parallel" else None))
        if nested:
            raise KernelError("T.SimtVF: a T.Parallel nest is a statement of the scope itself "
                              "(its iterations are spread over the threads), not inside "
                              "another loop or branch", span_location(nested[0].span) or where)
        if not loops:
            return stmt, _accesses(stmt, self.owner, self.in_axes), inner
        extents = [lp.extent for lp in loops]
        if not all(isinstance(e, tirx.IntImm) for e in extents):
            raise KernelError("T.Parallel in T.SimtVF needs constant extents", where)
        extents = tuple(int(e.value) for e in extents)
        variables = tuple(lp.loop_var for lp in loops)
        owner = ("nest", extents, variables)
        accesses = _accesses(body, owner)
        total, threads = math.prod(extents), self.threads
        step = tirx.Var("step", "int32")
        number = tirx.const(0, "int32") + self.tid if total <= threads else \
            step * threads + self.tid
        mapping, stride = {}, total
        for v, extent in zip(variables, extents):
            stride //= extent
            mapping[v] = self.analyzer.simplify(
                tirx.floormod(tirx.floordiv(number, stride), extent))
        code = _subst(body, mapping)
        if total % threads:
            code = tirx.IfThenElse(number < total, code, None, span=stmt.span)
        if total > threads:
            code = tirx.For(step, 0, -(-total // threads), tirx.ForKind.SERIAL, code,
                            span=stmt.span)
        return code, accesses, inner

    def check(self, stmt, accesses, varying) -> None:
        """Races within one statement: no barrier can order them."""
        where = span_location(stmt.span)
        for a in accesses:
            if str(a.buffer.scope()) not in (UB, GM):
                raise KernelError(f"T.SimtVF: the threads work on UB tiles and GM tensors; "
                                  f"{a.buffer.name!r} is in {a.buffer.scope()}, the cube's "
                                  "(copy it to a UB tile before the scope)", where)
            if str(a.buffer.scope()) == GM and str(a.buffer.dtype) not in GM_DTYPES:
                raise KernelError(f"T.SimtVF: the threads load and store GM tensors of "
                                  f"{', '.join(sorted(GM_DTYPES))} (asc_ldcg/asc_stcg of "
                                  f"simt_api/device_functions.h); {a.buffer.name!r} is "
                                  f"{a.buffer.dtype}: copy it to a UB tile with T.copy",
                                  where)
        for w in accesses:
            if not w.write:
                continue
            if not _distinct(w, varying):
                raise KernelError(f"T.SimtVF: threads race on {w.buffer.name!r}: its store "
                                  "does not tell the threads apart (index it by the T.Parallel "
                                  "variables or T.get_thread_binding()), and no barrier can "
                                  "order threads within one statement", where)
            for x in accesses:
                if x is not w and x.buffer.same_as(w.buffer) and not _same_thread(w, x):
                    raise KernelError(f"T.SimtVF: threads race on {w.buffer.name!r}: one "
                                      "statement writes it and touches it at another index, "
                                      "which another thread may write; split the statement "
                                      "in two so a barrier can go between them", where)

    def lower(self, body) -> list:
        out, phase = [], []
        for stmt in self.statements(body):
            if is_barrier(stmt):
                out.append(stmt)
                phase = []
                continue
            code, accesses, varying = self.thread_code(stmt)
            self.check(stmt, accesses, varying)
            if phase and _conflict(phase, accesses):
                out.append(barrier())
                phase = []
            out.append(code)
            phase.extend(accesses)
        return out


def lower_simt(attr) -> tirx.Stmt:
    """The ``T.SimtVF`` scope ``attr`` as one thread's code, barriers inserted; the tiles
    allocated in it come first."""
    lowering = _Simt(attr.node, block_of(attr))
    body = lowering.lower(attr.body)
    scope = tirx.AttrStmt(attr.node, SIMT_KEY, attr.value,
                          tirx.SeqStmt(body) if len(body) > 1 else body[0], span=attr.span)
    return tirx.SeqStmt([*lowering.allocs, scope]) if lowering.allocs else scope
