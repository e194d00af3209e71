"""Layout choice: which fragments can live in registers in an mma layout, which shared tiles
get the swizzled layout, which row vectors go with register accumulators, which other
fragments are spread over the threads in registers, which accumulators take the wgmma layout
and which 16-bit fragments become wgmma's register A operand. Each function only decides;
``transforms.layout`` attaches the chosen ``layout`` values."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.ir import REDUCE_OPS, tile_ops_in
from tvm import tirx

from .. import intrinsics, layout
from ..keys import WARP, WARPGROUP
from . import gemm_fit
from .ir import (
    accessed,
    buffers_in,
    const,
    full,
    loads_in,
    parallel_nests,
    role_loops,
    stores,
    substitute,
    uses,
)

FRAGMENT = "local.fragment"
# where a whole T.copy into a register accumulator may read from: each thread loads the
# elements its registers hold (a shared tile or a global tensor; not a fragment, which may
# itself take a register layout)
TILE_SOURCES = ("shared", "shared.dyn", "global")
# what a T.copy may move into or out of a spread fragment element by element: memory every
# thread reaches (a fragment kept in shared memory included)
SPREAD_PEERS = ("shared", "shared.dyn", "global", FRAGMENT)
SPREAD_DTYPES = ("float32", "float16", "bfloat16", "int32")
# dtypes of a fragment no gemm writes that may follow a register accumulator it is computed
# with (:func:`_nest_partners`): a running sum (float32) or a 16-bit copy of scaled scores on
# its way to a shared tile (FlashMLA's ``sp0_cast``)
COMPANION_DTYPES = ("float32", "int32", "float16", "bfloat16")
# 32-bit registers per thread that fragments in registers (mma accumulators, row vectors,
# spread fragments) may take together before further spread fragments stay in shared memory:
# a thread addresses at most 255 registers (sm_70 to sm_90), and a kernel needs about 60 more
# for addresses, indices, loop counters and temporaries (TileLang's layernorm backward at
# D = 8192 on 256 threads keeps five fragments of 32 floats a thread in registers: 160)
REGISTER_BUDGET = 192


def _fragments(func, accept) -> list:
    """The fragments ``func`` allocates that ``accept(buffer)``, in order."""
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: found.append(a.buffer) if
                                        layout.memory(a.buffer) == FRAGMENT and accept(a.buffer)
                                        else None))
    return found


def access_counts(func, buffers) -> dict:
    """How many loads and stores of each of ``buffers`` ``func`` has."""
    counts = _counts(func.body, operands=False)
    return {b: counts.get(b, 0) for b in buffers}


def _counts(stmt, operands: bool) -> dict:
    """How many loads and stores (and, with ``operands``, tile-op operands) name each buffer
    in ``stmt``."""
    counts: dict = {}

    def count(buf):
        counts[buf] = counts.get(buf, 0) + 1

    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, lambda n: count(accessed(n))),
                                   (tirx.BufferStore, lambda n: count(accessed(n)))])
    for call in tile_ops_in(stmt) if operands else ():
        for op in call.schema.operands:
            region = call.operands.get(op.name)
            if op.kind != "expr" and hasattr(region, "buffer"):
                count(region.buffer)
    return counts


def _operands(func, buffers):
    """``(call, operand, region)`` of every tile-op operand that is a region of one of
    ``buffers``."""
    for call in tile_ops_in(func):
        for op in call.schema.operands:
            region = call.operands.get(op.name)
            if op.kind == "expr" or not hasattr(region, "buffer") or region.buffer not in buffers:
                continue
            yield call, op, region


def row_shift(index, var):
    """``c`` when ``index`` is ``var + c`` (either order) with ``c`` free of ``var``; a zero
    when it is ``var``; else None."""
    if isinstance(index, tirx.Var) and index.same_as(var):
        return tirx.const(0, "int32")
    if isinstance(index, tirx.Add):
        for v, c in ((index.a, index.b), (index.b, index.a)):
            if isinstance(v, tirx.Var) and v.same_as(var) and not uses(c, var):
                return c
    return None


def _chooses(value) -> bool:
    """Whether ``value`` picks between values (``T.if_then_else``, a select)."""
    found = []
    tvm_ffi.structural_walk(value, [
        (tirx.Select, found.append),
        (tvm.ir.Call, lambda c: found.append(c) if isinstance(c.op, tvm.ir.Op) and
         c.op.name == "tirx.if_then_else" else None)])
    return bool(found)


def shifted_read(body, buf, loops) -> bool:
    """Whether the innermost ``body`` of a 2-D ``T.Parallel`` nest over ``loops`` is one store
    (alone or under an ``if`` without ``else``) whose value reads ``buf`` unconditionally at
    ``[i + c, j]``, ``c`` free of the nest's variables: MLA backward's
    ``acc_dkv_shared[bi, d] = acc_dkv[bi + s * 16, d]`` under ``if bi < 16``. An iteration whose
    row ``i + c`` is outside ``buf`` then does nothing (or reads outside it, which no program
    does), so the nest may run over the elements ``buf`` holds instead."""
    store = body
    if isinstance(store, tirx.IfThenElse) and store.else_case is None:
        if any(b.same_as(buf) for b in buffers_in(store.condition)):
            return False
        store = store.then_case
    if not isinstance(store, tirx.BufferStore) or store.buffer.same_as(buf) or \
            _chooses(store.value):
        return False
    reads = []
    tvm_ffi.structural_walk(store.value, (tvm.ir.TensorLoad, lambda e: reads.append(e)
                                          if e.source.same_as(buf) else None))
    if len(reads) != 1 or len(reads[0].indices) != 2:
        return False
    row, col = reads[0].indices
    shift = row_shift(row, loops[0].loop_var)
    return shift is not None and not uses(shift, loops[1].loop_var) and \
        isinstance(col, tirx.Var) and col.same_as(loops[1].loop_var)


def elementwise_uses(func, frags) -> dict:
    """Per fragment, (accesses inside ``T.Parallel`` nests that index it exactly by the nest's
    two loop variables over its whole shape, or read it shifted along rows as
    :func:`shifted_read` allows where it is the only such fragment the nest touches; any other
    access inside a nest)."""
    good, bad = {f: 0 for f in frags}, {f: 0 for f in frags}
    for loops, inner in parallel_nests(func.body):
        nest = loops[0]
        touched = [f for f in frags if any(f.same_as(b) for b in buffers_in(inner))]

        def visit(node, loops=loops, inner=inner, touched=touched):
            buf = accessed(node)
            if buf not in good:
                return
            shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buf.shape]
            whole = len(loops) == 2 and len(node.indices) == 2 and all(
                isinstance(loop.extent, tirx.IntImm) and int(loop.extent.value) == extent and
                isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
                for loop, extent in zip(loops, shape))
            exact = whole and all(isinstance(i, tirx.Var) and i.same_as(loop.loop_var)
                                  for i, loop in zip(node.indices, loops))
            shifted = whole and not exact and len(touched) == 1 and \
                shifted_read(inner, buf, loops)
            (good if exact or shifted else bad)[buf] += 1

        tvm_ffi.structural_walk(nest, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
    return {f: (good[f], bad[f]) for f in frags}


def accumulators(func, arch, threads) -> dict:
    """Fragments that may live in registers in the mma accumulator layout: float32 (int32 for int8
    gemms), 2-D, written by at least one ``mma.sync`` gemm (or ``mma.sp`` T.gemm_sp) as C, and
    otherwise only filled whole, copied from whole, copied into whole from a shared tile or a global
    tensor (``TILE_SOURCES``: a bias loaded before the k loop), reduced whole along rows into a
    shared row vector, or indexed ``[i, j]`` by the two loop variables of a ``T.Parallel`` nest over
    its whole shape. Maps each to its :class:`~tilewright_cuda.layout.Accumulator` (``rows`` when
    rows are reduced or touched element by element; ``square`` for one touched element by element
    that no reduction reads when its rows are too few for one warp column: MLA decode's 64 x 512
    ``acc_o`` on 8 warps, whose row statistics then stay in shared memory). A fragment no gemm
    writes whose every nest also touches such a ``rows`` accumulator of its shape follows it into
    registers (:func:`_nest_partners`), 16-bit ones too (``COMPANION_DTYPES``)."""
    frags = set(_fragments(func, lambda b: str(b.dtype) in COMPANION_DTYPES and
                           len(b.shape) == 2))
    allowed, regions, fed = {f: True for f in frags}, {f: 0 for f in frags}, set()
    rows = set()
    runners = {}  # fragment -> the threads of the gemms that write it (a T.ws role's)
    for call, op, region in _operands(func, frags):
        buf = region.buffer
        regions[buf] += 1
        running = threads_running(func, call, threads)
        if call.name in ("gemm", "gemm_sp") and op.name == "C":
            runners.setdefault(buf, set()).add(running)
        reduced = call.name in REDUCE_OPS and op.name == "src" and \
            int(call.attrs["dim"]) in (1, -1) and len(call.operands["dst"].extents) == 1 \
            and layout.memory(call.operands["dst"].buffer) in ("shared", "shared.dyn", FRAGMENT)
        fits = full(region) and (
            (call.name == "fill" and op.name == "dst") or
            (call.name == "copy" and op.name == "src") or
            (call.name == "copy" and op.name == "dst" and
             layout.memory(call.operands["src"].buffer) in TILE_SOURCES) or reduced or
            (call.name in ("gemm", "gemm_sp") and op.name == "C" and
             gemm_fit.mma_misfit(call, arch, running) is None))
        allowed[buf] = allowed[buf] and fits
        if reduced:
            rows.add(buf)
        if fits and call.name in ("gemm", "gemm_sp"):
            fed.add(buf)
    uses = access_counts(func, frags)
    wide = {f for f in frags if str(f.dtype) in ("float32", "int32")}
    # each width apart: a 16-bit fragment in a nest leaves a 32-bit one's shifted read alone
    elementwise = {**elementwise_uses(func, wide), **elementwise_uses(func, frags - wide)}
    chosen = {}
    for f in frags:
        good, bad = elementwise[f]
        if f not in wide or \
                not (allowed[f] and f in fed and not bad and uses[f] == regions[f] + good):
            continue
        acc = layout.Accumulator("rows" if f in rows or good > 0 else "square")
        own = runners[f].pop() if len(runners.get(f, ())) == 1 else threads
        if f not in rows and layout.accumulator_grid(f.shape, acc, own) is None:
            acc = layout.Accumulator("square")  # too few rows for a warp column each
        if layout.accumulator_grid(f.shape, acc, own) is not None:
            chosen[f] = acc
    for f in frags:  # companions: fed by no gemm, only ever combined with an accumulator
        good, bad = elementwise[f]
        if f in fed or not (allowed[f] and good and not bad and uses[f] == regions[f] + good):
            continue
        partners = _nest_partners(func, f, chosen)
        if partners is not None:
            chosen[f] = layout.Accumulator("rows")
    return chosen


def _buffers_accessed(stmt) -> set:
    """The buffers ``stmt`` loads or stores."""
    found = set()
    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, lambda n: found.add(accessed(n))),
                                   (tirx.BufferStore, lambda n: found.add(accessed(n)))])
    return found


def _nest_partners(func, frag, chosen) -> list | None:
    """For a fragment touched only in ``T.Parallel`` nests (and filled or copied whole): the
    register accumulators of its shape in ``"rows"`` layout that each of its nests also
    touches, or None when some nest touches none (the fragment cannot follow a register
    layout there). Such a fragment (a block-scaled GEMM's running sum of scaled partial
    products) lives in registers in the same layout: each thread holds the same elements."""
    shape = [const(e) for e in frag.shape]
    mates = [b for b, kind in chosen.items() if kind == layout.Accumulator("rows") and
             [const(e) for e in b.shape] == shape]
    found = []
    for _, inner in parallel_nests(func.body):
        touched = _buffers_accessed(inner)
        if frag not in touched:
            continue
        here = [b for b in mates if b in touched]
        if not here:
            return None
        found += here
    return found or None


def swizzled(func, arch, threads, in_registers) -> dict:
    """Shared tiles (and fragments kept in shared memory) that get the swizzled layout: 2-D
    (or ``[stages, rows, columns]``), and either read as A or B by at least one gemm (or
    T.gemm_sp) taking a tensor-core path (1- or 2-byte elements, ``layout.SWIZZLE_DTYPES``),
    each such read of the whole tile or of a part starting on a swizzle atom
    (``gemm_fit.atom_misfit``: a K half, one stage; ldmatrix addressing and wgmma's descriptors
    read the part from its first element as they read a whole tile), or float16/bfloat16
    written whole (or in parts starting on a swizzle atom) from an accumulator in registers (an
    epilogue tile: a warp's pair stores then cover eight rows in eight distinct bank groups
    instead of one). Every other access is
    rewritten element by element in place_memory; pointer accesses (16-byte copies, pair
    stores) keep whole 16-byte chunks, which the swizzle never splits. Maps each to its
    :class:`~tilewright_cuda.layout.Swizzled`."""
    whole: dict = {}
    for call in tile_ops_in(func):
        if call.name == "copy" and call.operands["src"].buffer in in_registers:
            dst = call.operands["dst"]
            if layout.memory(dst.buffer) in ("shared", "shared.dyn") and \
                    len(dst.buffer.shape) == 2 and \
                    layout.SWIZZLE_DTYPES.get(str(dst.buffer.dtype)) == 2:
                whole[dst.buffer] = whole.get(dst.buffer, True) and (
                    full(dst) or gemm_fit.atom_misfit(dst, "the copy") is None)
            continue
        if call.name not in ("gemm", "gemm_sp") or gemm_fit.mma_misfit(
                call, arch, threads_running(func, call, threads)) is not None:
            continue
        for op in ("A", "B"):
            region = call.operands[op]
            buf = region.buffer
            if layout.memory(buf) in ("shared", "shared.dyn", FRAGMENT) and \
                    buf not in in_registers and len(buf.shape) in (2, 3):
                whole[buf] = whole.get(buf, True) and (
                    full(region) or gemm_fit.atom_misfit(region, op) is None)
    chosen = {}
    for buf, ok in whole.items():
        shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buf.shape]
        found = layout.params(*shape[-2:], str(buf.dtype)) if ok and None not in shape else None
        if found is not None:
            chosen[buf] = layout.Swizzled(*found)
    return chosen


def row_vectors(func, chosen: dict, threads: int) -> set:
    """1-D float32 fragments of M rows, M a multiple of 16 rows per warp, whose every use is:
    filled whole; copied whole from or to another such vector, or a shared row buffer of M
    elements (FlashMLA's ``T.copy(scores_max, scores_max_0)``); the destination of a whole
    row reduction of a chosen accumulator (``chosen``: buffer -> Accumulator) with a ``(warps
    x 1)`` grid; indexed ``[i]`` in a 1-D ``T.Parallel`` nest over its M rows that touches
    nothing but such vectors, thread-local scalars and shared row buffers of M elements at
    ``[i]`` (one lane of the four that hold a row stores them), storing no vector when it
    both reads and writes one of those (``logsum[i] += logsum_1[i]``); or read ``[i]`` in a
    2-D nest that runs on a chosen accumulator's registers (``[i, j]``). In kernels with
    ``T.ws`` roles the warps are those of the one role that uses the vector
    (:func:`role_threads`), the same as its accumulators'."""
    own = role_threads(func, threads)
    strip = {acc for acc, kind in chosen.items() if kind.grid == "rows" and
             own(acc) is not None and
             layout.accumulator_grid(acc.shape, kind, own(acc)) == (own(acc) // WARP, 1)}
    if not strip:  # (accumulators, and so their warps, are whole)
        return set()
    vecs = _fragments(func, lambda b: str(b.dtype) == "float32" and len(b.shape) == 1 and
                      isinstance(b.shape[0], tirx.IntImm) and own(b) is not None and
                      int(b.shape[0].value) % (16 * (own(b) // WARP)) == 0)
    if not vecs or not strip:
        return set()
    ok = {v: True for v in vecs}
    uses = {v: 0 for v in vecs}
    together = []  # groups of vectors that must all be chosen or none

    def mark(buf, fine=False):
        if buf in ok:
            uses[buf] += 1
            if not fine:
                ok[buf] = False

    for call, op, region in _operands(func, set(ok)):
        buf, fine = region.buffer, full(region)
        if call.name == "copy":
            other = call.operands["dst" if op.name == "src" else "src"]
            fine = fine and full(call.operands["dst"]) and full(call.operands["src"]) and (
                other.buffer in ok and own(other.buffer) == own(buf) or
                _row_buffer(other.buffer, buf))
            if other.buffer in ok:
                together.append({buf, other.buffer})
        elif call.name == "reduce" or call.name in REDUCE_OPS:
            src = call.operands["src"]
            fine = fine and op.name == "dst" and src.buffer in strip and \
                own(src.buffer) == own(buf) and int(call.attrs["dim"]) in (1, -1) and \
                int(src.buffer.shape[0].value) == int(buf.shape[0].value)
        else:
            fine = fine and call.name == "fill" and op.name == "dst"
        mark(buf, fine)
    for loops, _ in parallel_nests(func.body):
        nest = loops[0]
        seen, accs, rowed, others = [], [], [], []

        def visit(node, loops=loops, seen=seen, accs=accs, rowed=rowed, others=others):
            buf = accessed(node)
            index = list(node.indices)
            at_row = len(index) == 1 and isinstance(index[0], tirx.Var) and \
                index[0].same_as(loops[0].loop_var) and _covers(loops[0], buf)
            if buf in ok:
                seen.append((buf, at_row and (len(loops) == 1 or
                                              isinstance(node, tvm.ir.TensorLoad))))
                if isinstance(node, tirx.BufferStore):
                    rowed.append((buf, None))  # a row vector stored
            elif buf in strip:
                accs.append(buf)
            elif len(loops) == 1 and at_row and layout.memory(buf) in ("shared", "shared.dyn"):
                rowed.append((buf, isinstance(node, tirx.BufferStore)))
            elif str(buf.scope()) not in ("local", "local.var"):
                others.append(buf)

        tvm_ffi.structural_walk(nest, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
        if not seen:
            continue
        written = {b for b, store in rowed if store}
        updated = any(b in written for b, store in rowed if store is False)
        sizes = {own(b) for b, _ in seen} | {own(a) for a in accs}
        shape_ok = len(sizes) == 1 and (
            len(loops) == 1 and not accs and not others and
            not (updated and any(store is None for _, store in rowed)) or
            len(loops) == 2 and len(accs) > 0 and all(
                int(a.shape[0].value) == int(loops[0].extent.value) for a in accs))
        for buf, fine in seen:
            mark(buf, fine and shape_ok)
        if len(loops) == 1:
            together.append({buf for buf, _ in seen})
    counted = access_counts(func, vecs)
    chosen_vecs = {v for v in vecs if ok[v] and counted[v] <= uses[v]}
    changed = True
    while changed:  # a vector goes only with the vectors it meets
        changed = False
        for group in together:
            if not group <= chosen_vecs and group & chosen_vecs:
                chosen_vecs -= group
                changed = True
    return chosen_vecs


def _row_buffer(buf, vec) -> bool:
    """Whether ``buf`` is a shared row buffer of ``vec``'s length and dtype."""
    return layout.memory(buf) in ("shared", "shared.dyn") and len(buf.shape) == 1 and \
        str(buf.dtype) == str(vec.dtype) and const(buf.shape[0]) == const(vec.shape[0])


def role_threads(func, block: int):
    """A function from a buffer to the threads that use it: the block's in a kernel without
    ``T.ws`` roles; else the size of the one role whose body holds every access of it, None
    when it is also accessed outside the roles or in roles of different sizes (a register
    layout is laid out over one role's threads: ``transforms.memory.role_registers``)."""
    roles = role_loops(func.body)
    if not roles:
        return lambda buf: block
    inside: dict = {}
    for loop in roles:
        for buf in buffers_in(loop.body):
            inside.setdefault(buf, set()).add(int(loop.extent.value))
    everywhere = _counts(func.body, operands=True)
    in_roles: dict = {}
    for loop in roles:
        for buf, n in _counts(loop.body, operands=True).items():
            in_roles[buf] = in_roles.get(buf, 0) + n

    def threads_of(buf):
        sizes = inside.get(buf)
        if sizes is None or len(sizes) != 1 or everywhere.get(buf) != in_roles.get(buf):
            return None
        return next(iter(sizes))

    return threads_of


def _covers(loop, buf) -> bool:
    return isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0 and \
        isinstance(loop.extent, tirx.IntImm) and \
        int(loop.extent.value) == int(buf.shape[0].value)


def threads_running(func, call, block: int) -> int:
    """Threads that run ``call``: its T.ws role's, else the block's."""
    for loop in role_loops(func.body):
        if any(c.stmt.same_as(call.stmt) for c in tile_ops_in(loop.body)):
            return int(loop.extent.value)
    return block


def wgmma_accumulators(func, arch, block: int) -> list:
    """Register accumulators that only gemms (or T.gemm_sp) fitting wgmma write (as C)."""
    fits: dict = {}
    for call in tile_ops_in(func):
        if call.name not in ("gemm", "gemm_sp"):
            continue
        for name in ("A", "B", "C"):
            buf = call.operands[name].buffer
            if layout.is_accumulator(buf):
                ok = name == "C" and gemm_fit.wgmma_shape_misfit(
                    call, arch, threads_running(func, call, block)) is None
                fits[buf] = fits.get(buf, True) and ok
    return [buf for buf, ok in fits.items() if ok]


def register_a(func, arch, block: int) -> list:
    """2-D float16/bfloat16 fragments whose only writes are whole ``T.copy``s from a wgmma
    accumulator of their shape or from a shared tile or global tensor of their dtype
    (``TILE_SOURCES``: each thread loads the elements its registers hold; FlashMLA's
    ``T.copy(Q_pe_shared, Q_pe_local_0)``) or stores of ``T.Parallel`` nests at their own
    element (:func:`_nest_writes`: W4A16's dequantised weights), whose reads are as the whole
    A operand of gemms that fit the register-A wgmma (C a wgmma accumulator with as many rows
    per warpgroup) and at most whole copies into a shared tile (FlashMLA's
    ``T.copy(acc_s_1_cast, SP1_shared)``), and which nothing else touches. Threads are
    counted per ``T.ws`` role: a role's gemms and copies run on its threads."""
    frags = set(_fragments(func, lambda b: str(b.dtype) in layout.REGISTER_A_DTYPES and
                           len(b.shape) == 2))
    if not frags:
        return []
    nested = _nest_writes(func, frags, role_threads(func, block))
    regions, ok, written, read = {f: 0 for f in frags}, {f: True for f in frags}, set(), set()
    for call, op, region in _operands(func, frags):
        buf, threads = region.buffer, threads_running(func, call, block)
        regions[buf] += 1
        if call.name == "copy" and op.name == "dst":
            good = _converts_accumulator(call, threads) or _loads_tile(call)
            written.add(buf)
        elif call.name == "copy" and op.name == "src":
            good = _stores_tile(call)
        elif call.name == "gemm" and op.name == "A":
            c = call.operands["C"].buffer
            good = full(region) and layout.of(c) == layout.Accumulator("wgmma") and \
                gemm_fit.wgmma_shape_misfit(call, arch, threads, a_in_registers=True) is None
            read.add(buf)
        else:
            good = False
        ok[buf] = ok[buf] and good
    uses = access_counts(func, frags)
    return [f for f in frags if ok[f] and f in read and (f in written or nested[f]) and
            uses[f] == regions[f] + nested[f]]


def _nest_writes(func, frags, threads_of) -> dict:
    """Per fragment, how many stores of ``T.Parallel`` nests write it as a register A operand
    can be written: each thread computes the elements its registers hold in the wgmma layout
    (``transforms.distribute`` runs such a nest over the registers, the iteration ``(i, j)``
    of register ``r`` at the accumulator layout's element of ``r``). So the nest has two loops
    over the fragment's whole shape and stores it at the iteration's own element
    (:func:`spread_index`), nothing in it reads the fragment (another iteration's element
    may be another thread's register) or touches another register layout, and the fragment's
    rows are 64 per warpgroup of its threads (``threads_of``: the block's, or its ``T.ws``
    role's). Reads of shared, global or thread-local memory inside the nest are free. A
    fragment accessed any other way in a nest counts zero: it stays in shared memory."""
    good = {f: 0 for f in frags}
    bad = set()
    for loops, inner in parallel_nests(func.body):
        touched = [b for b in buffers_in(inner) if b in good]
        if not touched:
            continue
        registers = [b for b in buffers_in(inner) if layout.of(b) is not None and
                     not isinstance(layout.of(b), layout.Swizzled)]
        read = set(loads_in(inner))

        def visit(st, loops=loops, registers=registers, read=read):
            buf = st.buffer
            if buf not in good:
                return
            if len(loops) == 2 and not registers and buf not in read and \
                    spread_index(list(st.indices), loops, buf.shape):
                good[buf] += 1
            else:
                bad.add(buf)

        tvm_ffi.structural_walk(loops[0], (tirx.BufferStore, visit))
        bad.update(b for b in touched if b in read)
    for f in frags:
        threads = threads_of(f)
        if f in bad or threads is None or threads % WARPGROUP or \
                const(f.shape[0]) != 64 * (threads // WARPGROUP):
            good[f] = 0
    return good


def _converts_accumulator(call, threads: int) -> bool:
    """A whole copy of a float32 wgmma accumulator into a fragment of its shape, the
    accumulator's rows 64 per warpgroup of the threads running the copy."""
    src, dst = call.operands["src"], call.operands["dst"]
    shape = [const(e) for e in src.buffer.shape]
    return full(src) and full(dst) and layout.of(src.buffer) == layout.Accumulator("wgmma") \
        and str(src.buffer.dtype) == "float32" \
        and shape == [const(e) for e in dst.buffer.shape] and threads % WARPGROUP == 0 \
        and shape[0] == 64 * (threads // WARPGROUP)


def _loads_tile(call) -> bool:
    """A whole copy into a fragment from a whole shared tile or global tensor region of its
    dtype and extents."""
    src, dst = call.operands["src"], call.operands["dst"]
    extents = [const(e) for e in src.extents if const(e) != 1]
    return full(dst) and layout.memory(src.buffer) in TILE_SOURCES and \
        str(src.buffer.dtype) == str(dst.buffer.dtype) and None not in extents and \
        extents == [const(e) for e in dst.buffer.shape]


def _stores_tile(call) -> bool:
    """A whole copy of a fragment into a shared tile region of its extents (each thread
    stores the elements its registers hold)."""
    src, dst = call.operands["src"], call.operands["dst"]
    extents = [const(e) for e in dst.extents if const(e) != 1]
    return full(src) and layout.memory(dst.buffer) in ("shared", "shared.dyn") and \
        None not in extents \
        and extents == [const(e) for e in src.buffer.shape]


def runs_whole(body) -> bool:
    """Whether a ``T.Parallel`` nest with innermost ``body`` runs whole in every thread: its
    only effects are stores to thread-local storage that is not a reducer (``local``,
    ``local.var``), so every thread computes the values alike."""
    written = stores(body)
    return bool(written) and all(str(b.scope()) in ("local", "local.var") for b in written)


def spread_index(indices, loops, shape) -> bool:
    """Whether ``indices`` of a fragment of ``shape`` inside a ``T.Parallel`` nest over
    ``loops`` name the iteration's own element in row-major order (the element a spread
    fragment keeps in the registers of the thread that runs the iteration): every loop starts
    at zero and has a constant extent, the loops of extent other than one match the
    fragment's dimensions of extent other than one (in order, extent for extent), each index
    of such a dimension is its loop's variable and every other index is zero."""
    sizes = [const(e) for e in shape]
    if len(indices) != len(sizes) or None in sizes or \
            any(const(lp.min) != 0 or const(lp.extent) is None for lp in loops):
        return False
    big = [lp for lp in loops if const(lp.extent) != 1]
    dims = [d for d, e in enumerate(sizes) if e != 1]
    if [sizes[d] for d in dims] != [const(lp.extent) for lp in big]:
        return False
    zero = {lp.loop_var: tirx.const(0, lp.loop_var.ty) for lp in loops if const(lp.extent) == 1}
    analyzer = tvm.sym.Analyzer()
    for d, index in enumerate(indices):
        target = big[dims.index(d)].loop_var if d in dims else tirx.const(0, index.ty)
        if not analyzer.can_prove_equal(substitute(index, zero), target):
            return False
    return True


def _spread_operand(call, op, region, threads: int, registers) -> bool:
    """Whether a tile-op operand of a spread candidate keeps every element with its owner: a
    whole ``T.fill`` or ``T.copy`` (the other side a tile every thread reaches, of the same
    extents; both become ``T.Parallel`` nests over the fragment) or the whole source of a
    reduction along its last dimension (:func:`~tilewright_cuda.layout.spread_rows`) into a
    buffer not in registers."""
    if not full(region):
        return False
    if call.name == "fill":
        return op.name == "dst"
    if call.name == "copy":
        other = call.operands["dst" if op.name == "src" else "src"]
        extents = [const(e) for e in region.extents if const(e) != 1]
        return other.buffer not in registers and \
            layout.memory(other.buffer) in SPREAD_PEERS and \
            [const(e) for e in other.extents if const(e) != 1] == extents and None not in extents
    if call.name in REDUCE_OPS:
        dst = call.operands["dst"].buffer
        return op.name == "src" and dst not in registers and \
            layout.spread_rows(region.buffer.shape, int(call.attrs["dim"]), threads) is not None
    return False


def _words(buf, threads: int) -> int:
    """32-bit registers per thread of a fragment in registers (16-bit elements take one)."""
    bits = tvm.runtime.DataType(str(buf.dtype)).bits
    if layout.is_rows(buf):
        count = layout.row_registers(buf, threads)
    elif layout.is_accumulator(buf):
        count = layout.registers(buf, threads)
    else:
        count = layout.spread_registers(buf.shape, threads)
    return count * max(1, bits // 32)


def spread(func, threads: int, chosen: dict) -> list:
    """Fragments spread over the threads in registers (layout.Spread): of a dtype of
    ``SPREAD_DTYPES``, a constant shape whose elements split evenly over the ``threads``, not
    already given a layout (``chosen``: buffer -> layout), and every access by the thread
    that owns the element: indexed by a ``T.Parallel`` nest at the iteration's own element
    (:func:`spread_index`) in a nest that neither runs whole in every thread
    (:func:`runs_whole`) nor touches another register layout, or an operand
    :func:`_spread_operand` accepts. Any other access (an element another thread's iteration
    wrote, a serial loop, a gemm, an element's address) keeps the fragment in shared memory.
    Taken in allocation order while the registers of the kernel's fragments in registers stay
    within ``REGISTER_BUDGET``; the rest stay in shared memory. None in kernels with ``T.ws``
    roles."""
    if role_loops(func.body):
        return []
    registers = {b for b, kind in chosen.items() if not isinstance(kind, layout.Swizzled)}
    frags = _fragments(func, lambda b: b not in chosen and str(b.dtype) in SPREAD_DTYPES and
                       layout.spread_registers(b.shape, threads) is not None)
    if not frags:
        return []
    ok, regions, good = {f: True for f in frags}, {f: 0 for f in frags}, {f: 0 for f in frags}
    for call, op, region in _operands(func, set(frags)):
        regions[region.buffer] += 1
        ok[region.buffer] = ok[region.buffer] and _spread_operand(call, op, region, threads,
                                                                  registers)
    for loops, inner in parallel_nests(func.body):
        apart = not runs_whole(inner) and not any(b in registers for b in buffers_in(inner))

        def visit(node, loops=loops, apart=apart):
            buf = accessed(node)
            if buf in ok:
                if apart and spread_index(list(node.indices), loops, buf.shape):
                    good[buf] += 1
                else:
                    ok[buf] = False

        tvm_ffi.structural_walk(loops[0], [(tvm.ir.TensorLoad, visit),
                                           (tirx.BufferStore, visit)])
    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, lambda c: ok.update(
        {c.args[0].source: False}) if intrinsics.is_address_of(c) and
        isinstance(c.args[0], tvm.ir.TensorLoad) and c.args[0].source in ok else None))
    counts = access_counts(func, frags)
    used = sum(_words(layout.attach(b, kind), threads) for b, kind in chosen.items()
               if b in registers)
    taken = []
    for f in frags:
        words = _words(f, threads)
        if ok[f] and counts[f] == regions[f] + good[f] and used + words <= REGISTER_BUDGET:
            taken.append(f)
            used += words
    return taken
