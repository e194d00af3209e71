"""float4_e2m1fn on CUDA: a kernel's float4 buffers (tensor parameters and tiles) hold one code
a byte (``uint8``), as the call passes a float4 tensor; each conversion to float4 is a call of
``tw_fp4_encode`` and each conversion from it a call of ``tw_fp4_decode``
(``include/tw_fp4.h``: CUDA's ``cuda_fp4.h``, rounding to nearest even, saturating to +-6, NaN
to +6). Arithmetic on float4 values is made in float32 and converted back first
(:mod:`tilewright.transform.narrow_float`: one rounding per operation).

TVM's CUDA printer packs a float4 buffer two codes a byte and stores a code by writing its whole
byte (the neighbour's code lost), so no float4 buffer reaches it.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.transform import narrow_float, prim_func_pass
from tvm import tirx

FLOAT4 = "float4_e2m1fn"


def _op_name(node) -> str:
    op = getattr(node, "op", None)
    return op.name if isinstance(node, tvm.ir.Call) and isinstance(op, tvm.ir.Op) else ""


def _encode(value):
    """The code (uint8) of a value of another type converted to float4."""
    if str(value.ty) != "float32":
        value = tirx.Cast("float32", value)
    return tirx.call_pure_extern("uint8", "tw_fp4_encode", value)


def _codes(value, held: dict, where):
    """The code (uint8) of the float4 expression ``value``, its float4 buffers read through the
    byte buffers ``held`` maps them to."""
    if isinstance(value, tvm.ir.TensorLoad) and value.source in held:
        return tirx.BufferLoad(held[value.source], value.indices)
    if isinstance(value, tirx.FloatImm):
        return _encode(tirx.const(float(value.value), "float32"))
    if isinstance(value, tirx.Cast):
        if str(value.value.ty) == FLOAT4:
            return _codes(value.value, held, where)
        return _encode(value.value)
    if isinstance(value, tirx.Select):
        return tirx.Select(value.condition, _codes(value.true_value, held, where),
                           _codes(value.false_value, held, where))
    if _op_name(value) == "prim.if_then_else":
        return tirx.if_then_else(value.args[0], _codes(value.args[1], held, where),
                                 _codes(value.args[2], held, where))
    raise KernelError(f"the CUDA backend holds float4_e2m1fn values as codes and converts them "
                      f"to and from other types only; it cannot compute {type(value).__name__} "
                      f"{value} in float4_e2m1fn: convert to float32 first", where)


def _hold(f):
    params = {p: _byte_buffer(p) for p in f.params
              if tirx.buffer.is_buffer_var(p) and str(p.dtype) == FLOAT4}
    held = dict(params)

    def tile(s):
        if str(s.buffer.dtype) == FLOAT4:
            held[s.buffer] = _byte_buffer(s.buffer)

    tvm_ffi.structural_walk(f.body, (tirx.AllocBuffer, tile))
    if not held:
        return f
    where = f.body.span

    def cast(c):
        if str(c.value.ty) != FLOAT4:
            return c
        if str(c.ty) == FLOAT4:
            return c.value
        value = tirx.call_pure_extern("float32", "tw_fp4_decode", _codes(c.value, held, where))
        return value if str(c.ty) == "float32" else tirx.Cast(str(c.ty), value)

    def store(s):
        if s.buffer not in held:
            return s
        return tirx.BufferStore(held[s.buffer], _codes(s.value, held, s.span or where),
                                s.indices, span=s.span)

    body = narrow_float.rewrite(f.body, frozenset({FLOAT4}))
    body = tvm_ffi.structural_map(body, [(tirx.Cast, cast), (tirx.BufferStore, store)])
    tvm_ffi.structural_walk(body, (tvm.ir.TensorLoad, lambda e: _unconverted(e, held, where)))
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: held.get(b, b)))
    return tirx.PrimFunc([params.get(p, p) for p in f.params], body, f.ret_type, f.attrs,
                         f.span)


def _unconverted(load, held: dict, where) -> None:
    """A float4 load left after the rewrite is used as a float4 value by something other than
    a conversion or a store."""
    if load.source in held:
        _codes(tirx.Max(load, load), held, where)  # raises, naming the operation


def _byte_buffer(buf):
    return tirx.decl_buffer(buf.shape, "uint8", buf.name, strides=buf.strides,
                            scope=str(buf.scope()), data_alignment=int(buf.data_alignment))


def hold_float4_in_bytes():
    """float4 buffers become byte buffers, conversions calls of ``tw_fp4_encode`` /
    ``tw_fp4_decode``, float4 arithmetic float32 arithmetic converted back."""
    return prim_func_pass("CUDAHoldFloat4InBytes", _hold)
