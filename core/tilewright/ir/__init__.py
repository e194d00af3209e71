"""The tile IR: tile ops as TVM calls, each described by a registered schema."""

from . import ops
from .ops import PORTABLE_OPS, REDUCE_KINDS
from .schema import (
    Attr,
    Operand,
    Region,
    TileOpCall,
    TileOpSchema,
    decode,
    get_schema,
    make_call,
    register_tile_op,
    registered_ops,
    tile_ops_in,
)

__all__ = [
    "PORTABLE_OPS", "REDUCE_KINDS", "Attr", "Operand", "Region", "TileOpCall", "TileOpSchema",
    "decode", "get_schema", "make_call", "ops", "register_tile_op", "registered_ops",
    "tile_ops_in",
]
