"""bfloat16 on the CPU backend, around TVM 0.27's bfloat16 legalisation (BF16ComputeLegalize,
BF16StorageLegalize), and float16 math functions.

Each arithmetic operation on bfloat16 values is made in float32 and rounded in integer code, as
on the interpreter and a GPU; values stored into bfloat16 tiles are rounded; conversions inside
``Let`` bindings (which the legalisation does not visit) are made here in integer code; a named
value that reads a bfloat16, float8 or float4 buffer is held in a float32 local element. float16
math functions are float32's rounded once. Each pass's docstring names the TVM behaviour it
works around.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.transform import StmtMutator, narrow_float, prim_func_pass
from tilewright.transform import lanes as lanes_module
from tvm import tirx

from .lowering_float8 import innermost_vectorized, lane_cells, outer_selection, selected_first

REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")
CALL_EXTERN = tvm.ir.Op.get("tirx.call_extern")


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


HELD_IN_FLOAT32 = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
                             "float4_e2m1fn"})


def hold_narrow_bindings():
    """A binding (a named value the language keeps, see ``tilewright.language.snapshots``)
    whose value loads a bfloat16, float8 or float4 buffer, or is of one of these types (a
    vector of them built from values held elsewhere: ``T.atomic_addx2``'s previous values, which
    spill_atomic_results holds in float32) becomes a one-element local array written
    where the binding stood and read where the variable was used: float32 for a value of these
    types (exact), the variable's own dtype otherwise (a ``T.ldg32`` word of two bfloat16
    elements is a uint32: through float32 it lost its low bits). These types are held in others
    here (float32, bytes): float8's lowering and TVM 0.27's bfloat16 legalisation rewrite the
    buffers' stores and loads, but not a binding's variable or, for bfloat16, a load inside a
    ``Bind`` ("Load/Store of buffer ... occurred before its declaration")."""

    class Hold(StmtMutator):
        def __init__(self):
            super().__init__()
            self.held = {}

        def visit_Bind(self, stmt):
            loads = []
            tvm_ffi.structural_walk(stmt.value, (tvm.ir.TensorLoad, lambda ld: loads.append(ld)))
            ty = stmt.var.ty
            element = str(tvm.runtime.DataType(str(ty.dtype)).with_lanes(1)) \
                if isinstance(ty, tvm.ir.PrimType) else ""
            if element not in HELD_IN_FLOAT32 and \
                    not any(str(ld.source.dtype) in HELD_IN_FLOAT32 for ld in loads):
                return stmt
            dtype = str(stmt.var.ty)
            held = "float32" if dtype in HELD_IN_FLOAT32 else dtype
            value = stmt.value if dtype == held else tirx.Cast(held, stmt.value)
            cell = tirx.decl_buffer((1,), held, f"{stmt.var.name}_held", scope="local")
            zero = [tirx.IntImm("int32", 0)]
            load = tirx.BufferLoad(cell, zero)
            self.held[stmt.var] = load if dtype == held else tirx.Cast(dtype, load)
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


def _external(value) -> bool:
    """Whether ``value`` is a runtime function's result (an atomic's previous value: a float32
    holding a bfloat16 exactly, which the call must make once)."""
    return isinstance(value, tvm.ir.Call) and value.op.same_as(CALL_EXTERN)


def round_bfloat16_arithmetic():
    """Each arithmetic operation on bfloat16 values rounds its result to bfloat16
    (:mod:`tilewright.transform.narrow_float`), as on the interpreter and a GPU: the operation
    is made in float32 and rounded in integer code, which TVM's BF16ComputeLegalize keeps
    (it would drop a plain conversion and keep float32 between operations). A conversion to
    bfloat16 inside an expression (``T.cast(x, T.bfloat16) == y``) is rounded so too: the
    legalisation dropped it, and the value kept all of float32's bits. Like torch's and the
    interpreter's, a conversion of a wider value goes through float32. A conversion stored
    straight into a bfloat16 buffer is left to the store, which rounds it (BF16StorageLegalize
    for a tensor, :func:`round_bfloat16_tiles` for a tile). A bfloat16 vector's operations and
    conversions are made lane by lane: the rounding and TVM's legalisation take scalars (left
    a vector, its operations kept float32's bits, and a tensor's lanes read inside the
    rounding's binding were not legalised: "BF16 needs to be storaged lowered first")."""

    def narrowed(dtype, value):
        return tirx.Cast(dtype, _float32_rounded_to_bfloat16(value))

    def run(func):
        stored = []  # conversions a store into a bfloat16 buffer rounds itself
        tvm_ffi.structural_walk(func.body, (tirx.BufferStore, lambda s: stored.append(s.value)
                                            if str(s.buffer.dtype) == "bfloat16" and
                                            isinstance(s.value, tirx.Cast) else None))

        def conversion(cast):
            lanes = tvm.runtime.DataType(str(cast.ty)).lanes
            if lanes > 1 and str(cast.ty) == f"bfloat16x{lanes}" and \
                    not any(cast.same_as(value) for value in stored):
                return lanes_module.gathered([conversion(tirx.Cast(
                    "bfloat16", lanes_module.lane(cast.value, k))) for k in range(lanes)])
            if str(cast.ty) != "bfloat16" or str(cast.value.ty) == "bfloat16" or \
                    any(cast.same_as(value) for value in stored) or _external(cast.value):
                return cast
            value = cast.value
            return narrowed("bfloat16", value if str(value.ty) == "float32" else
                            tirx.Cast("float32", value))

        body = tvm_ffi.structural_map(func.body, (tirx.Cast, conversion))
        return func.with_body(narrow_float.rewrite(body, frozenset({"bfloat16"}),
                                                   narrowed=narrowed, by_lanes=True))

    return prim_func_pass("CPURoundBfloat16Arithmetic", run)


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


def bfloat16_bits_of_values():
    """The bits of a bfloat16 value that is not an element of one of the kernel's tensors
    (``T.reinterpret(S[i], "uint16")`` of a tile's element, ``T.lds32`` of a bfloat16 tile)
    are taken from its float32 value: TVM 0.27's BF16ComputeLegalize holds bfloat16 tiles and
    values in float32 and left the reinterpret a bitcast of a float32 to 16 bits, which LLVM
    refuses. The float32 holds the bfloat16 exactly (stores into bfloat16 tiles are rounded,
    :func:`round_bfloat16_tiles`), so its high 16 bits are the value's bits."""

    def run(func):
        tensors = _tensors(func)

        def visit(call):
            if not call.op.same_as(REINTERPRET) or str(call.args[0].ty) != "bfloat16":
                return call
            value = call.args[0]
            if isinstance(value, tvm.ir.TensorLoad) and is_tensor(value.source, tensors):
                return call  # a tensor's element: its uint16 storage, read as it is
            wide = tirx.reinterpret("uint32", tirx.Cast("float32", value))
            bits = tirx.Cast("uint16", tirx.shift_right(wide, _u32(16)))
            return bits if str(call.ty) == "uint16" else tirx.reinterpret(str(call.ty), bits)

        return func.with_body(tvm_ffi.structural_map(func.body, (tvm.ir.Call, visit)))

    return prim_func_pass("CPUBfloat16BitsOfValues", run)


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
    """Whether a branch of the ``if_then_else`` ``call`` binds a value, reads a tile or converts
    a value to bfloat16: what :func:`bfloat16_conversions_around_lets` makes before a
    statement, where the branch is taken (a conversion to bfloat16 it makes with a binding:
    one left in the selection became a binding in a branch after the search, and float8's
    lowering then stored the selection into a bfloat16 element read inside a binding:
    "Load/Store of buffer selected ... occurred before its declaration")."""
    found = []
    for arg in call.args[1:]:
        tvm_ffi.structural_walk(arg, [(tirx.Let, found.append), (
            tvm.ir.TensorLoad, lambda ld: found.append(ld)
            if str(ld.source.scope()) != "global" else None), (
            tirx.Cast, lambda c: found.append(c) if str(c.ty) == "bfloat16" and
            str(c.value.ty) != "bfloat16" else None)])
    return bool(found)


def _held_selection(value) -> bool:
    """Whether ``value`` is (under conversions) an ``if_then_else`` whose branch binds a value,
    reads a tile or converts a value to bfloat16 (:func:`_held_in_a_branch`)."""
    while isinstance(value, tirx.Cast):
        value = value.value
    return _is_if_then_else(value) and _held_in_a_branch(value)


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


def is_tensor(buffer, tensors) -> bool:
    """Whether ``buffer`` is one of the kernel's tensors (``tensors``: the data variables of
    its parameters), whose bfloat16 elements stay 16-bit in memory; every other bfloat16
    buffer (a tile, a ``T.alloc_global`` workspace the kernel allocates) BF16ComputeLegalize
    re-declares as float32."""
    return any(buffer.data.same_as(t) for t in tensors)


def _tensors(func) -> list:
    return [p.data for p in func.params if tirx.buffer.is_buffer_var(p)]


def _converted_around_lets(expr, span, lane=None, tensors=()):
    """``expr`` with its conversions between bfloat16 and float32 made in integer code (see
    :func:`bfloat16_conversions_around_lets`), and the stores of the tile reads it holds in
    float32 local arrays, to be made before it; inside the vectorized loop ``lane`` each lane
    holds its read in its own element. ``tensors``: as :func:`is_tensor` takes them."""
    lazy, held = _lazy_loads(expr), []

    def widened(value):
        """The float32 lanes of the bfloat16 ``value``, a shuffle's made of its vectors'."""
        if isinstance(value, tirx.Shuffle):
            return tirx.Shuffle([widened(v) for v in value.vectors], value.indices)
        target = str(value.ty).replace("bfloat16", "float32")
        return convert(tirx.Cast(target, value)) if target == "float32" else \
            tirx.Cast(target, value)

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
        if isinstance(value, tirx.Shuffle):  # lanes of vectors: those of their conversions
            return widened(value)
        if not isinstance(value, tvm.ir.TensorLoad):
            return cast
        if is_tensor(value.source, tensors):
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
    deeper in the value or the condition (an operand, under conversions) whose branch binds a
    value, reads a tile or converts a value to bfloat16 (a binding once rounded here) is first
    stored so into a local element of its own (float32 for bfloat16) that the value or
    condition reads in its place: left there, its branch's tile read kept the old tile, and
    float8's lowering stored it into a bfloat16 element, read inside the binding with the
    same result ("Load/Store of buffer selected ... occurred before its declaration")."""

    def run(func):
        mutator = _AroundLets()
        mutator.tensors = _tensors(func)
        return func.with_body(mutator.visit(func.body))

    return prim_func_pass("CPUBfloat16AroundLets", run)


class _AroundLets(StmtMutator):
    """:func:`bfloat16_conversions_around_lets` with the innermost vectorized loop and the
    kernel's tensors known."""

    tensors: list = []

    def lane(self):
        return innermost_vectorized(self.loops)

    def visit_BufferStore(self, stmt):
        if not _has_let(stmt.value) or not _touches_bfloat16(stmt.value, stmt.buffer.dtype):
            return stmt
        split = _branches(stmt) if _lazy_loads(stmt.value) or \
            _held_selection(stmt.value) else None
        if split is not None:  # each branch's loads made where it is taken
            return self.branch(tirx.IfThenElse(
                split.condition, self.visit_BufferStore(split.then_case),
                self.visit_BufferStore(split.else_case), span=stmt.span))
        selected = self.select_first(stmt.value, stmt.span)
        if selected is not None:  # made first, by the store above, where it is an operand
            cell, chosen, rest = selected
            return tirx.SeqStmt([tirx.AllocBuffer(cell, span=stmt.span),
                                 self.visit_BufferStore(chosen),
                                 self.visit_BufferStore(tirx.BufferStore(
                                     stmt.buffer, rest, stmt.indices, span=stmt.span))])
        value, held = _converted_around_lets(stmt.value, stmt.span, self.lane(), self.tensors)
        if value.same_as(stmt.value):
            return stmt
        return _after_held(held, tirx.BufferStore(stmt.buffer, value, stmt.indices,
                                                  span=stmt.span))

    def visit_IfThenElse(self, stmt):
        return self.branch(super().visit_IfThenElse(stmt))

    def select_first(self, value, span):
        """The outer ``if_then_else`` of ``value`` whose branch binds a value, reads a tile or
        converts a value to bfloat16, split out by
        :func:`~tilewright_cpu.lowering_float8.selected_first` (into a float32 element for
        bfloat16), or None."""
        selection = outer_selection(value, _held_in_a_branch)
        if selection is None:
            return None
        held = "float32" if str(selection.ty) == "bfloat16" else None
        return selected_first(value, selection, self.lane(), span, held)

    def branch(self, stmt):
        if not _has_let(stmt.condition) or not _touches_bfloat16(stmt.condition):
            return stmt
        selected = self.select_first(stmt.condition, stmt.span)
        if selected is not None:
            cell, chosen, rest = selected
            return tirx.SeqStmt([tirx.AllocBuffer(cell, span=stmt.span),
                                 self.visit_BufferStore(chosen), self.branch(tirx.IfThenElse(
                                     rest, stmt.then_case, stmt.else_case, span=stmt.span))])
        condition, held = _converted_around_lets(stmt.condition, stmt.span, self.lane(),
                                                 self.tensors)
        return _after_held(held, tirx.IfThenElse(condition, stmt.then_case, stmt.else_case,
                                                  span=stmt.span))


def float16_math_in_float32():
    """Each math function of float16 values is the float32 function rounded to float16 once
    (:mod:`tilewright.transform.narrow_float`): TVM expands some for LLVM in float16 arithmetic
    (``tanh`` several units in the last place off). LLVM rounds float16 arithmetic per
    operation itself."""
    return prim_func_pass("CPUFloat16Math", lambda func: func.with_body(
        narrow_float.rewrite(func.body, frozenset({"float16"}), arithmetic=False)))
