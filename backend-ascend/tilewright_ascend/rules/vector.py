"""Vector instructions on UB tiles: the dialect's ``T.tile.*`` ops, ``T.fill`` of UB, the
vector-path ops of portable kernels (:data:`..facts.ops.VECTOR_PATH_OPS`) and ``T.Parallel``
nests of a dialect kernel.

Each rule writes one instruction when every operand is a contiguous range, else one per row
(rows start on 32-byte boundaries; the vector phase pads them). A row broadcast reads its
scalar with ``GetValue`` on the scalar unit.
"""

from __future__ import annotations

import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import Region
from tvm import tirx

from ..facts import ops
from ..facts.arch import ALIGN, short
from ..facts.dtypes import ctype
from ..facts.instructions import (
    REPEAT_LIMIT,
    ROUNDING_CASTS,
    cast_mode,
    compare_count,
    computes,
)
from .regions import Operand, by_rows, check_rows_aligned, like, static_ints, vector_operands
from .table import rule

_BIN = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min"}
_SCA = {"add": "Adds", "mul": "Muls", "max": "Maxs", "min": "Mins"}
_UN = {"exp": "Exp", "ln": "Ln", "abs": "Abs", "sqrt": "Sqrt", "rsqrt": "Rsqrt",
       "reciprocal": "Reciprocal", "relu": "Relu"}
_REDUCE = {"sum": "Sum", "abssum": "Sum", "max": "Max", "absmax": "Max", "min": "Min"}
_FOLD = {"Sum": "Add", "Max": "Max", "Min": "Min"}


def _make_vector_rule(name: str, instr: str, operand_names: tuple, scalar: str | None = None):
    def rule(em, call):
        regions = [call.operands[o] for o in operand_names]
        args, count = vector_operands(em, regions, f"T.tile.{name}")
        if scalar is not None:
            dt = str(regions[0].buffer.dtype)
            args.append(f"({ctype(dt)}){em.expr(call.operands[scalar])}")
        if instr == "Copy":
            em.line(f"DataCopy({args[0]}, {args[1]}, {count});")
        elif instr == "Cast":
            em.line(f"Cast({args[0]}, {args[1]}, RoundMode::{call.attrs['round']}, {count});")
        else:
            em.line(f"{instr}({', '.join(args)}, {count});")
    rule.__name__ = f"rule_tile_{name}"
    return rule


@rule("fill")
def rule_fill(em, call) -> None:
    dst = call.operands["dst"]
    if str(dst.buffer.scope()) != "ascend.ub":
        raise KernelError(f"T.fill of {dst.buffer.name!r} in "
                          f"{short(dst.buffer.scope())}: backend "
                          "'ascend' fills UB tiles (Duplicate on V) and clears accumulators "
                          "through the GEMM's init")
    args, count = vector_operands(em, [dst], "T.fill")
    em.line(f"Duplicate({args[0]}, ({ctype(str(dst.buffer.dtype))})"
            f"{em.expr(call.operands['value'])}, {count});")


for _n, _i in ops.BINARY.items():
    rule(f"{ops.PREFIX}tile.{_n}")(_make_vector_rule(_n, _i, ("dst", "src0", "src1")))
for _n, _i in ops.UNARY.items():
    rule(f"{ops.PREFIX}tile.{_n}")(_make_vector_rule(_n, _i, ("dst", "src")))
for _n, _i in ops.SCALAR.items():
    rule(f"{ops.PREFIX}tile.{_n}")(_make_vector_rule(_n, _i, ("dst", "src"), "scalar"))
rule(ops.FILL.name)(_make_vector_rule("fill", "Duplicate", ("dst",), "value"))
rule(ops.CAST.name)(_make_vector_rule("cast", "Cast", ("dst", "src")))


def _scalar(em, expr, dtype: str) -> str:
    return f"TW_CAST({ctype(dtype)}, {em.expr(expr)})"


@rule(ops.VBIN.name)
def rule_vbin(em, call):
    operands = [Operand(em, call.operands[n], "vector op") for n in ("dst", "src0", "src1")]
    instr = _BIN[call.attrs["op"]]
    by_rows(em, operands, lambda a, n: em.line(f"{instr}({', '.join(a)}, {n});"), instr)


def _scalar_op(em, op: str, args, scalar: str, count, ct: str):
    """dst = src op scalar, ``scalar`` already printed; ``args`` = [dst, src]; ``ct`` the
    element type, which the scalar operand of Adds/Muls must have."""
    d, s = args
    if op in _SCA:
        em.line(f"{_SCA[op]}({d}, {s}, {scalar}, {count});")
    elif op == "sub":
        em.line(f"Adds({d}, {s}, TW_CAST({ct}, -{scalar}), {count});")
    elif op == "div":
        em.line(f"Muls({d}, {s}, TW_CAST({ct}, 1 / {scalar}), {count});")
    elif op == "rsub":
        em.line(f"Muls({d}, {s}, TW_CAST({ct}, -1), {count});")
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"Adds({d}, {d}, {scalar}, {count});")
    elif op == "rdiv":
        em.line(f"Reciprocal({d}, {s}, {count});")
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"Muls({d}, {d}, {scalar}, {count});")
    else:
        raise KernelError(f"no vector instruction for 'tile {op} scalar'")


@rule(ops.VSCA.name)
def rule_vsca(em, call):
    operands = [Operand(em, call.operands[n], "vector op") for n in ("dst", "src")]
    dtype = str(call.operands["dst"].buffer.dtype)
    value = call.operands["scalar"]
    op = call.attrs["op"]
    if op == "sub":
        op, value = "add", tirx.Mul(value, tirx.const(-1, str(value.ty)))
    elif op == "div":
        op, value = "mul", tirx.Div(tirx.const(1, str(value.ty)), value)
    scalar = _scalar(em, value, dtype)
    by_rows(em, operands, lambda a, n: _scalar_op(em, op, a, scalar, n, operands[0].ctype),
            "vector op")


@rule(ops.VUN.name)
def rule_vun(em, call):
    operands = [Operand(em, call.operands[n], "vector op") for n in ("dst", "src")]
    op = call.attrs["op"]
    if op == "cast":
        mode = cast_mode(call.operands["src"].buffer.dtype, call.operands["dst"].buffer.dtype)
        by_rows(em, operands,
                lambda a, n: em.line(f"Cast({a[0]}, {a[1]}, RoundMode::{mode}, {n});"), "Cast")
    elif op in ROUNDING_CASTS:
        mode = ROUNDING_CASTS[op]
        by_rows(em, operands,
                lambda a, n: em.line(f"Cast({a[0]}, {a[1]}, RoundMode::{mode}, {n});"), "Cast")
    elif op == "copy":
        by_rows(em, operands, lambda a, n: _copy_lanes(em, operands[0], a, n), "copy")
    elif op == "neg":
        by_rows(em, operands, lambda a, n: em.line(
            f"Muls({a[0]}, {a[1]}, ({operands[0].ctype})-1, {n});"), "neg")
    else:
        instr = _UN[op]
        by_rows(em, operands, lambda a, n: em.line(f"{instr}({a[0]}, {a[1]}, {n});"), instr)


def _ends_buffer(op: Operand, n: int) -> bool:
    """Whether the ``n`` elements from ``op``'s start are the last of its buffer and the buffer
    ends inside a 32-byte block: the bytes after it up to that block's end belong to no buffer
    (the memory plan starts every UB buffer 32-byte aligned), so an instruction on 16-bit
    lanes may cover one byte past an odd length."""
    total = 1
    for d in static_ints(op.region.buffer.shape, op.region.buffer.name):
        total *= d
    return op.rows == 1 and op.off.isdigit() and int(op.off) + n == total and \
        total * op.eb % ALIGN != 0


def _copy_lanes(em, dst: Operand, args, n: int) -> None:
    """``n`` elements from ``args[1]`` to ``args[0]`` in UB: DataCopy of whole 32-byte blocks,
    else Adds of 0, which A2 computes on 16- and 32-bit integers and float16/float32 only; other
    element types are added as int16 lanes of the same bytes (LocalTensor::ReinterpretCast,
    include/basic_api/kernel_tensor.h), an exact copy."""
    dtype = str(dst.region.buffer.dtype)
    if n * dst.eb % ALIGN == 0:
        em.line(f"DataCopy({args[0]}, {args[1]}, {n});")
    elif computes("Adds", dtype):
        em.line(f"Adds({args[0]}, {args[1]}, ({dst.ctype})0, {n});")
    elif n * dst.eb % 2 == 0 or _ends_buffer(dst, n):
        em.line(f"Adds({args[0]}.ReinterpretCast<int16_t>(), "
                f"{args[1]}.ReinterpretCast<int16_t>(), (int16_t)0, {-(-n * dst.eb // 2)});")
    else:
        raise KernelError(f"a UB copy into {dst.label}: backend 'ascend' copies "
                          f"{dtype} rows of an even length or of whole 32-byte blocks; a row "
                          f"has {n}")


@rule(ops.VDUP.name)
def rule_vdup(em, call):
    dst = Operand(em, call.operands["dst"], "Duplicate")
    dtype = str(call.operands["dst"].buffer.dtype)
    if dtype in ("int8", "uint8", "bool") and not computes("Duplicate", dtype):
        # A2's Duplicate fills 16- and 32-bit lanes: an 8-bit tile (bool: one byte, 0 or 1)
        # is filled as int16 pairs
        # of the byte (LocalTensor::ReinterpretCast, include/basic_api/kernel_tensor.h)
        byte = f"TW_CAST(uint16_t, TW_CAST(uint8_t, {em.expr(call.operands['value'])}))"

        def pairs(a, n):
            if n % 2 and not _ends_buffer(dst, n):
                raise KernelError(f"T.fill of {em.tile_name(call.operands['dst'].buffer)}: backend "
                                  f"'ascend' fills {dtype} rows of an even length, or the last "
                                  f"row of a tile (Duplicate fills 16-bit lanes); a row has {n}")
            em.line(f"Duplicate({a[0]}.ReinterpretCast<int16_t>(), "
                    f"TW_CAST(int16_t, {byte} * 257), {-(-n // 2)});")

        by_rows(em, [dst], pairs, "Duplicate")
        return
    if dtype == "int64" and not computes("Duplicate", dtype):
        # A2's Duplicate fills 16- and 32-bit lanes: an int64 tile of a value whose two 32-bit
        # halves are equal (0, -1) is filled as int32_t lanes (LocalTensor::ReinterpretCast)
        value = call.operands["value"]
        bits = int(value.value) % 2 ** 64 if isinstance(value, tirx.IntImm) else None
        if bits is None or bits >> 32 != bits & 0xFFFFFFFF:
            raise KernelError(f"T.fill of the int64 tile "
                              f"{em.tile_name(call.operands['dst'].buffer)}: A2's Duplicate "
                              "fills 16- and 32-bit lanes, so backend 'ascend' fills int64 "
                              f"tiles with 0 or -1 only, not {value}; fill an int32 tile and "
                              "convert it")
        half = -1 if bits else 0
        by_rows(em, [dst], lambda a, n: em.line(
            f"Duplicate({a[0]}.ReinterpretCast<int32_t>(), TW_CAST(int32_t, {half}), {2 * n});"),
            "Duplicate")
        return
    value = _scalar(em, call.operands["value"], dtype)
    by_rows(em, [dst], lambda a, n: em.line(f"Duplicate({a[0]}, {value}, {n});"), "Duplicate")


@rule(ops.VBRC.name)
def rule_vbrc(em, call):
    dst, src = (Operand(em, call.operands[n], "broadcast") for n in ("dst", "src"))
    vec = Operand(em, call.operands["vec"], "broadcast")
    op, axis = call.attrs["op"], call.attrs["axis"]
    if dst.rows != src.rows or dst.cols != src.cols:
        raise KernelError("broadcast: operand shapes differ")
    r = em.ident("r")
    with em.block(f"for (int32_t {r} = 0; {r} < {dst.rows}; ++{r})"):
        args = [dst.at(r if dst.rows > 1 else None), src.at(r if src.rows > 1 else None)]
        if axis in ("row", "one"):  # one scalar per row, or one: the scalar unit reads it
            step = f"{r} * {vec.stride}" if vec.rows > 1 else r
            index = vec.off if axis == "one" else step if vec.off == "0" else \
                f"{vec.off} + {step}"
            s = em.ident("s")
            em.line(f"auto {s} = {vec.name}.GetValue({index});")
            if op == "sub":
                em.line(f"Adds({args[0]}, {args[1]}, TW_CAST({dst.ctype}, -{s}), {dst.cols});")
            elif op == "div":
                em.line(f"Muls({args[0]}, {args[1]}, TW_CAST({dst.ctype}, 1 / {s}), "
                        f"{dst.cols});")
            else:
                _scalar_op(em, op, args, f"TW_CAST({dst.ctype}, {s})", dst.cols, dst.ctype)
        else:
            if vec.rows * vec.cols != dst.cols or not vec.contiguous:
                raise KernelError("column broadcast: the vector must be one contiguous row of "
                                  f"{dst.cols} elements")
            if op in _BIN:
                em.line(f"{_BIN[op]}({args[0]}, {args[1]}, {vec.at()}, {dst.cols});")
            else:  # reversed operands: vec - src, vec / src
                em.line(f"{_BIN[op[1:]]}({args[0]}, {vec.at()}, {args[1]}, {dst.cols});")


@rule(ops.VREDUCE.name)
def rule_vreduce(em, call):
    dst, src = Operand(em, call.operands["dst"], "reduce"), \
        Operand(em, call.operands["src"], "reduce")
    work = Operand(em, call.operands["work"], "reduce")
    kind, clear = call.attrs["kind"], call.attrs["clear"]
    base = _REDUCE[kind]
    fold = _FOLD[base]
    rows, cols, stride = src.rows, src.cols, src.stride
    if rows > 1 and stride * src.eb % ALIGN:
        raise KernelError(f"reduce: rows of {src.label} are not 32-byte aligned")
    cur = src
    if kind.startswith("abs"):
        em.line(f"Abs({work.name}, {src.at()}, {stride * (rows - 1) + cols});")
        em.line("PipeBarrier<PIPE_V>();")
        cur = like(src, work.name)
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
        acc = like(src, work.name)
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
    target = dst
    if not clear:  # reduce into the tail of work, then combine with dst
        block = ALIGN // src.eb
        total = 1
        for s in call.operands["src"].buffer.shape:
            total *= int(s)
        target = like(dst, work.name)
        target.off = str(-(-total // block) * block)
    # one result per repeat; repeatTime is 8 bits: at most REPEAT_LIMIT rows per instruction,
    # in chunks whose results start 32-byte aligned
    step = REPEAT_LIMIT // (ALIGN // src.eb) * (ALIGN // src.eb)
    for start in range(0, rows, step):
        count = min(step, rows - start)
        em.line(f"WholeReduce{base}({target.at(col=start)}, {cur.at(str(start) if start else None)}"
                f", {mask}, {count}, 1, 1, {blocks}{order});")
    if not clear:
        em.line("PipeBarrier<PIPE_V>();")
        em.line(f"{fold}({dst.at()}, {dst.at()}, {target.at()}, {rows});")


def _masked(em, call, names, what, emit) -> None:
    """``emit(mask, args, count)`` once over the contiguous ranges of the operands ``names``
    (attribute ``slot`` 0), else once per row, the mask of row ``r`` at byte ``r * slot``."""
    mask = Operand(em, call.operands["mask" if "mask" in call.operands else "dst"], what)
    operands = [Operand(em, call.operands[n], what) for n in names]
    slot = call.attrs["slot"]
    if not slot:
        emit(mask.at(), [o.at() for o in operands], operands[0].rows * operands[0].cols)
        return
    check_rows_aligned(operands, what)
    r = em.ident("r")
    with em.block(f"for (int32_t {r} = 0; {r} < {operands[0].rows}; ++{r})"):
        at = f"{r} * {slot}" if mask.off == "0" else f"{mask.off} + {r} * {slot}"
        emit(f"{mask.name}[{at}]", [o.at(r) for o in operands], operands[0].cols)


@rule(ops.VCMP.name)
def rule_vcmp(em, call):
    """Compare (比较与选择/Compare.md): whole 256-byte repeats, so ``count`` is rounded up
    (the vector phase gave the sources room for it); bit i of the mask is element i."""
    dtype = str(call.operands["src0"].buffer.dtype)
    mode = call.attrs["op"]
    _masked(em, call, ("src0", "src1"), "Compare", lambda m, a, n: em.line(
        f"Compare({m}, {a[0]}, {a[1]}, CMPMODE::{mode}, {compare_count(n, dtype)});"))


@rule(ops.VCMPS.name)
def rule_vcmps(em, call):
    """Compares (比较与选择/Compares.md) of a tile with a scalar of its dtype."""
    dtype = str(call.operands["src"].buffer.dtype)
    scalar = _scalar(em, call.operands["scalar"], dtype)
    mode = call.attrs["op"]
    _masked(em, call, ("src",), "Compares", lambda m, a, n: em.line(
        f"Compares({m}, {a[0]}, {scalar}, CMPMODE::{mode}, {compare_count(n, dtype)});"))


@rule(ops.VSEL.name)
def rule_vsel(em, call):
    """Select (比较与选择/Select.md) between two tiles, VSEL_TENSOR_TENSOR_MODE."""
    _masked(em, call, ("dst", "src0", "src1"), "Select", lambda m, a, n: em.line(
        f"Select({a[0]}, {m}, {a[1]}, {a[2]}, SELMODE::VSEL_TENSOR_TENSOR_MODE, {n});"))


@rule(ops.VSELS.name)
def rule_vsels(em, call):
    """Select between a tile and a scalar false arm, VSEL_TENSOR_SCALAR_MODE."""
    scalar = _scalar(em, call.operands["scalar"], str(call.operands["dst"].buffer.dtype))
    _masked(em, call, ("dst", "src"), "Select", lambda m, a, n: em.line(
        f"Select({a[0]}, {m}, {a[1]}, {scalar}, SELMODE::VSEL_TENSOR_SCALAR_MODE, {n});"))


@rule(ops.VIDX.name)
def rule_vidx(em, call):
    """CreateVecIndex (数据填充/CreateVecIndex.md), count form: dst[k] = first + k. Its first
    32-byte block is written on the scalar unit, the rest on V (the synchronisation pass
    orders both: :func:`..analysis.accesses.op_accesses`)."""
    dst = call.operands["dst"]
    dtype = str(dst.buffer.dtype)
    if not computes("CreateVecIndex", dtype):
        raise KernelError(f"an index tile of {dtype}: A2's CreateVecIndex takes "
                          "float16, float32, int16 and int32")
    args, count = vector_operands(em, [dst], "CreateVecIndex")
    em.line(f"CreateVecIndex({args[0]}, {_scalar(em, call.operands['first'], dtype)}, "
            f"{count});")


_LOGIC = {"and": "And", "or": "Or"}


def _as_uint16(args) -> list[str]:
    return [f"{a}.ReinterpretCast<uint16_t>()" for a in args]


@rule(ops.VMASK.name)
def rule_vmask(em, call):
    """And/Or (逻辑计算/And.md, Or.md) of two uint8 bit masks, on their uint16 lanes (A2's
    logic instructions take int16_t and uint16_t)."""
    regions = [call.operands[n] for n in ("dst", "src0", "src1")]
    args, count = vector_operands(em, regions, "And/Or")
    em.line(f"{_LOGIC[call.attrs['op']]}({', '.join(_as_uint16(args))}, {count // 2});")


@rule(ops.VMASKNOT.name)
def rule_vmasknot(em, call):
    """Not (逻辑计算/Not.md) of a uint8 bit mask, on its uint16 lanes."""
    args, count = vector_operands(em, [call.operands["dst"], call.operands["src"]], "Not")
    em.line(f"Not({', '.join(_as_uint16(args))}, {count // 2});")


_VEC_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Max": "Max",
               "Min": "Min"}
_VEC_SCALAR = {"Add": "Adds", "Mul": "Muls", "Max": "Maxs", "Min": "Mins"}


def parallel_rule(em, loop) -> None:
    """A ``T.Parallel`` nest of elementwise stores on UB tiles becomes vector instructions:
    ``c[..] = a[..] op b[..]``, ``c[..] = a[..] op scalar``, ``c[..] = a[..]``,
    ``c[..] = scalar``."""
    loops, body = [], loop
    while isinstance(body, tirx.For):
        loops.append(body)
        body = body.body
    stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    extents = {lp.loop_var: lp.extent for lp in loops}
    for store in stores:
        if not isinstance(store, tirx.BufferStore):
            raise KernelError("a T.Parallel loop on Ascend must hold elementwise buffer stores "
                              "only (they become vector instructions)")
        dst = _parallel_region(store.buffer, store.indices, extents)
        value = store.value
        kind = type(value).__name__
        if kind in _VEC_BINARY and _is_load(value.a) and _is_load(value.b):
            regions = [dst, _parallel_region(value.a.source, value.a.indices, extents),
                       _parallel_region(value.b.source, value.b.indices, extents)]
            args, count = vector_operands(em, regions, "T.Parallel")
            em.line(f"{_VEC_BINARY[kind]}({', '.join(args)}, {count});")
        elif kind in _VEC_SCALAR and (_is_load(value.a) != _is_load(value.b)):
            load, scalar = (value.a, value.b) if _is_load(value.a) else (value.b, value.a)
            regions = [dst, _parallel_region(load.source, load.indices, extents)]
            args, count = vector_operands(em, regions, "T.Parallel")
            em.line(f"{_VEC_SCALAR[kind]}({', '.join(args)}, "
                    f"({ctype(str(store.buffer.dtype))}){em.expr(scalar)}, {count});")
        elif _is_load(value):
            regions = [dst, _parallel_region(value.source, value.indices, extents)]
            args, count = vector_operands(em, regions, "T.Parallel")
            em.line(f"DataCopy({args[0]}, {args[1]}, {count});")
        elif not _has_load(value):
            args, count = vector_operands(em, [dst], "T.Parallel")
            em.line(f"Duplicate({args[0]}, ({ctype(str(store.buffer.dtype))})"
                    f"{em.expr(value)}, {count});")
        else:
            raise KernelError(f"T.Parallel store {store.buffer.name}[...] = {value}: backend "
                              "'ascend' maps one vector instruction per store (a op b, a op "
                              "scalar, a copy or a fill); split the expression into steps "
                              "through UB temporaries or use T.tile.*")


def _is_load(e) -> bool:
    return type(e).__name__ == "TensorLoad"


def _has_load(e) -> bool:
    found = []
    tvm_ffi.structural_walk(e, (type(tirx.BufferLoad(tirx.decl_buffer((1,)), [0])),
                                lambda x: found.append(x)))
    return bool(found)


def _parallel_region(buffer, indices, extents) -> Region:
    if str(buffer.scope()) != "ascend.ub":
        raise KernelError(f"T.Parallel on Ascend computes on UB tiles; {buffer.name!r} is in "
                          f"{short(buffer.scope())}")
    starts, exts, seen = [], [], []
    for index in indices:
        if isinstance(index, tirx.Var) and index in extents:
            starts.append(0)
            exts.append(extents[index])
            seen.append(index)
        else:
            starts.append(index)
            exts.append(1)
    if len(seen) != len(extents):
        raise KernelError(f"T.Parallel on Ascend needs every loop variable as a plain index of "
                          f"{buffer.name!r}")
    return Region(buffer, tuple(starts), tuple(exts))
