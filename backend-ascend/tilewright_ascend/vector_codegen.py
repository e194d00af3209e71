"""Ascend C for the vector path of portable kernels (ops of :mod:`.vector`).

Each rule writes vector instructions over UB tiles: one instruction when every operand is a
contiguous range, else one per row (rows start on 32-byte boundaries; the vector pass pads
them). A row broadcast reads its scalar with ``GetValue`` on the scalar unit. Copies between
GM and UB that may run past a tensor's end, or whose rows are not whole 32-byte blocks, use
``DataCopyPad`` with the valid rows and columns computed at run time. Atomics set the MTE3
atomic mode around the UB -> GM copy. Loops the vector unit cannot do are written as scalar
``GetValue``/``SetValue`` loops under a comment giving the reason.
"""

from __future__ import annotations

import tvm
from tilewright.errors import KernelError
from tilewright.ir import Region
from tvm import tirx

from .arch import ALIGN, SHORT
from .lowering import RULES, ctype, offset_of, view
from .passes import dtype_bytes
from .vector import SCALAR_KEY, VBIN, VBRC, VDUP, VREDUCE, VSCA, VUN

# lines every generated file starts with; the emulator's header defines its own versions
PRELUDE = (
    "#ifndef TW_CAST",
    "#define TW_CAST(T, x) static_cast<T>(x)",
    "#endif",
    "#ifndef TW_SELECT",
    "#define TW_SELECT(c, a, b) ((c) ? (a) : (b))",
    "#define TW_MIN(a, b) ((a) < (b) ? (a) : (b))",
    "#define TW_MAX(a, b) ((a) > (b) ? (a) : (b))",
    "#endif",
    "#ifndef TW_DEVICE_ASSERT",
    "#define TW_DEVICE_ASSERT(c, msg) assert((c) && (msg))",
    "#endif",
)

_BIN = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min"}
_SCA = {"add": "Adds", "mul": "Muls", "max": "Maxs", "min": "Mins"}
_UN = {"exp": "Exp", "ln": "Ln", "abs": "Abs", "sqrt": "Sqrt", "rsqrt": "Rsqrt",
       "reciprocal": "Reciprocal", "relu": "Relu"}
_REDUCE = {"sum": "Sum", "abssum": "Sum", "max": "Max", "absmax": "Max", "min": "Min"}
_FOLD = {"Sum": "Add", "Max": "Max", "Min": "Min"}


class _Operand:
    """A UB region as rows of ``cols`` elements, ``stride`` apart, from element ``off``."""

    def __init__(self, em, region: Region, what: str):
        self.region, self.name = region, em.buf(region.buffer)
        self.rows, self.cols, self.stride = view(region)
        self.off = offset_of(em, region)
        self.eb = dtype_bytes(str(region.buffer.dtype))
        self.ctype = ctype(str(region.buffer.dtype))
        if str(region.buffer.scope()) != "ascend.ub":
            raise KernelError(f"{what}: {region.buffer.name!r} is in "
                              f"{SHORT.get(str(region.buffer.scope()))}; vector operands are "
                              "UB tiles")
        if self.off.lstrip("-").isdigit() and int(self.off) * self.eb % ALIGN:
            raise KernelError(f"{what}: {region.buffer.name!r} starts at element {self.off}, "
                              f"which is not {ALIGN}-byte aligned")

    @property
    def contiguous(self) -> bool:
        return self.rows == 1 or self.cols == self.stride

    def at(self, row: str | None = None, col: int = 0) -> str:
        parts = [p for p in (self.off if self.off != "0" else "",
                             f"{row} * {self.stride}" if row else "",
                             str(col) if col else "") if p]
        return self.name if not parts else f"{self.name}[{' + '.join(parts)}]"


def _rows(em, operands, emit_one, what):
    """Call ``emit_one(args, count)`` once over contiguous operands, else once per row."""
    rows = {o.rows for o in operands if o.rows > 1} or {1}
    counts = {o.rows * o.cols for o in operands}
    if len(counts) == 1 and all(o.contiguous for o in operands):
        emit_one([o.at() for o in operands], counts.pop())
        return
    if len(rows) != 1 or len({o.cols for o in operands}) != 1:
        shapes = ", ".join(f"{o.region.buffer.name} {o.rows}x{o.cols}" for o in operands)
        raise KernelError(f"{what}: operand shapes differ ({shapes})")
    for o in operands:
        if o.rows > 1 and o.stride * o.eb % ALIGN:
            raise KernelError(f"{what}: rows of {o.region.buffer.name!r} are {o.stride * o.eb} "
                              f"bytes apart, not a multiple of {ALIGN}")
    r = em.ident("r")
    with em.block(f"for (int32_t {r} = 0; {r} < {rows.pop()}; ++{r})"):
        emit_one([o.at(r if o.rows > 1 else None) for o in operands], operands[0].cols)


def _scalar(em, expr, dtype: str) -> str:
    return f"TW_CAST({ctype(dtype)}, {em.expr(expr)})"


def rule_vbin(em, call):
    ops = [_Operand(em, call.operands[n], "vector op") for n in ("dst", "src0", "src1")]
    instr = _BIN[call.attrs["op"]]
    _rows(em, ops, lambda a, n: em.line(f"{instr}({', '.join(a)}, {n});"), instr)


def _scalar_op(em, op: str, args, scalar: str, count, barrier=True):
    """dst = src op scalar, ``scalar`` already printed; ``args`` = [dst, src]."""
    d, s = args
    if op in _SCA:
        em.line(f"{_SCA[op]}({d}, {s}, {scalar}, {count});")
    elif op == "sub":
        em.line(f"Adds({d}, {s}, -{scalar}, {count});")
    elif op == "div":
        em.line(f"Muls({d}, {s}, 1 / {scalar}, {count});")
    elif op == "rsub":
        em.line(f"Muls({d}, {s}, -1, {count});")
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"Adds({d}, {d}, {scalar}, {count});")
    elif op == "rdiv":
        em.line(f"Reciprocal({d}, {s}, {count});")
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"Muls({d}, {d}, {scalar}, {count});")
    else:
        raise KernelError(f"no vector instruction for 'tile {op} scalar'")


def rule_vsca(em, call):
    ops = [_Operand(em, call.operands[n], "vector op") for n in ("dst", "src")]
    dtype = str(call.operands["dst"].buffer.dtype)
    value = call.operands["scalar"]
    op = call.attrs["op"]
    if op == "sub":
        op, value = "add", tirx.Mul(value, tirx.const(-1, str(value.ty)))
    elif op == "div":
        op, value = "mul", tirx.Div(tirx.const(1, str(value.ty)), value)
    scalar = _scalar(em, value, dtype)
    _rows(em, ops, lambda a, n: _scalar_op(em, op, a, scalar, n), "vector op")


def rule_vun(em, call):
    ops = [_Operand(em, call.operands[n], "vector op") for n in ("dst", "src")]
    op = call.attrs["op"]
    if op == "cast":
        narrow = ops[0].eb < ops[1].eb
        mode = "CAST_RINT" if narrow else "CAST_NONE"
        _rows(em, ops, lambda a, n: em.line(f"Cast({a[0]}, {a[1]}, RoundMode::{mode}, {n});"),
              "Cast")
    elif op == "copy":
        _rows(em, ops, lambda a, n: em.line(
            f"DataCopy({a[0]}, {a[1]}, {n});" if n * ops[0].eb % ALIGN == 0 else
            f"Adds({a[0]}, {a[1]}, ({ops[0].ctype})0, {n});"), "copy")
    elif op == "neg":
        _rows(em, ops, lambda a, n: em.line(f"Muls({a[0]}, {a[1]}, ({ops[0].ctype})-1, {n});"),
              "neg")
    else:
        instr = _UN[op]
        _rows(em, ops, lambda a, n: em.line(f"{instr}({a[0]}, {a[1]}, {n});"), instr)


def rule_vdup(em, call):
    dst = _Operand(em, call.operands["dst"], "Duplicate")
    value = _scalar(em, call.operands["value"], str(call.operands["dst"].buffer.dtype))
    _rows(em, [dst], lambda a, n: em.line(f"Duplicate({a[0]}, {value}, {n});"), "Duplicate")


def rule_vbrc(em, call):
    dst, src = (_Operand(em, call.operands[n], "broadcast") for n in ("dst", "src"))
    vec = _Operand(em, call.operands["vec"], "broadcast")
    op, axis = call.attrs["op"], call.attrs["axis"]
    if dst.rows != src.rows or dst.cols != src.cols:
        raise KernelError("broadcast: operand shapes differ")
    r = em.ident("r")
    with em.block(f"for (int32_t {r} = 0; {r} < {dst.rows}; ++{r})"):
        args = [dst.at(r if dst.rows > 1 else None), src.at(r if src.rows > 1 else None)]
        if axis == "row":  # one scalar per row: the scalar unit reads it from UB
            step = f"{r} * {vec.stride}" if vec.rows > 1 else r
            index = step if vec.off == "0" else f"{vec.off} + {step}"
            s = em.ident("s")
            em.line(f"auto {s} = {vec.name}.GetValue({index});")
            if op == "sub":
                em.line(f"Adds({args[0]}, {args[1]}, TW_CAST({dst.ctype}, -{s}), {dst.cols});")
            elif op == "div":
                em.line(f"Muls({args[0]}, {args[1]}, TW_CAST({dst.ctype}, 1 / {s}), "
                        f"{dst.cols});")
            else:
                _scalar_op(em, op, args, f"TW_CAST({dst.ctype}, {s})", dst.cols)
        else:
            if vec.rows * vec.cols != dst.cols or not vec.contiguous:
                raise KernelError("column broadcast: the vector must be one contiguous row of "
                                  f"{dst.cols} elements")
            if op in _BIN:
                em.line(f"{_BIN[op]}({args[0]}, {args[1]}, {vec.at()}, {dst.cols});")
            else:  # reversed operands: vec - src, vec / src
                em.line(f"{_BIN[op[1:]]}({args[0]}, {vec.at()}, {args[1]}, {dst.cols});")


def _like(op: _Operand, name: str) -> _Operand:
    """``op``'s row layout over another buffer, from its element 0."""
    out = object.__new__(_Operand)
    out.__dict__.update(op.__dict__)
    out.name, out.off = name, "0"
    return out


def rule_vreduce(em, call):
    dst, src = _Operand(em, call.operands["dst"], "reduce"), \
        _Operand(em, call.operands["src"], "reduce")
    work = _Operand(em, call.operands["work"], "reduce")
    kind, clear = call.attrs["kind"], call.attrs["clear"]
    base = _REDUCE[kind]
    fold = _FOLD[base]
    rows, cols, stride = src.rows, src.cols, src.stride
    if rows > 1 and stride * src.eb % ALIGN:
        raise KernelError(f"reduce: rows of {src.region.buffer.name!r} are not 32-byte aligned")
    cur = src
    if kind.startswith("abs"):
        em.line(f"Abs({work.name}, {src.at()}, {stride * (rows - 1) + cols});")
        em.line("PipeBarrier<PIPE_V>();")
        cur = _like(src, work.name)
    if call.attrs["dim"] == 0:  # down the columns: one vector op per row
        first = 0
        if clear:
            em.line(f"DataCopy({dst.at()}, {cur.at()}, {cols});" if cols * src.eb % ALIGN == 0
                    else f"Adds({dst.at()}, {cur.at()}, ({src.ctype})0, {cols});")
            first = 1
        r = em.ident("r")
        with em.block(f"for (int32_t {r} = {first}; {r} < {rows}; ++{r})"):
            em.line("PipeBarrier<PIPE_V>();")
            em.line(f"{fold}({dst.at()}, {dst.at()}, {cur.at(r)}, {cols});")
        return
    per = 256 // src.eb  # elements per repeat
    if cols > per:  # fold each row's 256-byte chunks into its first chunk (in work)
        acc = _like(src, work.name)
        r = em.ident("r")
        with em.block(f"for (int32_t {r} = 0; {r} < {rows}; ++{r})"):
            if cur is src:  # the first chunk goes to work whole; the others fold into it
                em.line(f"DataCopy({acc.at(r)}, {cur.at(r)}, {per});")
                em.line("PipeBarrier<PIPE_V>();")
            for k in range(1, -(-cols // per)):
                n = min(per, cols - k * per)
                em.line(f"{fold}({acc.at(r)}, {acc.at(r)}, {cur.at(r, k * per)}, {n});")
                em.line("PipeBarrier<PIPE_V>();")
        cur = acc
    mask = min(cols, per)
    blocks = stride * src.eb // ALIGN
    order = ", ReduceOrder::ORDER_ONLY_VALUE" if base != "Sum" else ""
    target = dst.at()
    if not clear:  # reduce into the tail of work, then combine with dst
        block = ALIGN // src.eb
        total = 1
        for s in call.operands["src"].buffer.shape:
            total *= int(s)
        target = f"{work.name}[{-(-total // block) * block}]"
    em.line(f"WholeReduce{base}({target}, {cur.at()}, {mask}, {rows}, 1, 1, {blocks}{order});")
    if not clear:
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"{fold}({dst.at()}, {dst.at()}, {target}, {rows});")


# -- GM <-> UB copies with bounds, atomics ------------------------------------------------
def _bind_grid(em):
    if getattr(em, "_tw_grid_bound", False):
        return
    loop = em.func.body
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING:
        try:
            em.analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
        except Exception:  # noqa: BLE001 - already bound
            pass
        loop = loop.body
    em._tw_grid_bound = True


def _valid(em, start, extent: int, dim) -> str | None:
    """The valid extent of a GM region dimension as C, or None when it is always whole."""
    end = tirx.const(0, "int32") + start + extent
    if em.analyzer.can_prove(end <= dim):
        return None
    return em.expr(tirx.Min(tirx.const(extent, "int32"), dim - start))


def copy_gm_ub(em, call, atomic: str | None = None) -> bool:
    """GM <-> UB copy; returns False when plain DataCopy does (in bounds, whole blocks)."""
    src, dst = call.operands["src"], call.operands["dst"]
    to_ub = str(src.buffer.scope()) == "global"
    gm, ub = (src, dst) if to_ub else (dst, src)
    what = f"T.copy {src.buffer.name} -> {dst.buffer.name}"
    if str(gm.buffer.dtype) != str(ub.buffer.dtype):
        raise KernelError(f"{what}: DataCopy does not convert {gm.buffer.dtype} to "
                          f"{ub.buffer.dtype}")
    _bind_grid(em)
    eb = dtype_bytes(str(ub.buffer.dtype))
    grows, gcols, gstride = view(gm)
    urows, ucols, ustride = view(ub)
    if grows * gcols != urows * ucols:
        raise KernelError(f"{what}: {grows}x{gcols} elements do not fit {urows}x{ucols}")
    shape = list(gm.buffer.shape)
    exts = [int(e) for e in gm.extents]
    outer = [d for d in range(len(exts) - 1) if exts[d] > 1]
    checks = []
    for d in range(len(exts) - 1):
        if exts[d] == 1 and not em.analyzer.can_prove(gm.starts[d] < shape[d]):
            checks.append(em.expr(gm.starts[d] < shape[d]))
    cols = _valid(em, gm.starts[-1], exts[-1], shape[-1])
    rows = _valid(em, gm.starts[outer[-1]], exts[outer[-1]], shape[outer[-1]]) \
        if len(outer) == 1 else None
    if len(outer) > 1 and not all(em.analyzer.can_prove(
            tirx.const(0, "int32") + gm.starts[d] + exts[d] <= shape[d]) for d in outer):
        raise KernelError(f"{what}: a region of more than two dimensions must lie inside the "
                          "tensor")
    if gcols != ucols and not (grows == 1 or urows == 1):
        raise KernelError(f"{what}: row lengths differ ({gcols} vs {ucols})")
    if gcols != ucols:  # one side is a single row: both must be dense
        if not ((grows == 1 or (isinstance(gstride, int) and gcols == gstride)) and
                (urows == 1 or ucols == ustride)):
            raise KernelError(f"{what}: cannot pair rows of {gcols} with rows of {ucols}")
        total = grows * gcols
        grows, gcols, gstride = 1, total, total
        urows, ucols, ustride = 1, total, total
    whole = cols is None and rows is None and not checks
    if whole and atomic is None and gcols * eb % ALIGN == 0 and \
            (grows == 1 or (gstride * eb % ALIGN == 0 and ustride * eb % ALIGN == 0)):
        return False
    if urows > 1 and ustride * eb % ALIGN:
        raise KernelError(f"{what}: UB rows of {ub.buffer.name!r} are {ustride * eb} bytes "
                          f"apart, not a multiple of {ALIGN}")
    t = ctype(str(ub.buffer.dtype))
    nr, nc = em.ident("tw_rows"), em.ident("tw_cols")
    gm_t, ub_t = (f"{em.buf(gm.buffer)}[{offset_of(em, gm)}]",
                  f"{em.buf(ub.buffer)}[{offset_of(em, ub)}]")
    with em.block(""):
        em.line(f"int32_t {nr} = {rows or grows};")
        em.line(f"int32_t {nc} = {cols or gcols};")
        cond = " && ".join([f"{nr} > 0", f"{nc} > 0", *checks])
        with em.block(f"if ({cond})"):
            gap = f"({ustride * eb} - ({nc} * {eb} + 31) / 32 * 32) / 32" if urows > 1 else "0"
            gs = gstride if isinstance(gstride, int) else em.expr(gstride)
            ggap = f"({gs} - {nc}) * {eb}" if grows > 1 else "0"
            if to_ub:
                em.line(f"DataCopyPad({ub_t}, {gm_t}, DataCopyExtParams({nr}, {nc} * {eb}, "
                        f"{ggap}, {gap}, 0), DataCopyPadExtParams<{t}>(false, 0, 0, 0));")
            else:
                if atomic:
                    em.line(f"SetAtomic{atomic}<{t}>();")
                em.line(f"DataCopyPad({gm_t}, {ub_t}, DataCopyExtParams({nr}, {nc} * {eb}, "
                        f"{gap}, {ggap}, 0));")
                if atomic:
                    em.line("SetAtomicNone();")
    return True


def _make_atomic_rule(kind: str):
    def rule(em, call):
        dst, src = call.operands["dst"], call.operands["src"]
        if not isinstance(src, Region) or str(src.buffer.scope()) != "ascend.ub" or \
                str(dst.buffer.scope()) != "global":
            raise KernelError(f"T.atomic_{kind}: backend 'ascend' adds a UB tile into global "
                              "memory (SetAtomic + DataCopy on MTE3)")
        copy_gm_ub(em, type(call)(call.schema, {"src": src, "dst": dst}, call.attrs,
                                  call.span, call.stmt), atomic=kind.capitalize())

    rule.__name__ = f"rule_atomic_{kind}"
    return rule


# -- debugging ----------------------------------------------------------------------------
def _c_string(text: str) -> str:
    return text.encode("unicode_escape").decode().replace('"', '\\"')


def rule_print_value(em, call):
    value = call.operands["value"]
    dtype = str(value.ty)
    fmt = "%f" if dtype.startswith(("float", "bfloat")) else "%d"
    arg = f"(double){em.expr(value)}" if fmt == "%f" else f"(int32_t){em.expr(value)}"
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{fmt} ({dtype})\\n", '
            f"{arg});")


def rule_print_tile(em, call):
    region = call.operands["buf"]
    if str(region.buffer.scope()) != "ascend.ub":
        raise KernelError("T.print of a tile: backend 'ascend' prints UB tiles (DumpTensor)")
    rows, cols, stride = view(region)
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{region.buffer.name} '
            f'{rows}x{cols} {region.buffer.dtype}\\n");')
    em.line(f"DumpTensor({em.buf(region.buffer)}[{offset_of(em, region)}], 0, "
            f"{stride * (rows - 1) + cols});")


def rule_device_assert(em, call):
    em.line(f'TW_DEVICE_ASSERT({em.expr(call.operands["cond"])}, '
            f'"{_c_string(call.attrs["msg"])}");')


# -- scalar fallback -------------------------------------------------------------------------
_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "EQ": "==", "NE": "!=", "LT": "<",
        "LE": "<=", "GT": ">", "GE": ">="}


def _flat(em, buffer, indices) -> str:
    offset, stride = tirx.const(0, "int32"), 1
    dims = [int(s) for s in buffer.shape]
    for index, dim in reversed(list(zip(indices, dims))):
        offset = offset + index * stride
        stride *= dim
    return em.expr(offset)


def scalar_expr(em, e) -> str:
    """A scalar-unit expression: loads become GetValue."""
    kind = type(e).__name__
    if kind == "TensorLoad":
        return f"{em.buf(e.source)}.GetValue({_flat(em, e.source, e.indices)})"
    if not _has_load(e):
        return em.expr(e)
    if kind in _OPS:
        return f"({scalar_expr(em, e.a)} {_OPS[kind]} {scalar_expr(em, e.b)})"
    if kind in ("Min", "Max"):
        return f"TW_{kind.upper()}({scalar_expr(em, e.a)}, {scalar_expr(em, e.b)})"
    if kind == "Cast":
        return f"TW_CAST({ctype(str(e.ty))}, {scalar_expr(em, e.value)})"
    if kind == "Call" and isinstance(e.op, tvm.ir.Op) and e.op.name.endswith("if_then_else"):
        c, a, b = e.args
        return (f"TW_SELECT({scalar_expr(em, c)}, {scalar_expr(em, a)}, "
                f"{scalar_expr(em, b)})")
    if kind == "Select":
        return (f"TW_SELECT({scalar_expr(em, e.condition)}, {scalar_expr(em, e.true_value)}, "
                f"{scalar_expr(em, e.false_value)})")
    raise KernelError(f"backend 'ascend' has neither a vector instruction nor a scalar-unit "
                      f"form for {e} ({kind})")


def _has_load(e) -> bool:
    import tvm_ffi

    found = []
    tvm_ffi.structural_walk(e, (tvm.ir.TensorLoad, lambda x: found.append(x)))
    return bool(found)


def emit_scalar_loop(em, loop) -> None:
    em.line(f"// scalar fallback on the S pipe (GetValue/SetValue): "
            f"{str(loop.annotations[SCALAR_KEY])}")
    _scalar_stmt(em, loop)


def _scalar_stmt(em, s):
    if isinstance(s, tirx.SeqStmt):
        for child in s.seq:
            _scalar_stmt(em, child)
    elif isinstance(s, tirx.For):
        em.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent))
        v = em.var(s.loop_var)
        with em.block(f"for (int32_t {v} = {em.expr(s.min)}; {v} < "
                      f"{em.expr(s.min + s.extent)}; ++{v})"):
            _scalar_stmt(em, s.body)
    elif isinstance(s, tirx.IfThenElse):
        if _has_load(s.condition):
            raise KernelError("backend 'ascend': a scalar-unit branch on tile data is not "
                              "supported")
        with em.block(f"if ({em.expr(s.condition)})"):
            _scalar_stmt(em, s.then_case)
        if s.else_case is not None:
            em.lines[-1] += " else {"
            em.depth += 1
            _scalar_stmt(em, s.else_case)
            em.depth -= 1
            em.line("}")
    elif isinstance(s, tirx.BufferStore):
        value = scalar_expr(em, s.value)
        em.line(f"{em.buf(s.buffer)}.SetValue({_flat(em, s.buffer, s.indices)}, "
                f"TW_CAST({ctype(str(s.buffer.dtype))}, {value}));")
    else:
        raise KernelError(f"backend 'ascend' cannot run {type(s).__name__} on the scalar unit")


RULES.update({
    VBIN.name: rule_vbin, VSCA.name: rule_vsca, VUN.name: rule_vun, VDUP.name: rule_vdup,
    VBRC.name: rule_vbrc, VREDUCE.name: rule_vreduce,
    "print_value": rule_print_value, "print_tile": rule_print_tile,
    "device_assert": rule_device_assert,
    **{f"atomic_{k}": _make_atomic_rule(k) for k in ("add", "max", "min")},
})
