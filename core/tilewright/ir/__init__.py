"""The tile IR: tile ops as TVM calls, each described by a registered schema."""

from . import ops
from .ops import (
    ATOMIC_KINDS,
    ATOMIC_OPS,
    ATOMIC_PREV,
    INTEGER_REDUCE_KINDS,
    NAMED_BARRIER,
    NAN_REDUCE_KINDS,
    PORTABLE_OPS,
    REDUCE_KINDS,
    REDUCE_OPS,
    SAFE_VALUES_KEY,
    SCAN_KINDS,
    SCAN_OPS,
    SYNC_GRID,
    THREAD_ALLREDUCE,
    THREAD_BINDING,
)
from .schema import (
    Attr,
    Operand,
    Region,
    TileOpCall,
    TileOpSchema,
    decode,
    get_schema,
    intrinsic_features,
    intrinsics_in,
    is_region,
    make_call,
    matrix_dims,
    register_intrinsic,
    register_tile_op,
    registered_capabilities,
    registered_ops,
    schema_of_call,
    tile_ops_in,
)

__all__ = [
    "ATOMIC_KINDS", "ATOMIC_OPS", "ATOMIC_PREV", "INTEGER_REDUCE_KINDS", "NAMED_BARRIER",
    "NAN_REDUCE_KINDS",
    "PORTABLE_OPS", "REDUCE_KINDS", "REDUCE_OPS", "SAFE_VALUES_KEY", "SCAN_KINDS", "SCAN_OPS",
    "SYNC_GRID", "THREAD_ALLREDUCE", "THREAD_BINDING",
    "Attr", "Operand", "Region", "TileOpCall",
    "TileOpSchema", "decode", "get_schema", "intrinsic_features", "intrinsics_in", "make_call",
    "matrix_dims", "ops",
    "is_region", "register_intrinsic", "register_tile_op", "registered_capabilities",
    "registered_ops", "schema_of_call",
    "tile_ops_in",
]
