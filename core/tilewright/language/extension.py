"""What a backend's dialect package needs to add ops to the language.

A dialect (``tilewright_cuda.language``, ``tilewright_ascend.language``) makes one
:class:`DialectSupport` for its package; its op functions then report errors at the user's
line and emit one tile-op statement into the kernel being traced::

    _D = DialectSupport(__file__)

    def mbarrier_arrive(bar):
        _D.emit("mbarrier_arrive", {"barrier": bar})
"""

from __future__ import annotations

import os

from ..errors import KernelError, SourceLocation, mark_internal, user_location
from ..ir import make_call
from . import builder as B


class DialectSupport:
    def __init__(self, module_file: str):
        # the distribution's top package: frames inside it are not the user's
        here = os.path.dirname(os.path.abspath(module_file))
        while os.path.exists(os.path.join(os.path.dirname(here), "__init__.py")):
            here = os.path.dirname(here)
        self.package = here
        mark_internal(here)  # the core's own locations (B.here(), kernel_error) skip it too

    def location(self) -> SourceLocation | None:
        """The user's line: the innermost frame outside tilewright, the dialect's package and
        TVM."""
        return user_location()

    def error(self, message: str) -> KernelError:
        return KernelError(message, self.location())

    def span(self):
        return B.span_of(self.location())

    def kernel_builder(self, what: str):
        """The current builder, checked to be inside ``T.Kernel`` and outside ``T.Parallel``."""
        builder = B.current(what)
        if not builder.in_kernel():
            raise self.error(f"{what} must be used inside 'with T.Kernel(...)'")
        if builder.enclosing("parallel") is not None:
            raise self.error(f"{what} cannot be used inside a T.Parallel loop")
        return builder

    def emit(self, name: str, operands: dict, attrs: dict | None = None,
             what: str | None = None) -> None:
        """Emit the tile op ``name`` (``what``: how the user wrote it, default ``T.<op>``)."""
        what = what or f"T.{name.split('.', 1)[-1]}"
        builder = self.kernel_builder(what)
        builder.emit(make_call(name, operands, attrs, span=self.span()))
