"""Tile-op schemas: one declaration per op, read by every analysis instead of special cases.

A tile op lives in the IR as ``Evaluate(Call(Op("tw.<name>"), args))``. The arguments are the
op's operands in schema order (a region operand is a ``tw.region`` call holding the first
element and the extents), followed by its attributes in schema order. :func:`decode` turns
such a statement back into a :class:`TileOpCall` view with named operands and attributes.
The call's own ``attrs`` hold the user's annotations that no pass reads (TileLang's keys this
language gives no meaning, ``T.copy(..., annotations={"test.copy": "sync"})``): printed with
the program, they change no lowering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import TilewrightError

Access = Literal["read", "write", "readwrite"]
_REGION_OP = "tw.region"


@dataclass(frozen=True)
class Operand:
    """One operand of a tile op: a buffer region (``region``) or a scalar expression."""

    name: str
    access: Access = "read"
    kind: Literal["region", "expr", "any"] = "region"


@dataclass(frozen=True)
class Attr:
    """A compile-time attribute of a tile op, with its Python type and default. A ``bool``
    attribute may instead hold a condition known only at run time (a boolean ``PrimExpr``)
    where the op's frontend allows one (the CUDA dialect's ``T.wgmma_gemm(clear_accum=k ==
    0)``); decoded, it is that expression instead of a Python bool."""

    name: str
    type: type
    default: Any


@dataclass(frozen=True)
class TileOpSchema:
    """The declaration of a tile op.

    ``dialect`` is None for a portable op; a dialect op names the backends that lower it in
    ``backends``, and using it on another backend is a compile-time error.
    """

    name: str
    operands: tuple[Operand, ...]
    attrs: tuple[Attr, ...] = ()
    doc: str = ""
    dialect: str | None = None
    backends: tuple[str, ...] = ()

    @property
    def ir_name(self) -> str:
        return f"tw.{self.name}"

    def attr_defaults(self) -> dict[str, Any]:
        return {a.name: a.default for a in self.attrs}


@dataclass(frozen=True)
class Region:
    """A rectangular region of a buffer: per-dimension start and extent."""

    buffer: tirx.Buffer
    starts: tuple
    extents: tuple

    @staticmethod
    def full(buffer: tirx.Buffer) -> Region:
        return Region(buffer, tuple(0 for _ in buffer.shape), tuple(buffer.shape))

    def to_expr(self) -> tvm.ir.Call:
        starts = [tirx.IntImm("int32", s) if isinstance(s, int) else s for s in self.starts]
        load = tirx.BufferLoad(self.buffer, starts)
        return tvm.ir.Call(tvm.ir.Op.get(_REGION_OP), [load, *self.extents])


def matrix_dims(extents) -> list[int] | None:
    """The two dimensions of a matrix operand (``T.gemm``'s A, B, C) among a tile's
    ``extents``: its non-unit ones when there are two (a stage of a pipelined [stages, M, K]
    buffer), else its last two (a one-wide tile: a row (1, K) of a GEMV, a column (K, 1), or
    (1, 1)); None when it has more than two non-unit dimensions or fewer than two in all."""
    dims = [d for d, e in enumerate(extents)
            if not (isinstance(e, int | tirx.IntImm) and int(e) == 1)]
    if len(dims) == 2:
        return dims
    return [len(extents) - 2, len(extents) - 1] if len(dims) < 2 <= len(extents) else None


def transpose_dims(extents) -> list[int]:
    """The dimensions of a region that ``T.transpose`` moves: all but its leading dimensions
    of extent 1 (a stage ``[s, :, :]`` of a ``[stages, M, N]`` tile is an ``(M, N)``
    matrix), and at least the last two. The last two swap; the others keep their place."""
    extents = list(extents)
    first = 0
    while first < len(extents) - 2 and isinstance(extents[first], int | tirx.IntImm) and \
            int(extents[first]) == 1:
        first += 1
    return list(range(first, len(extents)))


@dataclass(frozen=True)
class TileOpCall:
    """A decoded tile op: its schema, operands by name, attributes by name, source span."""

    schema: TileOpSchema
    operands: dict[str, Any]
    attrs: dict[str, Any]
    span: Any = None
    stmt: Any = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.schema.name

    def regions(self, access: str) -> list[Region]:
        """Regions this op reads (``"read"``) or writes (``"write"``), from the schema."""
        out = []
        for op in self.schema.operands:
            if op.kind == "region" and (op.access == access or op.access == "readwrite"):
                out.append(self.operands[op.name])
        return out


_REGISTRY: dict[str, TileOpSchema] = {}
_BY_IR_NAME: dict[str, TileOpSchema] = {}


def register_tvm_op(name: str, doc: str) -> None:
    """Register ``name`` as an opaque TVM op (once), for a plugin's own intrinsics that are
    not tile ops (the CUDA dialect's shared-memory addresses and TMA descriptors, say)."""
    try:
        tvm.ir.Op.get(name)
        return
    except Exception:  # noqa: BLE001 - TVM raises its own error type for unknown ops
        pass
    tvm_ffi.get_global_func("ir.RegisterOp")(name, doc)
    tvm.ir.register_op_attr(name, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
    tvm.ir.register_op_attr(name, "TScriptPrinterName", name.replace(".", "_"))


_register_tvm_op = register_tvm_op  # the name tilewright_ascend imports


def register_tile_op(schema: TileOpSchema) -> TileOpSchema:
    """Register ``schema`` once; registering the same name with another schema is an error."""
    existing = _REGISTRY.get(schema.name)
    if existing is not None:
        if existing != schema:
            raise TilewrightError(f"tile op {schema.name!r} is already registered differently")
        return existing
    register_tvm_op(schema.ir_name, schema.doc or schema.name)
    _REGISTRY[schema.name] = schema
    _BY_IR_NAME[schema.ir_name] = schema
    return schema


_INTRINSICS: dict[str, str] = {}
_INTRINSIC_FEATURES: dict[str, tuple[str, str]] = {}  # ir name -> (feature, doc)
# ir name -> fallback(call) -> PrimExpr: what a backend that does not declare the intrinsic's
# capability computes instead (the precise function of a fast-math call, a plain load)
_FALLBACKS: dict = {}
# expression ops whose evaluation writes memory: the registered intrinsics that say so, and a
# call of the user's external function (its effects are unknown)
_WRITING: set[str] = {"tirx.call_extern"}


def register_intrinsic(ir_name: str, capability: str | None, doc: str = "",
                       feature: str | None = None, writes: bool = False,
                       fallback=None) -> tvm.ir.Op:
    """Register an expression-level op (for example an atomic that returns the old value).
    ``capability`` is the name a backend declares in its capabilities' ``tile_ops`` to
    support it: a tile op's (an atomic's), or the intrinsic's own when no tile op goes with it
    (a dialect's expression, ``tvm_warp_shuffle``); None for an op that only its ``feature``
    admits (the marker of a ``T.CUDASourceCodeKernel`` launch). ``feature``, when
    given, a backend feature it needs besides (an atomic's ``return_prev``); ``writes``, that
    evaluating it writes memory (:func:`writes_memory`); ``fallback(call) -> PrimExpr``, when
    given, an implementation in plain TIR that a backend not declaring ``capability`` gets
    instead of a refusal (:func:`apply_fallbacks`)."""
    register_tvm_op(ir_name, doc or ir_name)
    if capability is not None:
        _INTRINSICS[ir_name] = capability
    if feature is not None:
        _INTRINSIC_FEATURES[ir_name] = (feature, doc or ir_name)
    if writes:
        _WRITING.add(ir_name)
    if fallback is not None:
        _FALLBACKS[ir_name] = fallback
    return tvm.ir.Op.get(ir_name)


def apply_fallbacks(node, declared):
    """``node`` (a PrimFunc or Stmt) with each call of an intrinsic that has a fallback and
    whose capability is not in ``declared`` (a backend's ``tile_ops``) replaced by the
    fallback: the core's decomposition of what a backend lacks."""

    def visit(call):
        if not isinstance(call.op, tvm.ir.Op):
            return call
        fallback = _FALLBACKS.get(call.op.name)
        if fallback is None or _INTRINSICS[call.op.name] in declared:
            return call
        return fallback(call)

    return tvm_ffi.structural_map(node, (tvm.ir.Call, visit))


def writes_memory(expr) -> bool:
    """Whether evaluating ``expr`` writes memory: it calls an intrinsic registered with
    ``writes=True`` (an atomic returning the previous value) or an external function. Such an
    expression runs where it stands, once, whatever names its value."""
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda call: found.append(call)
                                   if isinstance(call.op, tvm.ir.Op) and
                                   call.op.name in _WRITING else None))
    return bool(found)


def intrinsic_features(node) -> dict[str, str]:
    """feature -> what needs it, for the backend features the intrinsics in ``node`` need."""
    found: dict[str, str] = {}

    def visit(value):
        if isinstance(value.op, tvm.ir.Op) and value.op.name in _INTRINSIC_FEATURES:
            feature, doc = _INTRINSIC_FEATURES[value.op.name]
            found.setdefault(feature, doc)

    tvm_ffi.structural_walk(node, (tvm.ir.Call, visit))
    return found


def intrinsics_in(node) -> list[str]:
    """Capability names of the expression intrinsics used in ``node``."""
    found: list[str] = []

    def visit(value):
        if isinstance(value.op, tvm.ir.Op) and value.op.name in _INTRINSICS:
            found.append(_INTRINSICS[value.op.name])

    tvm_ffi.structural_walk(node, (tvm.ir.Call, visit))
    return found


def get_schema(name: str) -> TileOpSchema:
    return _REGISTRY[name]


def registered_ops() -> dict[str, TileOpSchema]:
    """Every registered tile op by name (portable and dialect ops)."""
    return dict(_REGISTRY)


def registered_capabilities() -> frozenset[str]:
    """The names a backend's capabilities may declare: the registered tile ops and the
    capability names of the registered expression intrinsics."""
    return frozenset(_REGISTRY) | frozenset(_INTRINSICS.values())


def _encode_attr(attr: Attr, value: Any):
    if attr.type is bool:
        if isinstance(value, tirx.PrimExpr) and not isinstance(value, tirx.IntImm):
            return value  # a condition known at run time (see Attr)
        return tirx.IntImm("bool", bool(value))
    if attr.type is int:
        return tirx.IntImm("int32", int(value))
    if attr.type is float:
        return tirx.FloatImm("float64", float(value))
    return tvm.ir.StringImm("" if value is None else str(value))


def _decode_attr(attr: Attr, value: Any):
    if attr.type is str:
        return str(value.value)
    if attr.type is bool:
        return bool(value.value) if isinstance(value, tirx.IntImm) else value
    return attr.type(value.value)


def make_call(name: str, operands: dict[str, Any], attrs: dict[str, Any] | None = None,
              span=None, annotations: dict[str, Any] | None = None) -> tirx.Evaluate:
    """Build the statement for tile op ``name``; operands are :class:`Region` or PrimExpr.
    ``annotations`` (values the IR holds: strings, numbers, expressions) go on the call's
    ``attrs``, which no pass reads (see the module)."""
    schema = _REGISTRY[name]
    attrs = {**schema.attr_defaults(), **(attrs or {})}
    args = []
    for op in schema.operands:
        value = operands[op.name]
        args.append(value.to_expr() if isinstance(value, Region) else value)
    args.extend(_encode_attr(a, attrs[a.name]) for a in schema.attrs)
    call = tvm.ir.Call(tvm.ir.Op.get(schema.ir_name), args, attrs=annotations or None)
    return tirx.Evaluate(call, span=span)


def is_region(expr) -> bool:
    """Whether ``expr`` is a region operand (``tw.region``) of a tile op."""
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name == _REGION_OP


def schema_of_call(call) -> TileOpSchema | None:
    """The schema of the tile op ``call`` (a ``tvm.ir.Call``) invokes, or None."""
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    return _BY_IR_NAME.get(call.op.name)


def decode_region(expr) -> Region:
    load, extents = expr.args[0], tuple(expr.args[1:])
    return Region(load.source, tuple(load.indices), extents)


def decode(stmt) -> TileOpCall | None:
    """The :class:`TileOpCall` view of ``stmt``, or None when it is not a tile op."""
    if not isinstance(stmt, tirx.Evaluate):
        return None
    call = stmt.value
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    schema = _BY_IR_NAME.get(call.op.name)
    if schema is None:
        return None
    n = len(schema.operands)
    operands = {}
    for op, arg in zip(schema.operands, call.args[:n]):
        operands[op.name] = decode_region(arg) if is_region(arg) else arg
    attrs = {a.name: _decode_attr(a, v) for a, v in zip(schema.attrs, call.args[n:])}
    return TileOpCall(schema, operands, attrs, stmt.span, stmt)


def tile_ops_in(node) -> list[TileOpCall]:
    """Every tile op in ``node`` (a PrimFunc, IRModule or Stmt), in program order."""
    found: list[TileOpCall] = []

    def visit(value):
        call = decode(value)
        if call is not None:
            found.append(call)

    tvm_ffi.structural_walk(node, (tirx.Evaluate, visit), order="pre")
    return found


register_tvm_op(_REGION_OP, "a rectangular buffer region: first element and extents")
