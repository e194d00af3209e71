"""TileLang's warp-level primitives in thread-level code (``tx = T.get_thread_binding()``):
shuffles (``T.shfl_sync``, ``shfl_xor``, ``shfl_down``, ``shfl_up``), votes (``T.any_sync``,
``all_sync``, ``ballot_sync``, ``ballot``, ``activemask``, ``match_any_sync``,
``match_all_sync``), block predicates (``T.syncthreads_count``, ``syncthreads_and``,
``syncthreads_or``), ``T.sync_warp``, the thread's place in its warp (``T.get_lane_idx``,
``get_warp_idx``, ``get_warp_idx_sync``, ``get_warp_group_idx``, ``shuffle_elect``) and the
bit helpers ``T.__ffs`` and ``T.__fns``.

A warp is 32 consecutive threads in the block's linear thread number ``x + X * (y + Y * z)``;
the last warp of a block whose size is not a multiple of 32 has fewer lanes. A shuffle or a
vote is a value of each thread, computed from the values of the threads of its warp (of its
block for ``T.syncthreads_*``) that run it. CUDA runs them as its warp intrinsics; the CPU
and the interpreter run thread-level code in lockstep (each statement for every thread before
the next, :mod:`tilewright.transform.threads`), so each thread's value is there for every
other thread to read, and the result is the one a converged warp gives.

The member ``mask`` must be a constant: it names the lanes that run the call, all of which
must reach it (a lane outside it contributes nothing to a vote; a shuffle reading it gets the
caller's own value, which a GPU leaves undefined). A backend running threads in lockstep
cannot tell a mask decided at run time from a divergent warp, so one is refused.
"""

from __future__ import annotations

import functools
import inspect

from tvm import tirx

from ..errors import KernelTypeError, bind_call, kernel_error, user_location
from ..ir import SYNC_WARP, make_call, mask_attr
from . import builder as B
from .buffer import TileBuffer, as_int, declare, region_of, resolve, to_expr
from .threads import THREAD_VARS, WARP, get_thread_binding, thread_builder

FULL_MASK = 0xFFFFFFFF
WARPS_PER_GROUP = 4  # a warpgroup (Hopper's): four warps
# the value dtypes a shuffle moves (CUDA's __shfl_sync overloads, narrower integers widened)
SHUFFLE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                  "uint64", "float16", "bfloat16", "float32", "float64")


def _checked(name: str):
    """A language function whose call with arguments its signature does not take is a
    TypeError at the user's line naming ``T.<name>`` and the signature."""

    def wrap(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bind_call(signature, f"T.{name}", args, kwargs)
            return fn(*args, **kwargs)

        return call

    return wrap


def _mask(mask, name: str) -> int:
    """The MASK attribute of a constant member mask."""
    value = as_int(mask)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= FULL_MASK:
        raise kernel_error(f"T.{name}: the member mask must be a constant of 32 bits naming at "
                           f"least one lane, got {mask!r} (the CPU and the interpreter run a "
                           "warp's threads in lockstep and cannot honour a mask decided at run "
                           "time)")
    return mask_attr(value)


def _width(width, name: str) -> int:
    value = as_int(width)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= WARP or \
            value & (value - 1):
        raise kernel_error(f"T.{name}: width must be a constant power of two from 1 to {WARP}, "
                           f"got {width!r}")
    return value


def _predicate(predicate, name: str):
    """The predicate as an int32 0 or 1; a float is refused (TileLang's TypeError)."""
    value = to_expr(predicate)
    dtype = str(value.ty)
    if dtype == "bool":
        return tirx.Cast("int32", value)
    if not dtype.startswith(("int", "uint")) or "x" in dtype:
        raise KernelTypeError(f"T.{name} requires an integer or boolean predicate, got {dtype}",
                              user_location())
    return tirx.Cast("int32", value != tirx.const(0, dtype))


def _collective(name: str, operands: dict, attrs: dict, dtype: str):
    """Emit warp op ``name`` writing a fresh one-element local array of ``dtype``; its element."""
    builder = thread_builder(f"T.{name}")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(f"{name}_{n}", (1,), dtype, "local")
    builder.emit(tirx.AllocBuffer(buf, span=B.here()))
    region = resolve(region_of(TileBuffer(buf), f"T.{name}"), None, f"T.{name}")
    builder.emit(make_call(name, {**operands, "dst": region}, attrs, span=B.here()))
    if not builder.enclosing("kernel").info.get(THREAD_VARS):
        get_thread_binding(0)  # the kernel's code is per-thread code, each thread its result
    return tirx.BufferLoad(buf, [tirx.const(0, "int32")])


# -- shuffles ------------------------------------------------------------------------------------
def _shuffle(name: str, value, lane, width, mask, op: str | None = None):
    """Shuffle op ``op`` (default ``name``, the function the user called)."""
    value = to_expr(value)
    dtype = str(value.ty)
    if dtype not in SHUFFLE_DTYPES:
        raise KernelTypeError(f"T.{name} moves a scalar of {', '.join(SHUFFLE_DTYPES)}, got "
                              f"{dtype}", user_location())
    lane = to_expr(lane)
    if not str(lane.ty).startswith(("int", "uint")):
        raise KernelTypeError(f"T.{name} takes an integer lane or offset, got {lane.ty}",
                              user_location())
    attrs = {"width": _width(width, name), "mask": _mask(mask, name)}
    return _collective(op or name, {"value": value, "lane": to_expr(lane, "int32")}, attrs,
                       dtype)


@_checked("shfl_sync")
def shfl_sync(value, src_lane, width=WARP, mask=FULL_MASK):
    """``T.shfl_sync(value, src_lane, width=32, mask=0xFFFFFFFF)``: ``value`` of lane
    ``src_lane`` (modulo ``width``) of the calling thread's group of ``width`` consecutive
    lanes (``__shfl_sync``)."""
    return _shuffle("shfl_sync", value, src_lane, width, mask)


@_checked("shfl_xor")
def shfl_xor(value, delta, width=WARP, mask=FULL_MASK):
    """``T.shfl_xor(value, delta, width=32, mask=0xFFFFFFFF)``: ``value`` of the lane whose
    number is the caller's XOR ``delta``; the caller's own when that lane is in a later group
    of ``width`` lanes (``__shfl_xor_sync``)."""
    return _shuffle("shfl_xor", value, delta, width, mask)


@_checked("shfl_down")
def shfl_down(value, delta, width=WARP, mask=FULL_MASK):
    """``T.shfl_down(value, delta, width=32, mask=0xFFFFFFFF)``: ``value`` of the lane
    ``delta`` above the caller; the caller's own past the end of its group of ``width`` lanes
    (``__shfl_down_sync``)."""
    return _shuffle("shfl_down", value, delta, width, mask)


@_checked("shfl_up")
def shfl_up(value, delta, width=WARP, mask=FULL_MASK):
    """``T.shfl_up(value, delta, width=32, mask=0xFFFFFFFF)``: ``value`` of the lane
    ``delta`` below the caller; the caller's own before the start of its group of ``width``
    lanes (``__shfl_up_sync``)."""
    return _shuffle("shfl_up", value, delta, width, mask)


@_checked("tvm_warp_shuffle")
def tvm_warp_shuffle(mask, value, lane, width, warp_size):
    """TVM's ``T.tvm_warp_shuffle(mask, value, lane, width, warp_size)``, as TileLang's
    Hadamard transform writes it: :func:`shfl_sync` of ``value`` from ``lane`` of the caller's
    group of ``width`` lanes, ``mask`` its members; ``warp_size`` is 32. (The CUDA dialect's
    own takes a member mask computed at run time too.)"""
    if as_int(warp_size) != WARP:
        raise kernel_error(f"T.tvm_warp_shuffle: warp_size is {WARP}, got {warp_size!r}")
    return _shuffle("tvm_warp_shuffle", value, lane, width, mask, op="shfl_sync")


# -- votes -----------------------------------------------------------------------------------------
@_checked("any_sync")
def any_sync(predicate, mask=FULL_MASK):
    """``T.any_sync(predicate, mask=0xFFFFFFFF)``: 1 when the predicate (an integer or a
    boolean) of some lane of ``mask`` in the calling thread's warp is non-zero, else 0
    (int32; ``__any_sync``)."""
    return _collective("any_sync", {"value": _predicate(predicate, "any_sync")},
                       {"mask": _mask(mask, "any_sync")}, "int32")


@_checked("all_sync")
def all_sync(predicate, mask=FULL_MASK):
    """``T.all_sync(predicate, mask=0xFFFFFFFF)``: 1 when the predicate of every lane of
    ``mask`` in the calling thread's warp is non-zero, else 0 (int32; ``__all_sync``)."""
    return _collective("all_sync", {"value": _predicate(predicate, "all_sync")},
                       {"mask": _mask(mask, "all_sync")}, "int32")


@_checked("ballot_sync")
def ballot_sync(predicate, mask=FULL_MASK):
    """``T.ballot_sync(predicate, mask=0xFFFFFFFF)``: a uint64 whose bit ``n`` is set when
    lane ``n`` of ``mask`` has a non-zero predicate (``__ballot_sync`` zero-extended: the
    upper 32 bits are 0)."""
    return _collective("ballot_sync", {"value": _predicate(predicate, "ballot_sync")},
                       {"mask": _mask(mask, "ballot_sync")}, "uint64")


@_checked("ballot")
def ballot(predicate):
    """``T.ballot(predicate)``: ``T.ballot_sync(predicate)`` over the whole warp."""
    return _collective("ballot_sync", {"value": _predicate(predicate, "ballot")},
                       {"mask": mask_attr(FULL_MASK)}, "uint64")


@_checked("activemask")
def activemask():
    """``T.activemask()``: a uint64 whose bit ``n`` is set when lane ``n`` of the calling
    thread's warp runs the call: the lanes that exist, less those a condition on the thread
    index keeps out (``__activemask`` zero-extended; a GPU's divergent warp may report fewer
    lanes)."""
    return _collective("activemask", {"value": tirx.const(1, "int32")},
                       {"mask": mask_attr(FULL_MASK)}, "uint64")


def _match_value(value, name: str):
    value = to_expr(value)
    dtype = str(value.ty)
    if dtype not in SHUFFLE_DTYPES:
        raise KernelTypeError(f"T.{name} compares a scalar of {', '.join(SHUFFLE_DTYPES)}, got "
                              f"{dtype}", user_location())
    if dtype in ("float16", "bfloat16"):
        return tirx.Cast("float32", value)  # exactly, equal values stay equal
    if dtype == "bool" or dtype.endswith(("int8", "int16")):
        return tirx.Cast("int32", value)
    return value


@_checked("match_any_sync")
def match_any_sync(value, mask=FULL_MASK):
    """``T.match_any_sync(value, mask=0xFFFFFFFF)``: a uint32 whose bit ``n`` is set when
    lane ``n`` of ``mask`` holds the caller's ``value`` (``__match_any_sync``)."""
    return _collective("match_any_sync", {"value": _match_value(value, "match_any_sync")},
                       {"mask": _mask(mask, "match_any_sync")}, "uint32")


@_checked("match_all_sync")
def match_all_sync(value, mask=FULL_MASK):
    """``T.match_all_sync(value, mask=0xFFFFFFFF)``: ``mask`` (uint32; its lanes that exist,
    in a partial warp) when every lane of it holds the same ``value``, else 0
    (``__match_all_sync`` without its predicate output)."""
    return _collective("match_all_sync", {"value": _match_value(value, "match_all_sync")},
                       {"mask": _mask(mask, "match_all_sync")}, "uint32")


def _block_vote(name: str, doc: str):
    @_checked(name)
    def vote(predicate):
        return _collective(name, {"value": _predicate(predicate, name)},
                           {"mask": mask_attr(FULL_MASK)}, "int32")

    vote.__name__ = name
    vote.__qualname__ = f"T.{name}"
    vote.__doc__ = (f"``T.{name}(predicate)``: a barrier of the block (every thread must "
                    f"reach it) that gives each thread {doc} (int32; ``__{name}``)")
    return vote


syncthreads_count = _block_vote("syncthreads_count", "the number of threads whose predicate "
                                "(an integer or a boolean) is non-zero")
syncthreads_and = _block_vote("syncthreads_and", "1 when every thread's predicate is "
                              "non-zero, else 0")
syncthreads_or = _block_vote("syncthreads_or", "1 when some thread's predicate is non-zero, "
                             "else 0")


@_checked("sync_warp")
def sync_warp(mask=None):
    """``T.sync_warp(mask=0xFFFFFFFF)``: the lanes of ``mask`` of the calling thread's warp
    wait for each other, which orders their memory accesses (``__syncwarp``; the CPU and the
    interpreter run the warp in lockstep, which orders them already)."""
    mask = _mask(FULL_MASK if mask is None else mask, "sync_warp")
    thread_builder("T.sync_warp").emit(make_call(SYNC_WARP.name, {}, {"mask": mask},
                                                 span=B.here()))


# -- the thread's place in its warp ----------------------------------------------------------------
def _linear(name: str):
    """The calling thread's number in the block, ``x + X * (y + Y * z)``."""
    threads = tuple(thread_builder(f"T.{name}").threads)
    linear = get_thread_binding(0)
    if threads[1] > 1:
        linear = linear + threads[0] * get_thread_binding(1)
    if threads[2] > 1:
        linear = linear + threads[0] * threads[1] * get_thread_binding(2)
    return linear


def _size(value, default: int, what: str, name: str) -> int:
    value = default if value is None else as_int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise kernel_error(f"T.{name}: {what} must be a positive constant, got {value!r}")
    return value


@_checked("get_lane_idx")
def get_lane_idx(warp_size=None):
    """``T.get_lane_idx(warp_size=32)``: the calling thread's lane, its number in the block
    modulo ``warp_size`` (int32)."""
    size = _size(warp_size, WARP, "warp_size", "get_lane_idx")
    return tirx.floormod(_linear("get_lane_idx"), size)


def _warp_idx(name: str, warp_size):
    size = _size(warp_size, WARP, "warp_size", name)
    return tirx.floordiv(_linear(name), size)


@_checked("get_warp_idx_sync")
def get_warp_idx_sync(warp_size=None):
    """``T.get_warp_idx_sync(warp_size=32)``: the calling thread's warp, its number in the
    block divided by ``warp_size`` (int32; the same as :func:`get_warp_idx`)."""
    return _warp_idx("get_warp_idx_sync", warp_size)


@_checked("get_warp_idx")
def get_warp_idx(warp_size=None):
    """``T.get_warp_idx(warp_size=32)``: the calling thread's warp, its number in the block
    divided by ``warp_size`` (int32)."""
    return _warp_idx("get_warp_idx", warp_size)


@_checked("get_warp_group_idx")
def get_warp_group_idx(warp_size=None, warps_per_group=None):
    """``T.get_warp_group_idx(warp_size=32, warps_per_group=4)``: the calling thread's
    warpgroup, its number in the block divided by ``warp_size * warps_per_group`` (int32)."""
    if warp_size is None and warps_per_group is not None:
        raise kernel_error("T.get_warp_group_idx takes warp_size when given warps_per_group")
    size = _size(warp_size, WARP, "warp_size", "get_warp_group_idx")
    group = _size(warps_per_group, WARPS_PER_GROUP, "warps_per_group", "get_warp_group_idx")
    return tirx.floordiv(_linear("get_warp_group_idx"), size * group)


@_checked("shuffle_elect")
def shuffle_elect(thread_extent):
    """``T.shuffle_elect(thread_extent)``: true for one thread of each group of
    ``thread_extent`` consecutive threads of the block (its first), for the block's first
    thread alone when ``thread_extent`` is 0 (bool)."""
    extent = as_int(thread_extent)
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
        raise kernel_error(f"T.shuffle_elect takes a constant thread extent (0: the block), got "
                           f"{thread_extent!r}")
    linear = _linear("shuffle_elect")
    if extent == 0:
        return linear == 0
    return tirx.floormod(linear, extent) == 0


# -- bit helpers -------------------------------------------------------------------------------
def _integer(value, name: str):
    value = to_expr(value)
    if not str(value.ty).startswith(("int", "uint")) or "x" in str(value.ty):
        raise KernelTypeError(f"T.{name} takes an integer, got {value.ty}", user_location())
    return value


@_checked("__ffs")
def ffs(value):
    """``T.__ffs(x)``: the position of the least significant set bit of the integer ``x``,
    counted from 1, or 0 when ``x`` is 0 (int32; CUDA's ``__ffs`` / ``__ffsll``)."""
    value = _integer(value, "__ffs")
    dtype = str(value.ty)
    unsigned = "uint64" if dtype.endswith("64") else "uint32"
    bits = value if dtype == unsigned else tirx.Cast(unsigned, value)  # its two's complement
    zero = tirx.const(0, unsigned)
    below = tirx.bitwise_xor(bits, bits - tirx.const(1, unsigned))  # up to that bit
    return tirx.Select(bits == zero, tirx.const(0, "int32"),
                       tirx.Cast("int32", tirx.popcount(below)))


@_checked("__fns")
def fns(mask, base, offset):
    """``T.__fns(mask, base, offset)``: the position (uint32) of the ``offset``-th set bit of
    the 32-bit ``mask`` counting up from bit ``base`` (0 to 31) and including it, counting
    down for a negative ``offset``; for ``offset`` 0, ``base`` when its bit is set; 0xFFFFFFFF
    when there is none (CUDA's ``__fns``, PTX's ``fns``)."""
    bits = tirx.Cast("uint64", tirx.Cast("uint32", _integer(mask, "__fns")))
    base = tirx.Cast("int64", _integer(base, "__fns"))
    offset = tirx.Cast("int64", _integer(offset, "__fns"))
    one = tirx.const(1, "uint64")
    # the bits from base up (for offset > 0) and from base down (offset < 0), each bound once
    up, down = tirx.Var("fns_up", "uint64"), tirx.Var("fns_down", "uint64")
    result = tirx.const(FULL_MASK, "uint32")
    for p in range(32):  # at most one position is the one sought
        here = tirx.const(p, "int64")
        if_up = tirx.And(tirx.bitwise_and(up, tirx.const(1 << p, "uint64")) != 0,
                         tirx.Cast("int64", tirx.popcount(tirx.bitwise_and(
                             up, tirx.const((2 << p) - 1, "uint64")))) == offset)
        if_down = tirx.And(tirx.bitwise_and(down, tirx.const(1 << p, "uint64")) != 0,
                           tirx.Cast("int64", tirx.popcount(tirx.shift_right(
                               down, tirx.const(p, "uint64")))) == -offset)
        found = tirx.Select(offset > 0, if_up, tirx.Select(offset < 0, if_down, tirx.And(
            here == base, tirx.bitwise_and(bits, tirx.const(1 << p, "uint64")) != 0)))
        result = tirx.Select(found, tirx.const(p, "uint32"), result)
    low = tirx.shift_left(one, tirx.Cast("uint64", base)) - one  # the bits below base
    return tirx.Let(up, tirx.bitwise_and(bits, tirx.bitwise_not(low)), tirx.Let(
        down, tirx.bitwise_and(bits, tirx.bitwise_or(low, tirx.shift_left(
            one, tirx.Cast("uint64", base)))), result))


BIT_HELPERS = {"__ffs": ffs, "__fns": fns}
