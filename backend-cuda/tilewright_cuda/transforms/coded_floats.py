"""The floating types CUDA holds as codes, one a byte (``uint8``): ``float4_e2m1fn`` and
``float8_e8m0fnu``. A kernel's buffers of them (tensor parameters and tiles) become byte
buffers, as the call passes such a tensor; each conversion to one of them is a call of its
encode function and each conversion from it a call of its decode function (:data:`CODED`, the
one table of what each type calls). Arithmetic on their values is made in float32 and
converted back first (:mod:`tilewright.transform.narrow_float`: one rounding per operation).

- float4_e2m1fn (``include/tw_fp4.h``: CUDA's ``cuda_fp4.h``, rounding to nearest even,
  saturating to +-6, NaN to +6). TVM's CUDA printer packs a float4 buffer two codes a byte
  and stores a code by writing its whole byte (the neighbour's code lost).
- float8_e8m0fnu (``include/tw_e8m0.h``: torch's rule, :class:`tilewright.language.dtypes.
  ScaleFormat`, in integer code). CUDA's ``__nv_cvt_float_to_e8m0`` (and so its
  ``__nv_fp8_e8m0``) rounds only toward zero or up, not by torch's rule.

So no buffer or value of these types reaches TVM's printer. A copy's cp.async or TMA load
moves the bytes (a load of a coded type that stands for an address or a tensor is left to the
byte buffer); a value used otherwise (reinterpreted, passed to a function) is refused at its
statement.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import narrow_float, prim_func_pass
from tvm import tirx

from .. import ops


@dataclass(frozen=True)
class Coding:
    """How CUDA computes a type held as codes: ``encode`` (float32 -> its code, ``uint8``)
    and ``decode`` (code -> float32), the device functions the conversions call."""

    encode: str
    decode: str


CODED = {
    "float4_e2m1fn": Coding("tw_fp4_encode", "tw_fp4_decode"),
    "float8_e8m0fnu": Coding("tw_e8m0_encode", "tw_e8m0_decode"),
}
DTYPES = frozenset(CODED)


def _op_name(node) -> str:
    op = getattr(node, "op", None)
    return op.name if isinstance(node, tvm.ir.Call) and isinstance(op, tvm.ir.Op) else ""


def _encode(value, dtype: str):
    """The code (uint8) in ``dtype`` of ``value``, of another type converted to it."""
    if str(value.ty) != "float32":
        value = tirx.Cast("float32", value)
    return tirx.call_pure_extern("uint8", CODED[dtype].encode, value)


def _decode(code, dtype: str):
    """The float32 value of ``code`` (uint8), a code of ``dtype``."""
    return tirx.call_pure_extern("float32", CODED[dtype].decode, code)


def _codes(value, held: dict, where):
    """The code (uint8) of the expression ``value`` of a coded type, its buffers of coded
    types read through the byte buffers ``held`` maps them to."""
    dtype = str(value.ty)
    if isinstance(value, tvm.ir.TensorLoad) and value.source in held:
        return tirx.BufferLoad(held[value.source], value.indices)
    if isinstance(value, tirx.FloatImm):
        return _encode(tirx.const(float(value.value), "float32"), dtype)
    if isinstance(value, tirx.Cast):
        source = str(value.value.ty)
        if source == dtype:
            return _codes(value.value, held, where)
        if source in CODED:  # from another coded type: through float32 (exact)
            return _encode(_decode(_codes(value.value, held, where), source), dtype)
        return _encode(value.value, dtype)
    if isinstance(value, tirx.Select):
        return tirx.Select(value.condition, _codes(value.true_value, held, where),
                           _codes(value.false_value, held, where))
    if _op_name(value) == "prim.if_then_else":
        return tirx.if_then_else(value.args[0], _codes(value.args[1], held, where),
                                 _codes(value.args[2], held, where))
    raise _refused(dtype, f"compute {type(value).__name__} {value} in {dtype}", where)


def _refused(dtype: str, what: str, where) -> KernelError:
    return KernelError(f"the CUDA backend holds {dtype} values as codes and converts them to "
                       f"and from other types only; it cannot {what}: convert to float32 first",
                       span_location(where))


def _hold(f):
    params = {p: _byte_buffer(p) for p in f.params
              if tirx.buffer.is_buffer_var(p) and str(p.dtype) in CODED}
    held = dict(params)

    def tile(s):
        if str(s.buffer.dtype) in CODED:
            held[s.buffer] = _byte_buffer(s.buffer)

    tvm_ffi.structural_walk(f.body, (tirx.AllocBuffer, tile))
    if not held:
        return f
    where = f.body.span

    def cast(c):
        source, dtype = str(c.value.ty), str(c.ty)
        if source not in CODED:
            return c
        if dtype == source:
            return c.value
        value = _decode(_codes(c.value, held, where), source)
        return value if dtype == "float32" else tirx.Cast(dtype, value)

    def store(s):
        if s.buffer not in held:
            return s
        return tirx.BufferStore(held[s.buffer], _codes(s.value, held, s.span or where),
                                s.indices, span=s.span)

    body = narrow_float.rewrite(f.body, DTYPES)
    refused: list[KernelError] = []  # raised here: one raised in a callback crosses the FFI
    body = tvm_ffi.structural_map(body, [(tirx.Cast, _keeping(cast, refused)),
                                         (tirx.BufferStore, _keeping(store, refused))])
    if not refused:
        _refuse_unconverted(body, held, where, refused)
    if refused:
        raise refused[0]
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: held.get(b, b)))
    return tirx.PrimFunc([params.get(p, p) for p in f.params], body, f.ret_type, f.attrs,
                         f.span)


# the calls whose operand loads name an element's address or its tensor, not its value: a
# copy's cp.async source and destination, a TMA load's shared destination and its descriptor
_ADDRESSES = frozenset({"tirx.address_of", ops.SHARED_ADDR, ops.TENSORMAP})


def _refuse_unconverted(body, held: dict, where, refused: list) -> None:
    """The refusal (into ``refused``) of a load of a coded type left after the rewrite: a use
    of the value as that type by something other than a conversion or a store. A load that
    stands for its element's address or its tensor (:data:`_ADDRESSES`) names the byte
    buffer's, the same bytes."""

    def coded(node) -> bool:
        return isinstance(node, tvm.ir.TensorLoad) and node.source in held

    # the span of the statement last entered (pre-order: the one whose expressions follow),
    # the kernel's where it has none
    at = [where]

    def visit(node):
        if refused or _op_name(node) in _ADDRESSES:
            return tvm_ffi.WalkResult.SKIP
        if isinstance(node, tirx.Stmt):
            at[0] = node.span if node.span is not None else where
        if isinstance(node, tvm.ir.Call):
            load = next((a for a in node.args if coded(a)), None)
            if load is not None:
                refused.append(_refused(str(load.ty), f"pass {load} to {node}", at[0]))
        elif coded(node):
            refused.append(_refused(str(node.ty), f"use the value {node} here", at[0]))
        return None

    tvm_ffi.structural_walk(body, visit, order="pre")


def _keeping(rule, refused: list):
    """``rule`` for ``tvm_ffi.structural_map``, a KernelError it raises kept in ``refused``
    (the node left as it was) instead of crossing the FFI, which would make it a RuntimeError."""

    def run(node):
        try:
            return rule(node)
        except KernelError as exc:
            refused.append(exc)
            return node

    return run


def _byte_buffer(buf):
    return tirx.decl_buffer(buf.shape, "uint8", buf.name, strides=buf.strides,
                            scope=str(buf.scope()), data_alignment=int(buf.data_alignment))


def hold_coded_floats_in_bytes():
    """Buffers of the :data:`CODED` types become byte buffers, conversions calls of their
    encode / decode functions, arithmetic on them float32 arithmetic converted back."""
    return prim_func_pass("CUDAHoldCodedFloatsInBytes", _hold)
