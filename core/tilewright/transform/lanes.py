"""Vector values lane by lane: a rewrite whose rule is written for scalars applied to each lane
of a vector node (``int8x8``, ``bfloat16x2`` ...), the lanes gathered again by a ``Shuffle``.
Used where the vector form of a rule would be wrong or would not build: narrow integers whose
working type with the same lanes is wider than a target's vectors (:mod:`.wrapping_int`),
bfloat16 on a backend whose legalisation rounds scalars only (:mod:`.narrow_float`)."""

from __future__ import annotations

import tvm
from tvm import tirx


def lanes_of(ty) -> int:
    """The lanes of a value of type ``ty``: 1 for a scalar, a pointer or a tuple."""
    return tvm.runtime.DataType(str(ty.dtype)).lanes if isinstance(ty, tvm.ir.PrimType) else 1


def lane(value, k: int):
    """Lane ``k`` of the vector ``value``: the scalar itself where ``value`` is built of
    scalars (a ``Shuffle`` of them, a ``Broadcast``), else a one-lane ``Shuffle``."""
    if lanes_of(value.ty) == 1:
        return value
    if isinstance(value, tirx.Broadcast):
        return value.value
    if isinstance(value, tirx.Shuffle) and all(
            lanes_of(v.ty) == 1 for v in value.vectors):
        return value.vectors[int(value.indices[k])]
    return tirx.Shuffle([value], [tirx.const(k, "int32")])


def by_lane(rule, rebuild, applies=None):
    """``rule`` for a scalar node; a vector node that ``rule`` would change (or for which
    ``applies(node)`` holds, where the rule cannot be tried on a vector) is made lane by lane
    and its lanes gathered again: ``rebuild(node, k)`` is lane ``k``'s node (built of
    :func:`lane`), to which ``rule`` is applied."""
    def apply(node):
        lanes = lanes_of(node.ty)
        if lanes == 1:
            return rule(node)
        if not (applies(node) if applies is not None else not rule(node).same_as(node)):
            return node
        return gathered([rule(rebuild(node, k)) for k in range(lanes)])

    return apply


def gathered(scalars: list):
    """The vector whose lanes are ``scalars``."""
    return tirx.Shuffle(scalars, [tirx.const(k, "int32") for k in range(len(scalars))])


def binary(node, k: int):
    """Lane ``k`` of the binary node ``node`` (``a + b``, ``a < b`` ...)."""
    return type(node)(lane(node.a, k), lane(node.b, k))
