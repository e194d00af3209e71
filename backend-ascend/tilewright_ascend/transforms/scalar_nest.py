"""The scalar-unit side of the vector path: nests that stay loops of GetValue/SetValue
(branches on tile data folded into selects, runs of one-trip loops merged), integer
reductions and wrapping integer conversions, which A2's vector unit does not compute."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region
from tvm import tirx

from ..facts.keys import SCALAR_KEY
from .tile_exprs import UB, as_exprs, ints, loads, non_unit, seq, uses_any


def any_scalar(stmts) -> bool:
    """Whether any of ``stmts`` holds a loop of the scalar unit."""
    found = []
    for s in stmts:
        tvm_ffi.structural_walk(s, (tirx.For, lambda f: found.append(f)
                                    if SCALAR_KEY in f.annotations else None))
    return bool(found)


def holds(dst: str, src: str) -> bool:
    """Whether the integer type ``dst`` holds every value of the integer type ``src``."""
    return int(tirx.min_value(dst).value) <= int(tirx.min_value(src).value) and \
        int(tirx.max_value(src).value) <= int(tirx.max_value(dst).value)


def scalar_conversion(dst: Region, src: Region, span, reason: str):
    """``dst`` = ``src`` converted element by element on the scalar unit, for ``reason``: an
    integer conversion wraps modulo the destination's size, where A2's Cast saturates (数据结构/
    precision_conversion.md: int32_t -> int16_t gives 2^15 - 1 for 2^31 - 1) or goes through
    float16 (int16_t -> int8_t); a pair no chain of A2's Casts converts (uint16_t, uint32_t:
    :func:`..facts.instructions.converts`) is converted by C++ (a float to an integer as
    :func:`tilewright.transform.saturating_float_to_int` makes it, after this pass). The
    regions have the same extents but for dimensions of 1."""
    dims = non_unit(dst)
    loops = [tirx.Var(f"w{n}", "int32") for n in range(len(dims))]

    def at(region):
        free = iter(loops)
        return [tirx.const(0, "int32") + start + (next(free) if extent != 1 else 0)
                for start, extent in zip(as_exprs(region.starts), ints(region.extents))]

    value = tirx.Cast(str(dst.buffer.dtype), tirx.BufferLoad(src.buffer, at(src)))
    body = tirx.BufferStore(dst.buffer, value, at(dst))
    for n in reversed(range(len(dims))):
        body = tirx.For(loops[n], 0, dims[n], tirx.ForKind.SERIAL, body,
                        annotations={SCALAR_KEY: reason} if n == 0 else {}, span=span)
    return body


def bounds_only(guard, body, variables) -> bool:
    """Whether ``body`` stores to global tensors only and every conjunct of ``guard`` is
    ``index < extent`` for an index a global access of ``body`` uses in a dimension of that
    extent (the bounds-checked copies then do what the guard did)."""
    accesses = []
    tvm_ffi.structural_walk(body, [
        (tvm.ir.TensorLoad, lambda x: accesses.append((x.source, list(x.indices)))),
        (tirx.BufferStore, lambda x: accesses.append((x.buffer, list(x.indices))))])
    stores = []
    tvm_ffi.structural_walk(body, (tirx.BufferStore, lambda x: stores.append(x.buffer)))
    if any(str(b.scope()) != "global" for b in stores):
        return False  # the guard also keeps UB elements unwritten
    accesses = [(b, i) for b, i in accesses if str(b.scope()) == "global"]

    def conjuncts(c):
        return conjuncts(c.a) + conjuncts(c.b) if isinstance(c, tirx.And) else [c]

    for c in conjuncts(guard):
        if not isinstance(c, tirx.LT) or not uses_any(c.a, variables):
            return False
        if not any(tvm_ffi.structural_equal(index, c.a) and
                   tvm_ffi.structural_equal(buf.shape[d], c.b)
                   for buf, idx in accesses for d, index in enumerate(idx)):
            return False
    return True


def fold_branches(stmt, names):
    """``stmt`` of a scalar nest with each ``if`` on tile data written as selects, so the scalar
    unit never branches on a value it has not read yet: the condition is bound to a name first
    (a store of the arm must not change it for the next), a store ``x[k] = v`` of the then arm
    becomes ``x[k] = c ? v : x[k]`` (of the else arm ``c ? x[k] : v``, nested arms under the
    conjunction), and the arms' names are bound unconditionally. Each arm may only bind names,
    store to UB tiles and read UB tiles (its reads are then made whatever the condition); a
    branch that does anything else is left as it is. ``names`` numbers the bound conditions."""

    def on_tile_data(s, cond) -> bool:
        return cond is not None or (isinstance(s, tirx.IfThenElse) and bool(loads(s.condition)))

    def fold(s, cond):  # a list of statements, or None where an arm cannot be folded
        if isinstance(s, tirx.SeqStmt):
            out = []
            for child in s.seq:
                new = fold(child, cond)
                if new is None:
                    return None
                out.extend(new)
            return out
        if isinstance(s, tirx.IfThenElse) and on_tile_data(s, cond):
            if any(str(x.source.scope()) != UB for x in loads(s.condition)):
                return None
            here = s.condition if cond is None else tirx.And(cond, s.condition)
            names.append(0)
            c = tirx.Var(f"tw_c{len(names)}", "bool")
            out = [tirx.Bind(c, here, span=s.span)]
            arms = [(s.then_case, c)]
            if s.else_case is not None:
                names.append(0)
                e = tirx.Var(f"tw_c{len(names)}", "bool")
                out.append(tirx.Bind(e, tirx.Not(c) if cond is None else
                                     tirx.And(cond, tirx.Not(c)), span=s.span))
                arms.append((s.else_case, e))
            for arm, arm_cond in arms:
                new = fold(arm, arm_cond)
                if new is None:
                    return None
                out.extend(new)
            return out
        if isinstance(s, tirx.IfThenElse):  # a branch on indices: the arms may hold some
            then = fold(s.then_case, None)
            other = fold(s.else_case, None) if s.else_case is not None else [None]
            if then is None or other is None:
                return None
            return [tirx.IfThenElse(s.condition, seq(then),
                                    None if other == [None] else seq(other), span=s.span)]
        if isinstance(s, tirx.For):
            body = fold(s.body, cond)
            return None if body is None else [tirx.For(
                s.loop_var, s.min, s.extent, s.kind, seq(body),
                annotations=s.annotations, span=s.span)]
        if cond is None:
            return [s]
        if any(str(x.source.scope()) != UB for x in loads(s)):
            return None
        if isinstance(s, tirx.Bind):
            return [s]
        if isinstance(s, tirx.BufferStore) and str(s.buffer.scope()) == UB:
            return [tirx.BufferStore(s.buffer, tirx.Select(cond, s.value, tirx.BufferLoad(
                s.buffer, list(s.indices))), list(s.indices), span=s.span)]
        return None

    folded = fold(stmt, None)
    return stmt if folded is None else seq(folded)


def scalar_reduction(src: Region, dst: Region, kind: str, dim: int, clear: bool, span):
    """``T.reduce_<kind>`` of an integer tile, which A2's WholeReduce family does not take (nor
    any bitwise kind), as a loop on the scalar unit: each element of ``dst`` combined with each
    of its elements of ``src`` in turn (``clear``: the first element starts it), in ``src``'s
    dtype (a sum wraps)."""
    extents = ints(src.extents)
    rank = len(extents)
    if len(dst.extents) not in (rank - 1, rank):
        raise KernelError(f"T.reduce_{kind}: backend 'ascend' reduces a {rank}-D tile into a "
                          f"{rank - 1}-D one; {dst.buffer.name!r} has {len(dst.extents)} "
                          "dimensions", span_location(span))
    loops = [tirx.Var(f"r{n}", "int32") for n in range(rank)]
    kept = [v for d, v in enumerate(loops) if d != dim] if len(dst.extents) == rank - 1 else \
        [tirx.const(0, "int32") if d == dim else v for d, v in enumerate(loops)]
    at_src = [tirx.const(0, "int32") + s + v for s, v in zip(as_exprs(src.starts), loops)]
    at_dst = [tirx.const(0, "int32") + s + v for s, v in zip(as_exprs(dst.starts), kept)]
    x = tirx.BufferLoad(src.buffer, at_src)
    if kind.startswith("abs"):
        x = tirx.Select(x < tirx.const(0, str(x.ty)), tirx.const(0, str(x.ty)) - x, x)
    acc = tirx.BufferLoad(dst.buffer, at_dst)
    combined = {"sum": acc + x, "abssum": acc + x, "max": tirx.Max(acc, x),
                "absmax": tirx.Max(acc, x), "min": tirx.Min(acc, x),
                "bitand": tirx.bitwise_and(acc, x), "bitor": tirx.bitwise_or(acc, x),
                "bitxor": tirx.bitwise_xor(acc, x)}[kind]
    body = tirx.BufferStore(dst.buffer, combined, at_dst)
    if clear:
        body = tirx.IfThenElse(tirx.EQ(loops[dim], 0), tirx.BufferStore(dst.buffer, x, at_dst),
                               body)
    order = [d for d in range(rank) if d != dim] + [dim]  # the reduced dimension innermost
    for n, d in enumerate(reversed(order)):
        body = tirx.For(loops[d], 0, extents[d], tirx.ForKind.SERIAL, body,
                        annotations={SCALAR_KEY: f"T.reduce_{kind} of {src.buffer.dtype}: A2's "
                                     "WholeReduce takes floats, and no bitwise kind"}
                        if n == rank - 1 else {},
                        span=span)
    return body


def merge_scalar(stmts) -> list:
    """``stmts`` with each run of one-trip scalar loops (the vector lowering's ``split``)
    made one."""
    out = []
    for s in stmts:
        if out and one_trip_scalar(s) and one_trip_scalar(out[-1]):
            last = out[-1]
            body = [*(last.body.seq if isinstance(last.body, tirx.SeqStmt) else [last.body]),
                    *(s.body.seq if isinstance(s.body, tirx.SeqStmt) else [s.body])]
            out[-1] = tirx.For(last.loop_var, 0, 1, tirx.ForKind.SERIAL, tirx.SeqStmt(body),
                               annotations=last.annotations, span=last.span)
        else:
            out.append(s)
    return out


def one_trip_scalar(s) -> bool:
    return isinstance(s, tirx.For) and SCALAR_KEY in s.annotations and \
        ints([s.extent]) == [1] and not uses_any(s.body, [s.loop_var])


def check_scalar_buffers(nest, span):
    for x in loads(nest):
        if str(x.source.scope()) not in (UB, "global"):
            raise KernelError(f"the scalar unit reads UB and GM; {x.source.name!r} is in "
                              f"{x.source.scope()}", span_location(span))
