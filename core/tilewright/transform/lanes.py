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


REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")


def lane(value, k: int):
    """Lane ``k`` of the vector ``value``: the scalar itself where ``value`` is built of
    scalars (a ``Shuffle`` of them, a ``Broadcast``), its bits where ``value`` reinterprets
    such a vector of wider or equal elements (:func:`_reinterpreted_lane`), else a one-lane
    ``Shuffle`` (which repeats ``value`` in every lane that reads it)."""
    if lanes_of(value.ty) == 1:
        return value
    if isinstance(value, tirx.Broadcast):
        return value.value
    if _built_of_scalars(value):
        return value.vectors[int(value.indices[k])]
    reinterpreted = _reinterpreted_lane(value, k)
    if reinterpreted is not None:
        return reinterpreted
    return tirx.Shuffle([value], [tirx.const(k, "int32")])


def _built_of_scalars(value) -> bool:
    return isinstance(value, tirx.Shuffle) and all(lanes_of(v.ty) == 1 for v in value.vectors)


def _reinterpreted_lane(value, k: int):
    """Lane ``k`` of ``T.reinterpret(words, <n x narrow>)`` where ``words`` is built of scalars
    of a whole multiple of the lane's bits (``T.ldg128``'s four uint32 words read as a
    ``bfloat16x8``): the bits of word ``k // r`` from bit ``bits * (k % r)`` (lane 0 in the
    low bits, as the words were made); None for any other value."""
    if not (isinstance(value, tvm.ir.Call) and value.op.same_as(REINTERPRET)):
        return None
    words, lane_type = value.args[0], tvm.runtime.DataType(str(value.ty.dtype))
    word_type = tvm.runtime.DataType(str(words.ty.dtype)) \
        if isinstance(words.ty, tvm.ir.PrimType) else None
    if word_type is None or not _built_of_scalars(words) or lane_type.bits < 8 or \
            word_type.bits % lane_type.bits:
        return None
    per_word = word_type.bits // lane_type.bits
    word = lane(words, k // per_word)
    unsigned, narrow = f"uint{word_type.bits}", f"uint{lane_type.bits}"
    if str(word.ty) != unsigned:
        word = tirx.reinterpret(unsigned, word)
    shift = lane_type.bits * (k % per_word)
    if shift:
        word = tirx.shift_right(word, tirx.const(shift, unsigned))
    bits = tirx.Cast(narrow, word) if narrow != unsigned else word
    element = str(lane_type.with_lanes(1))
    return bits if element == narrow else tirx.reinterpret(element, bits)


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
