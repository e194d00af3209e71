"""CPU-specific passes: GEMM K loops merged before tile-op lowering; after it, loops, memory
scopes and the block grid."""

from __future__ import annotations

import math
import os

import tvm
import tvm_ffi
from tilewright.errors import TilewrightError
from tilewright.ir import Region, decode, make_call
from tilewright.transform import StmtMutator, narrow_float, prim_func_pass, rebuild_for
from tvm import tirx
from tvm.sym.pattern import detect_linear_equation

from . import runtime
from .blocking import k_unroll
from .lowering_float8 import (
    innermost_vectorized,
    lane_cells,
    outer_selection,
    selected_first,
    touches_float8,
)

LOOP_KEY = "tw.loop"
VECTOR_LANES = 8
REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")


def _has_loop(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.For, lambda s: found.append(s)))
    return bool(found)


def _has_side_effects(stmt) -> bool:
    """Assertions and calls out of the kernel (printing, atomics) run lane by lane."""
    found = []
    tvm_ffi.structural_walk(stmt, [(tirx.AssertStmt, lambda s: found.append(s)),
                                   (tvm.ir.Call, lambda c: found.append(c) if isinstance(
                                       c.op, tvm.ir.Op) and c.op.name in _OPAQUE_CALLS else None)])
    return bool(found)


def _mentions(exprs, var) -> bool:
    """Whether any of ``exprs`` reads ``var``."""
    used = []
    for expr in exprs:
        tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: used.append(v)))
    return any(v.same_as(var) for v in used)


def _stores(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, found.append))
    return found


def _stores_vary(stmt, var) -> bool:
    """Whether every store in ``stmt`` writes a different element for each value of ``var``
    (a store that does not, such as a reducer update, must stay scalar)."""
    return all(_mentions(store.indices, var) for store in _stores(stmt))


def _stores_invariant_bfloat16(stmt, var) -> bool:
    """Whether ``stmt`` stores into a bfloat16 buffer a value that does not depend on ``var``:
    vectorised over ``var`` that value is a ``Broadcast`` of a bfloat16 scalar, which TVM
    0.27's BF16StorageLegalize does not rewrite ("dtype mismatch on BufferStore: buffer's
    dtype is uint16 ... RHS's dtype is bfloat16x8"; found by the differential fuzzer)."""
    return any(str(store.buffer.dtype) == "bfloat16" and not _mentions([store.value], var)
               for store in _stores(stmt))


_OPAQUE_CALLS = frozenset({"tirx.tvm_call_packed", "tirx.call_extern", "tirx.call_packed"})


class _Loops(StmtMutator):
    """Innermost ``T.Parallel`` loops with a constant extent become vector loops; every
    frontend annotation is dropped."""

    def __init__(self, vectorize: bool):
        super().__init__()
        self.vectorize = vectorize

    def visit_For(self, stmt):
        stmt = super().visit_For(stmt)
        annotations = {k: v for k, v in stmt.annotations.items() if not str(k).startswith("tw.")}
        kind = str(stmt.annotations.get(LOOP_KEY, ""))
        if kind == "unroll":
            return rebuild_for(stmt, annotations=annotations, kind=tirx.ForKind.UNROLLED)
        var = stmt.loop_var
        if kind != "parallel" or not self.vectorize or _has_loop(stmt.body) or \
                _has_side_effects(stmt.body) or not _stores_vary(stmt.body, var) or \
                touches_float8(stmt.body) or _stores_invariant_bfloat16(stmt.body, var) or \
                not isinstance(stmt.extent, tirx.IntImm) or int(stmt.extent.value) % VECTOR_LANES:
            return rebuild_for(stmt, annotations=annotations)
        extent = int(stmt.extent.value)
        if extent == VECTOR_LANES:
            return _vector_chunk(stmt.loop_var, stmt.body)
        outer, lane = tirx.Var(f"{stmt.loop_var.name}_o", "int32"), tirx.Var(
            f"{stmt.loop_var.name}_v", "int32")
        body = _substitute(stmt.body, stmt.loop_var, outer * VECTOR_LANES + lane)
        return tirx.For(outer, 0, extent // VECTOR_LANES, tirx.ForKind.SERIAL,
                        _vector_chunk(lane, body), span=stmt.span)


def _substitute(node, var, value):
    return tvm_ffi.structural_map(node, (tirx.Var, lambda v: value if v.same_as(var) else v))


def _monotone_conjuncts(cond, var) -> bool:
    """Whether ``cond`` is a conjunction of comparisons linear in ``var`` (so it holds for a
    whole range of ``var`` when it holds at both ends)."""
    if isinstance(cond, tirx.And):
        return _monotone_conjuncts(cond.a, var) and _monotone_conjuncts(cond.b, var)
    if isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
        return bool(detect_linear_equation(cond.a - cond.b, [var]))
    return False


def _vector_chunk(lane, body):
    """A vector loop over ``lane``. A body guarded by a bounds-like ``if`` is split in two
    versions: the vector loop when the guard holds for every lane (checked at both ends), a
    scalar guarded loop for the ragged edge."""
    vector = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body)
    if not (isinstance(body, tirx.IfThenElse) and body.else_case is None and
            _monotone_conjuncts(body.condition, lane)):
        return vector
    whole = tirx.And(_substitute(body.condition, lane, tirx.const(0, "int32")),
                     _substitute(body.condition, lane, tirx.const(VECTOR_LANES - 1, "int32")))
    edge_lane = tirx.Var(lane.name, "int32")
    edge = tirx.For(edge_lane, 0, VECTOR_LANES, tirx.ForKind.SERIAL,
                    _substitute(body, lane, edge_lane))
    fast = tirx.For(lane, 0, VECTOR_LANES, tirx.ForKind.VECTORIZED, body.then_case)
    return tirx.IfThenElse(whole, fast, edge)


def lower_loops(vectorize: bool = True):
    return prim_func_pass("CPULowerLoops",
                          lambda f: f.with_body(_Loops(vectorize).visit(f.body)))


def _scope_for(scope: str) -> str:
    return "local" if scope in ("local", "local.var") else "global"


def lower_scopes():
    """Shared and fragment tiles become per-block arrays in host memory."""

    def run(func):
        remap = {}

        def collect(stmt):
            buf = stmt.buffer
            scope = str(buf.scope())
            if scope not in ("global", "local"):
                remap[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name,
                                              scope=_scope_for(scope))

        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, collect))
        if not remap:
            return func
        body = tvm_ffi.structural_map(func.body, (tirx.Buffer, lambda b: remap.get(b, b)))
        return func.with_body(body)

    return prim_func_pass("CPULowerScopes", run)


def _unsigned(expr) -> bool:
    return str(expr.ty).startswith("uint")


def fold_unsigned_sign_tests():
    """``u < 0`` and ``0 > u`` of an unsigned ``u`` become ``False``, ``u >= 0`` and ``0 <= u``
    ``True``; other comparisons of two unsigned values of up to 32 bits are made in int64.
    TVM 0.27's LowerIntrin aborts the process on an ``if`` whose condition is
    ``u < 0`` of a let-bound unsigned value ("Check failed: literal_constraints_.size() ==
    new_literal_size", thrown from a destructor: ``std::terminate``), which common-
    subexpression elimination makes of a kernel comparing an unsigned cast with 0 (found by
    the differential fuzzer)."""

    def fold(node):
        lhs_zero, rhs_zero = _const_int(node.a) == 0, _const_int(node.b) == 0
        if isinstance(node, (tirx.LT, tirx.GE)) and rhs_zero and _unsigned(node.a):
            return tirx.const(isinstance(node, tirx.GE), str(node.ty))
        if isinstance(node, (tirx.GT, tirx.LE)) and lhs_zero and _unsigned(node.b):
            return tirx.const(isinstance(node, tirx.LE), str(node.ty))
        if _unsigned(node.a) and _unsigned(node.b) and tvm.DataType(str(node.a.ty)).bits <= 32:
            # compared as int64 (every value kept): TVM's simplifier moves an unsigned
            # comparison's operands to one side, and its constant folding stops on the
            # negative difference ("Minuend's value is 0U ... which will cause a negative
            # uint": u < 1 of a u known to be 0)
            return type(node)(tirx.Cast("int64", node.a), tirx.Cast("int64", node.b))
        return node

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.LT, tirx.GE, tirx.GT, tirx.LE), fold)))

    return prim_func_pass("CPUFoldUnsignedSignTests", run)


def _floor_from_truncated(node):
    """``node`` (a floor division or modulo of signed integers) written with truncating
    division and a correction, without bindings."""
    a, b = node.a, node.b
    dtype = str(node.ty)
    zero = tirx.const(0, dtype)
    rmod = tirx.Mod(a, b)  # truncating: the sign of ``a``
    # the truncated quotient is one above the floor where the remainder is not zero and its
    # sign is not the divisor's
    past = tirx.Or(tirx.And(rmod < zero, b > zero), tirx.And(rmod > zero, b < zero))
    if isinstance(node, tirx.FloorDiv):
        return tirx.Div(a, b) - tirx.Cast(dtype, past)
    return rmod + tirx.Select(past, b, zero)


def lower_floor_division():
    """A floor division or modulo of signed integers whose divisor is not a positive constant
    is written with truncating division and a correction, without bindings. TVM 0.27's
    LowerIntrin writes such a division with its remainder and quotient bound (``T.Let`` of
    ``rmod`` and ``rdiv``) inside the expression, and its LLVM code generator binds a ``Let``'s
    variable in its analyzer twice when the ``Let`` sits in the value of another one (once
    where it generates the inner value, once where it simplifies the outer value, which the
    analyzer simplifies differently): a division of a division stopped the build ("Binding of
    variable rmod as I.Range(0, 1) conflicts with previous binding"; found by the differential
    fuzzer). A positive constant divisor TVM lowers without bindings (a shift, or a truncating
    division and a correction), and LLVM merges the repeated operands written here."""

    def lower(node):
        divisor = _const_int(node.b)
        if not str(node.ty).startswith("int") or divisor is not None and divisor > 0:
            return node
        return _floor_from_truncated(node)

    def run(func):
        return func.with_body(tvm_ffi.structural_map(
            func.body, ((tirx.FloorDiv, tirx.FloorMod), lower)))

    return prim_func_pass("CPULowerFloorDivision", run)


def _u32(x):
    return tirx.const(x, "uint32")


def _bfloat16_bits(bits):
    """The bfloat16 nearest the float32 whose bits are the uint32 ``bits`` (to nearest even,
    NaN kept quiet), in the low 16 bits of a uint32. ``bits`` is used several times: give a
    variable or an expression without bindings."""
    rounded = tirx.shift_right(bits + _u32(0x7FFF) + tirx.bitwise_and(
        tirx.shift_right(bits, _u32(16)), _u32(1)), _u32(16))
    nan = tirx.bitwise_and(bits, _u32(0x7FFFFFFF)) > _u32(0x7F800000)
    quiet = tirx.bitwise_or(tirx.shift_right(bits, _u32(16)), _u32(0x40))
    return tirx.Select(nan, quiet, rounded)


def _bfloat16_rounded(value):
    """``value`` rounded to bfloat16 (to nearest even, NaN kept quiet) in integer code, as a
    bfloat16 expression. Its bits are not let-bound: TVM's BF16ComputeLegalize does not
    rewrite the buffers inside a ``Let`` expression's value (common-subexpression
    elimination merges the repeats)."""
    value32 = value if str(value.ty) == "float32" else tirx.Cast("float32", value)
    return tirx.reinterpret("bfloat16", tirx.Cast("uint16", _bfloat16_bits(
        tirx.reinterpret("uint32", value32))))


def round_bfloat16_tiles():
    """Values stored into a bfloat16 tile (shared, fragment, or the tile ops' own) are rounded
    to bfloat16, as a GPU's bfloat16 memory rounds them. TVM 0.27's BF16ComputeLegalize keeps
    such tiles in float32 and drops the conversion of a stored value, so a tile written by
    ``T.Parallel`` and read by ``T.gemm`` held float32 values: results more precise than the
    kernel's types (and than the interpreter's and a GPU's). A bfloat16 value already (a copy
    of another, one rounded in integer code) needs no rounding and is left alone."""

    def run(func):
        tiles = set()
        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda s: tiles.add(s.buffer)
                                             if str(s.buffer.dtype) == "bfloat16" else None))
        if not tiles:
            return func

        def store(stmt):
            value = stmt.value
            if stmt.buffer not in tiles or str(value.ty) != "bfloat16" or \
                    isinstance(value, tvm.ir.TensorLoad) and str(value.source.dtype) == "bfloat16" \
                    or isinstance(value, tvm.ir.Call) and value.op.same_as(REINTERPRET):
                return stmt
            inner = value.value if isinstance(value, tirx.Cast) else value
            return tirx.BufferStore(stmt.buffer, _bfloat16_rounded(inner), stmt.indices,
                                    span=stmt.span)

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.BufferStore, store)))

    return prim_func_pass("CPURoundBfloat16Tiles", run)


HELD_IN_FLOAT32 = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"})


def hold_narrow_bindings():
    """A binding whose value loads a bfloat16, float8 or float4 buffer (a named value the
    language keeps, see ``tilewright.language.snapshots``) becomes a one-element float32 local
    array (exact for these types) written where the binding stood and read where the variable
    was used. These types are held in others here (float32, bytes): float8's lowering and TVM
    0.27's bfloat16 legalisation rewrite the buffers' stores and loads, but not a binding's
    variable or, for bfloat16, a load inside a ``Bind`` ("Load/Store of buffer ... occurred
    before its declaration")."""

    class Hold(StmtMutator):
        def __init__(self):
            super().__init__()
            self.held = {}

        def visit_Bind(self, stmt):
            loads = []
            tvm_ffi.structural_walk(stmt.value, (tvm.ir.TensorLoad, lambda ld: loads.append(ld)))
            if not any(str(ld.source.dtype) in HELD_IN_FLOAT32 for ld in loads):
                return stmt
            dtype = str(stmt.var.ty)
            value = stmt.value if dtype == "float32" else tirx.Cast("float32", stmt.value)
            cell = tirx.decl_buffer((1,), "float32", f"{stmt.var.name}_held", scope="local")
            zero = [tirx.IntImm("int32", 0)]
            load = tirx.BufferLoad(cell, zero)
            self.held[stmt.var] = load if dtype == "float32" else tirx.Cast(dtype, load)
            return tirx.SeqStmt([tirx.AllocBuffer(cell, span=stmt.span),
                                 tirx.BufferStore(cell, value, zero, span=stmt.span)])

    def run(func):
        hold = Hold()
        body = hold.visit(func.body)
        if not hold.held:
            return func
        return func.with_body(tvm_ffi.structural_map(
            body, (tirx.Var, lambda v: hold.held.get(v, v))))

    return prim_func_pass("CPUHoldNarrowBindings", run)


def _float32_rounded_to_bfloat16(value):
    """The float32 ``value`` rounded to bfloat16 (to nearest even, NaN kept quiet), still a
    float32 value, its bits bound once: TVM's BF16ComputeLegalize drops a conversion to
    bfloat16 between operations, but leaves float32 and integer code alone."""
    bits = tirx.Var("bf16_bits", "uint32")
    return tirx.Let(bits, tirx.reinterpret("uint32", value), tirx.reinterpret(
        "float32", tirx.shift_left(_bfloat16_bits(bits), _u32(16))))


def round_bfloat16_arithmetic():
    """Each arithmetic operation on bfloat16 values rounds its result to bfloat16
    (:mod:`tilewright.transform.narrow_float`), as on the interpreter and a GPU: the operation
    is made in float32 and rounded in integer code, which TVM's BF16ComputeLegalize keeps
    (it would drop a plain conversion and keep float32 between operations). Conversions the
    kernel writes (a GEMM's operands) are left alone."""

    def narrowed(dtype, value):
        return tirx.Cast(dtype, _float32_rounded_to_bfloat16(value))

    return prim_func_pass("CPURoundBfloat16Arithmetic", lambda func: func.with_body(
        narrow_float.rewrite(func.body, frozenset({"bfloat16"}), narrowed=narrowed)))


def _has_let(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tirx.Let, found.append))
    return bool(found)


def _touches_bfloat16(expr, *dtypes) -> bool:
    """Whether ``expr`` reads or converts bfloat16 values (or one of ``dtypes`` is)."""
    found = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, lambda ld: found.append(ld.source.dtype)),
                                   (tirx.Cast, lambda c: found.append(c.ty))])
    return "bfloat16" in {*map(str, dtypes), *map(str, found)}


def _float32_of_bfloat16_bits(bits16):
    """The float32 value of the bfloat16 whose bits are the uint16 ``bits16`` (exact)."""
    return tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("uint32", bits16), _u32(16)))


def _bfloat16_bound(value):
    """The float32 ``value`` rounded to bfloat16 in integer code, its bits bound once, as a
    bfloat16 expression."""
    bits = tirx.Var("bf16_bits", "uint32")
    return tirx.reinterpret("bfloat16", tirx.Cast("uint16", tirx.Let(
        bits, tirx.reinterpret("uint32", value), _bfloat16_bits(bits))))


def _is_if_then_else(expr) -> bool:
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name == "prim.if_then_else"


def _lazy_loads(expr) -> list:
    """The loads in a branch of an ``if_then_else`` of ``expr`` (made only where taken)."""
    found = []

    def branch(call):
        if _is_if_then_else(call):
            for arg in call.args[1:]:
                tvm_ffi.structural_walk(arg, (tvm.ir.TensorLoad, found.append))

    tvm_ffi.structural_walk(expr, (tvm.ir.Call, branch))
    return found


def _held_in_a_branch(call) -> bool:
    """Whether a branch of the ``if_then_else`` ``call`` binds a value or reads a tile: what
    :func:`bfloat16_conversions_around_lets` makes before a statement, where the branch is
    taken."""
    found = []
    for arg in call.args[1:]:
        tvm_ffi.structural_walk(arg, [(tirx.Let, found.append), (
            tvm.ir.TensorLoad, lambda ld: found.append(ld)
            if str(ld.source.scope()) != "global" else None)])
    return bool(found)


def _branches(stmt):
    """A store of an ``if_then_else`` (under conversions) as an ``if`` over a store of each
    branch, or None for another store."""
    casts, value = [], stmt.value
    while isinstance(value, tirx.Cast):
        casts.append(str(value.ty))
        value = value.value
    if not _is_if_then_else(value):
        return None

    def store_of(branch):
        for dtype in reversed(casts):
            branch = tirx.Cast(dtype, branch)
        return tirx.BufferStore(stmt.buffer, branch, stmt.indices, span=stmt.span)

    cond, then_value, else_value = value.args
    return tirx.IfThenElse(cond, store_of(then_value), store_of(else_value), span=stmt.span)


def _converted_around_lets(expr, span, lane=None):
    """``expr`` with its conversions between bfloat16 and float32 made in integer code (see
    :func:`bfloat16_conversions_around_lets`), and the stores of the tile reads it holds in
    float32 local arrays, to be made before it; inside the vectorized loop ``lane`` each lane
    holds its read in its own element."""
    lazy, held = _lazy_loads(expr), []

    def convert(cast):
        source, target, value = str(cast.value.ty), str(cast.ty), cast.value
        if target == "bfloat16" and source != "bfloat16":  # through float32, as TVM converts
            return _bfloat16_bound(value if source == "float32" else
                                   tirx.Cast("float32", value))
        if source == "bfloat16" and target not in ("float32", "bfloat16"):
            return tirx.Cast(target, convert(tirx.Cast("float32", value)))
        if source != "bfloat16" or target != "float32":
            return cast
        if isinstance(value, tvm.ir.Call) and value.op.same_as(REINTERPRET):
            return _float32_of_bfloat16_bits(value.args[0])
        if not isinstance(value, tvm.ir.TensorLoad):
            return cast
        if str(value.source.scope()) == "global":
            return _float32_of_bfloat16_bits(tirx.reinterpret("uint16", value))
        if any(value.same_as(load) for load in lazy):
            return cast
        cell, index = lane_cells(1, "float32", f"{value.source.name}_held", lane)
        held.append(tirx.BufferStore(cell, cast, index(0), span=span))
        return tirx.BufferLoad(cell, index(0))

    return tvm_ffi.structural_map(expr, (tirx.Cast, convert)), held


def _after_held(held, stmt):
    if not held:
        return stmt
    return tirx.SeqStmt([*(tirx.AllocBuffer(h.buffer, span=stmt.span) for h in held), *held,
                         stmt])


def bfloat16_conversions_around_lets():
    """In a stored value or an ``if``'s condition that binds a variable (a ``Let``: the vector
    ``exp``, a rounded bfloat16 operation), conversions between bfloat16 and float32 are made
    here, so that TVM 0.27's bfloat16 legalisation has nothing to do in it: rounding to
    bfloat16 in integer code with the bits bound once, widening a tensor's bfloat16 in integer
    code (exact), a tile's (which BF16ComputeLegalize re-declares as float32) read into a
    float32 local array before the statement. BF16ComputeLegalize does not visit a ``Let``'s
    value: a tensor's bfloat16 read there reached BF16StorageLegalize as a float32 conversion
    of the raw uint16 bits (silently wrong values), a tile's was left reading the old tile
    ("Load/Store of buffer ... occurred before its declaration"). And it converts a float32
    value stored to bfloat16 by an expression that repeats the value (``DTypeConversion``:
    the bits, then their rounding bias), bindings included, which TVM's VectorizeLoop rejects
    ("Let cannot bind the same var to two different values": it compares the second
    binding's value with the variable it recorded for the first, so any repeated binding
    fails). A store of an ``if_then_else`` becomes an ``if`` over a store of each branch
    first, so that a branch's reads are made only where it is taken; an ``if_then_else``
    deeper in the value (an operand, under conversions) whose branch binds a value or reads a
    tile is first stored so into a local element of its own (float32 for bfloat16) that the
    value reads in its place: left there, its branch's tile read kept the old tile, and
    float8's lowering stored it into a bfloat16 element, read inside the binding with the
    same result ("Load/Store of buffer selected ... occurred before its declaration")."""

    return prim_func_pass("CPUBfloat16AroundLets",
                          lambda func: func.with_body(_AroundLets().visit(func.body)))


class _AroundLets(StmtMutator):
    """:func:`bfloat16_conversions_around_lets` with the innermost vectorized loop known."""

    def lane(self):
        return innermost_vectorized(self.loops)

    def visit_BufferStore(self, stmt):
        if not _has_let(stmt.value) or not _touches_bfloat16(stmt.value, stmt.buffer.dtype):
            return stmt
        split = _branches(stmt) if _lazy_loads(stmt.value) else None
        if split is not None:  # each branch's loads made where it is taken
            return self.branch(tirx.IfThenElse(
                split.condition, self.visit_BufferStore(split.then_case),
                self.visit_BufferStore(split.else_case), span=stmt.span))
        selection = outer_selection(stmt.value, _held_in_a_branch)
        if selection is not None:  # made first, by the store above, where it is an operand
            held = "float32" if str(selection.ty) == "bfloat16" else None
            cell, chosen, rest = selected_first(stmt, selection, self.lane(), held)
            return tirx.SeqStmt([tirx.AllocBuffer(cell, span=stmt.span),
                                 self.visit_BufferStore(chosen), self.visit_BufferStore(rest)])
        value, held = _converted_around_lets(stmt.value, stmt.span, self.lane())
        if value.same_as(stmt.value):
            return stmt
        return _after_held(held, tirx.BufferStore(stmt.buffer, value, stmt.indices,
                                                  span=stmt.span))

    def visit_IfThenElse(self, stmt):
        return self.branch(super().visit_IfThenElse(stmt))

    def branch(self, stmt):
        if not _has_let(stmt.condition) or not _touches_bfloat16(stmt.condition):
            return stmt
        condition, held = _converted_around_lets(stmt.condition, stmt.span, self.lane())
        return _after_held(held, tirx.IfThenElse(condition, stmt.then_case, stmt.else_case,
                                                  span=stmt.span))


def float16_math_in_float32():
    """Each math function of float16 values is the float32 function rounded to float16 once
    (:mod:`tilewright.transform.narrow_float`): TVM expands some for LLVM in float16 arithmetic
    (``tanh`` several units in the last place off). LLVM rounds float16 arithmetic per
    operation itself."""
    return prim_func_pass("CPUFloat16Math", lambda func: func.with_body(
        narrow_float.rewrite(func.body, frozenset({"float16"}), arithmetic=False)))


STACK_BYTES = 1024  # TVM keeps a constant-size CPU allocation up to this size on the stack
CLAIM = "tw_atomic_add_int32"  # the C runtime's atomic fetch-and-add


def _claims_available() -> bool:
    """Whether kernels may call the C runtime (built with the host C compiler)."""
    try:
        runtime.load()
    except TilewrightError:
        return False
    return True


def _hoist(rest: list) -> tuple[list, list]:
    """Constant-size allocations nested in a block's statements too large for the stack (GEMM
    panels, deeper tiles) taken out, to be made once per worker: TVM would otherwise allocate
    them from its workspace pool at every iteration of the loops around them."""
    hoisted = []

    def take(stmt):
        shape = [_const_int(d) for d in stmt.buffer.shape]
        if str(stmt.buffer.scope()) != "global" or any(d is None for d in shape):
            return stmt
        if math.prod(shape) * tvm.DataType(str(stmt.buffer.dtype)).bits // 8 <= STACK_BYTES:
            return stmt
        hoisted.append(stmt)
        return tirx.Evaluate(tirx.const(0, "int32"))

    rest = [_flatten(tvm_ffi.structural_map(s, (tirx.AllocBuffer, take))) for s in rest]
    return [s for s in rest if not _no_op(s)], hoisted


def _bind_block(loops: list, block) -> list:
    """``Bind`` statements giving each grid variable its value for the linear ``block``
    index. The first grid dimension (``blockIdx.x``) varies fastest, as a GPU dispatches
    blocks: kernels are written so that neighbours in x share data (the rows of A of a GEMM,
    the keys and values of an attention head), which then stays in cache between blocks."""
    binds, stride = [], None
    for loop in loops:
        value = block if stride is None else tirx.floordiv(block, stride)
        binds.append(tirx.Bind(loop.loop_var, tirx.floormod(value, loop.extent)
                               if loop is not loops[-1] else value))
        stride = loop.extent if stride is None else stride * loop.extent
    return binds


COUNTER_STRIDE = 16  # int32 elements between two shares' counters: one 64-byte line each


def _shared_blocks(loops: list, total, count: int, worker: tirx.Var, tiles: list,
                   rest: list) -> tirx.Stmt:
    """The grid as ``count`` workers over ``total`` blocks, each first running its own share
    (blocks ``[w * total // count, (w + 1) * total // count)``) and then helping the others,
    every block claimed from its share's counter (see :func:`lower_blocks`)."""
    counters = tirx.decl_buffer((count * COUNTER_STRIDE,), "int32", "next_block",
                                scope="global")
    mine = tirx.decl_buffer((1,), "int32", "block", scope="global")
    step, share = tirx.Var("step", "int32"), tirx.Var("share", "int32")
    owner = tirx.floormod(worker + step, count)
    start = tirx.floordiv(total * owner, count)
    end = tirx.floordiv(total * (owner + 1), count)
    claim = tirx.BufferStore(mine, tirx.call_extern(
        "int32", CLAIM, tirx.address_of(tirx.BufferLoad(counters, [owner * COUNTER_STRIDE])),
        tirx.const(1, "int32")) + start, [0])
    block = tirx.BufferLoad(mine, [0])
    blocks = tirx.While(block < end, tirx.SeqStmt([*_bind_block(loops, block), *rest, claim]))
    shares = tirx.For(step, 0, count, tirx.ForKind.SERIAL, tirx.SeqStmt([claim, blocks]))
    worker_body = tirx.SeqStmt([*tiles, tirx.AllocBuffer(mine), shares])
    grid = tirx.For(worker, 0, count, tirx.ForKind.PARALLEL, worker_body, span=loops[0].span)
    reset = tirx.For(share, 0, count, tirx.ForKind.SERIAL, tirx.BufferStore(
        counters, tirx.const(0, "int32"), [share * COUNTER_STRIDE]))
    return tirx.SeqStmt([tirx.AllocBuffer(counters), reset, grid])


def lower_blocks(workers: int | None = None):
    """The block grid becomes a parallel loop over ``workers`` CPU workers (the host's core
    count by default). Each worker owns a contiguous share of the blocks and runs it in order,
    claiming each block from its share's counter with an atomic increment; a worker whose share
    is done takes blocks from the others' shares the same way, so a worker slowed by other load
    on its core runs fewer blocks (where the C runtime cannot be built, worker ``w`` runs blocks
    ``w, w + workers, ...`` instead). The runtime runs worker ``i`` on thread ``i`` when it can,
    so a share's data stays in one core's caches from call to call. The kernel's tiles, and the
    larger buffers the tile ops' lowering made inside a block, are allocated once per worker,
    not once per block: a large tile allocated per block costs a fresh mapping and page faults
    every time. A function with several ``T.Kernel`` blocks runs them one after the other, each
    lowered so."""
    workers = workers or os.cpu_count() or 1

    def lower_grid(stmt):
        loops = []
        while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
            loops.append(stmt)
            stmt = stmt.body
        if not loops:
            return None
        body = list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
        rest, hoisted = _hoist([s for s in body if not isinstance(s, tirx.AllocBuffer)])
        tiles = [s for s in body if isinstance(s, tirx.AllocBuffer)] + hoisted
        total = loops[0].extent
        for loop in loops[1:]:
            total = total * loop.extent
        total = tvm.sym.Analyzer().simplify(total)
        count = min(int(total.value), workers) if isinstance(total, tirx.IntImm) else workers
        worker = tirx.Var("worker", "int32")
        if _claims_available():
            return _shared_blocks(loops, total, count, worker, tiles, rest)
        step = tirx.Var("step", "int32")
        steps = tirx.floordiv(total - worker + (count - 1), count)
        per_block = tirx.For(step, 0, steps, tirx.ForKind.SERIAL, tirx.SeqStmt(
            _bind_block(loops, worker + step * count) + rest))
        worker_body = tirx.SeqStmt([*tiles, per_block]) if tiles else per_block
        return tirx.For(worker, 0, count, tirx.ForKind.PARALLEL, worker_body,
                        span=loops[0].span)

    def run(func):
        stmts = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]
        lowered = [lower_grid(s) for s in stmts]
        if all(s is None for s in lowered):
            return func
        stmts = [new if new is not None else old for old, new in zip(stmts, lowered)]
        return func.with_body(_flatten(stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)))

    return prim_func_pass("CPULowerBlocks", run)


# -- GEMM K loops --------------------------------------------------------------------------------
def _const_int(x):
    return int(x.value) if isinstance(x, tirx.IntImm) else x if isinstance(x, int) else None


def _references(body) -> dict:
    """How many loads and stores (region operands included) name each buffer."""
    count: dict = {}

    def add(buf):
        count[buf] = count.get(buf, 0) + 1

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, lambda n: add(n.source)),
                                   (tirx.BufferStore, lambda n: add(n.buffer))])
    return count


def _is_full(region: Region) -> bool:
    return len(region.extents) == len(region.buffer.shape) and all(
        _const_int(s) == 0 for s in region.starts) and all(
        _const_int(e) is not None and _const_int(e) == _const_int(d)
        for e, d in zip(region.extents, region.buffer.shape))


class _KLoop:
    """A K loop of a GEMM over staged tiles: ``for k: copy(.., A_s); copy(.., B_s);
    gemm(A_s, B_s, C)`` in any order of the copies. ``staged`` maps the gemm's ``A`` and ``B``
    to the copy that fills each; ``None`` when the loop has another shape."""

    def __init__(self, loop: tirx.For, refs: dict):
        self.loop = loop
        body = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        calls = [decode(s) for s in body]
        self.gemm = None
        self.staged = None
        if any(c is None or c.name not in ("copy", "gemm") for c in calls):
            return
        gemms = [c for c in calls if c.name == "gemm"]
        copies = {c.operands["dst"].buffer: c for c in calls if c.name == "copy"}
        if len(gemms) != 1 or len(copies) != len(calls) - 1 or gemms[0].attrs["clear_accum"]:
            return
        gemm = gemms[0]
        staged = {}
        for name in "AB":
            region = gemm.operands[name]
            copy = copies.get(region.buffer)
            # the tile is filled whole by its copy, read whole by the gemm and named nowhere
            # else in the function (so a deeper tile can replace it)
            if copy is None or len(region.buffer.shape) != 2 or not _is_full(region) or \
                    not _is_full(copy.operands["dst"]) or refs.get(region.buffer) != 2:
                return
            staged[name] = copy
        written = {c.buffer for c in (gemm.operands["C"], *(c.operands["dst"] for c in
                                                             copies.values()))}
        if any(c.operands["src"].buffer in written for c in copies.values()) or \
                len(copies) != 2 or gemm.operands["C"].buffer in copies:
            return
        self.gemm, self.staged = gemm, staged

    def k_dim(self, name: str) -> int:
        transposed = self.gemm.attrs["transpose_" + name]
        return (0 if transposed else 1) if name == "A" else (1 if transposed else 0)


def _deeper(buffer, dim: int, factor: int, dtype: str):
    """A tile ``factor`` times deeper than ``buffer`` along ``dim``, and its whole region."""
    shape = [int(d) for d in buffer.shape]
    shape[dim] *= factor
    deep = tirx.decl_buffer(shape, dtype, f"{buffer.name}_k{factor}", scope=buffer.scope())
    return deep, Region.full(deep)


def _staging_dtype(copy, acc: str) -> str:
    """The staged tile's dtype, or the accumulator's when the tile only widens to it on the
    way from the copy's source to the gemm (float16 -> float32, int8 -> int32): converting
    once on the copy gives the gemm the same values as converting at each use."""
    src, tile = str(copy.operands["src"].buffer.dtype), str(copy.operands["dst"].buffer.dtype)
    a, t = tvm.DataType(acc), tvm.DataType(tile)
    widens = a.bits >= t.bits and (str(a).startswith(("float", "bfloat")) ==
                                   str(t).startswith(("float", "bfloat")))
    return acc if src == tile and widens else tile


def _at(region: Region, var, value) -> Region:
    """``region`` with ``var`` replaced by ``value`` in its starts and extents."""
    simplify = tvm.sym.Analyzer().simplify
    return Region(region.buffer,
                  tuple(simplify(_substitute(s, var, value)) for s in region.starts),
                  tuple(simplify(_substitute(e, var, value)) for e in region.extents))


def _contiguous(sources: list, src: Region, dst: Region, k_dim: int, depth: int):
    """One source region covering ``sources`` when they follow each other along the source
    dimension copied into the tile's K dimension ``k_dim`` (else None)."""
    sdims = [d for d, e in enumerate(src.extents) if _const_int(e) != 1]
    ddims = [d for d, e in enumerate(dst.extents) if _const_int(e) != 1]
    if len(sdims) != len(ddims) or k_dim not in ddims:
        return None
    axis = sdims[ddims.index(k_dim)]
    analyzer = tvm.sym.Analyzer()
    first = sources[0]
    for u, part in enumerate(sources):
        for d, (a, b) in enumerate(zip(part.starts, first.starts)):
            shift = u * depth if d == axis else 0
            if _const_int(analyzer.simplify(a - b - shift)) != 0:
                return None
        if any(_const_int(analyzer.simplify(a - b)) != 0
               for a, b in zip(part.extents, first.extents)):
            return None
    extents = list(first.extents)
    extents[axis] = extents[axis] * len(sources)
    return Region(first.buffer, first.starts, tuple(extents))


def _merge_k(kl: _KLoop, factor: int, direct: dict):
    """The loop with ``factor`` iterations merged into one deeper GEMM (and a loop for the
    remainder), and the deeper tiles it stages (``direct`` names the operands read in place).
    """
    loop, gemm = kl.loop, kl.gemm
    acc = str(gemm.operands["C"].buffer.dtype)
    outer = tirx.Var(f"{loop.loop_var.name}_o", "int32")
    body, deep, operands = [], {}, {"C": gemm.operands["C"]}
    for name, copy in kl.staged.items():
        src, dst = copy.operands["src"], copy.operands["dst"]
        k_dim = kl.k_dim(name)
        depth = int(dst.buffer.shape[k_dim])
        sources = [_at(src, loop.loop_var, loop.min + outer * factor + u) for u in range(factor)]
        whole = _contiguous(sources, src, dst, k_dim, depth)
        if name in direct:
            operands[name] = whole
            continue
        deep[name], operands[name] = _deeper(dst.buffer, k_dim, factor, _staging_dtype(copy, acc))
        if whole is not None:  # one copy whose rows the hardware prefetcher can stream
            body.append(make_call("copy", {"src": whole, "dst": operands[name]}, copy.attrs,
                                  span=copy.span))
            continue
        for u, part in enumerate(sources):
            starts = [0, 0]
            starts[k_dim] = u * depth
            body.append(make_call("copy", {"src": part, "dst": Region(
                deep[name], tuple(starts), tuple(dst.extents))}, copy.attrs, span=copy.span))
    body.append(make_call("gemm", operands, gemm.attrs, span=gemm.span))
    trips = loop.extent
    main = tirx.For(outer, 0, tirx.floordiv(trips, factor), tirx.ForKind.SERIAL,
                    tirx.SeqStmt(body), annotations=dict(loop.annotations), span=loop.span)
    if _const_int(trips) is not None and _const_int(trips) % factor == 0:
        return main, deep, False
    rest = tirx.Var(loop.loop_var.name, "int32")
    tail = tirx.For(rest, 0, trips - tirx.floordiv(trips, factor) * factor, tirx.ForKind.SERIAL,
                    _substitute(loop.body, loop.loop_var,
                                loop.min + tirx.floordiv(trips, factor) * factor + rest),
                    annotations=dict(loop.annotations), span=loop.span)
    return tirx.SeqStmt([main, tail]), deep, True


class _FuseK(StmtMutator):
    """Rewrites the K loops :class:`_KLoop` recognises; ``allocs`` maps each staged tile
    to the allocations that replace its own."""

    def __init__(self, refs: dict):
        super().__init__()
        self.refs = refs
        self.allocs: dict = {}

    def visit_For(self, stmt):
        stmt = super().visit_For(stmt)  # the analyser now knows this loop and its parents
        if stmt.kind != tirx.ForKind.SERIAL or not isinstance(stmt.body, tirx.SeqStmt):
            return stmt
        kl = _KLoop(stmt, self.refs)
        if kl.gemm is None:
            return stmt
        c = kl.gemm.operands["C"]
        m, n = (_const_int(e) for e in c.extents[-2:])
        depth = _const_int(kl.staged["A"].operands["dst"].buffer.shape[kl.k_dim("A")])
        if m is None or n is None or depth is None:
            return stmt
        direct = self._direct(kl)
        tiles = {name: copy.operands["dst"].buffer for name, copy in kl.staged.items()}
        if len(direct) == 2:  # the whole loop is one GEMM on the operands in place
            for tile in tiles.values():
                self.allocs[tile] = []
            return make_call("gemm", {**direct, "C": c}, kl.gemm.attrs, span=kl.gemm.span)
        factor = k_unroll(_const_int(stmt.extent), depth, m, n,
                          tvm.DataType(str(c.buffer.dtype)).bits)
        if factor < 2:
            return stmt
        new, deep, keeps_tiles = _merge_k(kl, factor, direct)
        for name, tile in tiles.items():
            self.allocs[tile] = ([tirx.AllocBuffer(tile)] if keeps_tiles else []) + \
                ([tirx.AllocBuffer(deep[name])] if name in deep else [])
        return new

    def _direct(self, kl: _KLoop) -> dict:
        """The operands whose copy over every iteration reads one region, of the tile's dtype,
        provably inside its buffer: the GEMM may read that region in place."""
        trips = _const_int(kl.loop.extent)
        if trips is None:
            return {}
        found = {}
        for name, copy in kl.staged.items():
            src, dst = copy.operands["src"], copy.operands["dst"]
            if str(src.buffer.dtype) != str(dst.buffer.dtype):
                continue
            k_dim = kl.k_dim(name)
            sources = [_at(src, kl.loop.loop_var, kl.loop.min + u) for u in range(trips)]
            whole = _contiguous(sources, src, dst, k_dim, int(dst.buffer.shape[k_dim]))
            if whole is not None and all(
                    self.analyzer.can_prove(s >= 0) and self.analyzer.can_prove(s + e <= d)
                    for s, e, d in zip(whole.starts, whole.extents, whole.buffer.shape)):
                found[name] = whole
        return found


def fuse_gemm_k():
    """A K loop that stages tiles of A and B with ``T.copy`` and multiplies them with one
    ``T.gemm`` (the GPU GEMM's shape) is rewritten so the micro-kernel keeps C in registers
    across a deep K instead of loading and storing it every ``block_K``:

    - when every copy is a plain copy of a region provably inside its buffer, and the
      iterations' regions follow each other, the loop becomes one GEMM that reads the whole
      K extent in place (the micro-kernel does its own cache blocking);
    - otherwise :func:`~tilewright_cpu.blocking.k_unroll` iterations run as one deeper GEMM:
      the kernel's copies, with their bounds guards, fill tiles that many times deeper (in the
      accumulator's type when they only widen to it; an operand that may be read in place
      is), and a remainder of iterations runs as written."""

    def run(func):
        fuse = _FuseK(_references(func.body))
        body = fuse.visit(func.body)
        if not fuse.allocs:
            return func

        def place(stmt):
            return _seq_of(fuse.allocs[stmt.buffer]) if stmt.buffer in fuse.allocs else stmt

        return func.with_body(_flatten(tvm_ffi.structural_map(body, (tirx.AllocBuffer, place))))

    return prim_func_pass("CPUFuseGemmK", run)


def _no_op(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and _const_int(stmt.value) == 0


def _seq_of(stmts):
    if not stmts:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _flatten(stmt):
    """Nested sequences spliced into their parents (an allocation must sit in the sequence
    whose statements use it), no-ops dropped from them."""

    def splice(seq):
        flat = []
        for s in seq.seq:
            flat.extend(s.seq if isinstance(s, tirx.SeqStmt) else [] if _no_op(s) else [s])
        if len(flat) == len(seq.seq) and all(a.same_as(b) for a, b in zip(flat, seq.seq)):
            return seq
        return _seq_of(flat)

    return tvm_ffi.structural_map(stmt, (tirx.SeqStmt, splice))


# -- GEMM operands converted once ----------------------------------------------------------------
HOIST_MAX_BYTES = 256 * 1024  # a converted tile above this would not stay in L2 between uses


def _aliases(body) -> dict:
    """Each tile declared over another's memory (``T.decl_buffer(data=...)``, views) mapped to
    the tile whose memory it is."""
    alias = {}

    def declared(stmt):
        data = stmt.data
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and \
                data.op.name == "tirx.buffer_data":
            alias[stmt.buffer] = data.args[0]

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, declared))
    return alias


def _root(buffer, alias: dict):
    seen = set()
    while buffer in alias and buffer not in seen:
        seen.add(buffer)
        buffer = alias[buffer]
    return buffer


def _written(body, alias: dict) -> set:
    """The tiles ``body`` may write (by the tile owning their memory): stores, tile ops'
    written regions and addresses handed to calls (atomics ...)."""
    written = set()

    def tile_op(stmt):
        call = decode(stmt)
        if call is not None:
            written.update(_root(r.buffer, alias) for r in call.regions("write"))

    def address(call):
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.address_of" and \
                isinstance(call.args[0], tvm.ir.TensorLoad):
            written.add(_root(call.args[0].source, alias))

    tvm_ffi.structural_walk(body, [
        (tirx.BufferStore, lambda s: written.add(_root(s.buffer, alias))),
        (tirx.Evaluate, tile_op), (tvm.ir.Call, address)])
    return written


def _allocated(body) -> set:
    found = set()
    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, lambda s: found.add(s.buffer)))
    return found


class _HoistConversions(StmtMutator):
    """Rewrites the loops that :func:`hoist_gemm_conversions` describes; ``alias`` as
    :func:`_aliases` gives it."""

    def __init__(self, alias: dict):
        super().__init__()
        self.alias = alias

    def visit_For(self, stmt):
        if stmt.kind in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED):
            hoisted = self._hoist(stmt)
            if hoisted is not None:
                return hoisted
        return super().visit_For(stmt)

    def _hoist(self, loop):
        written, inner = _written(loop.body, self.alias), _allocated(loop.body)
        tiles = {}  # tile -> its copy in the accumulator's type

        def consider(stmt):
            call = decode(stmt)
            if call is None or call.name != "gemm":
                return
            acc = str(call.operands["C"].buffer.dtype)
            for name in "AB":
                region = call.operands[name]
                tile = region.buffer
                if str(tile.dtype) == acc or str(tile.scope()) == "global" or \
                        _root(tile, self.alias) in written or tile in self.alias or \
                        tile in inner or tile in tiles or not _is_full(region):
                    continue
                shape = [_const_int(d) for d in tile.shape]
                if any(d is None for d in shape) or \
                        math.prod(shape) * tvm.DataType(acc).bits // 8 > HOIST_MAX_BYTES:
                    continue
                tiles[tile] = tirx.decl_buffer(tile.shape, acc, f"{tile.name}_{acc}",
                                               scope=tile.scope())

        tvm_ffi.structural_walk(loop.body, (tirx.Evaluate, consider))
        if not tiles:
            return None

        def replace(stmt):
            call = decode(stmt)
            if call is None or call.name != "gemm":
                return stmt
            operands = {name: Region.full(tiles[region.buffer])
                        if name in "AB" and region.buffer in tiles and _is_full(region)
                        else region for name, region in call.operands.items()}
            return make_call("gemm", operands, call.attrs, span=call.span)

        body = tvm_ffi.structural_map(loop.body, (tirx.Evaluate, replace))
        converts = [make_call("copy", {"src": Region.full(tile), "dst": Region.full(wide)}, {},
                              span=loop.span) for tile, wide in tiles.items()]
        loop = super().visit_For(rebuild_for(loop, body=body))
        return tirx.SeqStmt([*(tirx.AllocBuffer(wide) for wide in tiles.values()), *converts,
                             loop])


def hoist_gemm_conversions():
    """A ``T.gemm`` operand tile of a narrower type than the accumulator (bfloat16, float16,
    float8) that a loop around the gemm never writes (the queries of an attention kernel, read
    against every block of keys) is converted once, before the outermost such loop, into a
    tile of the accumulator's type that the gemm reads instead: the micro-kernel converts a
    narrower operand at every call, and a float8 one element by element in integer code. A
    converted tile larger than :data:`HOIST_MAX_BYTES` is left alone."""

    def run(func):
        body = _HoistConversions(_aliases(func.body)).visit(func.body)
        return func if body.same_as(func.body) else func.with_body(_flatten(body))

    return prim_func_pass("CPUHoistGemmConversions", run)
