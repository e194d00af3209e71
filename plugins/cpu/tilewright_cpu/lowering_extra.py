"""CPU lowering rules for scans, atomics and kernel-side debugging.

Atomics call the C helpers in ``csrc/tw_cpu_runtime.c`` (blocks run on several threads, so
updates to shared global memory need real atomics); ``T.print`` calls back into Python with
the block index; ``T.device_assert`` becomes a runtime assertion that raises in the caller.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import tvm
import tvm_ffi
from tilewright.errors import UnsupportedOpError
from tilewright.ir import (
    ATOMIC_KINDS,
    ATOMIC_LOAD,
    ATOMIC_PREV,
    BITWISE_ATOMIC_KINDS,
    SCAN_OPS,
    Region,
    TileOpCall,
)
from tilewright.transform import RuleContext, prim_func_pass
from tilewright.transform.lowering_utils import (
    as_expr,
    in_bounds,
    loop_nest,
    non_unit,
    region_index,
    scan_rows,
)
from tvm import tirx

from . import runtime
from .lowering import register_lowering

PRINT_VALUE = "tilewright_cpu.print_value"
PRINT_TILE = "tilewright_cpu.print_tile"
ASSERT_FAILED = "tilewright_cpu.device_assert_failed"
ASSERT_RESET = "tilewright_cpu.device_assert_reset"
ASSERT_RAISE = "tilewright_cpu.device_assert_raise"


def lower_scan(call: TileOpCall, ctx: RuleContext):
    """``T.cumsum`` / ``T.cummax``: each row a serial scan."""
    rows, body = scan_rows(call)
    return loop_nest(rows, body, ctx=ctx)


for _scan in SCAN_OPS:
    register_lowering(_scan)(lower_scan)


# the dtypes csrc/tw_cpu_runtime.c defines tw_atomic_<kind>_<dtype> for (its FAMILY and
# INTEGERS macros), and tw_atomic_load_<dtype> / tw_atomic_store_<dtype> (LOAD_STORE)
_INTEGERS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                       "uint64"})
ATOMIC_DTYPES = frozenset({*_INTEGERS, "float16", "bfloat16", "float32", "float64"})
_KIND_DTYPES = {kind: _INTEGERS if kind in BITWISE_ATOMIC_KINDS else ATOMIC_DTYPES
                for kind in ATOMIC_KINDS}
_WIDE = ("float16", "bfloat16")  # travel to and from the runtime as float32


def _checked(what: str, buffer, dtypes) -> str:
    dtype = str(buffer.dtype)
    if dtype not in dtypes:
        raise UnsupportedOpError(
            f"T.{what} into {dtype} ({buffer.name}) is not supported by backend 'cpu' "
            f"(it takes {', '.join(sorted(dtypes))}); use one of those")
    return dtype


def _runtime_type(dtype: str) -> str:
    """The type the runtime takes and returns an element of ``dtype`` as."""
    return "float32" if dtype in _WIDE else dtype


def _as_runtime(value, dtype: str):
    """``value`` as the runtime takes an element of ``dtype``."""
    value_type = _runtime_type(dtype)
    return value if str(value.ty) == value_type else tirx.Cast(value_type, value)


def _from_runtime(value, dtype: str):
    return tirx.Cast(dtype, value) if dtype in _WIDE else value


def _atomic_call(kind: str, buffer, index, value):
    """``tw_atomic_<kind>_<dtype>(&buffer[index], value)``, returning the previous value. The
    runtime's atomics are sequentially consistent, whatever memory order the kernel names."""
    dtype = _checked(f"atomic_{kind}", buffer, _KIND_DTYPES[kind])
    ptr = tirx.address_of(tirx.BufferLoad(buffer, index))
    old = tirx.call_extern(_runtime_type(dtype), f"tw_atomic_{kind}_{dtype}",
                           ptr, _as_runtime(value, dtype))
    return _from_runtime(old, dtype)


def _held(value, dtype: str) -> tuple:
    """``value`` stored into a local element of the runtime's type for ``dtype``: the
    statements and the element's load, which the runtime's call takes. The passes that lower
    bfloat16 and float8 values convert a store's value, not an expression statement's operands
    (a bfloat16 sum, rounded with a binding, left a tile's read unconverted: "Load/Store of
    buffer ... occurred before its declaration"; a conversion through float8 bound its code
    twice: "Detected bound for f8_code conflicts with memorization")."""
    cell = tirx.decl_buffer((1,), _runtime_type(dtype), "atomic_value", scope="local")
    zero = [tirx.IntImm("int32", 0)]
    return ([tirx.AllocBuffer(cell), tirx.BufferStore(cell, _as_runtime(value, dtype), zero)],
            tirx.BufferLoad(cell, zero))


def _make_atomic_rule(kind: str):
    def lower_atomic(call: TileOpCall, ctx: RuleContext):
        """An element of a tile, or an expression's value held first (:func:`_held`)."""
        runtime.load()
        dst, src = call.operands["dst"], call.operands["src"]
        ddims = non_unit(dst)
        sdims = non_unit(src) if isinstance(src, Region) else []

        def body(v):
            index = region_index(dst, v, ddims)
            held, value = ([], tirx.BufferLoad(src.buffer, region_index(src, v, sdims))) \
                if isinstance(src, Region) else _held(src, str(dst.buffer.dtype))
            update = tirx.Evaluate(_atomic_call(kind, dst.buffer, index, value))
            update = tirx.SeqStmt([*held, update]) if held else update
            cond = in_bounds(dst.buffer, index, ctx)
            return update if cond is None else tirx.IfThenElse(cond, update, None)

        if not ddims:
            return body([])
        return loop_nest([dst.extents[d] for d in ddims], body, annotations={}, ctx=ctx)

    lower_atomic.__name__ = f"lower_atomic_{kind}"
    return lower_atomic


for _kind in ATOMIC_KINDS:
    register_lowering(f"atomic_{_kind}")(_make_atomic_rule(_kind))


@register_lowering("atomic_store")
def lower_atomic_store(call: TileOpCall, ctx: RuleContext):
    """``tw_atomic_store_<dtype>(&dst, value)`` (sequentially consistent), the value held
    first (:func:`_held`)."""
    runtime.load()
    dst, value = call.operands["dst"], call.operands["src"]
    dtype = _checked("atomic_store", dst.buffer, ATOMIC_DTYPES)
    ptr = tirx.address_of(tirx.BufferLoad(dst.buffer, list(dst.starts)))
    held, value = _held(value, dtype)
    store = tirx.SeqStmt([*held, tirx.Evaluate(tirx.call_extern(
        "void", f"tw_atomic_store_{dtype}", ptr, value))])
    cond = in_bounds(dst.buffer, list(dst.starts), ctx)
    return store if cond is None else tirx.IfThenElse(cond, store, None)


def _atomic_prev_rule(kind: str):
    def rule(call):
        runtime.load()
        load, value, _order = call.args
        return _atomic_call(kind, load.source, list(load.indices), value)

    return rule


def _atomic_load_rule(call):
    """``tw_atomic_load_<dtype>(&element)`` (sequentially consistent)."""
    runtime.load()
    load = call.args[0]
    dtype = _checked("atomic_load", load.source, ATOMIC_DTYPES)
    return _from_runtime(tirx.call_extern(_runtime_type(dtype),
                                          f"tw_atomic_load_{dtype}", tirx.address_of(load)),
                         dtype)


# Expression intrinsics (atomics returning the old value, atomic loads) become runtime calls.
INTRINSIC_RULES = {**{name: _atomic_prev_rule(k) for name, k in ATOMIC_PREV.items()},
                   ATOMIC_LOAD: _atomic_load_rule}
# the runtime's calls that return a value read atomically (their names as the rules make
# them): made once each (spill_atomic_results)
ATOMIC_EXTERNS = frozenset({*(f"tw_atomic_{kind}_{dtype}" for kind in ATOMIC_KINDS
                              for dtype in _KIND_DTYPES[kind]),
                            *(f"tw_atomic_load_{dtype}" for dtype in ATOMIC_DTYPES)})


def _atomic_results(expr) -> list:
    """The calls of runtime atomics in ``expr``, in order, one inside another's operands
    before it."""
    found = []

    def visit(call):
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.call_extern" and \
                str(call.args[0].value) in ATOMIC_EXTERNS:
            found.append(call)

    tvm_ffi.structural_walk(expr, (tvm.ir.Call, visit))
    return found


def _without_kept_effects(expr):
    """``expr`` without the bindings whose variable it never reads and whose value calls no
    runtime atomic."""

    def let(node):
        used = []
        tvm_ffi.structural_walk(node.body, (tirx.Var, lambda v: used.append(v)
                                            if v.same_as(node.var) else None))
        return node if used or _atomic_results(node.value) else node.body

    return tvm_ffi.structural_map(expr, (tirx.Let, let))


def spill_atomic_results():
    """A statement whose value uses an atomic's previous value (``old[i] = T.atomic_add(...,
    return_prev=True)``, a binding, an expression statement) first stores it in a local
    element, made once, and reads it there:
    TVM 0.27's bfloat16 legalisation writes the conversion of a float32 value to bfloat16 with
    its operand twice, so a bfloat16 atomic's call was made twice (added twice, returning the
    value after the first add). A ``Let`` binding the call does not survive the passes that
    copy a thread's statements. An atomic whose operand is another's previous value
    (``T.atomic_max(S[0], T.atomic_add(C[0], 1, return_prev=True))``) reads the inner one's
    element: each is made once, the inner first. The unused binding that kept an atomic folded
    away (``T.atomic_add(...) * 0``, see ``tilewright.language.math.keeping_effects``) is
    dropped once the atomic is made before the statement: a bfloat16 one was left binding a
    bfloat16 variable to the float32 value TVM's bfloat16 legalisation makes of it ("value.ty()
    == var->ty")."""

    def spill(stmt, value, rebuild):
        calls = _atomic_results(value)
        if not calls:
            return stmt
        prefix, cells = [], []

        def held(expr):  # the calls already stored replaced by their elements, outermost first
            return _without_kept_effects(tvm_ffi.structural_map(expr, (tvm.ir.Call, lambda c: (
                next((load for call, load in cells if call.same_as(c)), c))), order="pre"))

        for n, call in enumerate(calls):
            cell = tirx.decl_buffer((1,), str(call.ty), f"atomic_prev_{n}", scope="local")
            zero = [tirx.IntImm("int32", 0)]
            prefix += [tirx.AllocBuffer(cell, span=stmt.span),
                       tirx.BufferStore(cell, held(call), zero, span=stmt.span)]
            cells.append((call, tirx.BufferLoad(cell, zero)))
        return tirx.SeqStmt([*prefix, rebuild(held(value))])

    def store(s):
        return spill(s, s.value, lambda v: tirx.BufferStore(s.buffer, v, s.indices,
                                                            span=s.span))

    def bind(s):
        return spill(s, s.value, lambda v: tirx.Bind(s.var, v, span=s.span))

    def evaluate(s):  # an expression statement whose value is left unused
        calls = _atomic_results(s.value)
        if len(calls) == 1 and calls[0].same_as(s.value):  # the atomic's call itself: once
            return s
        return spill(s, s.value, lambda v: tirx.Evaluate(v, span=s.span))

    return prim_func_pass("CPUSpillAtomicResults", lambda f: f.with_body(tvm_ffi.structural_map(
        f.body, [(tirx.BufferStore, store), (tirx.Bind, bind), (tirx.Evaluate, evaluate)])))


def _positions(ctx: RuleContext) -> list:
    """Block indices, then the indices of enclosing T.Parallel loops ("threads")."""
    blocks = [loop.loop_var for loop in ctx.loops if loop.kind == tirx.ForKind.THREAD_BINDING]
    lanes = [loop.loop_var for loop in ctx.loops
             if str(loop.annotations.get("tw.loop", "")) == "parallel"]
    return [tirx.const(len(blocks), "int32"), *blocks, *lanes]


@register_lowering("print_value")
def lower_print_value(call: TileOpCall, ctx: RuleContext):
    value = call.operands["value"]
    dtype = str(value.ty)
    wide = "float64" if dtype.startswith(("float", "bfloat")) else "int64"
    return tirx.Evaluate(tirx.call_packed(PRINT_VALUE, tvm.ir.StringImm(call.attrs["msg"]),
                                          tvm.ir.StringImm(dtype), tirx.Cast(wide, value),
                                          *_positions(ctx)))


@register_lowering("print_tile")
def lower_print_tile(call: TileOpCall, ctx: RuleContext):
    region = call.operands["buf"]
    buf = region.buffer

    def wide(values):
        return [tirx.Cast("int64", as_expr(v)) for v in values]

    # the elements' strides: a T.StridedTensor's own, else row-major
    strides = list(buf.strides)
    if not strides:
        step = tirx.const(1, "int64")
        for extent in reversed(list(buf.shape)):
            strides.insert(0, step)
            step = step * tirx.Cast("int64", as_expr(extent))
    return tirx.Evaluate(tirx.call_packed(
        PRINT_TILE, tvm.ir.StringImm(call.attrs["msg"]), tvm.ir.StringImm(str(buf.name)),
        tvm.ir.StringImm(str(buf.dtype)), buf.data, tirx.const(len(buf.shape), "int32"),
        *wide(buf.shape), *wide(strides), *wide(region.starts), *wide(region.extents),
        *_positions(ctx)))


@register_lowering("device_assert")
def lower_device_assert(call: TileOpCall, ctx: RuleContext):
    # Blocks run as tasks of TVM's thread pool, whose launch ignores a task's error code: a
    # failed assertion is also recorded, and `check_device_asserts` raises it in the caller.
    cond, msg = call.operands["cond"], tvm.ir.StringImm(call.attrs["msg"])
    record = tirx.IfThenElse(tirx.Not(cond), tirx.Evaluate(tirx.call_packed(ASSERT_FAILED, msg)),
                             None)
    # TVM 0.27's Python wrapper names its first two parameters (kind, condition) but forwards
    # them in that order to a constructor taking (condition, kind): pass them accordingly.
    return tirx.SeqStmt([record, tirx.AssertStmt(cond, tvm.ir.StringImm("RuntimeError"), [msg])])


def check_device_asserts():
    """A kernel with ``T.device_assert`` forgets earlier failures when it starts and raises the
    first failure its blocks recorded when they have all finished."""

    def run(func):
        found = []
        tvm_ffi.structural_walk(func.body, (tvm.ir.Call, lambda c: found.append(c) if len(
            c.args) and isinstance(c.args[0], tvm.ir.StringImm) and
            str(c.args[0].value) == ASSERT_FAILED else None))
        if not found:
            return func
        return func.with_body(tirx.SeqStmt([tirx.Evaluate(tirx.call_packed(ASSERT_RESET)),
                                            func.body,
                                            tirx.Evaluate(tirx.call_packed(ASSERT_RAISE))]))

    return prim_func_pass("CPUCheckDeviceAsserts", run)


_failures: list[str] = []
_failures_lock = threading.Lock()


@tvm.register_global_func(ASSERT_FAILED, override=True)
def _assert_failed(msg):
    with _failures_lock:
        if not _failures:
            _failures.append(str(msg))
    return 0


@tvm.register_global_func(ASSERT_RESET, override=True)
def _assert_reset():
    with _failures_lock:
        _failures.clear()
    return 0


@tvm.register_global_func(ASSERT_RAISE, override=True)
def _assert_raise():
    with _failures_lock:
        msg = _failures[0] if _failures else None
        _failures.clear()
    if msg is not None:
        raise RuntimeError(msg)
    return 0


def _where(args) -> str:
    n = int(args[0])
    blocks, lanes = tuple(int(a) for a in args[1:1 + n]), tuple(int(a) for a in args[1 + n:])
    text = f"block {blocks}"
    return text + (f" iteration {lanes}" if lanes else "")


@tvm.register_global_func(PRINT_VALUE, override=True)
def _print_value(msg, dtype, value, *where):
    print(f"[{_where(where)}] {msg}{': ' if msg else ''}{value} ({dtype})", flush=True)
    return 0


_NUMPY = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32,
          "float64": np.float64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
          "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
          "uint64": np.uint64, "bool": np.bool_}


@tvm.register_global_func(PRINT_TILE, override=True)
def _print_tile(msg, name, dtype, data, rank, *rest):
    rank = int(rank)
    dims = [int(d) for d in rest[:rank]]
    strides = [int(s) for s in rest[rank:2 * rank]]
    starts = [int(s) for s in rest[2 * rank:3 * rank]]
    extents = [int(e) for e in rest[3 * rank:4 * rank]]
    dtype = str(dtype)
    item = np.dtype(_NUMPY[dtype]).itemsize
    # the elements up to the farthest one the strides reach
    size = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(dims) else 0
    address = data.value if hasattr(data, "value") else int(data)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (size * item))
                                .from_address(address)).view(_NUMPY[dtype])
    array = np.lib.stride_tricks.as_strided(raw, dims, [s * item for s in strides],
                                            writeable=False)
    if dtype == "bfloat16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
    label = str(name)
    if starts != [0] * rank or extents != dims:  # a slice: print only that region
        array = array[tuple(slice(s, s + e) for s, e in zip(starts, extents))]
        label += "[" + ", ".join(f"{s}:{s + e}" for s, e in zip(starts, extents)) + "]"
    head = f"[{_where(rest[4 * rank:])}] {msg}{': ' if msg else ''}{label} shape " \
           f"{tuple(array.shape)} {dtype}"
    print(f"{head}\n{np.array2string(array, threshold=256, edgeitems=4)}", flush=True)
    return 0
