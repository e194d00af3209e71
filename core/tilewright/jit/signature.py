"""The signature of a tile program (:class:`~tilewright.runtime.signature.KernelSignature`):
shapes that are expressions over symbols are written in the grammar of
:mod:`tilewright.runtime.expr`, which parses them without ``eval``; which tensors the kernel
may write and which outputs it provably writes whole (:mod:`.coverage`); the alignment and
index type its code assumes."""

from __future__ import annotations

import numbers

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import ArgumentError, TilewrightError
from ..ir import decode, is_region, schema_of_call, value_dtype
from ..runtime.expr import ExprError, solve_linear
from ..runtime.expr import parse as parse_expr
from ..runtime.signature import KernelSignature, ParamSpec
from .coverage import covered_outputs


def signature_of(func: tirx.PrimFunc, out_idx) -> KernelSignature:
    """The signature of tile program ``func`` with the parameters ``out_idx`` as outputs."""
    n = len(func.params)
    outputs = set()
    for i in out_idx or ():
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise TilewrightError(f"out_idx {i} is out of range for {n} parameters")
        outputs.add(j)
    params = []
    written = written_buffers(func)
    covered = covered_outputs(func, sorted(outputs))
    packed = {int(i): int(bits) for i, bits in (func.attrs or {}).get("tw.packed_params", [])}
    for i, p in enumerate(func.params):
        if tirx.buffer.is_buffer_var(p):  # `tirx.Buffer` is an alias of every Var
            shape = tuple(_dim(s) for s in p.shape)
            index = "int64" if any(str(getattr(s, "ty", "int32")) == "int64"
                                   for s in p.shape) else "int32"
            align = int(p.data_alignment) if int(p.data_alignment) > 0 else 64
            bits = packed.get(i, 0)
            if bits and (not shape or isinstance(shape[-1], int) and shape[-1] % (8 // bits)):
                what = f"int{bits}" if str(p.dtype) == "int8" else str(p.dtype)
                raise TilewrightError(f"{what} tensor {p.name!r} of shape {shape}: its last "
                                      f"dimension must be a multiple of {8 // bits}, the values "
                                      "one byte of the packed tensor holds")
            strides = tuple(_dim(s) for s in p.strides)
            if strides and i in outputs:
                raise TilewrightError(f"out_idx names {p.name!r}, a T.StridedTensor: the "
                                      "outputs a kernel returns are allocated contiguous; "
                                      "declare it with T.Tensor, or pass the strided tensor "
                                      "as an input the kernel writes")
            if strides and any(str(getattr(s, "ty", "int32")) == "int64" for s in p.strides):
                index = "int64"
            params.append(ParamSpec(str(p.name), shape, str(p.dtype), i in outputs, "tensor",
                                    align, index, any(p.same_as(w) for w in written),
                                    i in covered, bits, strides))
        else:
            if i in outputs:
                raise TilewrightError(f"out_idx names scalar parameter {p.name!r}")
            params.append(ParamSpec(str(p.name), (), value_dtype(p), False, "scalar",
                                    written=False))
    _check_symbols_readable(func)
    symbols, stride_symbols, seen = [], [], set()
    inputs = [p for p in params if not p.is_output]
    for found, field in ((symbols, "shape"), (stride_symbols, "strides")):
        for pos, p in enumerate(inputs):
            for axis, s in enumerate(getattr(p, field)):
                if isinstance(s, str) and s.isidentifier() and s not in seen:
                    seen.add(s)
                    found.append((s, pos, axis))
    name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
        else "main"
    assumptions = tuple(expr_text(c) for c in (func.attrs or {}).get("tw.assumptions", []))
    return KernelSignature(name, tuple(params), tuple(symbols), assumptions,
                           tuple(stride_symbols))


def written_buffers(func: tirx.PrimFunc) -> list:
    """The buffers ``func`` may write: stored to, written by a tile op (from its schema), or
    handed to a call by address (atomics, extern helpers)."""
    found: list = []

    def store(node):
        found.append(node.buffer)

    def evaluate(node):
        call = decode(node)
        if call is not None:
            found.extend(r.buffer for r in call.regions("write"))

    def call(node):
        if is_region(node) or schema_of_call(node) is not None:
            return  # tile ops: their schema says what they write (above)
        for arg in node.args:
            if isinstance(arg, tvm.ir.TensorLoad):
                found.append(arg.source)
            elif isinstance(arg, tvm.ir.Call) and arg.args and \
                    isinstance(arg.args[0], tvm.ir.TensorLoad):  # address_of(A[i]) and kin
                found.append(arg.args[0].source)
            elif isinstance(arg, tirx.Var):
                found.append(arg)

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, store), (tirx.Evaluate, evaluate),
                                        (tvm.ir.Call, call)])
    return found


_BINARY = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//",
           tirx.FloorMod: "%", tirx.EQ: "==", tirx.NE: "!=", tirx.LT: "<", tirx.LE: "<=",
           tirx.GT: ">", tirx.GE: ">=", tirx.And: "and", tirx.Or: "or"}
_CALLS = {tirx.Min: "min", tirx.Max: "max", tirx.Div: "truncdiv", tirx.Mod: "truncmod"}


def expr_text(e) -> str:
    """``e``, an integer TIR expression over shape symbols, in the grammar of
    :mod:`tilewright.runtime.expr`; anything else is an :class:`ArgumentError`."""
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        return str(e.name)
    if isinstance(e, tirx.Cast) and "int" in str(e.dtype):
        return expr_text(e.value)
    if type(e) in _BINARY:
        return f"({expr_text(e.a)} {_BINARY[type(e)]} {expr_text(e.b)})"
    if type(e) in _CALLS:
        return f"{_CALLS[type(e)]}({expr_text(e.a)}, {expr_text(e.b)})"
    if isinstance(e, tirx.Not):
        return f"(not {expr_text(e.a)})"
    raise ArgumentError(f"a tensor shape uses {e}, which tilewright cannot compute when the "
                        "kernel is called; use +, -, *, //, %, min and max of shape symbols")


def _dim(extent):
    if isinstance(extent, tirx.IntImm):
        return int(extent.value)
    if isinstance(extent, tirx.Var):
        return str(extent.name)
    text = expr_text(extent)
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _check_symbols_readable(func: tirx.PrimFunc) -> None:
    """Every shape symbol must be a whole dimension of some parameter, or the one unknown of a
    dimension linear in it (``n * 4``: solved from that dimension when the kernel is called),
    else no argument gives its value: a TypeError naming the symbol, as for a symbol used only
    by outputs. A ``T.StridedTensor``'s stride may use the symbols that are a whole dimension or
    stride (the kernel binds its strides on entry, before it solves the others)."""
    direct = set()
    for p in func.params:
        if tirx.buffer.is_buffer_var(p):
            direct.update(str(s.name) for s in (*p.shape, *p.strides) if isinstance(s, tirx.Var))
    whole = direct | {str(p.name) for p in func.params if not tirx.buffer.is_buffer_var(p)}
    found = True
    while found:  # the symbols solved from a dimension (which may give the next one's)
        found = False
        for p in func.params:
            for extent in (p.shape if tirx.buffer.is_buffer_var(p) else ()):
                unknown = _solvable(extent, whole)
                if unknown is not None:
                    whole.add(unknown)
                    found = True
    for p in func.params:
        if not tirx.buffer.is_buffer_var(p):
            continue
        for what, values, known in (("shape", p.shape, whole), ("strides", p.strides, direct)):
            for extent in values:
                used: list = []
                tvm_ffi.structural_walk(extent, (tirx.Var, used.append))
                for name in (str(v.name) for v in used):
                    if name not in known:
                        raise ArgumentError(
                            f"the {what} of {str(p.name)!r} is {_shape_text(values)}: symbol "
                            f"{name!r} is never a whole dimension or stride of a parameter, so "
                            f"no argument gives its value; add a parameter with {name!r} as "
                            "one of its dimensions")


def _solvable(extent, known: set) -> str | None:
    """The one symbol of ``extent`` not in ``known`` when ``extent`` is linear in it (checked
    at a few values of it, the known ones set to 7), else None."""
    if isinstance(extent, (tirx.IntImm, tirx.Var)):
        return None
    names = set()
    tvm_ffi.structural_walk(extent, (tirx.Var, lambda v: names.add(str(v.name))))
    unknown = names - known
    if len(unknown) != 1:
        return None
    (name,) = unknown
    try:
        expr = parse_expr(expr_text(extent))
    except (ArgumentError, ExprError):
        return None
    others = {n: 7 for n in names - unknown}
    if solve_linear(expr, name, expr({**others, name: 5}), others) != 5:
        return None
    return name


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(_dim(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def output_indices(func: tirx.PrimFunc, out_idx) -> list:
    """The positions of the outputs of ``func``: those it declares (eager ``T.empty``) and
    ``out_idx``."""
    declared = [int(i) for i in func.attrs["tw.outputs"]] if func.attrs and \
        "tw.outputs" in func.attrs else []
    if out_idx is None:
        return declared
    names = ", ".join(str(p.name) for p in func.params)
    listed = [out_idx] if isinstance(out_idx, numbers.Integral) else \
        list(out_idx) if isinstance(out_idx, (list, tuple)) else None
    if listed is None or any(not isinstance(i, numbers.Integral) or isinstance(i, bool)
                             for i in listed):
        raise TilewrightError(f"out_idx must be an int or a list of ints (positions among the "
                              f"parameters {names}), got {out_idx!r}")
    n = len(func.params)
    for i in listed:  # wrapped modulo n, 3 of 3 parameters named the first one
        if not -n <= i < n:
            raise TilewrightError(f"out_idx {i} is out of range for the {n} parameters "
                                  f"({names}): use 0 to {n - 1}, or -1 to {-n} from the end")
    return sorted(set(declared) | {int(i) % n for i in listed})
