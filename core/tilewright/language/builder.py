"""The IR builder the frontend drives while it runs a kernel's (rewritten) Python body.

A :class:`Builder` holds a stack of frames; each frame collects statements and, when it
closes, wraps them into one statement (a loop, a branch, the kernel's block loops). Every
statement carries a span with the user's file and line, which later errors report.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import tirx

from ..errors import SourceLocation, kernel_error, user_location
from ..ir.schema import writes_memory
from .snapshots import reads_memory, settle

_state = threading.local()

# a kernel frame's info key: functions run when the kernel's body is complete, for checks that
# need all of it (a reducer epoch left open, say)
KERNEL_CHECKS = "kernel_checks"


def span_of(location: SourceLocation | None):
    if location is None:
        return None
    return tvm.ir.Span(tvm.ir.SourceName(location.filename), location.line, location.line, 0, 0)


def here():
    """The TVM span of the user's current line."""
    return span_of(user_location())


def seq(stmts: list) -> tirx.Stmt:
    if not stmts:
        return tirx.Evaluate(tirx.IntImm("int32", 0))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


@dataclass
class Frame:
    kind: str
    stmts: list = field(default_factory=list)
    info: dict = field(default_factory=dict)


@dataclass
class ParamBinding:
    """How one kernel parameter was declared while tracing."""

    name: str
    buffer: Any
    is_output: bool = False
    # bits of a value of a tensor passed packed (int4: 4), else 0
    packed_bits: int = 0


class Builder:
    """Builds one tile-level PrimFunc."""

    def __init__(self, name: str, *, const_values: dict[str, int] | None = None):
        self.name = name
        self.frames: list[Frame] = [Frame("root")]
        self.params: list[ParamBinding] = []
        self.const_values = const_values
        self.const_symbols: dict[str, tirx.Var] = {}
        self.const_sources: dict = {}  # T.const name -> kernel.ConstSource
        self.kernel_seen = False
        self.source_kernel = False  # T.CUDASourceCodeKernel: the function's only launch
        self.kernel_annotations: dict = {}
        self.threads: tuple[int, ...] = ()
        self.snapshots: set = set()  # variables binding `x = <load>` values (see snapshots.py)
        self.assumptions: list = []  # T.assume conditions over the parameters only

    # -- activation -------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self):
        stack = _stack()
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    # -- frames -----------------------------------------------------------------------
    def emit(self, stmt) -> None:
        self.frames[-1].stmts.append(stmt)

    def open(self, kind: str, **info) -> Frame:
        frame = Frame(kind, info=info)
        self.frames.append(frame)
        return frame

    def close(self, frame: Frame) -> tirx.Stmt:
        # frames above `frame` are left open only when an exception unwinds through them
        while self.frames and self.frames[-1] is not frame:
            self.frames.pop()
        self.frames.pop()
        return seq(frame.stmts)

    def snapshot(self, name: str, value):
        """``name = value`` in a kernel: a value that reads a buffer is bound to a variable
        here, so later uses see the buffer as it was at this line; other values are returned
        as they are."""
        if not isinstance(value, tvm.ir.Expr) or \
                not isinstance(value.ty, tvm.ir.PrimType) or not self.in_kernel() or \
                not (reads_memory(value) or writes_memory(value)):
            return value
        var = tirx.Var(name, value.ty)
        self.emit(tirx.Bind(var, value, span=here()))
        self.snapshots.add(var)
        return var

    def enclosing(self, *kinds: str) -> Frame | None:
        for frame in reversed(self.frames):
            if frame.kind in kinds:
                return frame
        return None

    def in_kernel(self) -> bool:
        return self.enclosing("kernel") is not None

    # -- parameters -------------------------------------------------------------------
    def add_param(self, name: str, buffer, *, is_output: bool = False,
                  packed_bits: int = 0) -> None:
        if any(p.name == name for p in self.params):
            raise kernel_error(f"parameter {name!r} is declared twice")
        self.params.append(ParamBinding(name, buffer, is_output, packed_bits))

    def replace_param(self, var, name: str, buffer, packed_bits: int = 0) -> bool:
        """Make the scalar parameter ``var`` (a ``T.handle`` / ``T.ptr``) the tensor parameter
        ``buffer`` at the same position (``T.match_buffer``); False if ``var`` is none."""
        for i, p in enumerate(self.params):
            if p.buffer.same_as(var):
                self.params[i] = ParamBinding(name, buffer, p.is_output, packed_bits)
                return True
        return False

    def const_symbol(self, name: str):
        """``T.const(name)``: the bound value when known, else a symbol to be bound."""
        if self.const_values is not None and name in self.const_values:
            return self.const_values[name]
        if name not in self.const_symbols:
            self.const_symbols[name] = tirx.Var(name, "int32")
        return self.const_symbols[name]

    def finish(self) -> tirx.PrimFunc:
        if len(self.frames) != 1:
            raise kernel_error(f"internal error: {len(self.frames) - 1} frames left open")
        if not self.kernel_seen:
            raise kernel_error(f"kernel {self.name!r} has no 'with T.Kernel(...)' block")
        body = settle(seq(self.frames[0].stmts), self.snapshots)
        func = tirx.PrimFunc([p.buffer for p in self.params], body)
        return func.with_attrs({
            "global_symbol": self.name,
            "tw.tile_program": True,
            "tw.outputs": [i for i, p in enumerate(self.params) if p.is_output],
            "tw.packed_params": [[i, p.packed_bits] for i, p in enumerate(self.params)
                                 if p.packed_bits],
            **({"tw.assumptions": list(self.assumptions)} if self.assumptions else {}),
        })


def _stack() -> list[Builder]:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


def current(what: str = "this operation") -> Builder:
    """The active builder; outside a kernel, an error naming ``what``."""
    stack = _stack()
    if not stack:
        raise kernel_error(f"{what} can only be used inside a tilewright kernel")
    return stack[-1]


def maybe_current() -> Builder | None:
    stack = _stack()
    return stack[-1] if stack else None


def require_kernel(what: str) -> Builder:
    builder = current(what)
    if not builder.in_kernel():
        raise kernel_error(f"{what} must be used inside 'with T.Kernel(...)'")
    return builder
