"""CUDA lowering rules for scans, atomics and kernel-side debugging.

Atomics become ``atomicAdd`` (native) and the ``tw_atomic_*`` helpers of ``include/tw_cuda.h``.
``T.print`` of a scalar prints from every thread that reaches it (tagged with block and thread);
``T.print`` of a buffer is printed once per block, by thread 0, after a barrier.
``T.device_assert`` prints the failing line with block and thread, then traps.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import ATOMIC_KINDS, Region, TileOpCall
from tilewright.transform import RuleContext, StmtMutator, prim_func_pass
from tilewright.transform.lowering_utils import (
    in_bounds,
    loop_nest,
    non_unit,
    region_index,
    scan_rows,
)
from tvm import tirx

from .lowering import (
    cast,
    register_lowering,
    sync,
    thread_var,
)


@register_lowering("cumsum")
def lower_cumsum(call: TileOpCall, ctx: RuleContext):
    """Each row is scanned by one thread; rows are spread over the threads."""
    rows, body = scan_rows(call)
    if not rows:  # one row: one thread scans it
        tx, _ = thread_var(ctx)
        return tirx.IfThenElse(tx == 0, body([]), None)
    return loop_nest(rows, body, ctx=ctx)


_NATIVE_ADD = ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "uint64")
_HELPER = {"add": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "uint64",
                   "int64"),
           "max": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64",
                   "uint64"),
           "min": ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64",
                   "uint64")}


def atomic_call(kind: str, buffer, index, value):
    """``tw_atomic_<kind>(&buffer[index], value)``, returning the previous value."""
    dtype = str(buffer.dtype)
    if dtype not in _HELPER[kind]:
        raise KernelError(f"T.atomic_{kind} on {dtype} is not supported by backend 'cuda' "
                          f"(supported: {', '.join(_HELPER[kind])})")
    ptr = tirx.address_of(tirx.BufferLoad(buffer, index))
    return tirx.call_extern(dtype, f"tw_atomic_{kind}", ptr, cast(value, dtype))


def _make_atomic_rule(kind: str):
    def lower_atomic(call: TileOpCall, ctx: RuleContext):
        dst, src = call.operands["dst"], call.operands["src"]
        ddims = non_unit(dst)
        sdims = non_unit(src) if isinstance(src, Region) else []

        def body(v):
            index = region_index(dst, v, ddims)
            value = tirx.BufferLoad(src.buffer, region_index(src, v, sdims)) \
                if isinstance(src, Region) else src
            update = tirx.Evaluate(atomic_call(kind, dst.buffer, index, value))
            cond = in_bounds(dst.buffer, index, ctx)
            return update if cond is None else tirx.IfThenElse(cond, update, None)

        if not ddims:  # one element: one thread updates it
            tx, _ = thread_var(ctx)
            return tirx.IfThenElse(tx == 0, body([]), None)
        return loop_nest([dst.extents[d] for d in ddims], body, ctx=ctx)

    lower_atomic.__name__ = f"lower_atomic_{kind}"
    return lower_atomic


for _kind in ATOMIC_KINDS:
    register_lowering(f"atomic_{_kind}")(_make_atomic_rule(_kind))


def _atomic_prev_rule(kind: str):
    def rule(call):
        load, value = call.args
        return atomic_call(kind, load.source, list(load.indices), value)

    return rule


# Expression intrinsics (atomics returning the old value) become helper calls.
INTRINSIC_RULES = {f"tw.atomic_{k}_prev": _atomic_prev_rule(k) for k in ATOMIC_KINDS}


_PREV_OPS = frozenset(f"tw.atomic_{k}_prev" for k in ATOMIC_KINDS)


def _has_atomic_prev(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in _PREV_OPS else None))
    return bool(found)


class _GateScalarAtomics(StmtMutator):
    """``Y[i] = T.atomic_<kind>(X[j], v, return_prev=True)`` outside ``T.Parallel`` is block
    code, which every thread of the block runs; the atomic must happen once per block, so the
    store is made by thread 0 only."""

    def visit_BufferStore(self, stmt):
        if any(loop.kind == tirx.ForKind.PARALLEL for loop in self.loops) or \
                str(stmt.buffer.scope()) != "global" or not _has_atomic_prev(stmt.value):
            return stmt
        for loop in reversed(self.loops):
            if loop.thread_binding is not None and \
                    str(loop.thread_binding.thread_tag) == "threadIdx.x":
                return tirx.IfThenElse(loop.loop_var == 0, stmt, None)
        return stmt


def gate_scalar_atomics():
    """The pass of :class:`_GateScalarAtomics`."""
    return prim_func_pass("CUDAGateScalarAtomics",
                          lambda f: f.with_body(_GateScalarAtomics().visit(f.body)))


# -- debugging ------------------------------------------------------------------------------
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


@register_lowering("print_value")
def lower_print_value(call: TileOpCall, ctx: RuleContext):
    value = call.operands["value"]
    conv, wide = _format(str(value.ty))
    blocks, tx = _block_and_thread(ctx)
    msg = _escape(call.attrs["msg"])
    fmt = f"[block (%d, %d, %d) thread %d] {msg}{': ' if msg else ''}{conv} ({value.ty})\\n"
    return _printf(fmt, *blocks, tx, tirx.Cast(wide, value))


@register_lowering("print_tile")
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
    return tirx.SeqStmt([sync(), tirx.IfThenElse(tx == 0, tirx.SeqStmt([head, elements]),
                                                 None), sync()])


@register_lowering("device_assert")
def lower_device_assert(call: TileOpCall, ctx: RuleContext):
    blocks, tx = _block_and_thread(ctx)
    fmt = f"[block (%d, %d, %d) thread %d] {_escape(call.attrs['msg'])}\\n"
    fail = tirx.SeqStmt([_printf(fmt, *blocks, tx),
                         tirx.Evaluate(tirx.call_extern("int32", "__trap"))])
    return tirx.IfThenElse(tirx.Not(call.operands["cond"]), fail, None)
