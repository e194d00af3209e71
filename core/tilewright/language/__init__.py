"""``import tilewright.language as T``: the portable tile language."""

from . import (
    int_operands,  # noqa: F401 - Python ints beside TVM expressions, as TileLang's TVM
    tvm_names,  # noqa: F401 - TileLang's tvm.tirx.PrimExpr on TVM 0.27
)
from . import missing as _missing
from .annotations import (
    Fragment,
    Layout,
    annotate_layout,
    annotate_min_blocks_per_sm,
    annotate_safe_value,
    region,
    use_swizzle,
)
from .buffer import TileBuffer, VarHandle
from .conv import c2d_im2col, im2col
from .debug import device_assert, print
from .dtypes import DTYPES as _DTYPES
from .dtypes import DType
from .dtypes import DType as dtype
from .frames import (
    Kernel,
    Parallel,
    Persistent,
    Pipelined,
    assume,
    get_block_binding,
    get_block_bindings,
    get_block_extent,
    get_block_extents,
    let,
    parallel,
    serial,
    sync_grid,
    sync_threads,
    unroll,
    vectorized,
)
from .kernel import (
    Buffer,
    FragmentBuffer,
    LocalBuffer,
    Macro,
    Ref,
    SharedBuffer,
    StridedTensor,
    Tensor,
    Var,
    alloc_buffer,
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    alloc_var,
    const,
    dynamic,
    empty,
    func_attr,
    macro,
    make_tensor,
    match_buffer,
    prim_func,
    reshape,
    symbolic,
    view,
)
from .ldst import LDST as _LDST
from .logical import all_of, any_of
from .math import (
    BINARY as _BINARY,
)
from .math import (
    BIT_COUNTS as _BIT_COUNTS,
)
from .math import (
    BITWISE as _BITWISE,
)
from .math import (
    FAST_MATH as _FAST_MATH,
)
from .math import (
    PREDICATES as _PREDICATES,
)
from .math import (
    UNARY as _UNARY,
)
from .math import (
    Cast,
    Ramp,
    Select,
    abs,
    align_up,
    bitwise_not,
    cast,
    ceildiv,
    clamp,
    dp4a,
    extract_lane,
    fabs,
    floordiv,
    floormod,
    if_then_else,
    index_to_coordinates,
    infinity,
    likely,
    max,
    max_value,
    min,
    min_value,
    reinterpret,
    shift_left,
    shift_right,
    truncdiv,
    truncmod,
    unpack,
)
from .pdl import pdl_sync, pdl_trigger
from .random import rng_init, rng_rand, rng_rand_float
from .reducer import alloc_reducer, finalize_reducer, reducer_init, reducer_update
from .script_blocks import axis, block_attr, init, reads, sblock, sblock_attr, where, writes
from .source_kernel import CUDASourceCodeKernel
from .threads import WARP_REDUCE_OPS as _WARP_REDUCE_OPS
from .threads import (
    attr,
    comm_reducer,
    evaluate,
    get_thread_binding,
    get_thread_bindings,
    get_thread_extent,
    get_thread_extents,
    thread_binding,
    tvm_thread_allreduce,
)
from .tileops import ATOMIC_OPS as _ATOMIC_OPS
from .tileops import REDUCE_OPS as _REDUCE_OPS
from .tileops import SCAN_OPS as _SCAN_OPS
from .tileops import WIDE_ATOMIC_OPS as _WIDE_ATOMIC_OPS
from .tileops import (
    GemmWarpPolicy,
    atomic_load,
    atomic_store,
    clear,
    copy,
    fill,
    gemm,
    gemm_sp,
    reduce,
    transpose,
)
from .warp import BIT_HELPERS as _BIT_HELPERS
from .warp import (
    activemask,
    all_sync,
    any_sync,
    ballot,
    ballot_sync,
    get_lane_idx,
    get_warp_group_idx,
    get_warp_idx,
    get_warp_idx_sync,
    match_all_sync,
    match_any_sync,
    shfl_down,
    shfl_sync,
    shfl_up,
    shfl_xor,
    shuffle_elect,
    sync_warp,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
    tvm_warp_shuffle,
)

globals().update(_DTYPES)
globals().update(_REDUCE_OPS)
globals().update(_SCAN_OPS)
globals().update(_ATOMIC_OPS)
globals().update(_WIDE_ATOMIC_OPS)
globals().update(_WARP_REDUCE_OPS)
globals().update(_UNARY)
globals().update(_BINARY)
globals().update(_BITWISE)
globals().update(_BIT_COUNTS)
globals().update(_FAST_MATH)
globals().update(_LDST)
globals().update(_BIT_HELPERS)
# TileLang's other spellings
cdiv = ceildiv
Serial = serial
Vectorized = vectorized
Unroll = unroll
globals().update(_PREDICATES)

__all__ = [
    "Buffer", "CUDASourceCodeKernel", "DType", "Fragment", "FragmentBuffer", "GemmWarpPolicy",
    "Kernel", "Layout", "Unroll",
    "LocalBuffer", "Macro", "Parallel", "Persistent", "Pipelined", "SharedBuffer",
    "StridedTensor", "Tensor", "Var",
    "TileBuffer", "VarHandle", "Cast", "Ramp", "Select", "Serial", "Vectorized", "abs",
    "all_of", "any_of",
    "alloc_buffer", "alloc_fragment", "assume", "alloc_global", "alloc_local", "alloc_reducer",
    "alloc_shared", "alloc_var", "atomic_load", "atomic_store", "attr", "axis", "block_attr",
    "comm_reducer",
    "evaluate", "tvm_thread_allreduce",
    "annotate_layout", "annotate_min_blocks_per_sm", "annotate_safe_value", "bitwise_not",
    "c2d_im2col", "cast", "cdiv",
    "align_up", "ceildiv", "clamp", "clear",
    "const", "copy",
    "device_assert", "dp4a", "dtype", "dynamic", "empty", "extract_lane", "fabs", "fill",
    "floordiv",
    "floormod",
    "finalize_reducer", "gemm", "gemm_sp", "get_block_binding", "get_block_extent",
    "get_thread_binding", "get_thread_extent",
    "get_block_bindings", "get_block_extents", "get_thread_bindings", "get_thread_extents",
    "if_then_else", "im2col",
    "index_to_coordinates", "infinity", "init", "let", "likely", "macro",
    "Ref", "func_attr", "make_tensor", "match_buffer", "max", "max_value", "min", "min_value",
    "parallel", "pdl_sync",
    "pdl_trigger", "prim_func", "print",
    "reads", "reduce", "reducer_init", "reducer_update", "region", "rng_init", "rng_rand",
    "rng_rand_float", "reinterpret", "reshape", "sblock", "sblock_attr", "serial",
    "shift_left", "shift_right", "symbolic",
    "sync_grid", "sync_threads", "thread_binding", "transpose", "truncdiv", "truncmod",
    "unpack", "unroll",
    "use_swizzle", "vectorized", "view", "where", "writes",
    # warp-level primitives
    "activemask", "all_sync", "any_sync", "ballot", "ballot_sync", "get_lane_idx",
    "get_warp_group_idx", "get_warp_idx", "get_warp_idx_sync", "match_all_sync",
    "match_any_sync", "shfl_down", "shfl_sync", "shfl_up", "shfl_xor", "shuffle_elect",
    "sync_warp", "syncthreads_and", "syncthreads_count", "syncthreads_or", "tvm_warp_shuffle",
    *_BIT_HELPERS,
    *_DTYPES, *_REDUCE_OPS, *_SCAN_OPS,
    *_ATOMIC_OPS, *_WIDE_ATOMIC_OPS, *_WARP_REDUCE_OPS, *_UNARY,
    *_BINARY, *_BITWISE, *_BIT_COUNTS, *_PREDICATES, *_FAST_MATH, *_LDST,
]


def __getattr__(name: str):
    """``T.<name>`` the language lacks: an AttributeError that names the dialect that has it
    or the close names (``missing``)."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise AttributeError(_missing.missing_name(name, __all__))
