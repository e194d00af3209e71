"""float8 and float4 arithmetic and conversions on the CPU backend, written out as integer code.

Each arithmetic operation on float8 or float4 values is made in float32 and converted back
(:mod:`tilewright.transform.narrow_float`: the language rounds each operation), so it is a
decode of each operand, a float32 operation and an encode.

TVM's float8 legalisation for LLVM decodes zero, subnormals, infinities and NaN wrongly and
encodes subnormals as zero, and TVM packs float4 buffers two values a byte, so every conversion
to or from these types is replaced here by explicit bit manipulation, reading the formats'
facts from :data:`tilewright.language.dtypes.FLOAT_FORMATS` (round to nearest even;
``float8_e4m3fn`` saturates to +-448, infinities included, and has one NaN per sign;
``float8_e5m2`` is IEEE-like with infinities; ``float4_e2m1fn`` saturates to +-6 and has no
NaN: NaN converts to +6, as CUDA's ``__nv_cvt_float_to_fp4`` does; ``float8_e8m0fnu``, the
unsigned powers of two of MX scales, converts as torch does, :class:`ScaleFormat`). Other
floating types convert through float32, which holds every float8 and float4 value exactly.

A kernel's own float8 and float4 tiles (shared, fragment, local) are held as bytes (``uint8``),
their loads and stores reinterpreted: TVM's float8 legalisation would otherwise turn them into
float32 tiles, under the integer code above. float4 tensor parameters are bytes too, one code
each (the call unpacks a caller's two codes a byte). TVM legalises loads and stores of float8
parameters lane by lane, so a ``T.vectorized`` loop (a GEMM micro-kernel's) that touches float8
or float4 runs serially.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.language.dtypes import FLOAT_FORMATS, FloatFormat, ScaleFormat
from tilewright.transform import StmtMutator, narrow_float, prim_func_pass, rebuild_for
from tvm import tirx

FORMATS = FLOAT_FORMATS
# formats whose tensor parameters are held as bytes here (TVM would pack them)
BYTE_PARAMS = frozenset(name for name, fmt in FORMATS.items() if fmt.bits < 8)


def _shift(fmt: FloatFormat) -> int:
    """The float32 mantissa bits a conversion to ``fmt`` drops."""
    return 23 - fmt.man_bits


def _u32(value):
    return tirx.const(value, "uint32")


def _let(value, name: str, body):
    """``body(v)`` with ``v`` bound to ``value`` once: an encode or decode mentions its operand
    several times, so a chain of operations would otherwise grow exponentially."""
    var = tirx.Var(name, str(value.ty))
    return tirx.Let(var, value, body(var))


def encode(value, fmt: FloatFormat | ScaleFormat):
    """The bits (uint8) of a float32 ``value`` in format ``fmt``."""
    rule = _encode_scale if isinstance(fmt, ScaleFormat) else _encode
    return _let(tirx.reinterpret("uint32", value), "f8_bits", lambda bits: rule(bits, fmt))


def _encode_scale(bits, fmt: ScaleFormat):
    """:meth:`ScaleFormat.encode` (torch's float8_e8m0fnu conversion) on float32 ``bits``:
    the exponent field, plus one where the dropped mantissa is above half or a normal's tie;
    NaN and +-inf (exponent 255) stay 255, the NaN code."""
    exponent = (bits >> _u32(23)) & _u32(0xFF)
    guard = (bits >> _u32(22)) & _u32(1)
    rest = bits & _u32(0x3FFFFF)
    up = tirx.Select(tirx.Or(rest != _u32(0), exponent != _u32(0)), guard, _u32(0))
    code = tirx.Select(exponent == _u32(0xFF), _u32(fmt.nan_code), exponent + up)
    return tirx.Cast("uint8", code)


def _encode(bits, fmt: FloatFormat):
    shift = _shift(fmt)
    sign = (bits >> _u32(32 - fmt.bits)) & _u32(fmt.sign_bit)
    mag = bits & _u32(0x7FFFFFFF)
    # normal range: rebias the exponent, round the mantissa to nearest even
    rebias = _u32((127 - fmt.bias) << 23)
    half = _u32((1 << (shift - 1)) - 1)
    rounded = (mag - rebias + half + ((mag >> _u32(shift)) & _u32(1))) >> _u32(shift)
    # below the smallest normal: a multiple of the smallest subnormal, nearest even
    unit = 2.0 ** (fmt.man_bits + fmt.bias - 1)
    small = tirx.Cast("uint32", tirx.nearbyint(tirx.reinterpret("float32", mag) *
                                               tirx.const(unit, "float32")))
    min_normal = _u32((127 - fmt.bias + 1) << 23)
    if fmt.saturate:
        code = tirx.Select(mag >= _u32(_max_bits(fmt)), _u32(fmt.max_code),
                           tirx.Select(mag >= min_normal, rounded, small))
    else:
        inf = _u32(fmt.max_code + 1)
        code = tirx.Select(mag >= min_normal, tirx.Min(rounded, inf), small)
    nan = sign | _u32(fmt.nan_code) if fmt.nan_code is not None else _u32(fmt.max_code)
    return tirx.Cast("uint8", tirx.Select(mag > _u32(0x7F800000), nan, sign | code))


def _max_bits(fmt: FloatFormat) -> int:
    """The float32 bits of the largest finite value of ``fmt``."""
    exponent = (fmt.max_code >> fmt.man_bits) - fmt.bias + 127
    mantissa = (fmt.max_code & ((1 << fmt.man_bits) - 1)) << _shift(fmt)
    return (exponent << 23) | mantissa


def decode(code, fmt: FloatFormat | ScaleFormat):
    """The float32 value of bits ``code`` (uint8) in format ``fmt``."""
    rule = _decode_scale if isinstance(fmt, ScaleFormat) else _decode
    return _let(tirx.Cast("uint32", code), "f8_code", lambda bound: rule(bound, fmt))


def _decode_scale(code, fmt: ScaleFormat):
    """``2 ** (code - 127)``: the code as float32's exponent field; code 0 is 2^-127, float32's
    subnormal 0x00400000; the NaN code a quiet NaN."""
    value = tirx.Select(code == _u32(0), _u32(0x00400000), code << _u32(23))
    return tirx.reinterpret("float32", tirx.Select(code == _u32(fmt.nan_code),
                                                   _u32(0x7FC00000), value))


def _decode(code, fmt: FloatFormat):
    shift = _shift(fmt)
    sign = (code & _u32(fmt.sign_bit)) << _u32(32 - fmt.bits)
    mag = code & _u32(fmt.sign_bit - 1)
    exponent = mag >> _u32(fmt.man_bits)
    normal = tirx.reinterpret("float32", sign | ((mag << _u32(shift)) +
                                                 _u32((127 - fmt.bias) << 23)))
    subnormal = tirx.Cast("float32", mag) * tirx.const(
        2.0 ** -(fmt.man_bits + fmt.bias - 1), "float32")
    subnormal = tirx.Select(sign != _u32(0), -subnormal, subnormal)
    value = tirx.Select(exponent == _u32(0), subnormal, normal)
    if fmt.saturate:  # no infinities; NaN only where the format has a code for it
        if fmt.nan_code is None:
            return value
        return tirx.Select(mag == _u32(fmt.nan_code), tirx.const(float("nan"), "float32"),
                           value)
    special = tirx.reinterpret("float32", sign | _u32(0x7F800000) |
                               ((mag & _u32((1 << fmt.man_bits) - 1)) << _u32(shift)))
    return tirx.Select(exponent == _u32((1 << fmt.exp_bits) - 1), special, value)


def _convert(cast):
    target, source = str(cast.ty), str(cast.value.ty)
    if source == target and source in FORMATS:  # no conversion (T.cast to its own dtype)
        return cast.value
    if target in FORMATS and source not in FORMATS:
        value = cast.value if source == "float32" else tirx.Cast("float32", cast.value)
        return tirx.reinterpret(target, encode(value, FORMATS[target]))
    if source in FORMATS and target not in FORMATS:
        value = decode(tirx.reinterpret("uint8", cast.value), FORMATS[source])
        return value if target == "float32" else tirx.Cast(target, value)
    if source in FORMATS and target in FORMATS and source != target:
        value = decode(tirx.reinterpret("uint8", cast.value), FORMATS[source])
        return tirx.reinterpret(target, encode(value, FORMATS[target]))
    return cast


def touches_float8(stmt) -> bool:
    """Whether ``stmt`` loads, stores or converts float8 or float4 values: TVM legalises those
    to scalar integer code that LLVM cannot vectorise (a per-lane if_then_else)."""
    found = []

    def visit(node):
        if str(getattr(node, "ty", "")) in FORMATS:
            found.append(node)

    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, lambda s: visit(s.value)),
                                   (tvm.ir.TensorLoad, visit), (tirx.Cast, visit)])
    return bool(found)


class _SerialFloat8(StmtMutator):
    """``T.vectorized`` loops that touch float8 become serial loops."""

    def visit_For(self, stmt):
        stmt = super().visit_For(stmt)
        if stmt.kind == tirx.ForKind.VECTORIZED and touches_float8(stmt.body):
            return rebuild_for(stmt, kind=tirx.ForKind.SERIAL)
        return stmt


def _byte_params(f):
    """``f`` with its float4 tensor parameters held as uint8 tensors of the same shape (one
    code a byte), and the map of old to new parameters."""
    params = {p: tirx.decl_buffer(p.shape, "uint8", p.name, strides=p.strides,
                                  scope=str(p.scope()), data_alignment=int(p.data_alignment))
              for p in f.params
              if tirx.buffer.is_buffer_var(p) and str(p.dtype) in BYTE_PARAMS}
    if not params:
        return f, params
    return tirx.PrimFunc([params.get(p, p) for p in f.params], f.body, f.ret_type, f.attrs,
                         f.span), params


def _as_bytes(body, params):
    """``body`` with its float8 and float4 tiles held as uint8 tiles of the same shape, its
    loads and stores of the parameters ``params`` maps (old to new) as loads and stores of
    the new ones."""
    tiles = dict(params)

    def collect(stmt):
        buf = stmt.buffer
        if str(buf.dtype) in FORMATS:
            tiles[buf] = tirx.decl_buffer(buf.shape, "uint8", buf.name, scope=str(buf.scope()))

    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, collect))
    if not tiles:
        return body

    def load(node):
        tile = tiles.get(node.source)
        if tile is None:
            return node
        return tirx.reinterpret(str(node.ty), tirx.BufferLoad(tile, node.indices))

    def store(stmt):
        tile = tiles.get(stmt.buffer)
        if tile is None:
            return stmt
        return tirx.BufferStore(tile, _bits(stmt.value), stmt.indices,
                                span=stmt.span)

    body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    return tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: tiles.get(b, b)))


def _op_name(node) -> str:
    op = getattr(node, "op", None)
    return op.name if isinstance(node, tvm.ir.Call) and isinstance(op, tvm.ir.Op) else ""


def _bits(value):
    """The uint8 bits of a float8 expression, without a float8 value in between where it can:
    TVM's legalisation widens float8 selects and constants to float32, under a reinterpret."""
    if isinstance(value, tirx.FloatImm):
        return encode(tirx.const(float(value.value), "float32"), FORMATS[str(value.ty)])
    if isinstance(value, tirx.Select):
        return tirx.Select(value.condition, _bits(value.true_value), _bits(value.false_value))
    if _op_name(value) == "prim.if_then_else":
        return tirx.if_then_else(value.args[0], _bits(value.args[1]), _bits(value.args[2]))
    if _op_name(value) == "tirx.reinterpret" and str(value.args[0].ty) == "uint8":
        return value.args[0]
    return tirx.reinterpret("uint8", value)


def _collapse(call):
    """``reinterpret(uint8, x)`` of a float8 ``x`` is :func:`_bits` of it."""
    if _op_name(call) == "tirx.reinterpret" and str(call.ty) == "uint8" and \
            str(call.args[0].ty) in FORMATS:
        return _bits(call.args[0])
    return call


def _lazy_lets(expr) -> set:
    """The variables of the ``Let`` expressions in a branch of an ``if_then_else`` of
    ``expr``: the branch not taken must not be evaluated (its loads may be out of bounds)."""
    found = set()

    def branch(call):
        if _op_name(call) == "prim.if_then_else":
            for arg in call.args[1:]:
                tvm_ffi.structural_walk(arg, (tirx.Let, lambda let: found.add(let.var)))

    tvm_ffi.structural_walk(expr, (tvm.ir.Call, branch))
    return found


def _hoisted(value):
    """``value`` without its ``uint32`` ``Let`` expressions (the bits an encode, a decode or a
    bfloat16 rounding binds; those outside lazy branches), and the ``(var, value)`` bindings
    they made, each after those it reads. Other bindings (the float32 ones of the vector
    ``exp``) stay where they are."""
    keep = _lazy_lets(value)
    bindings = {}

    def take(let):
        if let.var in keep or str(let.var.ty) != SLOT:
            return let
        bindings[let.var] = let.value
        return let.body

    value = tvm_ffi.structural_map(value, (tirx.Let, take))
    ordered, done = [], set()

    def place(var):
        if var in done:
            return
        done.add(var)
        tvm_ffi.structural_walk(bindings[var], (tirx.Var, lambda v: place(v)
                                                if v in bindings else None))
        ordered.append((var, bindings[var]))

    for var in bindings:
        place(var)
    return value, ordered


SLOT = "uint32"  # the type of the bindings a store's local array holds


def outer_selection(value, lazy):
    """An ``if_then_else`` inside ``value`` (not ``value`` itself) for which ``lazy`` holds
    (a predicate that holds for any ``if_then_else`` around one it holds for), in no branch of
    another: one evaluated whenever ``value`` is, or None."""
    found = []
    tvm_ffi.structural_walk(value, (tvm.ir.Call, lambda c: found.append(c) if
                                    _op_name(c) == "prim.if_then_else" and lazy(c)
                                    else None))
    inner = []
    for call in found:
        for arg in call.args[1:]:
            tvm_ffi.structural_walk(arg, (tvm.ir.Call, inner.append))
    outer = [c for c in found if not c.same_as(value) and not any(c.same_as(i) for i in inner)]
    return outer[0] if outer else None


def selected_first(value, selection, lane, span, dtype=None):
    """``value`` split around ``selection``, an ``if_then_else`` in it: a local element (of
    ``dtype``, the selection's own by default; one for each lane of the vectorized loop
    ``lane``), the store of the selection into it, and ``value`` reading the element in the
    selection's place."""
    own = str(selection.ty)
    dtype = dtype or own
    cell, index = lane_cells(1, dtype, "selected", lane)
    load = tirx.BufferLoad(cell, index(0))
    read = load if dtype == own else tirx.Cast(own, load)
    rest = tvm_ffi.structural_map(
        value, (tvm.ir.Call, lambda c: read if c.same_as(selection) else c))
    chosen = tirx.BufferStore(cell, selection if dtype == own else tirx.Cast(dtype, selection),
                              index(0), span=span)
    return cell, chosen, rest


def _store_of(stmt, value):
    return tirx.BufferStore(stmt.buffer, value, stmt.indices, span=stmt.span)


def _spill_lets(body):
    """The ``uint32`` ``Let`` expressions of each store's value become stores into a local
    array before it (LLVM keeps the array in registers). TVM's LLVM codegen simplifies a
    bound value with the earlier bindings substituted, in time exponential in the depth of a
    chain of float8 operations, whether they are ``Let`` expressions or ``Bind`` statements
    (a chain of two took 55 CPU-seconds); values passed through memory are not substituted. A
    store of an ``if_then_else`` becomes an ``if`` over a store of each branch, so that a
    branch's bindings are made only where it is taken; an ``if_then_else`` with bindings in a
    branch inside the value (an operand of an operation) is first stored that way into a
    local element of its own, read in its place: TVM's BF16ComputeLegalize does not look
    inside a ``Let`` expression's value, so a bfloat16 tile read there kept its old buffer
    ("Load/Store of buffer ... occurred before its declaration"). Inside a ``T.vectorized``
    loop each lane has its own elements (indexed by the loop variable), so that the loop
    still vectorises: one element shared by the lanes became a store of every lane to one
    address and a broadcast of the last lane's value."""
    return _Spill().visit(body)


class _Spill(StmtMutator):
    def visit_BufferStore(self, stmt):
        return self.store(stmt, innermost_vectorized(self.loops))

    def store(self, stmt, lane):
        """``stmt`` with its bindings spilled; ``lane``: the innermost vectorized loop."""
        value = stmt.value
        if _op_name(value) == "prim.if_then_else" and _lazy_lets(value):
            # a guarded value: the guard becomes a statement, each branch a store of its own
            cond, then_value, else_value = value.args
            return tirx.IfThenElse(cond, self.store(_store_of(stmt, then_value), lane),
                                   self.store(_store_of(stmt, else_value), lane),
                                   span=stmt.span)
        selection = outer_selection(value, _lazy_lets)
        if selection is not None:
            cell, chosen, rest = selected_first(value, selection, lane, stmt.span)
            return tirx.SeqStmt([tirx.AllocBuffer(cell), self.store(chosen, lane),
                                 self.store(_store_of(stmt, rest), lane)])
        value, bindings = _hoisted(value)
        if not bindings:
            return stmt
        slots, index = lane_cells(len(bindings), SLOT, "f8_tmp", lane)
        loads = {var: tirx.BufferLoad(slots, index(k)) for k, (var, _) in enumerate(bindings)}

        def spilled(expr):
            return tvm_ffi.structural_map(expr, (tirx.Var, lambda v: loads.get(v, v)))

        spills = [tirx.BufferStore(slots, spilled(bound), index(k), span=stmt.span)
                  for k, (_, bound) in enumerate(bindings)]
        return tirx.SeqStmt([tirx.AllocBuffer(slots), *spills,
                             _store_of(stmt, spilled(value))])


def innermost_vectorized(loops):
    """The innermost ``T.vectorized`` loop of ``loops`` (outermost first), or None."""
    lanes = [loop for loop in loops if loop.kind == tirx.ForKind.VECTORIZED]
    return lanes[-1] if lanes else None


def lane_cells(count: int, dtype: str, name: str, lane):
    """A local array of ``count`` elements for each lane of the vectorized loop ``lane`` (or
    of ``count`` elements), and the index of element ``k`` of this lane."""
    if lane is None:
        return (tirx.decl_buffer((count,), dtype, name, scope="local"),
                lambda k: [tirx.IntImm("int32", k)])
    extent = int(lane.extent)
    offset = lane.loop_var - lane.min
    return (tirx.decl_buffer((count * extent,), dtype, name, scope="local"),
            lambda k: [tirx.IntImm(str(offset.ty), k * extent) + offset])


def _lower(f):
    f, params = _byte_params(f)
    body = _SerialFloat8().visit(narrow_float.rewrite(f.body, frozenset(FORMATS)))
    body = _as_bytes(tvm_ffi.structural_map(body, (tirx.Cast, _convert)), params)
    return f.with_body(_spill_lets(tvm_ffi.structural_map(body, (tvm.ir.Call, _collapse))))


def lower_float8():
    """Every conversion to or from a float8 or float4 type becomes :func:`encode` /
    :func:`decode`, their tiles (and float4 parameters) are held as bytes, a vectorised loop
    that touches them becomes serial."""
    return prim_func_pass("CPULowerFloat8", _lower)
