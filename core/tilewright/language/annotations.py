"""Layout and scheduling annotations: ``T.annotate_layout``, ``T.Layout``, ``T.Fragment``,
``T.use_swizzle``, ``T.annotate_min_blocks_per_sm`` and ``T.region``.

Annotations are hints about *how* to run a kernel, never about *what* it computes: they are
recorded on the kernel's block loop (``tw.layouts`` / ``tw.swizzle`` /
``tw.min_blocks_per_sm`` annotations) for backends that use them; a
backend that does not need them (the CPU backend) ignores them without changing results.
"""

from __future__ import annotations

import inspect

from tvm import tirx

from ..errors import kernel_error
from ..ir import SAFE_VALUES_KEY
from . import builder as B
from .buffer import BufferSlice, TileBuffer, as_int, to_expr
from .script_blocks import safe_value_scope


class Layout:
    """``T.Layout(shape, fn)``: maps a tile index to a physical index, ``fn(*index)``."""

    def __init__(self, shape, forward_fn):
        self.shape = tuple(as_int(s) for s in shape)
        self.forward_fn = forward_fn
        arity = len(inspect.signature(forward_fn).parameters)
        if arity not in (len(self.shape), 0) and not _varargs(forward_fn):
            raise kernel_error(f"T.Layout: the index function takes {arity} argument(s) but "
                               f"the shape has {len(self.shape)} dimension(s)")

    def map(self, *index):
        out = self.forward_fn(*index)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def index_map(self) -> tuple:
        """Symbolic output of the layout function, for printing and for backends."""
        args = [tirx.Var(f"i{n}", "int32") for n in range(len(self.shape))]
        return tuple(to_expr(e) for e in self.map(*args))


class Fragment(Layout):
    """``T.Fragment(shape, forward_thread_fn=..., forward_index_fn=...)``: a layout that also
    says which thread holds each element; or, as TileLang also takes it,
    ``T.Fragment(shape, forward_fn)`` with ``forward_fn(*index)`` giving ``(thread, local
    index)`` (with ``replicate > 1`` it takes the replica too, ``forward_fn(i, rep)``: the
    first replica's place is the one described)."""

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, replicate=1,
                 forward_index_fn=None):
        self.replicate = as_int(replicate)
        if forward_fn is not None:
            dims = len(tuple(shape))
            arity = len(inspect.signature(forward_fn).parameters)
            extra = (0,) if self.replicate != 1 and arity == dims + 1 else ()
            if arity not in (dims, dims + len(extra)) and not _varargs(forward_fn):
                raise kernel_error(f"T.Fragment: forward_fn takes {arity} argument(s) but the "
                                   f"shape has {dims} dimension(s)"
                                   + (" (and one replica)" if self.replicate != 1 else ""))

            def place(*index):
                out = forward_fn(*index, *extra)
                if not isinstance(out, (tuple, list)) or len(out) != 2:
                    raise kernel_error("T.Fragment: forward_fn gives (thread, local index) "
                                       f"for an element, got {out!r:.60}")
                return out

            forward_thread_fn = lambda *i: place(*i)[0]  # noqa: E731
            forward_index_fn = lambda *i: place(*i)[1]  # noqa: E731
        super().__init__(shape, forward_index_fn or (lambda *i: i))
        self.forward_thread_fn = forward_thread_fn


def _varargs(fn) -> bool:
    return any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())


def annotate_layout(layouts: dict):
    """Ask for specific layouts of some shared or fragment buffers."""
    builder = B.require_kernel("T.annotate_layout")
    for buf, layout in layouts.items():
        if not isinstance(buf, TileBuffer):
            raise kernel_error("T.annotate_layout keys must be buffers allocated in the kernel")
        if not isinstance(layout, Layout):
            raise kernel_error(f"T.annotate_layout: the layout of {buf.name!r} must be a "
                               f"T.Layout or T.Fragment, got {type(layout).__name__}")
        if tuple(layout.shape) != tuple(buf.shape):
            raise kernel_error(f"T.annotate_layout: layout shape {layout.shape} does not match "
                               f"{buf.name!r} of shape {buf.shape}")
        builder.kernel_annotations.setdefault("tw.layouts", {})[buf.name] = \
            list(layout.index_map())


def annotate_safe_value(safe_values: dict):
    """``T.annotate_safe_value({A: -1e4})``: what a load of global tensor ``A`` at an index
    outside its extent reads (0 unless annotated; the loads the compiler cannot prove inside
    are guarded on every backend, :mod:`tilewright.transform.safe_memory`). The values are
    Python numbers, converted to the tensor's dtype. They apply to the whole kernel, or,
    inside a ``with T.sblock(...)``, to that block and the blocks nested in it, where they
    take precedence over the kernel's and the outer blocks' values for the same tensor
    (:mod:`.script_blocks`)."""
    builder = B.require_kernel("T.annotate_safe_value")
    scoped = safe_value_scope(builder)
    if not isinstance(safe_values, dict):
        raise kernel_error(f"T.annotate_safe_value takes a dict {{tensor: value}}, got "
                           f"{type(safe_values).__name__}")
    for buf, value in safe_values.items():
        if not isinstance(buf, TileBuffer) or str(buf.buffer.scope()) != "global":
            raise kernel_error("T.annotate_safe_value keys must be the kernel's global "
                               f"tensors (its parameters), got {getattr(buf, 'name', buf)!r}")
        value = as_int(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise kernel_error(f"T.annotate_safe_value: the value for {buf.name!r} must be a "
                               f"number, got {value!r}")
        values = scoped if scoped is not None else \
            builder.kernel_annotations.setdefault(SAFE_VALUES_KEY, {})
        values[buf.name] = float(value)


def use_swizzle(panel_size: int = 10, order: str = "row", enable: bool = True):
    """Rasterise blocks in panels of ``panel_size`` so neighbours share L2 data."""
    builder = B.require_kernel("T.use_swizzle")
    if order not in ("row", "col"):
        raise kernel_error(f"T.use_swizzle order must be 'row' or 'col', got {order!r}")
    if int(panel_size) <= 0:
        raise kernel_error(f"T.use_swizzle panel_size must be positive, got {panel_size}")
    if enable:
        builder.kernel_annotations["tw.swizzle"] = [int(panel_size), order]


# the kernel loop's annotation T.annotate_min_blocks_per_sm makes: the blocks each
# multiprocessor should hold at once
MIN_BLOCKS_KEY = "tw.min_blocks_per_sm"
# the most blocks a multiprocessor of any NVIDIA architecture holds at once
MAX_BLOCKS_PER_SM = 32


def annotate_min_blocks_per_sm(n: int):
    """``T.annotate_min_blocks_per_sm(n)``: ask the compiler to keep each thread's register
    use low enough for ``n`` blocks of this kernel to be resident on one multiprocessor at
    once (CUDA: ``__launch_bounds__(threads, n)``; more blocks in flight, maybe at the price
    of register spills). A hint about speed: the backends without such a limit (cpu, interp,
    Ascend) ignore it. ``n`` is an int from 1 to 32."""
    builder = B.require_kernel("T.annotate_min_blocks_per_sm")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BLOCKS_PER_SM:
        raise kernel_error(f"T.annotate_min_blocks_per_sm takes an int from 1 to "
                           f"{MAX_BLOCKS_PER_SM} (blocks resident on one multiprocessor), "
                           f"got {n!r}")
    builder.kernel_annotations[MIN_BLOCKS_KEY] = n


def region(start, access_type: str = "rw", *extents) -> BufferSlice:
    """``T.region(A[i, j], "r", 64, 32)``: the region of that shape starting at an element."""
    if not hasattr(start, "indices"):
        raise kernel_error("T.region takes a buffer element such as A[i, j] as its start")
    if access_type not in ("r", "w", "rw"):
        raise kernel_error(f"T.region access type must be 'r', 'w' or 'rw', got {access_type!r}")
    starts = tuple(start.indices)
    if len(extents) > len(starts):
        raise kernel_error(f"T.region: {len(extents)} extents for a {len(starts)}-D start")
    full = (1,) * (len(starts) - len(extents)) + tuple(as_int(e) for e in extents)
    return BufferSlice(start.source, starts, full)
