"""UB tile regions and TIR expression helpers shared by the vector path's modules."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import Region
from tvm import sym, tirx

from ..facts.arch import ALIGN
from ..facts.dtypes import dtype_bytes

UB = "ascend.ub"
FLOATS = ("float32", "float16", "bfloat16")
INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64")


class Unvectorizable(Exception):
    """The expression has a node the vector unit cannot compute."""


def simplified(analyzer, e):
    """``e`` simplified by ``analyzer``, or ``e`` itself where TVM's simplifier fails: folding
    a comparison of an unsigned value that is a constant 0 (``(uint8)j < 1`` with ``j`` in
    ``[0, 1)``) it builds ``0U - 1U`` and stops on its own check (TVM 0.27)."""
    try:
        return analyzer.simplify(e)
    except tvm.error.InternalError:
        return e


def simplify(e):
    return simplified(sym.Analyzer(), e)


def vars_in(e) -> list:
    found = []
    tvm_ffi.structural_walk(e, (tirx.Var, lambda v: found.append(v)))
    return found


def uses_any(e, variables) -> bool:
    return any(any(v.same_as(w) for w in variables) for v in vars_in(e))


def subst(e, mapping):
    return tvm_ffi.structural_map(e, (tirx.Var, lambda v: next(
        (val for k, val in mapping if k.same_as(v)), v)))


def loads(e) -> list:
    found = []
    tvm_ffi.structural_walk(e, (tvm.ir.TensorLoad, lambda x: found.append(x)))
    return found


def ints(values) -> list[int] | None:
    out = []
    for v in values:
        v = v.value if isinstance(v, tirx.IntImm) else v
        if not isinstance(v, int):
            return None
        out.append(v)
    return out


def padded_shape(shape, dtype):
    """The shape of a UB tile whose rows are padded to 32 bytes (2-D and up)."""
    dims = ints(shape)
    if dims is None or len(dims) < 2:
        return None
    per = ALIGN // dtype_bytes(dtype)
    last = -(-dims[-1] // per) * per
    return None if last == dims[-1] else [*dims[:-1], last]


def is_if_then_else(e) -> bool:
    return type(e).__name__ == "Call" and isinstance(e.op, tvm.ir.Op) and \
        str(e.op.name).endswith(".if_then_else")


def whole_tile(region) -> bool:
    """Whether ``region`` is all of its tile (whose rows may be padded)."""
    extents, shape = ints(region.extents), ints(region.buffer.shape)
    if extents is None or shape is None or len(extents) != len(shape) or \
            any(not (isinstance(s, int) and s == 0 or isinstance(s, tirx.IntImm) and s.value == 0)
                for s in region.starts):
        return False
    padded = padded_shape(extents, str(region.buffer.dtype)) or extents
    return list(padded) == list(shape)


def contiguous(region) -> bool:
    """Whether ``region`` is one contiguous range of its buffer (every dimension after its
    first of extent above 1 whole)."""
    extents, shape = ints(region.extents), ints(region.buffer.shape)
    if extents is None or shape is None:
        return False
    outer = next((d for d, e in enumerate(extents) if e != 1), len(extents))
    return all(e == n for e, n in zip(extents[outer + 1:], shape[outer + 1:]))


def inside(region, loops=()) -> bool:
    """Whether ``region`` provably lies inside its tensor, within the ranges of ``loops``."""
    analyzer = sym.Analyzer()
    for loop in loops:
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    return all(analyzer.can_prove(tirx.const(0, "int32") + start + int(ext) <= dim)
               for start, ext, dim in zip(region.starts, region.extents, region.buffer.shape))


def tile_operand(buffer, indices, variables, extents):
    """A UB load or store as (Region, dims) when each index is a loop variable (in nest order)
    plus an offset or free of loop variables; None otherwise."""
    if str(buffer.scope()) != UB:
        return None
    starts, exts, dims = [], [], []
    for index in indices:
        mine = [k for k, v in enumerate(variables) if uses_any(index, [v])]
        if not mine:
            starts.append(index)
            exts.append(tirx.IntImm("int32", 1))
            continue
        if len(mine) > 1:
            return None
        k = mine[0]
        start = simplify(subst(index, [(variables[k], tirx.const(0, "int32"))]))
        rest = simplify(index - start - variables[k])
        if not (isinstance(rest, tirx.IntImm) and rest.value == 0):
            return None
        starts.append(start)
        exts.append(tirx.IntImm("int32", extents[k]))
        dims.append(k)
    if dims != sorted(dims) or len(set(dims)) != len(dims):
        return None
    return Region(buffer, tuple(starts), tuple(exts)), tuple(dims)


def tile_element(region, dims, variables, extents):
    """The load of the element of ``region``, a tile value over the loop ``dims`` (as
    :func:`tile_operand` gives), at the nest's current iteration. The tile may have more or
    fewer dimensions than ``dims``: a value over (i, j) of T.Parallel(2, 1) lives in a (2, 1)
    column tile or in a (2,) row, so the variables of the loops of more than one trip go,
    in order, to the region's dimensions of more than one element, offset by its starts."""
    shape = ints(region.extents)
    moving = [d for d in dims if extents[d] != 1]
    if shape is None or [extents[d] for d in moving] != [e for e in shape if e != 1]:
        raise Unvectorizable(f"the tile {region.buffer.name!r} of extents {shape} does not "
                             f"hold one element per iteration of loops {list(dims)}")
    index = as_exprs(region.starts) or [tirx.const(0, "int32")]
    at = iter(moving)
    index = [simplify(x + variables[next(at)]) if e != 1 else x
             for x, e in zip(index, shape or [1])]
    return tirx.BufferLoad(region.buffer, index)


def non_unit(region):
    dims = [e for e in (ints(region.extents) or []) if e != 1]
    return dims or [1]


def as_exprs(values):
    return [tirx.const(v, "int32") if isinstance(v, int) else v for v in values]


def cast_to(e, dtype):
    return e if str(e.ty) == dtype else tirx.Cast(dtype, e)


def seq(stmts):
    stmts = list(stmts)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def with_span(stmt, span):
    if isinstance(stmt, tirx.Evaluate):
        return tirx.Evaluate(stmt.value, span=span)
    return stmt
