"""How dialect calls find the user's line and emit one IR statement."""

from __future__ import annotations

import os
import sys

import tilewright
from tilewright.errors import KernelError, SourceLocation
from tilewright.ir import make_call
from tilewright.language import builder as B

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CORE = os.path.dirname(os.path.abspath(tilewright.__file__))


def location() -> SourceLocation | None:
    """The user's line: the innermost frame outside tilewright, this plugin and TVM."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        internal = name.startswith((_PKG, _CORE)) or "/tvm/" in name or "/tvm_ffi/" in name
        if not internal and not name.startswith("<"):
            return SourceLocation(name, frame.f_lineno)
        frame = frame.f_back
    return None


def error(message: str) -> KernelError:
    return KernelError(message, location())


def span():
    return B.span_of(location())


def emit(name: str, operands: dict, attrs: dict | None = None) -> None:
    what = f"T.{name.removeprefix('ascend.')}"
    builder = B.current(what)
    if not builder.in_kernel():
        raise error(f"{what} must be used inside 'with T.Kernel(...)'")
    if builder.enclosing("parallel") is not None:
        raise error(f"{what} cannot be used inside a T.Parallel loop")
    builder.emit(make_call(name, operands, attrs, span=span()))
