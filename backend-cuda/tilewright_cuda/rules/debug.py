"""Kernel-side debugging: ``T.print`` of a scalar prints from every thread that reaches it
(tagged with block and thread); ``T.print`` of a buffer is printed once per block, by thread
0, between barriers; ``T.device_assert`` prints the failing line with block and thread, then
traps."""

from __future__ import annotations

import tvm
from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import loop_nest, non_unit, region_index
from tvm import tirx

from .. import intrinsics
from .common import thread_var
from .table import register


def _format(dtype: str) -> tuple[str, str]:
    """(printf conversion, dtype the value is passed as)."""
    if dtype.startswith(("float", "bfloat")):
        return "%f", "float64"
    if dtype == "bool" or dtype.startswith("int"):
        return "%lld", "int64"
    return "%llu", "uint64"


def _printf(fmt: str, *args):
    return tirx.Evaluate(tirx.call_extern("int32", "printf", tvm.ir.StringImm(fmt), *args))


def _block_and_thread(ctx):
    tx, _ = thread_var(ctx)
    blocks = [loop.loop_var for loop in ctx.loops if loop.kind == tirx.ForKind.THREAD_BINDING
              and str(loop.thread_binding.thread_tag).startswith("blockIdx")]
    blocks = blocks + [tirx.const(0, "int32")] * (3 - len(blocks))
    return blocks, tx


def _escape(msg: str) -> str:
    return msg.replace("%", "%%")


@register("print_value")
def lower_print_value(call: TileOpCall, ctx: RuleContext):
    value = call.operands["value"]
    conv, wide = _format(str(value.ty))
    blocks, tx = _block_and_thread(ctx)
    msg = _escape(call.attrs["msg"])
    fmt = f"[block (%d, %d, %d) thread %d] {msg}{': ' if msg else ''}{conv} ({value.ty})\\n"
    return _printf(fmt, *blocks, tx, tirx.Cast(wide, value))


@register("print_tile")
def lower_print_tile(call: TileOpCall, ctx: RuleContext):
    region = call.operands["buf"]
    buf = region.buffer
    conv, wide = _format(str(buf.dtype))
    blocks, tx = _block_and_thread(ctx)
    msg = _escape(call.attrs["msg"])
    dims = non_unit(region)
    head = _printf(f"[block (%d, %d, %d)] {msg}{': ' if msg else ''}{buf.name} "
                   f"{buf.dtype}\\n", *blocks)

    def body(v):
        index = region_index(region, v, dims)
        coords = "".join("[%d]" for _ in index)
        return _printf(f"  {coords} = {conv}\\n", *index,
                       tirx.Cast(wide, tirx.BufferLoad(buf, index)))

    elements = loop_nest([region.extents[d] for d in dims], body, annotations={}, ctx=ctx)
    return tirx.SeqStmt([intrinsics.sync(), tirx.IfThenElse(
        tx == 0, tirx.SeqStmt([head, elements]), None), intrinsics.sync()])


@register("device_assert")
def lower_device_assert(call: TileOpCall, ctx: RuleContext):
    blocks, tx = _block_and_thread(ctx)
    fmt = f"[block (%d, %d, %d) thread %d] {_escape(call.attrs['msg'])}\\n"
    fail = tirx.SeqStmt([_printf(fmt, *blocks, tx),
                         tirx.Evaluate(tirx.call_extern("int32", "__trap"))])
    return tirx.IfThenElse(tirx.Not(call.operands["cond"]), fail, None)
