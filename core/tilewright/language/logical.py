"""``T.any_of`` / ``T.all_of``: whether any / every element of a tile, a tensor or a region of
one is true (non-zero), as one boolean expression a branch tests (TileLang's block-sparse
``if T.any_of(BlockMask[by, bx, k, :]):``).

The expression is the elements' loads joined by ``||`` / ``&&``, so every backend computes it
as it computes any condition: the region's shape must be constant, and small (TileLang's use is
a handful of mask flags); a larger one is refused at the call's line.
"""

from __future__ import annotations

import functools
import itertools
import math

from tvm import tirx

from ..errors import kernel_error
from .buffer import as_int, region_of, resolve, shape_str, to_expr

# the most elements one expression joins (a chain of loads, each a branch's operand)
MAX_ELEMENTS = 256


def _truths(value, what: str) -> list:
    """Each element of ``value``'s region as a boolean: itself (bool) or ``!= 0``."""
    region = resolve(region_of(value, what), None, what)
    extents = [as_int(e) for e in region.extents]
    name = region.buffer.name
    if not all(isinstance(e, int) for e in extents):
        raise kernel_error(f"{what}: the region of {name!r} has shape {shape_str(extents)}; "
                           "it needs a constant shape")
    if math.prod(extents) > MAX_ELEMENTS:
        raise kernel_error(f"{what}: the region of {name!r} has {math.prod(extents)} elements, "
                           f"more than {MAX_ELEMENTS}; reduce it into a tile first "
                           "(T.reduce_max of its values != 0)")
    dtype = str(region.buffer.dtype)
    truths = []
    for offsets in itertools.product(*(range(e) for e in extents)):
        load = tirx.BufferLoad(region.buffer, [to_expr(s) + o if o else to_expr(s)
                                               for s, o in zip(region.starts, offsets)])
        truths.append(load if dtype == "bool" else load != tirx.const(0, dtype))
    return truths


def any_of(buffer):
    """True when any element of ``buffer`` (a tile, a tensor or a region of one) is true."""
    return functools.reduce(tirx.Or, _truths(buffer, "T.any_of"))


def all_of(buffer):
    """True when every element of ``buffer`` (a tile, a tensor or a region of one) is true."""
    return functools.reduce(tirx.And, _truths(buffer, "T.all_of"))
