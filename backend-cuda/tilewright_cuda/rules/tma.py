"""TMA (the Tensor Memory Accelerator, sm_90+): the boxes of a copy between a global region
and a shared one, for ``T.tma_copy`` (rules/dialect.py) and for portable copies in pipelined
loops.

A copy from a global tensor into a whole swizzled shared tile (TMA's own
``SWIZZLE_128B``/``64B``/``32B`` layouts, ``layout.Swizzled``) that is a statement of a
``T.Pipelined`` loop with two or more stages can be one TMA load per column block of the tile,
issued by one thread and completing on an mbarrier of its pipeline stage, instead of
``cp.async`` chunks issued by every thread. The copy rule cannot know yet whether the loop will
be pipelined, so it emits a *choice*, ``if (tw_tma_choice()) <TMA> else <cp.async>``; the
pipeline phase takes the TMA branch when every producer of a loop offers one and gives each
stage its mbarrier (replacing ``tw_stage_barrier()``), and takes the ``cp.async`` branch of
every choice left. Out-of-bounds parts of a box read as zero, as the ``cp.async`` path's do.

``T.copy(..., disable_tma=True)`` keeps one copy on ``cp.async``; the pass config
``cuda.disable_tma_lower`` (TileLang's ``tl.disable_tma_lower``) keeps all of them. With the
pass config ``cuda.tma_unswizzled`` a copy into a whole unswizzled (row-major) tile whose rows
are a multiple of 16 bytes is offered as a TMA load too, one dense box (T.gemm_sp's metadata
tile, which the sparse wgmma's lanes read as rows of 16-bit words, so it has no swizzle;
without it that loop's producers all stay on ``cp.async``). It is opt-in because it turns
other loops with such a tile (scale rows, say) over to TMA as well.

A box is at most 256 elements in each dimension (``cuTensorMapEncodeTiled``); a wider tile
moves as several boxes completing on the same mbarrier (:func:`_pieces`), the expected bytes
still the whole tile's. Rows wider than 256 elements of a row-major tile are one box of a view
of the tensor instead where one fits (:func:`_fold`: 576 columns as 3 x 192). A box starts
on a 16-byte boundary of its rows (:func:`_check_inner_start`; the GPU traps otherwise). A
swizzled tile moves as one box per 128-byte (64-, 32-byte) column block of its layout, and may
be filled in part: every row, the columns of whole blocks. A TMA names its descriptor as
``tw.cuda.tensormap(tensor, box..., fold, swizzle)`` (``fold`` 0 for the tensor's own shape);
the finish pass deduplicates and numbers them, one per distinct box.
"""

from __future__ import annotations

import math

import tvm
from tilewright.errors import KernelError
from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tvm import tirx

from .. import intrinsics, keys, layout, ops
from ..analysis.ir import const, row_step, unit_inner
from .common import leader

SWIZZLE_BYTES = {3: 128, 2: 64, 1: 32}
MAX_BOX = 256
SWIZZLE_PERIOD = 1024  # bytes: a TMA destination with 128-byte swizzling starts at one
SWIZZLE_ROWS = 8  # rows of a swizzle pattern: it repeats every 8 x its column width bytes


def _check_shared_region(region, what: str):
    """The shared region must be one row-major block: unit dims, then full dims."""
    shape = [const(d) for d in region.buffer.shape]
    extents = [const(e) for e in region.extents]
    first = next((i for i, e in enumerate(extents) if e != 1), len(extents))
    for d in range(first + 1, len(extents)):
        if extents[d] != shape[d] or const(region.starts[d]) != 0:
            raise KernelError(f"{what}: the shared region of {region.buffer.name!r} must be "
                              "contiguous (leading single indices, then whole trailing "
                              "dimensions), e.g. S[stage, :, :]")


def _check_swizzled_region(region, width: int, what: str):
    """A region of a swizzled tile that TMA can fill: single indices of its pipeline version,
    every row, and columns that start and end on the ``width``-byte column blocks of the
    layout (the rows of one column block are stored densely, so whole blocks are contiguous)."""
    name, shape = region.buffer.name, [const(d) for d in region.buffer.shape]
    extents = [const(e) for e in region.extents]
    if any(e != 1 for e in extents[:-2]) or extents[-2] != shape[-2] or \
            const(region.starts[-2]) != 0:
        raise KernelError(f"{what}: {name!r} has a swizzled layout; TMA fills every row of it "
                          f"({shape[-2]} rows), from one pipeline version, e.g. "
                          f"S[stage, :, c0:c1]")
    atom = width // tvm.runtime.DataType(str(region.buffer.dtype)).bits * 8
    lo, n = region.starts[-1], extents[-1]
    if n % atom or not tvm.sym.Analyzer().can_prove(tirx.floormod(lo, atom) == 0):
        raise KernelError(f"{what}: the columns {lo} .. {lo} + {n} of {name!r} do not start "
                          f"and end on its swizzle atoms of {atom} columns ({width} bytes); "
                          "TMA fills whole atom columns of a swizzled tile")


def load(src, dst, barrier, what: str = "T.tma_copy") -> list:
    """The statements one thread issues to load the global region ``src`` into the shared
    region ``dst`` through TMA, completing on ``barrier`` (its expected bytes raised first,
    no arrival). Raises KernelError when TMA cannot move the tile."""
    return _boxes(src, dst, barrier, what)


def store(src, dst, what: str = "T.tma_copy") -> list:
    """The statements one thread issues to store the shared region ``src`` to the global
    region ``dst`` through TMA, in one commit group."""
    return [*_boxes(dst, src, None, what), intrinsics.call("tw_tma_store_commit")]


def _boxes(g, s, bar, what: str) -> list:
    """Loads (``bar`` given) or stores between the global region ``g`` and the shared region
    ``s``: a swizzled tile moves as one box per column block of its layout, and a dimension
    wider than TMA's 256 elements as several boxes (:func:`_pieces`)."""
    loading = bar is not None
    if str(g.buffer.dtype) != str(s.buffer.dtype):
        raise KernelError(f"{what}: {g.buffer.name!r} is {g.buffer.dtype} but "
                          f"{s.buffer.name!r} is {s.buffer.dtype}; TMA does not convert")
    extents = [const(e) for e in g.extents]
    if any(e is None for e in extents):
        raise KernelError(f"{what}: the global region of {g.buffer.name!r} needs constant "
                          f"extents (the TMA box), got {list(g.extents)}")
    if any(e < 1 for e in extents):
        raise KernelError(f"{what}: the global region of {g.buffer.name!r} is empty "
                          f"(extents {extents}); a TMA box has at least one element a "
                          "dimension")
    rank = len(extents)
    if rank > 5:
        raise KernelError(f"{what}: TMA handles tensors of up to 5 dimensions, "
                          f"{g.buffer.name!r} has {rank}")
    itemsize = tvm.runtime.DataType(str(g.buffer.dtype)).bits // 8
    dims = list(reversed(extents))  # innermost first
    coords = list(reversed(list(g.starts)))
    swizzled = layout.swizzle_of(s.buffer)
    blocks, mode, period = 1, 0, 1
    if swizzled is None:
        _check_shared_region(s, what)
    else:
        width, bits = swizzled
        _check_swizzled_region(s, width, what)
        if dims[0] * itemsize % width:
            raise KernelError(f"{what}: {s.buffer.name!r} has a swizzled layout of {width}-byte "
                              f"columns; the box's rows ({dims[0]} x {itemsize} bytes of "
                              f"{g.buffer.name!r}) must be a multiple of it")
        blocks, mode = dims[0] * itemsize // width, SWIZZLE_BYTES[bits]
        dims[0] = width // itemsize
        period = SWIZZLE_ROWS * width
        rows = const(s.buffer.shape[-2])
        if const(s.extents[-1]) != const(s.buffer.shape[-1]) and rows * width % period:
            raise KernelError(f"{what}: a column block of {s.buffer.name!r} ({rows} rows x "
                              f"{width} bytes) is not a whole number of its swizzle's "
                              f"{period}-byte periods, so a box at a later block would not "
                              "start on one; TMA fills such a tile whole (every column)")
    _check_inner_start(g, coords[0], itemsize, what)
    fold = _fold(g, dims[0], coords[0], itemsize) if swizzled is None else None
    if fold is not None:  # the rows as [fold, columns / fold]: one box instead of one a row
        dims = [fold, dims[0] // fold, *dims[1:]]
        coords = [0, tvm.sym.Analyzer().simplify(tirx.floordiv(coords[0], fold)), *coords[1:]]
        rank += 1
    tile = math.prod(extents)
    block_bytes = tile // blocks * itemsize  # one column block of a swizzled tile
    split, pieces = _pieces(dims)
    narrow = next((box[0] for _, box in pieces if box[0] * itemsize % 16), None)
    if narrow is not None:
        raise KernelError(f"{what}: the innermost box extent of {g.buffer.name!r} is "
                          f"{narrow * itemsize} bytes; TMA needs a multiple of 16 bytes")
    outer = dims[split + 1:]
    count = math.prod(outer)
    pitch = [1]  # elements between neighbours of each dimension in the shared tile
    for d in dims[:-1]:
        pitch.append(pitch[-1] * d)
    starts = [lo * pitch[split] * itemsize for lo, _ in pieces] + \
        [pitch[j] * itemsize for j in range(split + 1, rank)]
    if period > 1 and any(o % period for o in starts):
        raise KernelError(f"{what}: {g.buffer.name!r}'s box is wider than TMA's {MAX_BOX} "
                          f"elements in a dimension, and its parts would not start on the "
                          f"{period}-byte period of {s.buffer.name!r}'s swizzled layout")
    row = tirx.Var("tma_part", "int32") if count > 1 else None
    index, at = [], tirx.const(0, "int32")  # the outer dims' indices and their shared offset
    rest = row
    for j, d in enumerate(outer, split + 1):
        i = tirx.floormod(rest, d) if j < rank - 1 else rest
        rest = tirx.floordiv(rest, d) if j < rank - 1 else None
        index.append(i)
        at = at + i * (pitch[j] * itemsize)
    base = intrinsics.shared_addr(tirx.BufferLoad(s.buffer, list(s.starts)))
    stmts = []
    for b in range(blocks):
        for lo, box in pieces:
            descriptor = tirx.call_intrin(
                "handle", ops.TENSORMAP,
                tirx.BufferLoad(g.buffer, [tirx.const(0, "int32")] * len(g.buffer.shape)),
                *[tirx.const(x, "int32") for x in box], tirx.const(fold or 0, "int32"),
                tirx.const(mode, "int32"))
            # column block b of a swizzled tile starts b whole blocks after the tile
            offset = b * block_bytes + lo * pitch[split] * itemsize
            offset = at + offset if row is not None else tirx.const(offset, "int32")
            smem = base if isinstance(offset, tirx.IntImm) and offset.value == 0 else \
                tirx.call_extern("handle", "tw_offset_bytes", base, offset)
            c = list(coords)
            c[0] = c[0] + b * dims[0] if b else c[0]
            if lo:
                c[split] = c[split] + lo
            for j, i in enumerate(index, split + 1):
                c[j] = c[j] + i
            c = [tirx.Cast("int32", x) if str(x.ty) != "int32" else x
                 for x in (tirx.const(v, "int32") if isinstance(v, int) else v for v in c)]
            if loading:
                stmts.append(intrinsics.call(f"tw_tma_load_{rank}d", descriptor, bar, smem, *c))
            else:
                stmts.append(intrinsics.call(f"tw_tma_store_{rank}d", descriptor, smem, *c))
    if row is not None:
        stmts = [tirx.For(row, 0, count, tirx.ForKind.SERIAL,
                          tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0])]
    if loading:
        stmts.insert(0, intrinsics.call("tw_mbar_expect_tx", bar,
                                        tirx.const(tile * itemsize, "uint32")))
    return stmts


def _check_inner_start(g, start, itemsize: int, what: str):
    """A box must start on a 16-byte boundary of its tensor's rows: the H200 raises "an
    illegal instruction was encountered" at a ``cp.async.bulk.tensor`` whose first column
    ``start`` is not a multiple of 16 bytes (``cuTensorMapEncodeTiled`` accepts the map; the
    coordinates come at run time). Measured (findings/tma): a 2-D float16 map with boxes of
    256 and 64 columns runs at starts of 0, 16 and 32 bytes and traps at 4, 8 and 12. Every
    later box of the copy starts a whole number of 16-byte multiples after the first (parts
    of 256 elements, swizzle column blocks, folded parts of ``c`` elements with ``c`` a
    multiple of 16 bytes), so the first column decides."""
    if itemsize >= 16:
        return
    if not tvm.sym.Analyzer().can_prove(tirx.floormod(start, 16 // itemsize) == 0):
        raise KernelError(f"{what}: the box of {g.buffer.name!r} starts at column {start}, "
                          f"{itemsize}-byte elements; TMA needs the first column of a box on "
                          f"a 16-byte boundary (a multiple of {16 // itemsize}), or the GPU "
                          "raises an illegal instruction")


def _fold(g, width: int, start, itemsize: int) -> int | None:
    """The row length ``c`` of the view that moves a box ``width`` > :data:`MAX_BOX` elements
    wide in one load, or None. The tensor map then sees the tensor's innermost dimension of
    ``n`` elements as two, ``[c, n / c]`` (strides ``itemsize`` and ``c * itemsize`` bytes),
    and the box as ``[c, width / c, ...]``, which lands row-major in shared memory as the
    unfolded box would. ``c`` is the largest that divides ``width`` and ``n`` (a constant),
    divides the box's first column ``start`` provably, is at most :data:`MAX_BOX` with
    ``width / c`` too, and is a multiple of 16 bytes; the tensor keeps its other dimensions,
    so it needs at most 4."""
    n = const(g.buffer.shape[-1])
    if width <= MAX_BOX or n is None or len(g.buffer.shape) > 4:
        return None
    analyzer = tvm.sym.Analyzer()
    for c in range(MAX_BOX, 0, -1):
        if width % c == 0 and n % c == 0 and width // c <= MAX_BOX and c * itemsize % 16 == 0 \
                and analyzer.can_prove(tirx.floormod(start, c) == 0):
            return c
    return None


def _pieces(dims: list[int]) -> tuple[int, list]:
    """The boxes of a dense tile of ``dims`` (innermost first) that TMA moves: ``(split,
    [(start in dimension split, box), ...])``. A box lands densely in shared memory, so
    where a dimension ``split`` exceeds :data:`MAX_BOX` it is cut into boxes of ``MAX_BOX``
    and a remainder (576 = 256 + 256 + 64), each box whole in the dimensions inside ``split``
    and one element deep in those outside it (the caller repeats it over them)."""
    split = next((j for j, d in enumerate(dims) if d > MAX_BOX), None)
    if split is None:
        return len(dims) - 1, [(0, list(dims))]
    return split, [(lo, dims[:split] + [min(MAX_BOX, dims[split] - lo)] +
                    [1] * (len(dims) - split - 1)) for lo in range(0, dims[split], MAX_BOX)]


# -- portable copies in pipelined loops ------------------------------------------------------------
def _pipelined(ctx: RuleContext) -> bool:
    """The copy runs directly in a ``T.Pipelined`` loop of two or more stages, outside T.ws
    roles (whose copies the kernel author synchronises)."""
    if any(keys.ROLE in loop.annotations for loop in ctx.loops):
        return False
    inner = ctx.loops[-1] if ctx.loops else None
    return inner is not None and int(inner.annotations.get(keys.STAGES, 0)) >= 2


def why_not(call: TileOpCall, ctx: RuleContext) -> str | None:
    """Why this copy stays on ``cp.async``; None when it may be a TMA load."""
    src, dst = call.operands["src"], call.operands["dst"]
    if not ctx.options.tma:
        return "TMA needs sm_90+ and is not switched off"
    if call.attrs.get("disable_tma", False):
        return "T.copy(..., disable_tma=True)"
    if not _pipelined(ctx):
        return "not a statement of a T.Pipelined loop with num_stages >= 2"
    if layout.memory(src.buffer) != "global" or not layout.memory(dst.buffer).startswith("shared"):
        return "not a global -> shared copy"
    swizzled = layout.swizzle_of(dst.buffer)
    shape = [const(d) for d in dst.buffer.shape]
    itemsize = tvm.runtime.DataType(str(src.buffer.dtype)).bits // 8
    if len(shape) != 2 or None in shape:
        return "the shared tile is not a 2-D tile of constant shape"
    if swizzled is None and not ctx.options.tma_unswizzled:
        return f"the shared tile has no swizzled layout ({keys.TMA_UNSWIZZLED} not set)"
    if not all(const(s) == 0 for s in dst.starts) or \
            [const(e) for e in dst.extents] != shape:
        return "the copy fills part of the shared tile"
    if swizzled is None and shape[1] * itemsize % 16:
        return "the unswizzled tile's rows are not a multiple of 16 bytes (TMA's box rule)"
    if swizzled is not None and shape[0] * swizzled[0] % SWIZZLE_PERIOD:
        return "a column block of the tile is not a whole number of swizzle periods"
    if not unit_inner(src.buffer):
        return "the tensor's last dimension is not contiguous (TMA's stride rule)"
    if len(src.buffer.shape) > 1 and not ctx.can_prove(
            tirx.floormod(row_step(src.buffer), 16 // itemsize) == 0):
        return "the tensor's rows are not a multiple of 16 bytes (TMA's stride rule)"
    return None


def copy_choice(call: TileOpCall, ctx: RuleContext, fallback):
    """A choice between the TMA load of ``call`` and ``fallback`` (its ``cp.async`` lowering),
    or ``fallback`` when the copy cannot be a TMA load."""
    if why_not(call, ctx) is not None:
        return fallback
    try:
        loads = load(call.operands["src"], call.operands["dst"], intrinsics.stage_barrier(),
                     "T.copy")
    except KernelError:  # a box TMA cannot move (more than 5 dims, parts of a swizzled tile
        # off its period, an innermost box under 16 bytes, a first column off a 16-byte
        # boundary): keep cp.async
        return fallback
    return tirx.IfThenElse(intrinsics.tma_choice(), leader(ctx, loads), fallback)
