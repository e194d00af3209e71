"""Programmatic dependent launch (TileLang's ``T.pdl_trigger`` and ``T.pdl_sync``): how a
kernel overlaps with the kernels launched before and after it on one stream.

Without these calls a kernel starts once the previous kernel on its stream has finished. On
CUDA (sm_90 and newer) a kernel that calls ``T.pdl_sync()`` is launched so that it may start
earlier, as soon as every block of the previous kernel has called ``T.pdl_trigger()`` (or
finished): the statements before its ``T.pdl_sync()`` overlap the previous kernel's tail and
must not read what that kernel writes; ``T.pdl_sync()`` waits until the previous kernel has
finished and its writes are visible. A backend that runs kernels one after another (the CPU,
the interpreter, Ascend, CUDA below sm_90) has nothing to order: both calls are accepted and
do nothing there, and every read after ``T.pdl_sync()`` sees the previous kernel's writes
on every backend.
"""

from __future__ import annotations

from ..errors import kernel_error
from ..ir import PDL_SYNC, PDL_TRIGGER, make_call
from . import builder as B


def _emit(name: str) -> None:
    builder = B.require_kernel(f"T.{name}")
    if builder.enclosing("parallel") is not None:
        raise kernel_error(f"T.{name} inside a T.Parallel loop: it orders the whole kernel "
                           "against the kernels launched around it; call it between the "
                           "kernel's statements")
    builder.emit(make_call(name, {}, {}, span=B.here()))


def pdl_trigger() -> None:
    """``T.pdl_trigger()``: the kernel launched after this one on the stream may start once
    every block of this kernel has called it (or finished). It publishes nothing: that kernel
    reads this one's results only after its own ``T.pdl_sync()``, which waits for this kernel
    to finish. The statements after it run as usual."""
    _emit(PDL_TRIGGER.name)


def pdl_sync() -> None:
    """``T.pdl_sync()``: wait until the kernels launched before this one on the stream have
    finished and their global-memory writes are visible. Statements before it may run while
    the previous kernel is still running (CUDA, sm_90+): they must not read its results. Put
    it before the first read of what an earlier kernel wrote. CUDA refuses ``T.__ldg`` in
    such a kernel: its read-only path need not see the writes of the kernel it overlaps."""
    _emit(PDL_SYNC.name)


__all__ = ["pdl_sync", "pdl_trigger"]
