"""Software pipelining of ``T.Pipelined(n, num_stages=S)`` loops (the ``pipeline`` phase, after
tile-op lowering).

The statements of the loop body are split into *producers*, global -> shared copies whose
loads read only global tensors, and *consumers*, everything else. Each shared tile a
producer writes gets ``S`` versions (``[S, *shape]``, version ``v`` of iteration ``i`` is
``i % S``), and the loop becomes::

    P(0); commit; ...; P(S-2); commit                      # prologue: S-1 stages in flight
    for i in range(n):
        cp.async.wait_group(S-2)                          # stage i has landed (this thread)
        __syncthreads()                                   # ... for every thread; i-1 read
        if i + S-1 < n: P(i + S-1)                        # refill the version read at i-1
        commit                                            # (empty groups keep the count)
        C(i)
    cp.async.wait_group(0)                                # drain

The barrier after the wait is placed here, unconditionally (the refill is conditional, so a
barrier ``insert_sync`` put before it could be skipped). ``insert_sync`` adds only what the
consumers need among themselves: it tells the versions of a tile apart from their index
(``floormod(i + c, S)``; the tiles are listed in the function attribute
:data:`VERSIONS_ATTR`), so the refill of one version and the reads of another need no
barrier. A loop none of whose copies is a ``cp.async`` (before sm_80, unaligned or dynamic
tiles) runs in order: with copies through registers nothing would overlap.

On sm_90+ the copy rule offers a TMA form of each producer it can (tma.py); when every
producer of a loop has one, the loop takes the TMA forms of tma_pipeline.py instead: stages
complete on mbarriers, issued in order by one thread of the block or, on sm_90a, by a producer
warpgroup added to the block (warp specialisation). Choices left anywhere else take
``cp.async``.

``stage=[...]`` (one entry per statement of the body) selects the producers explicitly
(stage 0; any other stage is a consumer) and ``order=[...]`` gives the order the body's
statements are issued in the steady state. A loop whose copies cannot be versioned (the tile
is also used outside the loop, or written by a consumer) runs in order, unpipelined.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import prim_func_pass
from tvm import tirx

from . import tma, wgmma
from .lowering import SHARED_SCOPES, cp_async_commit, cp_async_wait, is_sync, sync
from .passes import _is_address_of, find_thread
from .tma import STAGES_KEY
from .tma import extern_name as _extern_name
from .tma import flat as _flat
from .tma import seq as _seq
from .tma_pipeline import MULTICAST_KEY, WS_KEY, TmaPlan

VERSIONS_ATTR = "tw.cuda.smem_versions"
_COPY_CALLS = ("tw_cp_async16", "tw_copy16")
_GROUP_CALLS = ("tw_cp_async_commit", "tw_cp_async_wait")


def _is_group_call(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and \
        (_extern_name(stmt.value) or "").startswith(_GROUP_CALLS)


def _strip_groups(stmt):
    """A producer without the commit/wait its copy rule added (the pipeline places them)."""
    if isinstance(stmt, tirx.SeqStmt):
        return _seq([s for s in stmt.seq if not _is_group_call(s)])
    return stmt


def _producer_writes(stmt) -> list | None:
    """The shared buffers ``stmt`` fills from global memory, or None when it is not such a
    copy (it reads anything but global tensors, writes anything but shared tiles, or calls
    anything but the 16-byte copies)."""
    written, bad, copy_dst = [], [], []

    def call(c):
        name = _extern_name(c)
        if name is None:
            if isinstance(c.op, tvm.ir.Op) and c.op.name not in (
                    "tirx.address_of", "tirx.if_then_else", "prim.if_then_else", "tirx.likely"):
                bad.append(c)
            return
        if name.startswith(_COPY_CALLS):
            dst = c.args[1].args[0]
            copy_dst.append(dst)
            written.append(dst.source)
        elif not name.startswith(_GROUP_CALLS):
            bad.append(c)

    def load(e):
        if str(e.source.scope()) != "global" and not any(e.same_as(d) for d in copy_dst):
            bad.append(e)

    def store(s):
        written.append(s.buffer)
        if str(s.buffer.scope()) not in SHARED_SCOPES:
            bad.append(s)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, call))
    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    if bad or not written or any(str(b.scope()) not in SHARED_SCOPES for b in written):
        return None
    unique = []
    for b in written:
        if not any(b.same_as(u) for u in unique):
            unique.append(b)
    return unique


def _touches(stmt, buffers) -> bool:
    found = []

    def visit(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if any(buf.same_as(b) for b in buffers):
            found.append(buf)

    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
    return bool(found)


def _writes(stmt, buffers) -> bool:
    """Whether ``stmt`` may write one of ``buffers``: a store, or an element address passed
    to a call (a cp.async or copy destination, an atomic, a gemm's accumulator, the packing
    of wgmma A registers), a gemm's A and B operands aside."""
    found = []

    def store(s):
        if any(s.buffer.same_as(b) for b in buffers):
            found.append(s)

    def call(c):
        name = _extern_name(c)
        if name is None:
            return
        args = c.args[3:] if name.startswith("tw_gemm") else c.args[1:]  # A, B are read
        for a in args:
            if _is_address_of(a) and isinstance(a.args[0], tvm.ir.TensorLoad) and \
                    any(a.args[0].source.same_as(b) for b in buffers):
                found.append(a)

    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, store), (tvm.ir.Call, call)])
    return bool(found)


class _Versioned:
    """Rewrites accesses of the versioned tiles: ``X[idx]`` -> ``Xv[version, idx]``."""

    def __init__(self, buffers: list, stages: int):
        self.old = buffers
        self.new = [tirx.decl_buffer((stages, *b.shape), b.dtype, b.name, scope=str(b.scope()),
                                     data_alignment=int(b.data_alignment)) for b in buffers]

    def lookup(self, buf):
        for old, new in zip(self.old, self.new):
            if buf.same_as(old):
                return new
        return None

    def rewrite(self, stmt, loop_var, value, version):
        def load(e):
            new = self.lookup(e.source)
            return e if new is None else tirx.BufferLoad(new, [version, *e.indices])

        def store(s):
            new = self.lookup(s.buffer)
            return s if new is None else tirx.BufferStore(new, s.value, [version, *s.indices])

        stmt = tvm_ffi.structural_map(stmt, (tirx.Var, lambda v: value if v.same_as(loop_var)
                                             else v))
        return tvm_ffi.structural_map(stmt, [(tvm.ir.TensorLoad, load),
                                             (tirx.BufferStore, store)])


def _plan(loop, stages: int):
    """(statements, indices of the producers) of a pipelined loop's body."""
    body = loop.body
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    # the copy rules' own commit/wait (flattened into the body) give way to the pipeline's
    stmts = [s for s in stmts if not _is_group_call(s)]
    stage = loop.annotations.get("tw.stage")
    if stage is None:
        return stmts, [i for i, s in enumerate(stmts)
                       if _producer_writes(tma.resolve(s)) is not None]
    stage = [int(x) for x in stage]
    if len(stage) != len(stmts):
        raise KernelError(f"T.Pipelined stage= has {len(stage)} entries but the loop body has "
                          f"{len(stmts)} statements", span_location(loop.span))
    producers = [i for i, x in enumerate(stage) if x == 0]
    for i in producers:
        if _producer_writes(tma.resolve(stmts[i])) is None:
            raise KernelError(f"T.Pipelined stage 0 statement #{i} is not a copy from global "
                              "into shared memory; the CUDA backend prefetches only such "
                              "copies", span_location(loop.span))
    return stmts, producers


def _issue_order(loop, count: int) -> list[int]:
    order = loop.annotations.get("tw.order")
    if order is None:
        return list(range(count))
    order = [int(x) for x in order]
    if sorted(order) != list(range(count)):
        raise KernelError(f"T.Pipelined order= must be a permutation of 0..{count - 1}, got "
                          f"{order}", span_location(loop.span))
    return sorted(range(count), key=lambda i: order[i])


def _pipeline_loop(loop, func_body, analyzer, tx):
    """The pipelined replacement of ``loop`` and its versioned buffers, or None to keep it."""
    stages = int(loop.annotations[STAGES_KEY])
    stmts, producers = _plan(loop, stages)
    if not producers:
        return None
    use_tma = all(tma.is_choice(stmts[p]) for p in producers)
    stmts = [s.then_case if use_tma and i in producers else tma.resolve(s)
             for i, s in enumerate(stmts)]
    tiles = []
    for i in producers:
        for b in (tma.loaded_tiles if use_tma else _producer_writes)(stmts[i]):
            if not any(b.same_as(t) for t in tiles):
                tiles.append(b)
    consumers = [s for i, s in enumerate(stmts) if i not in producers]
    if any(_writes(s, tiles) for s in consumers):
        return None
    outside = tvm_ffi.structural_map(func_body, (tirx.For, lambda s: tirx.Evaluate(0)
                                                 if s.same_as(loop) else s))
    if _touches(outside, tiles):
        return None
    if not use_tma and not any("tw_cp_async16" in str(stmts[p]) for p in producers):
        return None  # nothing would overlap: the copies go through registers anyway
    versioned = _Versioned(tiles, stages)
    overlap = stages >= 3 and _wgmma_can_overlap(consumers, tiles)
    if overlap:  # one wgmma group stays in flight: its version is refilled one step later
        stmts = [s if i_ in producers else _keep_one_wgmma_group(s)
                 for i_, s in enumerate(stmts)]
    if use_tma:
        kept = _without_wgmma_barriers(stmts, producers, versioned.old)
        return TmaPlan(loop, stmts, producers, versioned, overlap, kept,
                       _issue_order(loop, len(stmts)), analyzer, tx,
                       _nested(func_body, loop)), versioned
    n = loop.extent
    i = tirx.Var(loop.loop_var.name, loop.loop_var.ty)
    ahead_by = stages - 2 if overlap else stages - 1

    def produce(at, version):
        return [versioned.rewrite(_strip_groups(stmts[p]), loop.loop_var, loop.min + at, version)
                for p in producers]

    prologue = []
    for s in range(ahead_by):
        copies = _seq(produce(tirx.const(s, "int32"), tirx.const(s, "int32")))
        in_range = tirx.const(s, "int32") < n
        prologue.append(copies if analyzer.can_prove(in_range) else
                        tirx.IfThenElse(in_range, copies, None))
        prologue.append(cp_async_commit())
    ahead = i + ahead_by
    refill = tirx.IfThenElse(ahead < n, _seq(produce(ahead, tirx.floormod(
        ahead, stages))), None)
    # the one barrier of an iteration: stage i visible to all, iteration i-1's reads done
    # (with wgmma overlap: iteration i-2's wgmma groups retired in every warpgroup)
    steady = [cp_async_wait(ahead_by - 1), sync()]
    first = True
    for index in _issue_order(loop, len(stmts)):
        if index in producers:
            if first:  # all refills issue together, where the first producer stands
                steady.append(refill)
                steady.append(cp_async_commit())
                first = False
        else:
            steady.append(versioned.rewrite(stmts[index], loop.loop_var, loop.min + i,
                                            tirx.floormod(i, stages)))
    steady = _one_barrier_for_wgmma(steady)
    annotations = {k: v for k, v in loop.annotations.items()
                   if str(k) not in (STAGES_KEY, "tw.order", "tw.stage")}
    main = tirx.For(i, 0, n, loop.kind, tirx.SeqStmt(steady), annotations=annotations,
                    span=loop.span)
    drain = [wgmma.wait(0)] if overlap else []
    return tirx.SeqStmt([*prologue, main, *drain, cp_async_wait(0)]), versioned


def _without_wgmma_barriers(stmts: list, producers: list, tma_tiles: list) -> list:
    """The loop body's statements with None for each ``fence.proxy.async; __syncthreads``
    pair right before a wgmma whose operands are TMA tiles (made visible by their mbarrier)
    or tiles no consumer writes (fenced before the loop, ordered by the iteration's
    barrier)."""
    consumers = [s for k, s in enumerate(stmts) if k not in producers]
    kept = list(stmts)
    for k, s in enumerate(stmts):
        if k < 2 or k in producers or not isinstance(s, tirx.Evaluate) or \
                not _wgmma_calls(s) or not is_sync(stmts[k - 1]) or \
                not _is_extern(stmts[k - 2], "tw_fence_proxy_async"):
            continue
        operands = [buf for c in _wgmma_calls(s) for arg in c.args[1:3]
                    for buf in _loads_in(arg) if str(buf.scope()) in SHARED_SCOPES]
        if all(any(buf.same_as(t) for t in tma_tiles) or
               not any(_writes(c, [buf]) for c in consumers) for buf in operands):
            kept[k - 1] = kept[k - 2] = None
    return kept


def _nested(func_body, loop) -> bool:
    """Whether ``loop`` runs inside another loop of the block's program."""
    outer = []
    tvm_ffi.structural_walk(func_body, (tirx.For, lambda s: outer.append(s) if
                                        s.kind != tirx.ForKind.THREAD_BINDING and
                                        not s.same_as(loop) and _contains(s.body, loop)
                                        else None))
    return bool(outer)


def _contains(node, target) -> bool:
    found = []
    tvm_ffi.structural_walk(node, (tirx.For, lambda s: found.append(s) if s.same_as(target)
                                   else None))
    return bool(found)


def _is_extern(stmt, name: str) -> bool:
    return isinstance(stmt, tirx.Evaluate) and _extern_name(stmt.value) == name


def _one_barrier_for_wgmma(steady: list) -> list:
    """``wait; sync; refill; commit; fence.proxy.async; sync; wgmma ...`` (a wgmma gemm
    first among the consumers) -> ``wait; fence.proxy.async; sync; refill; commit; wgmma``:
    each thread's landed copies of this stage are fenced to the async proxy before the
    iteration's barrier, which then serves the wgmma too (the refill writes another
    version). One block-wide barrier per k-tile instead of two."""
    flat = _flat(steady)
    if len(flat) < 6 or not is_sync(flat[1]) or not _is_extern(flat[3], "tw_cp_async_commit"):
        return steady
    fence, barrier, rest = flat[4], flat[5], flat[6:]
    if not (_is_extern(fence, "tw_fence_proxy_async") and is_sync(barrier) and rest and
            _wgmma_calls(rest[0])):
        return steady
    return [flat[0], fence, flat[1], flat[2], flat[3], *rest]


def _wgmma_calls(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if (
        _extern_name(c) or "").startswith("tw_gemm_wgmma") else None))
    return found


def _loads_in(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda e: found.append(e.source)))
    return found


def _wgmma_can_overlap(consumers: list, tiles: list) -> bool:
    """Whether the loop's wgmma gemms may leave their group in flight into the next
    iteration: each reads only the pipelined tiles or shared tiles nothing in the loop
    writes, and its accumulator is touched by nothing else in the loop (not cleared, not
    read element-wise as FlashAttention's scores are)."""
    calls = [c for s in consumers for c in _wgmma_calls(s)]
    if not calls:
        return False
    without = [tvm_ffi.structural_map(s, (tirx.Evaluate, lambda e: tirx.Evaluate(0) if
                                          _wgmma_calls(e) else e)) for s in consumers]
    for call in calls:
        a, b, acc = (_loads_in(arg) for arg in call.args[1:4])
        for buf in a + b:
            if not any(buf.same_as(t) for t in tiles) and any(_writes(s, [buf])
                                                            for s in consumers):
                return False
        if any(_touches(s, acc) for s in without):
            return False
    return True


def _keep_one_wgmma_group(stmt):
    """A consumer whose gemms wait for all but their own wgmma group (``wait_group 1``)."""
    def visit(e):
        name = _extern_name(e.value) or ""
        return wgmma.wait(1) if name == f"{wgmma.WAIT}0>" else e

    return tvm_ffi.structural_map(stmt, (tirx.Evaluate, visit))


BLOCKS_KEY = "cuda.blocks_per_sm"
BLOCKS_ATTR = "tw.cuda.blocks_per_sm"


def blocks_per_sm_config(configs) -> int:
    """The pass config ``cuda.blocks_per_sm``: blocks each SM should hold at once (the second
    number of ``__launch_bounds__``; registers and shared memory are budgeted for it)."""
    value = (configs or {}).get(BLOCKS_KEY, 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
        raise KernelError(f"pass config {BLOCKS_KEY} must be an integer from 1 to 8, got "
                          f"{value!r}")
    return value


def pipeline(arch=None, configs=None):
    """Software-pipelines every ``T.Pipelined`` loop with ``num_stages >= 2``; on sm_90a a
    kernel's only such loop, fed by TMA, gets a producer warpgroup (unless the pass config
    ``cuda.disable_warp_specialized`` says not to)."""
    specialise = arch is not None and arch.sm >= 90 and arch.name.endswith("a") and \
        not (configs or {}).get(WS_KEY)

    blocks = blocks_per_sm_config(configs)

    def run(func):
        if blocks > 1:
            func = func.with_attr(BLOCKS_ATTR, blocks)
        loops = []
        tvm_ffi.structural_walk(func.body, (tirx.For, lambda s: loops.append(s) if int(
            s.annotations.get(STAGES_KEY, 0)) >= 2 else None))
        if not loops:
            return func
        body, versions = func.body, {}
        analyzer = tvm.sym.Analyzer()
        tx = find_thread(func).loop_var
        for loop in loops:
            done = _pipeline_loop(loop, body, analyzer, tx)
            if done is None:
                continue
            new_loop, versioned = done
            stages = int(loop.annotations[STAGES_KEY])
            if isinstance(new_loop, TmaPlan):
                split = new_loop.specialise(body, bool((configs or {}).get(MULTICAST_KEY)),
                                            blocks) if specialise and len(loops) == 1 else None
                if split is not None:
                    body, new_loop = split, loop  # the loop is gone: nothing to swap
                else:
                    new_loop = new_loop.in_order()

            def swap(node, loop=loop, new_loop=new_loop):
                return new_loop if node.same_as(loop) else node

            def alloc(a, versioned=versioned):
                new = versioned.lookup(a.buffer)
                return a if new is None else tirx.AllocBuffer(new)

            body = tvm_ffi.structural_map(body, [(tirx.For, swap), (tirx.AllocBuffer, alloc)])
            versions.update({b.name: stages for b in versioned.old})
        func = func.with_body(tma.resolve(body))  # copies of loops left alone: cp.async
        return func.with_attr(VERSIONS_ATTR, versions) if versions else func

    return prim_func_pass("CUDASoftwarePipeline", run)
