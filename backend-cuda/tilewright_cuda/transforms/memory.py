"""The ``place_memory`` phase: shared tiles and fragments become views of one dynamic
shared-memory pool, register layouts (spread fragments too) become per-thread registers,
frontend annotations go. A register accumulator, row vector or spread fragment used inside a
T.ws role is sized for the role's threads first (:func:`role_registers`)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import prim_func_pass, rebuild_for
from tvm import tirx

from .. import intrinsics, keys, layout
from ..analysis import lifetimes
from ..analysis.accesses import shared
from ..analysis.ir import buffers_in, find_thread, map_roles, role_loops, seq

SMEM_ALIGN = 128


def registers(buffer, threads: int):
    """The per-thread register array of an accumulator, row vector or spread fragment on
    ``threads`` threads."""
    if layout.is_spread(buffer):
        return tirx.decl_buffer(layout.spread_register_shape(buffer, threads), buffer.dtype,
                                buffer.name, scope="local")
    if layout.is_rows(buffer):
        return tirx.decl_buffer((layout.row_registers(buffer, threads),), buffer.dtype,
                                buffer.name, scope="local")
    n = int(buffer.shape[1].value)
    rows = -(-layout.registers(buffer, threads) // n)
    return tirx.decl_buffer((rows, n), buffer.dtype, buffer.name, scope="local")


def _bytes(buffer) -> int:
    n = 1
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            raise KernelError(f"shared buffer {buffer.name!r} needs a constant shape on the "
                              f"CUDA backend, got {list(buffer.shape)}")
        n *= int(extent.value)
    return n * tvm.runtime.DataType(str(buffer.dtype)).bits // 8


BLOCK_RESERVED_SHARED = 1024  # bytes of each resident block's shared memory the GPU keeps


def shared_bytes_per_block(arch, blocks: int = 1) -> int:
    """Dynamic shared memory one block may use when ``blocks`` blocks share an SM."""
    if blocks == 1:
        return arch.max_shared_bytes
    per_sm = arch.max_shared_bytes + BLOCK_RESERVED_SHARED
    return per_sm // blocks - BLOCK_RESERVED_SHARED


def _align(offset: int, buf) -> int:
    align = layout.ALIGN if layout.swizzle_of(buf) else SMEM_ALIGN
    return -(-offset // align) * align


def _size(buf) -> int:
    return -(-_bytes(buf) // SMEM_ALIGN) * SMEM_ALIGN


def pack(buffers) -> dict:
    """Each of ``buffers`` at its own offset of the pool, in order."""
    at, offset = {}, 0
    for buf in buffers:
        at[buf] = _align(offset, buf)
        offset = at[buf] + _size(buf)
    return at


def _meet(one, other) -> bool:
    """Whether two buffers' segments (``analysis.lifetimes.live_segments``) overlap."""
    return any(a <= d and c <= b for a, b in one for c, d in other)


def pack_by_lifetime(buffers, segments: dict) -> dict:
    """Offsets of ``buffers`` in the pool where two whose ``segments`` (intervals of units,
    ``analysis.lifetimes``) do not overlap may share bytes: each, in order, at the lowest
    offset free of the buffers placed before it that are live at the same time."""
    at = {}
    for buf in buffers:
        busy = sorted((at[o], at[o] + _size(o)) for o in at if _meet(segments[o],
                                                                     segments[buf]))
        offset = 0
        for start, end in busy:
            if _align(offset, buf) + _size(buf) <= start:
                break
            offset = max(offset, end)
        at[buf] = _align(offset, buf)
    return at


def pool_bytes(at: dict) -> int:
    return max((offset + _size(buf) for buf, offset in at.items()), default=0)


def _barriers_for_reuse(at: dict, segments: dict, prog) -> list:
    """The statements (of ``prog``, ``analysis.lifetimes``) before which a block barrier must
    go: where a segment of a buffer's life starts in bytes that a segment of another, live
    before, used (every thread must be done with the old contents), unless a barrier already
    runs between the two; and, for two such segments in the same loop, where the earlier one
    starts again after the later one in the next iteration. The barrier goes before the
    outermost entered loop that starts where the segment starts and ends within it, else
    before the position."""
    marked, planned = [], set()

    def add(first, last):
        loops = [lp for lp in prog.loops if lp.first == first and lp.last <= last]
        if loops:
            marked.append(max(loops, key=lambda lp: lp.last).stmt)
        else:
            marked.append(prog.positions[first][0])
            planned.add(first)

    pairs = [(a, b, sa, sb) for a in at for b in at if a is not b and
             at[a] < at[b] + _size(b) and at[b] < at[a] + _size(a)
             for sa in segments[a] for sb in segments[b] if sa[1] < sb[0]]
    for _, _, (a_first, a_last), (b_first, b_last) in pairs:
        if not lifetimes.barrier_between(prog, a_last, b_first, planned):
            add(b_first, b_last)
        loop = lifetimes.enclosing(prog, a_first, b_last)
        if loop is not None and not (
                lifetimes.barrier_after(prog, b_last, loop.last, planned) or
                lifetimes.barrier_between(prog, loop.first - 1, a_first, planned)):
            add(a_first, a_last)
    return marked


def _with_barriers(thread_body, prog, marked: list):
    """``thread_body`` with a ``__syncthreads()`` before each statement of ``marked``, found
    through the loops and branches ``prog`` enters."""
    if not marked:
        return thread_body

    def mark(stmt):
        if any(stmt.same_as(m) for m in marked):
            return tirx.SeqStmt([intrinsics.sync(), mark_inside(stmt)])
        return mark_inside(stmt)

    def mark_inside(stmt):
        if isinstance(stmt, tirx.SeqStmt):
            return tirx.SeqStmt([mark(s) for s in stmt.seq])
        if isinstance(stmt, tirx.For) and any(lp.stmt.same_as(stmt) for lp in prog.loops):
            return rebuild_for(stmt, body=mark(stmt.body))
        if isinstance(stmt, tirx.IfThenElse) and any(
                any(c[1].same_as(stmt) for c in context) for context in prog.contexts):
            return tirx.IfThenElse(stmt.condition, mark(stmt.then_case),
                                   None if stmt.else_case is None else mark(stmt.else_case),
                                   span=stmt.span)
        return stmt

    return mark(thread_body)


def _without_allocations(body, buffers):
    """``body`` without the allocations of ``buffers``."""
    def visit(q):
        return seq([s for s in q.seq if not (isinstance(s, tirx.AllocBuffer) and any(
            s.buffer.same_as(b) for b in buffers))] or [tirx.Evaluate(0)])

    return tvm_ffi.structural_map(body, (tirx.SeqStmt, visit))


def place_memory(options):
    """Shared buffers and fragments (design: fragments live in shared memory, see README)
    become views into one dynamic shared-memory pool, swizzled tiles (with all their pipeline
    versions) at multiples of ``swizzle.ALIGN`` with every access rewritten to the swizzled
    offset; thread-local scopes become registers (``local``). A shared buffer nothing touches
    takes no bytes and loses its allocation (``analysis.lifetimes.unused``). Each buffer has
    bytes of its own,
    unless the pool would then exceed what one block may use on the architecture (its share
    with ``cuda.blocks_per_sm``): then buffers whose lifetimes do not overlap
    (``analysis.lifetimes``: inside a loop's body too, and between loops that each renew a
    buffer) share bytes, with a block barrier
    between the last use of one and the first use of the next (and on a loop's back edge).
    Fails when even that exceeds it, naming each buffer's bytes."""
    arch = options.arch

    def run(func):
        versions = func.attrs[keys.VERSIONS] if func.attrs is not None and \
            keys.VERSIONS in func.attrs else {}
        allocs = []
        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, allocs.append))
        tx_loop = find_thread(func)
        threads = int(tx_loop.extent.value)
        locals_ = {}
        pooled = [alloc.buffer for alloc in allocs if shared(alloc.buffer)]
        unused = lifetimes.unused(func.body, pooled)
        if unused:
            pooled = [b for b in pooled if not any(b.same_as(u) for u in unused)]
            func = func.with_body(_without_allocations(func.body, unused))
            tx_loop = find_thread(func)
        for alloc in allocs:
            buf = alloc.buffer
            if shared(buf):
                continue
            if layout.is_accumulator(buf) or layout.is_rows(buf) or layout.is_spread(buf):
                locals_[buf] = registers(buf, threads)
            elif str(buf.scope()) != "local":
                locals_[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope="local")
        blocks = options.blocks_per_sm
        limit = shared_bytes_per_block(arch, blocks)
        at = pack(pooled)
        offset = pool_bytes(at)
        if offset > limit:
            prog = lifetimes.program(tx_loop.body, tx_loop.loop_var)
            segments = lifetimes.live_segments(tx_loop.body, pooled, tx_loop.loop_var,
                                              versions)
            reused = pack_by_lifetime(pooled, segments)
            if pool_bytes(reused) > limit:
                parts = ", ".join(f"{b.name} {_bytes(b)}" + (
                    f" ({int(b.shape[0].value)} pipeline versions)" if str(b.name) in versions
                    else "") for b in pooled)
                each = "one block" if blocks == 1 else f"each of {blocks} blocks per SM " \
                    "(cuda.blocks_per_sm)"
                raise KernelError(
                    f"the kernel needs {offset} bytes of shared memory ({parts}; "
                    f"{pool_bytes(reused)} with buffers whose lifetimes do not overlap sharing "
                    f"bytes), above the {limit} bytes {each} may use on {arch.name}; use "
                    "smaller tiles or fewer stages", span_location(func.body.span))
            at, offset = reused, pool_bytes(reused)
            new_loop = rebuild_for(tx_loop, body=_with_barriers(
                tx_loop.body, prog, _barriers_for_reuse(at, segments, prog)))
            func = func.with_body(tvm_ffi.structural_map(
                func.body, (tirx.For, lambda s: new_loop if s.same_as(tx_loop) else s)))
        views = {buf: (buf, at[buf]) for buf in pooled}
        # swizzled tiles sit at multiples of layout.ALIGN from the pool's base
        pool = tirx.decl_buffer((max(offset, 16),), "uint8", "tw_smem", scope="shared.dyn",
                                data_alignment=layout.ALIGN)
        remap = dict(locals_)
        swizzled = []
        for buf, (old, at) in views.items():
            itemsize = tvm.runtime.DataType(str(old.dtype)).bits // 8
            shape = old.shape
            if layout.swizzle_of(old) is not None:  # one flat array, indexed per the layout
                swizzled.append(buf)
                shape = (_bytes(old) // itemsize,)
            remap[buf] = tirx.decl_buffer(shape, old.dtype, old.name, data=pool.data,
                                          elem_offset=at // itemsize, scope="shared.dyn")

        def swizzled_view(buf):
            return next((remap[b] for b in swizzled if b.same_as(buf)), None)

        def load(e):
            view = swizzled_view(e.source)
            return e if view is None else tirx.BufferLoad(
                view, [layout.element_index(e.source, list(e.indices))])

        def store(st):
            view = swizzled_view(st.buffer)
            return st if view is None else tirx.BufferStore(
                view, st.value, [layout.element_index(st.buffer, list(st.indices))])

        def rewrite_alloc(stmt):
            if stmt.buffer in views:
                view = remap[stmt.buffer]
                return tirx.DeclBuffer(view, data=pool.data)
            if stmt.buffer in locals_:
                return tirx.AllocBuffer(remap[stmt.buffer])
            return stmt

        body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, rewrite_alloc)])
        if swizzled:
            body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load),
                                                 (tirx.BufferStore, store)])
        body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
        if views:
            tx_loop = find_thread(func.with_body(body))
            new_loop = rebuild_for(tx_loop, body=tirx.SeqStmt([tirx.AllocBuffer(pool),
                                                              tx_loop.body]))
            body = tvm_ffi.structural_map(
                body, (tirx.For, lambda s: new_loop if s.same_as(tx_loop) else s))
        return func.with_attr(keys.DYN_SMEM, offset if views else 0).with_body(body)

    return prim_func_pass("CUDAPlaceMemory", run)


def role_registers():
    """mma accumulators (and their row vectors, layout.RowVector) and spread fragments
    (layout.Spread) used inside a role are laid out over the role's threads (a warp-specialised
    loop's compute threads, once the pipeline gives the block a producer warpgroup): give them
    the register count of that role (before ``place_memory`` sizes them for the whole
    block)."""

    def run(func):
        roles = role_loops(func.body)
        if not roles:
            return func
        users: dict = {}
        for loop in roles:
            for buf in buffers_in(loop.body):
                if layout.is_accumulator(buf) or layout.is_rows(buf) or layout.is_spread(buf):
                    users.setdefault(buf, set()).add(int(loop.extent.value))
        remap = {}
        for buf, sizes in users.items():
            if len(sizes) > 1 or _used_outside(func, buf):
                raise KernelError(f"fragment {buf.name!r} is used in T.ws roles of different "
                                  "sizes or also outside them; keep an accumulator's uses "
                                  "(T.clear, T.gemm, T.copy) in one role")
            remap[buf] = registers(buf, sizes.pop())
        body = tvm_ffi.structural_map(func.body, (tirx.Buffer, lambda b: remap.get(b, b)))
        return func.with_body(body)

    return prim_func_pass("CUDARoleRegisters", run)


def _used_outside(func, buf) -> bool:
    stripped = map_roles(func, lambda loop: tirx.Evaluate(tirx.const(0, "int32")))
    return any(b.same_as(buf) for b in buffers_in(stripped.body))


def strip_annotations():
    """Frontend annotations (``tw.*``) are dropped; ``T.unroll`` loops become unrolled."""

    def visit(loop):
        if not any(str(k).startswith("tw.") for k in loop.annotations):
            return loop
        kind = loop.kind
        if str(loop.annotations.get(keys.LOOP, "")) == "unroll":
            kind = tirx.ForKind.UNROLLED
        return rebuild_for(loop, kind=kind, annotations={
            k: v for k, v in loop.annotations.items() if not str(k).startswith("tw.")})

    return prim_func_pass("CUDAStripAnnotations", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tirx.For, visit))))
