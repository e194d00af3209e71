"""What the lowering rules share: the thread context of a rule, conversions, the reduction
kinds' algebra and warp shuffles (masked to the lanes that exist: a block need not be whole
warps).

A rule returns one of two kinds of code:

- a *parallel nest*: loops annotated ``tw.loop = "parallel"`` over the elements of a tile; the
  ``distribute`` phase spreads their iterations over the block's threads, exactly like a
  user's ``T.Parallel`` loop;
- *thread code*: statements written for one thread of the block, using ``threadIdx.x``
  (the enclosing ``thread_binding`` loop in ``ctx.loops``), such as the shuffle reductions.

Accesses that may fall outside a buffer are guarded: reads give zero, writes are skipped.
"""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import TileOpCall, get_schema
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import compare_floats
from tvm import tirx

from .. import intrinsics, keys, layout
from ..keys import WARP

FULL_MASK = tirx.const(0xFFFFFFFF, "uint32")
# the core's shuffle ops (ir.SHUFFLE_OPS) -> CUDA's functions, which the reductions use too
SHUFFLE_FUNCTIONS = {"shfl_sync": "__shfl_sync", "shfl_xor": "__shfl_xor_sync",
                     "shfl_down": "__shfl_down_sync", "shfl_up": "__shfl_up_sync"}


def thread_var(ctx: RuleContext):
    """(threadIdx.x var, threads per block) of the enclosing thread loop (a T.ws role's
    inside one)."""
    for loop in reversed(ctx.loops):
        if loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None and \
                str(loop.thread_binding.thread_tag) == keys.THREAD_TAG:
            return loop.loop_var, int(loop.extent.value)
    raise KernelError("CUDA lowering found a tile op outside the block's thread loop")


def leader(ctx: RuleContext, body: list) -> tirx.Stmt:
    """``body`` run by the first thread of the block, or of the enclosing role."""
    tx, _ = thread_var(ctx)
    return tirx.IfThenElse(tx == 0, tirx.SeqStmt(body) if len(body) > 1 else body[0], None)


def cast(value, dtype: str):
    return value if str(value.ty) == dtype else tirx.Cast(dtype, value)


def reducer_kind(buffer) -> str | None:
    """The kind of a ``T.alloc_reducer`` buffer (``sum``, ``max``, ...), else None."""
    scope = layout.memory(buffer)
    return scope.rsplit(".", 1)[-1] if scope.startswith("local.reducer") else None


def fill_call(region) -> TileOpCall:
    """A ``T.fill(region, 0)`` call, for rules that clear an accumulator first."""
    return TileOpCall(get_schema("fill"), {"dst": region, "value": tirx.const(0, "float32")}, {})


# -- reductions ----------------------------------------------------------------------------------
def infinity(dtype: str, sign: int = 1):
    """Positive (``sign`` 1) or negative infinity of a floating-point type. TVM has no
    bfloat16 infinity, and folds a conversion of float32's into a constant it prints as
    ``inff``: the bfloat16 one is converted on the device (``__float2bfloat16_rn``)."""
    if dtype == "bfloat16":
        return tirx.call_pure_extern(dtype, "__float2bfloat16_rn",
                                     tirx.infinity("float32") * sign)
    return tirx.infinity(dtype) * sign if sign < 0 else tirx.infinity(dtype)


def reduce_parts(kind: str, dtype: str, nan_propagate: bool = False):
    """(identity, combine(acc, x), merge(a, b)) of a reduction kind. A float32 / float64 max
    or min is CUDA's ``max`` / ``min`` (fmaxf / fminf: a NaN operand is ignored, the
    language's rule); a float16 / bfloat16 one, and any with ``nan_propagate``, the core's
    ``compare_floats`` (TVM's CUDA prelude defines ``max(half, half)`` as ``__hgt(a, b) ? a :
    b``, whose result of a NaN depends on the operands' order)."""
    is_float = dtype.startswith(("float", "bfloat"))
    lowest = infinity(dtype, -1) if is_float else tirx.min_value(dtype)
    highest = infinity(dtype) if is_float else tirx.max_value(dtype)
    zero = tirx.const(0, dtype)
    add, mx, mn = (lambda a, b: a + b), tirx.Max, tirx.Min
    bitand, bitor, bitxor = tirx.bitwise_and, tirx.bitwise_or, tirx.bitwise_xor
    ones = tirx.const(-1, dtype) if dtype.startswith("int") else highest
    if is_float and (nan_propagate or dtype not in ("float32", "float64")):
        mx, mn = compare_floats("max", nan_propagate), compare_floats("min", nan_propagate)
    return {
        "sum": (zero, add, add),
        "abssum": (zero, lambda a, x: a + tirx.abs(x), add),
        "max": (lowest, mx, mx),
        "min": (highest, mn, mn),
        "absmax": (zero, lambda a, x: mx(a, tirx.abs(x)), mx),
        # the bitwise kinds of T.alloc_reducer (integer dtypes only)
        "bitand": (ones, bitand, bitand),
        "bitor": (zero, bitor, bitor),
        "bitxor": (zero, bitxor, bitxor),
    }[kind]


def lane_mask(tx, threads: int):
    """The member mask of a shuffle by thread ``tx`` of a block of ``threads``: the lanes of its
    warp that exist. Every lane (``FULL_MASK``) in a block of whole warps; the last warp of any
    other block has ``threads % 32`` lanes, and a shuffle whose mask names a lane that does not
    exist is undefined."""
    if threads % WARP == 0:
        return FULL_MASK
    partial = tirx.const((1 << threads % WARP) - 1, "uint32")
    if threads < WARP:
        return partial
    return tirx.Select(tirx.floordiv(tx, WARP) == threads // WARP, partial, FULL_MASK)


def shfl_xor(value, offset: int, width: int = WARP, mask=FULL_MASK):
    return tirx.call_extern(str(value.ty), SHUFFLE_FUNCTIONS["shfl_xor"], mask, value,
                            tirx.const(offset, "int32"), tirx.const(width, "int32"))


def butterfly(buf, merge, group: int, mask=FULL_MASK, stride: int = 1) -> list:
    """Combine ``buf[0]`` across ``group`` lanes ``stride`` apart (consecutive lanes by
    default; ``group * stride`` lanes of one warp, both powers of two) with XOR shuffles at
    offsets ``stride * group / 2``, ..., ``stride`` (every lane of the group exists;
    ``mask``: :func:`lane_mask`)."""
    stmts, offset = [], group // 2
    while offset:
        value = tirx.BufferLoad(buf, [0])
        stmts.append(tirx.BufferStore(
            buf, merge(value, shfl_xor(value, offset * stride, mask=mask)), [0]))
        offset //= 2
    return stmts


def combine_lanes(buf, merge, group: int, tx, threads: int) -> list:
    """Combine ``buf[0]`` across the calling thread's group of ``group`` consecutive threads
    (``group`` a power of two up to a warp), every thread of the group getting the result, in
    a block of ``threads``. When the groups are whole, the :func:`butterfly`; else the last
    group has fewer threads (a block of 48 threads, groups of 32): each XOR step combines a
    partner's value only when the partner exists, which leaves the group's first thread
    holding the whole group's (each step adds the upper half of its group's lanes that
    exist to the lower half), and a shuffle from that thread hands it to the others."""
    while group > 1 and group // 2 >= threads:  # the same threads: a block smaller than one
        group //= 2
    mask = lane_mask(tx, threads)
    if threads % group == 0:
        return butterfly(buf, merge, group, mask)
    other = tirx.decl_buffer((1,), buf.dtype, f"{buf.name}_other", scope="local")
    stmts, offset = [tirx.AllocBuffer(other)], group // 2
    while offset:
        value = tirx.BufferLoad(buf, [0])
        stmts += [tirx.BufferStore(other, shfl_xor(value, offset, mask=mask), [0]),
                  tirx.IfThenElse(tirx.bitwise_xor(tx, offset) < threads, tirx.BufferStore(
                      buf, merge(value, tirx.BufferLoad(other, [0])), [0]), None)]
        offset //= 2
    first = tirx.call_extern(str(buf.dtype), SHUFFLE_FUNCTIONS["shfl_sync"], mask,
                             tirx.BufferLoad(buf, [0]),
                             tirx.const(0, "int32"), tirx.const(group, "int32"))
    return [*stmts, tirx.BufferStore(buf, first, [0])]


def warp_lanes(group: int, stride: int) -> int:
    """How many members of a group of ``group`` threads ``stride`` apart
    (:func:`combine_strided`) XOR shuffles combine inside one warp: the largest power of two
    dividing ``group`` whose members span at most a warp (``lanes * stride`` threads, an
    aligned run that divides the warp), for a power of two ``stride``; else one."""
    lanes = 1
    if stride & (stride - 1) == 0:
        while stride * lanes * 2 <= WARP and group % (lanes * 2) == 0:
            lanes *= 2
    return lanes


def combine_strided(buf, merge, group: int, stride: int, tx, threads: int) -> list:
    """Combine ``buf[0]`` across the calling thread's group of ``group`` threads ``stride``
    apart in a block of ``threads`` (thread ``tx``'s group: ``tx % stride + stride * i +
    stride * group * (tx // (stride * group))`` for ``i`` below ``group``: the threads that
    differ only along one dimension of the block), every thread of the group getting the
    result. First the :func:`butterfly` at offsets ``stride * 2^i`` combines the
    :func:`warp_lanes` members of each aligned run of ``lanes * stride`` threads (whole in a
    partial last warp too: the run divides the warp and the block). When that is the whole
    group, nothing else; otherwise the first ``stride`` threads of each run (one per group)
    put its total in a shared slot (``<buf>_parts``: one per run, in the order of the
    threads), and after the block's barrier every thread combines its group's ``group /
    lanes`` slots in order. Every thread of the block must run it (the barrier); barrier
    insertion puts one before a later write of the slots (a loop's next iteration)."""
    lanes = warp_lanes(group, stride)
    shuffles = butterfly(buf, merge, lanes, lane_mask(tx, threads), stride)
    if lanes == group:
        return shuffles
    parts, run = group // lanes, stride * lanes
    slots = tirx.decl_buffer((threads // lanes,), buf.dtype, f"{buf.name}_parts",
                             scope="shared.dyn")
    column = tirx.floormod(tx, stride) if stride > 1 else 0  # the thread's place in its run
    if lanes == 1:
        slot = tx
    else:
        slot = column + stride * tirx.floordiv(tx, run)
    put = tirx.BufferStore(slots, tirx.BufferLoad(buf, [0]), [slot])
    if lanes > 1:
        put = tirx.IfThenElse(tirx.floormod(tx, run) < stride, put, None)
    first = column  # the group's first slot
    if stride * group < threads:
        first = first + stride * parts * tirx.floordiv(tx, stride * group)
    part = tirx.Var(f"{buf.name}_part", "int32")
    gather = tirx.For(part, 1, parts - 1, tirx.ForKind.SERIAL, tirx.BufferStore(
        buf, merge(tirx.BufferLoad(buf, [0]), tirx.BufferLoad(slots, [first + stride * part])),
        [0]))
    return [*shuffles, tirx.AllocBuffer(slots), put, intrinsics.sync(),
            tirx.BufferStore(buf, tirx.BufferLoad(slots, [first]), [0]), gather]
