"""The portable tile ops, each registered once with its schema."""

from __future__ import annotations

from tvm import tirx

from .schema import Attr, Operand, TileOpSchema, register_intrinsic, register_tile_op

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

GEMM_SP = register_tile_op(TileOpSchema(
    "gemm_sp",
    (Operand("A", "read"), Operand("E", "read"), Operand("B", "read"),
     Operand("C", "readwrite")),
    (Attr("transpose_A", bool, False), Attr("transpose_E", bool, False),
     Attr("transpose_B", bool, False), Attr("policy", str, "square"),
     Attr("clear_accum", bool, False), Attr("k_pack", int, 1), Attr("wg_wait", int, 0)),
    doc="C += op(decompress(A, E)) @ op(B): A holds the kept values of a 2:4 structured-sparse "
        "operand and E its metadata (see tilewright.sparse)",
))

# The reduction family shares one shape; it is registered from this table.
REDUCE_KINDS = {
    "sum": "sum of elements",
    "max": "maximum",
    "min": "minimum",
    "abssum": "sum of absolute values",
    "absmax": "maximum absolute value",
    "bitand": "bitwise and of integers",
    "bitor": "bitwise or of integers",
    "bitxor": "bitwise exclusive or of integers",
}
# the kinds defined on integers only (a float tile is refused at the user's line)
INTEGER_REDUCE_KINDS = frozenset({"bitand", "bitor", "bitxor"})
# the kinds that compare floats: a NaN element is ignored (IEEE 754's maxNum / minNum, CUDA's
# fmaxf and __hmax, TileLang's default), unless the op's NAN_PROPAGATE attribute is set, which
# makes the result NaN when an element is (TileLang's nan_propagate=True); the combining
# functions every backend uses are transform.lowering_utils.compare_floats
NAN_REDUCE_KINDS = frozenset({"max", "min", "absmax"})

for _kind, _doc in REDUCE_KINDS.items():
    register_tile_op(TileOpSchema(
        f"reduce_{_kind}",
        (Operand("src", "read"), Operand("dst", "readwrite")),
        (Attr("dim", int, -1), Attr("clear", bool, True),
         *((Attr("nan_propagate", bool, False),) if _kind in NAN_REDUCE_KINDS else ())),
        doc=f"reduce a tile along one dimension: {_doc}" + (
            " (a NaN element is ignored unless NAN_PROPAGATE, which makes the result NaN)"
            if _kind in NAN_REDUCE_KINDS else ""),
    ))

# The inclusive scans share one shape: T.cum<kind> -> what each element becomes.
SCAN_KINDS = {
    "sum": "inclusive prefix sum",
    "max": "inclusive running maximum",
}
for _kind, _doc in SCAN_KINDS.items():
    register_tile_op(TileOpSchema(
        f"cum{_kind}",
        (Operand("src", "read"), Operand("dst", "write")),
        (Attr("dim", int, 0), Attr("reverse", bool, False)),
        doc=f"{_doc} along one dimension",
    ))

# Atomics: `dst` is one element or a tile; `src` is a value or a tile of the same shape.
# `element`: dst was written as one element (`A[i]`), not a region (`A[i:i+1]`, a tile op, the
# block's): in thread-level code (T.get_thread_binding) an element's atomic is each thread's.
# The read-modify-write kinds: add, max and min are portable (every backend has them); the
# bitwise ones take integers only, and a backend offers them as it can (Ascend C's atomic
# copies add, max and min only).
PORTABLE_ATOMIC_KINDS = ("add", "max", "min")
BITWISE_ATOMIC_KINDS = ("or", "and", "xor")
ATOMIC_KINDS = (*PORTABLE_ATOMIC_KINDS, *BITWISE_ATOMIC_KINDS)
# C++'s memory orders (std::memory_order, in its order; TileLang's ids are the same) and those
# each kind of atomic takes, as C++ allows them: a load cannot release, a store cannot acquire
MEMORY_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "release": 3, "acq_rel": 4,
                 "seq_cst": 5}
LOAD_ORDERS = ("relaxed", "consume", "acquire", "seq_cst")
STORE_ORDERS = ("relaxed", "release", "seq_cst")
# the backend feature an atomic returning the previous value needs (Ascend C's atomics return
# nothing: a backend without it refuses return_prev)
ATOMIC_RETURN_PREV = "atomic_return_prev"
# the expression intrinsic of each kind that returns the previous value -> the kind; its
# arguments: the element (a BufferLoad), the value, the memory order's id
ATOMIC_PREV = {f"tw.atomic_{k}_prev": k for k in ATOMIC_KINDS}
for _name, _kind in ATOMIC_PREV.items():
    register_tile_op(TileOpSchema(
        f"atomic_{_kind}",
        (Operand("dst", "readwrite"), Operand("src", "read", kind="any")),
        (Attr("memory_order", str, "relaxed"), Attr("element", bool, False),
         # T.atomic_add(..., use_tma=True): TileLang's request for a TMA reduction
         *((Attr("use_tma", bool, False),) if _kind == "add" else ())),
        doc=f"atomic read-modify-write ({_kind}) of global memory shared by blocks",
    ))
    register_intrinsic(_name, f"atomic_{_kind}",
                       f"T.atomic_{_kind}(..., return_prev=True) (an atomic {_kind} of one "
                       "element returning the previous value)", feature=ATOMIC_RETURN_PREV,
                       writes=True)
# T.atomic_store: one element (`element` is always true: the op is an element's, each
# thread's in thread-level code, made once per block in block code like the kinds above)
ATOMIC_STORE = register_tile_op(TileOpSchema(
    "atomic_store",
    (Operand("dst", "write"), Operand("src", "read", kind="expr")),
    (Attr("memory_order", str, "seq_cst"), Attr("element", bool, True)),
    doc="an atomic store of one element of global memory with a memory order",
))
# T.atomic_load: the element (a BufferLoad) and the memory order's id; the capability is its own
ATOMIC_LOAD = "tw.atomic_load"
register_intrinsic(ATOMIC_LOAD, "atomic_load",
                   "T.atomic_load (an atomic load of one element with a memory order)")

TRANSPOSE = register_tile_op(TileOpSchema(
    "transpose",
    (Operand("src", "read"), Operand("dst", "write")),
    doc="dst[..., j, i] = src[..., i, j] between two tiles (schema.transpose_dims says which "
        "dimensions take part), converted to dst's dtype",
))

# Programmatic dependent launch: orderings between a kernel and the kernels launched around it
# on one stream. A backend that starts a kernel only after the previous one has finished has
# nothing to order and lowers both to nothing.
PDL_TRIGGER = register_tile_op(TileOpSchema(
    "pdl_trigger", (),
    doc="TileLang's T.pdl_trigger(): the kernel launched after this one on the stream may "
        "start (it still waits at its T.pdl_sync for this one to finish)",
))
PDL_SYNC = register_tile_op(TileOpSchema(
    "pdl_sync", (),
    doc="TileLang's T.pdl_sync(): wait until the kernels launched before this one on the "
        "stream have finished and their memory writes are visible",
))

# TileLang's fast-math functions: T.__<name>(x) -> the function it approximates. A backend
# declaring the capability FAST_MATH lowers the intrinsics itself (CUDA: __expf & co. of
# float32); any other gets the precise function, which is as accurate as the contract asks.
FAST_MATH = "fast_math"
FAST_MATH_FUNCTIONS = ("exp", "exp10", "log", "log2", "log10", "tan", "cos", "sin")
# ir name -> the precise function (the name of TVM's op and of tvm.tirx's builder)
FAST_MATH_OPS = {f"tw.fast_{fn}": fn for fn in FAST_MATH_FUNCTIONS}
for _name, _fn in FAST_MATH_OPS.items():
    register_intrinsic(_name, FAST_MATH, f"T.__{_fn}(x): {_fn}(x) at least as accurate as "
                       f"CUDA's fast intrinsic of float32", fallback=lambda call, fn=_fn:
                       getattr(tirx, fn)(call.args[0]))

# T.__ldg(x[i]): a load through the read-only data cache; a backend without the capability
# LDG reads the element plainly
LDG = "ldg"
READ_ONLY_LOAD = "tw.read_only_load"
register_intrinsic(READ_ONLY_LOAD, LDG, "T.__ldg(x[i]): x[i], read through a cache for data "
                   "that does not change while the kernel runs", fallback=lambda call:
                   call.args[0])

# T.CUDASourceCodeKernel: a kernel launch whose program is the user's CUDA source. Its block
# loops hold one statement, a call of SOURCE_KERNEL (source, entry, threads x, y, z, cluster
# x, y, z), which only a backend declaring the feature SOURCE_KERNELS compiles
SOURCE_KERNELS = "cuda_source_kernels"
SOURCE_KERNEL = "tw.cuda_source_kernel"
register_intrinsic(SOURCE_KERNEL, None, "T.CUDASourceCodeKernel (a kernel launch of the user's "
                   "CUDA source)", feature=SOURCE_KERNELS, writes=True)

PRINT_TILE = register_tile_op(TileOpSchema(
    "print_tile", (Operand("buf", "read"),), (Attr("msg", str, ""),),
    doc="print a whole buffer from the kernel (debugging)",
))
PRINT_VALUE = register_tile_op(TileOpSchema(
    "print_value", (Operand("value", "read", kind="expr"),), (Attr("msg", str, ""),),
    doc="print a scalar from the kernel (debugging)",
))
DEVICE_ASSERT = register_tile_op(TileOpSchema(
    "device_assert", (Operand("cond", "read", kind="expr"),), (Attr("msg", str, ""),),
    doc="stop the kernel with an error when a condition does not hold",
))

THREAD_BINDING = register_tile_op(TileOpSchema(
    "get_thread_binding", (Operand("dst", "write"),),
    (Attr("dim", int, 0), Attr("threads", str, "")),
    doc="the calling thread's index along one of T.Kernel's thread dimensions (THREADS: the "
        "three extents, 'x,y,z'), stored into a per-thread variable: the kernel's code that "
        "reads it runs once per thread (thread-level programming)",
))

NAMED_BARRIER = register_tile_op(TileOpSchema(
    "named_barrier", (), (Attr("barrier_id", int, 1), Attr("arrive_count", int, 32)),
    doc="TileLang's T.sync_threads(BARRIER_ID, ARRIVE_COUNT): the calling thread waits until "
        "ARRIVE_COUNT threads (whole warps) of the block have arrived at barrier BARRIER_ID "
        "(1-15), which orders their shared-memory accesses; the threads that call it are the "
        "kernel's choice (thread-level code)",
))

SYNC_GRID = register_tile_op(TileOpSchema(
    "sync_grid", (), (),
    doc="TileLang's T.sync_grid(): a barrier of every thread of every block of the grid; the "
        "global memory writes before it are visible to every block after it (CUDA: a "
        "cooperative launch; a backend running the blocks one after another runs the kernel "
        "in phases, each for every block, transform.grid_sync)",
))

THREAD_ALLREDUCE = register_tile_op(TileOpSchema(
    "tvm_thread_allreduce", (Operand("value", "read", kind="expr"), Operand("dst", "write")),
    (Attr("combiner", str, "sum"), Attr("dim", int, 0), Attr("threads", str, ""),
     Attr("width", int, 0)),
    doc="TVM's thread allreduce (TileLang's hand-written GEMV reductions) and TileLang's "
        "T.warp_reduce_*: every thread of a group along one of T.Kernel's thread dimensions "
        "(DIM; WIDTH consecutive threads, the last run of the dimension possibly shorter, "
        "0: the whole dimension) gets the group's values "
        "combined (COMBINER: sum, max, min, bitand, bitor) in its one-element array",
))

# TileLang's warp shuffles, one op each, named as the language names them -> its mode. Each
# thread of a warp (32 consecutive threads in the block's linear thread number
# x + X * (y + Y * z); a 1-D block's last warp may have fewer) reads the value of one source
# lane of the warp, chosen by the mode as PTX's shfl chooses it (the LANE operand taken modulo
# 32; WIDTH splits the warp into groups of consecutive lanes):
# - idx: lane LANE modulo WIDTH of the caller's group;
# - xor: the caller's lane XOR LANE, the caller's own value when that is in a later group;
# - down: the caller's lane + LANE, the caller's own value past its group's end;
# - up: the caller's lane - LANE, the caller's own value before its group's start.
# A source lane that does not exist (past a partial warp's end) or that does not run the
# shuffle gives the caller's own value (undefined on a GPU). MASK (a constant) names the lanes
# that run it, every one of which must reach it; an int attribute holds its 32 bits as a signed
# int32 (-1: every lane), read back with lane_mask.
SHUFFLE_OPS = {"shfl_sync": "idx", "shfl_xor": "xor", "shfl_down": "down", "shfl_up": "up"}
for _name, _mode in SHUFFLE_OPS.items():
    register_tile_op(TileOpSchema(
        _name, (Operand("value", "read", kind="expr"), Operand("lane", "read", kind="expr"),
                Operand("dst", "write")),
        (Attr("width", int, 32), Attr("mask", int, -1)),
        doc=f"TileLang's T.{_name}: the value of another lane of the calling thread's warp "
            f"(PTX's shfl.{_mode}), in the caller's one-element array",
    ))
# TileLang's votes, one op each -> (the threads combined: 'warp' (the lanes of MASK, a
# constant, in the calling thread's warp that run it) or 'block' (a barrier of the whole
# block), the result's dtype, what each thread gets in its one-element array)
VOTE_OPS = {
    "any_sync": ("warp", "int32", "1 when some lane's predicate is non-zero, else 0"),
    "all_sync": ("warp", "int32", "1 when every lane's predicate is non-zero, else 0"),
    "ballot_sync": ("warp", "uint64", "bit n set when lane n's predicate is non-zero"),
    "activemask": ("warp", "uint64", "bit n set when lane n runs it"),
    "match_any_sync": ("warp", "uint32", "bit n set when lane n's value equals the caller's"),
    "match_all_sync": ("warp", "uint32", "MASK (its lanes that exist) when every lane's value "
                       "is the same, else 0"),
    "syncthreads_count": ("block", "int32", "the number of threads whose predicate is "
                          "non-zero"),
    "syncthreads_and": ("block", "int32", "1 when every thread's predicate is non-zero, "
                        "else 0"),
    "syncthreads_or": ("block", "int32", "1 when some thread's predicate is non-zero, else 0"),
}
for _name, (_scope, _dtype, _doc) in VOTE_OPS.items():
    _over = "lanes of the calling thread's warp" if _scope == "warp" else "block"
    register_tile_op(TileOpSchema(
        _name, (Operand("value", "read", kind="expr"), Operand("dst", "write")),
        (Attr("mask", int, -1),),
        doc=f"TileLang's T.{_name} over the {_over}: {_doc} ({_dtype})",
    ))
# the votes that are barriers of the whole block: every thread must reach them
BLOCK_VOTE_OPS = frozenset(n for n, (scope, _, _) in VOTE_OPS.items() if scope == "block")


def lane_mask(attr) -> int:
    """The 32-bit member mask a warp op's MASK attribute holds."""
    return int(attr) & 0xFFFFFFFF


def mask_attr(mask: int) -> int:
    """The MASK attribute holding the 32-bit member mask ``mask``."""
    return mask - (1 << 32) if mask >= 1 << 31 else mask


SYNC_WARP = register_tile_op(TileOpSchema(
    "sync_warp", (), (Attr("mask", int, -1),),
    doc="TileLang's T.sync_warp(mask): the lanes of MASK of the calling thread's warp wait "
        "for each other, which orders their memory accesses (a backend running a block's "
        "threads in lockstep has nothing to do)",
))

# the kernel loop's annotation T.annotate_safe_value makes: {global tensor's name: the value a
# load of it outside its extent reads}, which the safe-memory guard uses instead of 0
SAFE_VALUES_KEY = "tw.safe_values"

# the names of the two families' tile ops, for passes that treat a family alike
REDUCE_OPS = frozenset(f"reduce_{k}" for k in REDUCE_KINDS)
# the warp-level ops of thread-level code, each a collective of the threads that run it
WARP_OPS = frozenset({*SHUFFLE_OPS, *VOTE_OPS, SYNC_WARP.name})
SCAN_OPS = frozenset(f"cum{k}" for k in SCAN_KINDS)
# the element ops of atomics: an element's is each calling thread's in thread-level code
ATOMIC_OPS = frozenset({*(f"atomic_{k}" for k in ATOMIC_KINDS), "atomic_store"})

PORTABLE_OPS = ("copy", "fill", "gemm", "gemm_sp", *(f"reduce_{k}" for k in REDUCE_KINDS),
                *(f"cum{k}" for k in SCAN_KINDS), *(f"atomic_{k}" for k in PORTABLE_ATOMIC_KINDS),
                "print_tile", "print_value", "device_assert", "transpose", "pdl_trigger",
                "pdl_sync")
