"""SIMT vector functions: each ``T.SimtVF`` scope (lowered to one thread's code by
:mod:`..transforms.simt`) becomes a ``__simt_vf__`` function and an ``asc_vf_call`` on the
vector core (:mod:`..facts.simt`).

The function takes the UB tiles its threads touch as ``__ubuf__`` pointers (``TW_UBUF``,
``TW_UB_ARG``; the emulator's versions also carry the elements the threads may touch, the
window of a multi-buffered tile's version, and whether they are read, written or both), the
GM tensors as ``__gm__`` pointers (``TW_GMBUF``, ``TW_GM_ARG``, the same window; loaded and
stored with ``asc_ldcg``/``asc_stcg``, :data:`..facts.simt.GM_LOAD`) and
the scalars of the enclosing code as arguments of their types; its threads compute their
linear index from ``threadIdx.x`` (and ``.y``, ``.z`` in a block of more dimensions, launched
with that ``dim3``), tile elements through ``TW_UB_LOAD``/``TW_UB_STORE`` (plain ``p[i]`` on
an NPU), compute math with the SIMT API's functions (``Simt::Exp``, ...) in float32 and wait
for each other at ``asc_syncthreads()``.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tvm import sym, tirx

from ..analysis.buffers import flat_index
from ..facts.dtypes import ctype
from ..facts.simt import BARRIER, GM, GM_LOAD, GM_STORE, LAUNCH, MATH, THREAD_INDEX, block_of
from ..facts.terms import statement_term
from ..transforms.simt import is_barrier
from ..transforms.tile_exprs import simplified
from .expr import ExprPrinter

ATTRIBUTE = "__simt_vf__"
# the vendor's headers of asc_vf_call and of asc_syncthreads (threadIdx is built in)
INCLUDES = ['#include "simt_api/common_functions.h"', '#include "simt_api/device_sync_functions.h"',
            '#include "simt_api/device_functions.h"']
# the NPU's versions of the SIMT helpers (the emulator's header defines its own)
PRELUDE = (
    "#ifndef TW_UBUF",
    "#define TW_UBUF(T) __ubuf__ T*",
    "#define TW_UB_ARG(T, t, mode, first, count) ((__ubuf__ T*)(t).GetPhyAddr())",
    "#define TW_UB_LOAD(p, i) ((p)[i])",
    "#define TW_UB_STORE(p, i, v) ((p)[i] = (v))",
    "#define TW_GMBUF(T) __gm__ T*",
    "#define TW_GM_ARG(T, t, mode, first, count) ((t).GetPhyAddr(0))",
    f"#define TW_GM_LOAD(p, i) {GM_LOAD}((p) + (i))",
    f"#define TW_GM_STORE(p, i, v) {GM_STORE}((p) + (i), (v))",
    "#endif",
)


_POINTER = {"UB": "TW_UBUF", "GM": "TW_GMBUF"}


def _kind(buf) -> str:
    """``GM`` or ``UB``: the prefix of the helpers that pass and touch ``buf``."""
    return "GM" if str(buf.scope()) == GM else "UB"


def _operands(body, tid):
    """The tiles ``body`` touches (first use order, with 1 read / 2 written) and the
    variables it takes from outside."""
    tiles: dict = {}
    bound, free = {tid}, []

    def tile(buf, mode):
        tiles[buf] = tiles.get(buf, 0) | mode

    def var(v):
        if v not in bound and v not in free:
            free.append(v)

    tvm_ffi.structural_walk(body, [(tirx.For, lambda f: bound.add(f.loop_var)),
                                   (tirx.Bind, lambda b: bound.add(b.var))], order="pre")
    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, lambda x: tile(x.source, 1)),
                                   (tirx.BufferStore, lambda x: tile(x.buffer, 2)),
                                   (tirx.Var, var)], order="pre")
    # a tile's storage is a variable too: its pointer argument
    return tiles, [v for v in free if isinstance(v.ty, tvm.ir.PrimType)]


def _windows(body, tid, threads: int, tiles, where) -> dict:
    """Per tile, the elements the threads may touch: ``(first, count)``, ``first`` an
    expression of the enclosing code's variables (the version of a multi-buffered tile), or
    the whole tile where the accesses do not give one constant count."""
    domain = {tid: sym.IntervalSet(0, threads - 1)}
    tvm_ffi.structural_walk(body, (tirx.For, lambda f: domain.__setitem__(
        f.loop_var, sym.IntervalSet(f.min, f.min + f.extent - 1))))
    analyzer, spans = sym.Analyzer(), {}

    def add(buf, indices):
        bound = analyzer.int_set(flat_index(buf, indices), domain)
        spans.setdefault(buf, []).append((bound.min_value, bound.max_value))

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, lambda x: add(x.source, x.indices)),
                                   (tirx.BufferStore, lambda x: add(x.buffer, x.indices))])
    windows = {}
    for buf in tiles:
        if not all(isinstance(d, tirx.IntImm) for d in buf.shape):
            raise KernelError(f"T.SimtVF: the threads reach the GM tensor {buf.name!r} of "
                              "a shape known at run time: give it a constant shape", where)
        size = math.prod(int(d) for d in buf.shape)
        first, last = spans[buf][0]
        for lo, hi in spans[buf][1:]:
            first = lo if analyzer.can_prove(lo < first) else first
            last = hi if analyzer.can_prove(hi > last) else last
        count = analyzer.simplify(last - first + 1)
        exact = all(analyzer.can_prove(first <= lo) and analyzer.can_prove(hi <= last)
                    for lo, hi in spans[buf])
        windows[buf] = (analyzer.simplify(first), int(count)) \
            if exact and isinstance(count, tirx.IntImm) and int(count) <= size else (0, size)
    return windows


class _Printer(ExprPrinter):
    """Expressions of a thread: math functions are the SIMT API's, in float32."""

    def cpp(self, e) -> str:
        if type(e).__name__ == "Call" and isinstance(e.op, tvm.ir.Op) and len(e.args) == 1:
            name = MATH.get(str(e.op.name).split(".")[-1])
            if name is not None:
                return f"Simt::{name}(TW_CAST(float, {self.cpp(e.args[0])}))"
        return super().cpp(e)


class _Function:
    """Writes one SIMT vector function."""

    def __init__(self, attr, name: str):
        self.tid, self.block = attr.node, block_of(attr)
        self.threads = math.prod(self.block)
        self.tiles, self.scalars = _operands(attr.body, self.tid)
        self.windows = _windows(attr.body, self.tid, self.threads, self.tiles,
                                span_location(attr.span))
        self.names: dict = {}
        self.analyzer = sym.Analyzer()
        self.analyzer.bind(self.tid, tvm.ir.Range.from_min_extent(0, self.threads))
        self.printer = _Printer(self.var, self.buf, self.analyzer,
                                load=lambda b, i: f"TW_{_kind(b)}_LOAD({self.buf(b)}, {i})")
        self.lines: list[str] = []
        self.depth = 1
        params = [f"{_POINTER[_kind(b)]}({ctype(str(b.dtype))}) {self.buf(b)}"
                  for b in self.tiles] + \
            [f"{ctype(str(v.ty))} {self.var(v)}" for v in self.scalars]
        self.head = f"{ATTRIBUTE} inline void {name}({', '.join(params)})"
        terms, stride = [], 1
        for index, extent in zip(THREAD_INDEX, self.block):
            if extent > 1:
                terms.append(index + (f" * {stride}" if stride > 1 else ""))
            stride *= extent
        self.line(f"int32_t {self.var(self.tid)} = {' + '.join(terms) or '0'};")
        self.stmt(attr.body)

    def ident(self, obj, wanted: str) -> str:
        if obj not in self.names:
            base = "".join(c if c.isalnum() or c == "_" else "_" for c in wanted)
            name, n = base, 1
            while name in self.names.values():
                name, n = f"{base}_{n}", n + 1
            self.names[obj] = name
        return self.names[obj]

    def var(self, v) -> str:
        return self.ident(v, str(v.name))

    def buf(self, b) -> str:
        return self.ident(b, str(b.name))

    def expr(self, e) -> str:
        return self.printer.cpp(simplified(self.analyzer, e))

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def nested(self, head: str, body) -> None:
        self.line(f"{head} {{")
        self.depth += 1
        self.stmt(body)
        self.depth -= 1
        self.line("}")

    def stmt(self, s) -> None:
        if isinstance(s, tirx.SeqStmt):
            for child in s.seq:
                self.stmt(child)
        elif isinstance(s, tirx.For):
            self.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent))
            v = self.var(s.loop_var)
            self.nested(f"for (int32_t {v} = {self.expr(s.min)}; {v} < "
                        f"{self.expr(s.min + s.extent)}; ++{v})", s.body)
        elif isinstance(s, tirx.IfThenElse):
            self.nested(f"if ({self.expr(s.condition)})", s.then_case)
            if s.else_case is not None:
                self.lines[-1] += " else {"
                self.depth += 1
                self.stmt(s.else_case)
                self.depth -= 1
                self.line("}")
        elif isinstance(s, tirx.BufferStore):
            index = self.expr(flat_index(s.buffer, s.indices))
            self.line(f"TW_{_kind(s.buffer)}_STORE({self.buf(s.buffer)}, {index}, "
                      f"TW_CAST({ctype(str(s.buffer.dtype))}, {self.expr(s.value)}));")
        elif isinstance(s, tirx.Bind):
            self.line(f"{ctype(str(s.var.ty))} {self.var(s.var)} = {self.expr(s.value)};")
        elif is_barrier(s):
            self.line(f"{BARRIER}();")
        else:
            raise KernelError(f"T.SimtVF: backend 'ascend' cannot generate thread code for "
                              f"{statement_term(s)}", span_location(getattr(s, "span", None)))

    def text(self) -> str:
        return "\n".join([f"{self.head} {{", *self.lines, "}"])


def emit_simt(emitter, attr) -> None:
    """The function of the scope ``attr`` (declared before the kernel) and its launch at the
    current line."""
    name = emitter.ident(f"{emitter.name}_simt")
    function = _Function(attr, name)
    emitter.declare(function.text())
    args = [f"TW_{_kind(b)}_ARG({ctype(str(b.dtype))}, {emitter.buf(b)}, {mode}, "
            f"{emitter.expr(function.windows[b][0])}, {function.windows[b][1]})"
            for b, mode in function.tiles.items()] + [emitter.var(v) for v in function.scalars]
    block = ", ".join(str(d) for d in function.block)
    emitter.line(f"{LAUNCH}<{name}>(dim3{{{block}}}, {', '.join(args)});")
