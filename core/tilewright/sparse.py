"""The 2:4 structured-sparse layout of ``T.gemm_sp``: which dtypes it takes, how many elements
a group keeps, and how the metadata says where they were.

A sparse operand A of dense shape ``[M, K]`` is cut along K into groups of ``group`` elements
of which at most ``kept`` are nonzero (2 of 4 for 16- and 8-bit dtypes, 1 of 2 for float32).
It is stored as the kept values, ``[M, K * kept / group]`` in their dense order, and metadata
``E [M, K / e_factor]`` of an integer dtype: one 4-bit field per group, holding two 2-bit
*slots*; the fields of consecutive groups fill a metadata element from its low bits up
(TileLang's ordered metadata). For a group of 4 the two slots are the positions of the kept
values (ascending); for a group of 2 a slot counts halves of a 32-bit element, so the one
kept value at position ``p`` is written as slots ``2p`` and ``2p + 1`` (``0b0100`` or
``0b1110``, as the tensor cores read float32 metadata).

:func:`dense_column` is written with ``//``, ``%``, ``>>`` and ``&`` only, so the same code
decodes NumPy or torch arrays (the interpreter, the compressor) and builds TIR expressions (a
compiling backend's loops). The module imports no TVM: the GPU harness, which has none, compresses
through :mod:`tilewright.utils.sparse` too.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELD_BITS = 4  # bits of metadata per group
SLOT_BITS = 2


@dataclass(frozen=True)
class SparseGroup:
    """``kept`` of every ``group`` consecutive elements along K are stored."""

    kept: int
    group: int

    @property
    def slot_width(self) -> int:
        """Metadata slots per element (2 when an element is two 16-bit halves)."""
        return 4 // self.group


# the operand dtypes of T.gemm_sp and their groups
SPARSE_GROUPS: dict[str, SparseGroup] = {
    "float32": SparseGroup(1, 2),
    **dict.fromkeys(("float16", "bfloat16", "int8", "uint8", "float8_e4m3fn", "float8_e5m2"),
                    SparseGroup(2, 4)),
}
# the metadata dtypes and the default for each operand dtype (int8 operands take int32
# metadata, as CUTLASS lays them out; the others int16)
META_BITS = {"int8": 8, "int16": 16, "int32": 32, "uint8": 8, "uint16": 16, "uint32": 32}


def default_meta_dtype(dtype: str) -> str:
    return "int32" if dtype in ("int8", "uint8") else "int16"


def fields_per_meta(meta_dtype: str) -> int:
    """Groups whose fields one metadata element holds."""
    return META_BITS[meta_dtype] // FIELD_BITS


def e_factor(dtype: str, meta_dtype: str) -> int:
    """Dense elements along K that one metadata element describes (TileLang's
    ``get_e_factor``): E has ``K / e_factor`` columns."""
    return fields_per_meta(meta_dtype) * SPARSE_GROUPS[dtype].group


def kept_per_meta(dtype: str, meta_dtype: str) -> int:
    """Stored (compressed) elements along K that one metadata element describes."""
    return fields_per_meta(meta_dtype) * SPARSE_GROUPS[dtype].kept


def meta_column(kk, dtype: str, meta_dtype: str):
    """The metadata column describing stored column ``kk``."""
    return kk // kept_per_meta(dtype, meta_dtype)


def dense_column(meta, kk, dtype: str, meta_dtype: str):
    """The dense column K of stored column ``kk``, given ``meta``, the metadata element
    :func:`meta_column` names (an integer at least 32 bits wide, so no shift loses a bit)."""
    g = SPARSE_GROUPS[dtype]
    q, s = kk // g.kept, kk % g.kept
    fields = fields_per_meta(meta_dtype)
    shift = (q % fields) * FIELD_BITS + s * SLOT_BITS
    slot = (meta >> shift) & ((1 << SLOT_BITS) - 1)
    return q * g.group + slot // g.slot_width


def field_of(positions, dtype: str) -> int:
    """The 4-bit field of one group whose kept values sit at ``positions`` (ascending, one per
    kept value)."""
    g = SPARSE_GROUPS[dtype]
    slots = [p * g.slot_width + w for p in positions for w in range(g.slot_width)]
    return sum(slot << (SLOT_BITS * i) for i, slot in enumerate(slots))
