"""Fragment extents as TileLang's layout inference gives them.

On a GPU, TileLang stores a fragment (``T.alloc_fragment``) in registers laid out by the
``T.Parallel`` loop that accesses it: an access whose indices are the loop's own variables
(``f[i]`` in ``for i in T.Parallel(n)``, TileLang's "common access") gives the fragment the
loop's layout, over the loop's extents. The declared shape does not bound such an access:
``sinks = T.alloc_fragment([heads])`` written as ``sinks[i]`` for ``i`` in
``T.Parallel(block_M)`` holds ``block_M`` values, one per iteration, whatever ``heads`` is.

:func:`widen_fragments` gives a fragment the same extent here: a dimension that such an access
indexes past its declared size grows to the loop's extent, with one warning naming the
fragment, both shapes and the user's line. Any other access past a tile's end stays the
compile-time error of :mod:`tilewright.transform.bounds`.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import span_location
from ..log import get_logger
from .frames import LOOP_KIND_KEY

_log = get_logger("language")


def _parallel_extents(body) -> dict:
    """Each ``T.Parallel`` loop variable with a constant range starting at 0 -> its extent."""
    found = {}

    def visit(loop):
        if str(loop.annotations.get(LOOP_KIND_KEY, "")) == "parallel" and \
                isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0 and \
                isinstance(loop.extent, tirx.IntImm):
            found[loop.loop_var] = int(loop.extent.value)

    tvm_ffi.structural_walk(body, (tirx.For, visit))
    return found


def _loop_extents(indices, loops: dict) -> list | None:
    """The loop extents when every index is a distinct ``T.Parallel`` variable, else None."""
    extents, seen = [], []
    for index in indices:
        if not isinstance(index, tirx.Var) or index not in loops or \
                any(index.same_as(v) for v in seen):
            return None
        seen.append(index)
        extents.append(loops[index])
    return extents


def widen_fragments(body):
    """``body`` with each fragment grown to the extents of the ``T.Parallel`` loops that index
    it with their own variables, where those exceed its declared shape."""
    loops = _parallel_extents(body)
    if not loops:
        return body
    wanted: dict = {}  # fragment -> (extents, span of the first access that needs them)

    def note(buffer, indices, span):
        if str(buffer.scope()) != "local.fragment" or \
                not all(isinstance(s, tirx.IntImm) for s in buffer.shape):
            return
        extents = _loop_extents(list(indices), loops)
        if extents is None or len(extents) != len(buffer.shape):
            return
        old, old_span = wanted.get(buffer, ([int(s.value) for s in buffer.shape], None))
        grown = [max(a, b) for a, b in zip(old, extents)]
        if grown != old:
            old_span = old_span or span
        wanted[buffer] = (grown, old_span)

    def visit_store(store):
        note(store.buffer, store.indices, store.span)

    def visit_load(load):
        note(load.source, load.indices, None)

    tvm_ffi.structural_walk(body, [(tirx.BufferStore, visit_store),
                                   (tvm.ir.TensorLoad, visit_load)])
    remap = {}
    for buffer, (shape, span) in wanted.items():
        declared = [int(s.value) for s in buffer.shape]
        if shape == declared:
            continue
        remap[buffer] = tirx.decl_buffer(shape, buffer.dtype, buffer.name, scope=buffer.scope())
        where = span_location(span)
        _log.warning("%sfragment %s is declared with shape %s but a T.Parallel loop indexes "
                     "it with its own variables over %s; as in TileLang, the fragment takes "
                     "the loop's extents", f"{where}: " if where else "", buffer.name,
                     tuple(declared), tuple(shape))
    if not remap:
        return body
    return tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
