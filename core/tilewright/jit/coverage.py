"""Which outputs a tile program provably writes whole: every element, never read first.

The JIT allocates outputs zero-filled so that an element a kernel leaves unwritten reads 0;
an output proven covered here needs no fill (a pass over memory as large as a memory-bound
kernel's own output). The proof is conservative: anything it does not understand leaves the
output zero-filled.

An output ``O`` is covered when the program never reads it (no load, no tile op reading or
accumulating into it, no call taking its address) and one write to it, a store or the
destination of ``T.copy`` / ``T.fill``, reaches every element:

- only loops (any kind, from 0 in steps of 1), the ``then`` branch of conditions, allocations,
  attributes and bindings enclose it; a loop whose variable the index does not use runs at
  least once;
- each condition is a conjunction of bounds checks on the written index (``index < extent``
  of that dimension, ``index >= 0``);
- in each dimension the index is ``sum(stride * var)`` over distinct loop variables (and the
  tile offsets of a copy's destination region), no variable in two dimensions, the strides
  chaining (the smallest 1, each the previous times its loop's extent), and the last stride
  times its extent at least the dimension's extent.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import sym, tirx

from ..ir import Region, decode, is_region

_COVERING_OPS = ("copy", "fill")  # tile ops that only write their destination


def covered_outputs(func: tirx.PrimFunc, outputs) -> set:
    """The positions among ``outputs`` (parameter indices) of the tensors ``func`` provably
    writes whole without reading them (see the module docstring)."""
    found = set()
    for index in outputs:
        buf = func.params[index]
        if tirx.buffer.is_buffer_var(buf) and not _read(func.body, buf) and \
                _covered(func.body, buf):
            found.add(index)
    return found


def _read(body, buf) -> bool:
    """Whether anything in ``body`` may read ``buf`` (or take its address)."""
    hits = []

    def call(node):
        if is_region(node):  # a tile op's operand: the op says below what it does with it
            return tvm_ffi.WalkResult.SKIP
        if any(isinstance(arg, tirx.Var) and arg.same_as(buf) for arg in node.args):
            hits.append(node)
        return None

    def load(node):
        if node.source.same_as(buf):
            hits.append(node)

    def evaluate(node):
        call = decode(node)
        if call is None:
            return
        for name, value in call.operands.items():
            if isinstance(value, Region) and value.buffer.same_as(buf) and \
                    not (call.name in _COVERING_OPS and name == "dst"):
                hits.append(node)

    tvm_ffi.structural_walk(body, [(tirx.Evaluate, evaluate), (tvm.ir.Call, call),
                                   (tvm.ir.TensorLoad, load)], order="pre")
    return bool(hits)


def _covered(body, buf) -> bool:
    analyzer = sym.Analyzer()
    shape = list(buf.shape)
    for loops, conditions, indices in _writes(body, buf, [], []):
        if _reaches_all(analyzer, shape, loops, conditions, indices):
            return True
    return False


def _writes(stmt, buf, loops, conditions):
    """(enclosing loops, enclosing conditions, per-dimension (index, tile extent)) of every
    write to ``buf`` under only the statements the proof understands."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from _writes(s, buf, loops, conditions)
    elif isinstance(stmt, tirx.For):
        yield from _writes(stmt.body, buf, [*loops, stmt], conditions)
    elif isinstance(stmt, tirx.IfThenElse):
        yield from _writes(stmt.then_case, buf, loops, [*conditions, stmt.condition])
    elif isinstance(stmt, tirx.BufferStore):
        if stmt.buffer.same_as(buf):
            yield loops, conditions, [(i, None) for i in stmt.indices]
    elif isinstance(stmt, tirx.Evaluate):
        call = decode(stmt)
        dst = call.operands.get("dst") if call is not None and call.name in _COVERING_OPS \
            else None
        if dst is not None and dst.buffer.same_as(buf) and \
                len(dst.starts) == len(dst.extents) == len(buf.shape):
            yield loops, conditions, list(zip(dst.starts, dst.extents))
    elif type(stmt).__name__ in ("AttrStmt", "AllocBuffer", "DeclBuffer", "LetStmt"):
        yield from _writes(getattr(stmt, "body", None), buf, loops, conditions)


def _reaches_all(analyzer, shape, loops, conditions, indices) -> bool:
    if not all(_is_zero(loop.min) and (loop.step is None or _is_one(loop.step))
               for loop in loops):
        return False
    used: list = []
    for dim, (index, tile) in enumerate(indices):
        terms = _affine(index, loops)
        if terms is None:
            return False
        if tile is not None:  # a region's elements: offsets 0 .. tile - 1 at stride 1
            terms.append((1, tile, None))
        terms = [t for t in terms if not _is_one(t[1])]  # a term of one value adds nothing
        loops_here = [loop for _, _, loop in terms if loop is not None]
        for n, loop in enumerate(loops_here):  # each variable in one term of one dimension
            if any(loop.same_as(other) for other in used + loops_here[:n]):
                return False
        used.extend(loops_here)
        if not _chains(analyzer, sorted(terms, key=lambda t: t[0]), shape[dim]):
            return False
    if not all(any(loop.same_as(u) for u in used) or analyzer.can_prove(loop.extent >= 1)
               for loop in loops):
        return False
    index_exprs = [index for index, _ in indices]
    return all(_bounds_check(analyzer, clause, index_exprs, shape)
               for condition in conditions for clause in _clauses(condition))


def _is_zero(value) -> bool:
    return isinstance(value, tirx.IntImm) and int(value.value) == 0


def _is_one(value) -> bool:
    return isinstance(value, tirx.IntImm) and int(value.value) == 1


def _affine(expr, loops) -> list | None:
    """``expr`` as [(stride, extent, loop)], a sum of the variables of ``loops`` times
    constant strides; None when it is anything else (a constant term, another variable, a
    product of variables)."""
    if isinstance(expr, tirx.Var):
        loop = next((loop for loop in loops if loop.loop_var.same_as(expr)), None)
        return None if loop is None else [(1, loop.extent, loop)]
    if isinstance(expr, tirx.IntImm):
        return [] if int(expr.value) == 0 else None
    if isinstance(expr, tirx.Add):
        a, b = _affine(expr.a, loops), _affine(expr.b, loops)
        return None if a is None or b is None else a + b
    if isinstance(expr, tirx.Mul):
        for term, factor in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(factor, tirx.IntImm) and int(factor.value) > 0:
                inner = _affine(term, loops)
                if inner is None:
                    return None
                return [(stride * int(factor.value), extent, loop)
                        for stride, extent, loop in inner]
    return None


def _chains(analyzer, terms, extent) -> bool:
    """Whether strides ``terms`` (ascending) enumerate every index in [0, extent)."""
    if not terms:
        return analyzer.can_prove(extent <= 1)
    expected = 1
    for n, (stride, count, _) in enumerate(terms):
        if stride != expected:
            return False
        if n == len(terms) - 1:
            return analyzer.can_prove(count * stride >= extent)
        if not isinstance(count, tirx.IntImm):
            return False
        expected = stride * int(count.value)
    return False


def _clauses(condition) -> list:
    if isinstance(condition, tirx.And):
        return _clauses(condition.a) + _clauses(condition.b)
    return [condition]


def _bounds_check(analyzer, clause, indices, shape) -> bool:
    """Whether ``clause`` holds for every in-bounds index: ``index < extent`` or
    ``index >= 0`` of some dimension."""
    for index, extent in zip(indices, shape):
        if isinstance(clause, tirx.LT) and analyzer.can_prove_equal(clause.a, index) and \
                analyzer.can_prove_equal(clause.b, extent):
            return True
        if isinstance(clause, tirx.GT) and analyzer.can_prove_equal(clause.b, index) and \
                analyzer.can_prove_equal(clause.a, extent):
            return True
        if isinstance(clause, tirx.GE) and analyzer.can_prove_equal(clause.a, index) and \
                _is_zero(clause.b):
            return True
    return False
