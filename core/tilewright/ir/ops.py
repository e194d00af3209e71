"""The portable tile ops, each registered once with its schema."""

from __future__ import annotations

from .schema import Attr, Operand, TileOpSchema, register_tile_op

COPY = register_tile_op(TileOpSchema(
    "copy",
    (Operand("src", "read"), Operand("dst", "write")),
    (Attr("coalesced_width", int, 0), Attr("disable_tma", bool, False),
     Attr("eviction_policy", str, "")),
    doc="copy a tile between any two memory scopes; out-of-bounds elements read as zero and "
        "are not written",
))

FILL = register_tile_op(TileOpSchema(
    "fill",
    (Operand("dst", "write"), Operand("value", "read", kind="expr")),
    doc="set every element of a tile to a value",
))

GEMM = register_tile_op(TileOpSchema(
    "gemm",
    (Operand("A", "read"), Operand("B", "read"), Operand("C", "readwrite")),
    (Attr("transpose_A", bool, False), Attr("transpose_B", bool, False),
     Attr("policy", str, "square"), Attr("clear_accum", bool, False),
     Attr("k_pack", int, 1), Attr("wg_wait", int, 0)),
    doc="C += op(A) @ op(B) on tiles; C is the accumulator",
))

# The reduction family shares one shape; it is registered from this table.
REDUCE_KINDS = {
    "sum": "sum of elements",
    "max": "maximum",
    "min": "minimum",
    "abssum": "sum of absolute values",
    "absmax": "maximum absolute value",
}

for _kind, _doc in REDUCE_KINDS.items():
    register_tile_op(TileOpSchema(
        f"reduce_{_kind}",
        (Operand("src", "read"), Operand("dst", "readwrite")),
        (Attr("dim", int, -1), Attr("clear", bool, True)),
        doc=f"reduce a tile along one dimension: {_doc}",
    ))

PORTABLE_OPS = ("copy", "fill", "gemm", *(f"reduce_{k}" for k in REDUCE_KINDS))
