"""Software pipelining of ``T.Pipelined(n, num_stages=S)`` loops (the ``pipeline`` phase, after
tile-op lowering).

The statements of the loop body are split into *producers*, global -> shared copies whose
loads read only global tensors and that no branch of the body runs under (``plan.branched``),
and *consumers*, everything else. Each shared tile a
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
``keys.VERSIONS``), so the refill of one version and the reads of another need no
barrier. Once the analyses are done, the versions and barrier phases of every loop made here
become counters the loop carries (counters.py, in ``place_memory``). A loop none of whose
copies is a ``cp.async`` (before sm_80, unaligned or dynamic tiles) runs in order: with copies
through registers nothing would overlap.

With three stages or more, a loop whose wgmma gemms read only its versioned tiles (and
nothing else in it touches their accumulators) leaves one wgmma group in flight into the next
iteration (``wait_group 1``; the refill then runs one iteration less ahead, so that it never
writes the version the group in flight reads: ``plan.wgmma_can_overlap``). A loop whose
hand-issued groups (``T.wgmma_gemm``, ``T.wait_wgmma(n)``) are left in flight at the end of
its body (``plan.carries_wgmma_groups``) is refilled one iteration less ahead the same way,
its waits as written; with fewer than three stages it is refused. A loop whose one
wgmma gemm is a wgmma.sp, whose metadata registers are the helper's own, hands it two
register sets of the loop's, one for even iterations and one for odd ones, kept live after
every wait (``plan.HeldRegisters``), in the cp.async and the TMA forms alike.

On sm_90+ the copy rule offers a TMA form of each producer it can (tma.py); when every
producer of a loop has one, the loop takes the TMA forms of tma_pipeline.py instead: stages
complete on mbarriers, issued in order by one thread of the block or, on sm_90a, by a producer
warpgroup added to the block (warp specialisation). In order, a loop in a persistent kernel's
tile loop (``T.Persistent``) issues the next tile's first loads before the tile's epilogue (with
``cuda.tma_multicast`` in clusters of two blocks that walk their tiles together).
Choices left anywhere else take ``cp.async``.

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

from ... import intrinsics, keys
from ...analysis.accesses import loaded_tiles, only_cp_async, producer_writes
from ...analysis.ir import block_loops, find_thread, nested, seq, touches, writes
from .plan import (
    HeldRegisters,
    Versioned,
    carries_wgmma_groups,
    is_choice,
    issue_order,
    keep_one_wgmma_group,
    one_barrier_for_wgmma,
    owned_registers,
    resolve,
    statements,
    strip_groups,
    wgmma_can_overlap,
    without_wgmma_barriers,
)
from .tma import TmaPlan


def _issues_cp_async(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if
                                   intrinsics.extern_name(c) == "tw_cp_async16" else None))
    return bool(found)


def _allocations_before_pipelined_loops(body):
    """Tiles allocated inside a ``T.Pipelined`` loop's body are allocated in front of the loop,
    as TileLang allocates every tile of a kernel once, in its block: the versions of a
    pipelined tile outlive an iteration (stage ``i + S - 1`` is filled while ``i`` is read),
    and ``stage=[...]`` / ``order=[...]`` count the body's statements without them."""

    def hoist(loop):
        if int(loop.annotations.get(keys.STAGES, 0)) < 2:
            return loop
        allocations = []
        tvm_ffi.structural_walk(loop.body, (tirx.AllocBuffer, allocations.append))
        if not allocations:
            return loop
        kept = tvm_ffi.structural_map(loop.body, (tirx.SeqStmt, lambda q: seq(
            [x for x in q.seq if not isinstance(x, tirx.AllocBuffer)] or [tirx.Evaluate(0)])))
        return tirx.SeqStmt([*allocations, tirx.For(
            loop.loop_var, loop.min, loop.extent, loop.kind, kept, loop.thread_binding,
            annotations=loop.annotations, span=loop.span)])

    return tvm_ffi.structural_map(body, (tirx.For, hoist))


def _pipeline_loop(loop, func_body, analyzer, tx):
    """The pipelined replacement of ``loop`` and its versioned buffers, or None to keep it."""
    stages = int(loop.annotations[keys.STAGES])
    stmts, producers = statements(loop)
    if not producers:
        return None
    use_tma = all(is_choice(stmts[p]) for p in producers)
    stmts = [s.then_case if use_tma and i in producers else resolve(s)
             for i, s in enumerate(stmts)]
    tiles = []
    for i in producers:
        for b in (loaded_tiles if use_tma else producer_writes)(stmts[i]):
            if not any(b.same_as(t) for t in tiles):
                tiles.append(b)
    consumers = [s for i, s in enumerate(stmts) if i not in producers]
    if any(writes(s, tiles) for s in consumers):
        return None
    outside = tvm_ffi.structural_map(func_body, (tirx.For, lambda s: tirx.Evaluate(0)
                                                 if s.same_as(loop) else s))
    if touches(outside, tiles):
        return None
    if not use_tma and not any(_issues_cp_async(stmts[p]) for p in producers):
        return None  # nothing would overlap: the copies go through registers anyway
    versioned = Versioned(tiles, stages)
    owned = owned_registers(consumers)
    carried = carries_wgmma_groups(consumers)
    if carried and stages < 3:
        raise KernelError(f"this T.Pipelined loop leaves wgmma groups in flight into its next "
                          f"iteration (T.wait_wgmma(n) with n > 0 after its last "
                          f"T.wgmma_gemm), so a stage is refilled one step later: it needs "
                          f"num_stages >= 3 (got {stages})", span_location(loop.span))
    keep_one = stages >= 3 and not carried and wgmma_can_overlap(consumers, tiles)
    # a group in flight into the next iteration, the loop's own (keep_one) or the user's
    # (carried): its version is refilled one step later
    overlap = keep_one or carried
    held = HeldRegisters(owned[0], loop.loop_var) if keep_one and owned else None
    if keep_one:
        stmts = [s if i_ in producers else keep_one_wgmma_group(s)
                 for i_, s in enumerate(stmts)]
    if held is not None:
        stmts = [s if i_ in producers else held.rewrite(s) for i_, s in enumerate(stmts)]
    if use_tma:
        kept = without_wgmma_barriers(stmts, producers, versioned.old)
        return TmaPlan(loop, stmts, producers, versioned, overlap, kept,
                       issue_order(loop, len(stmts)), analyzer, tx,
                       nested(func_body, loop), held), versioned
    n = loop.extent
    i = tirx.Var(loop.loop_var.name, loop.loop_var.ty)
    ahead_by = stages - 2 if overlap else stages - 1

    def produce(at, version):
        return [versioned.rewrite(strip_groups(stmts[p]), loop.loop_var, loop.min + at, version)
                for p in producers]

    prologue = []
    for s in range(ahead_by):
        copies = seq(produce(tirx.const(s, "int32"), tirx.const(s, "int32")))
        in_range = tirx.const(s, "int32") < n
        prologue.append(copies if analyzer.can_prove(in_range) else
                        tirx.IfThenElse(in_range, copies, None))
        prologue.append(intrinsics.cp_async_commit())
    ahead = i + ahead_by
    refill = tirx.IfThenElse(ahead < n, seq(produce(ahead, tirx.floormod(
        ahead, stages))), None)
    # the one barrier of an iteration: stage i visible to all, iteration i-1's reads done
    # (with wgmma overlap: iteration i-2's wgmma groups retired in every warpgroup)
    steady = [intrinsics.cp_async_wait(ahead_by - 1), intrinsics.sync()]
    first = True
    for index in issue_order(loop, len(stmts)):
        if index in producers:
            if first:  # all refills issue together, where the first producer stands
                steady.append(refill)
                steady.append(intrinsics.cp_async_commit())
                first = False
        else:
            steady.append(versioned.rewrite(stmts[index], loop.loop_var, loop.min + i,
                                            tirx.floormod(i, stages)))
    steady = one_barrier_for_wgmma(steady)
    annotations = {k: v for k, v in loop.annotations.items()
                   if str(k) not in keys.PIPELINE_HINTS}
    annotations[keys.COUNTED] = 1  # versions on counters once the analyses are done
    main = tirx.For(i, 0, n, loop.kind, tirx.SeqStmt(steady), annotations=annotations,
                    span=loop.span)
    drain = [intrinsics.wgmma_wait(0)] if overlap else []
    if held is not None:
        prologue = [*held.start(), *prologue]
        drain.append(held.keep())
    return tirx.SeqStmt([*prologue, main, *drain, intrinsics.cp_async_wait(0)]), versioned


def _copies_join_prologue(body, pipelined, versioned):
    """``body`` with the lone cp.async copies right before ``pipelined`` (a cp.async loop's
    replacement, its loop known to run at least once) issued into the prologue's first group:
    their own commit and ``wait_group 0`` dropped (pass config ``cuda.prologue_copies``). The
    first iteration's wait (``wait_group S - 2`` of the prologue's ``S - 1`` groups) then
    covers them and its barrier shows them to every thread, so they are in flight beside the
    first stages instead of one memory latency before them."""

    first = pipelined.seq[0]  # a sequence of statements spliced into its parent's

    def visit(q):
        # the statements before the loop, allocations (no code) left out
        items = [(j, x) for j, x in enumerate(q.seq) if not isinstance(x, tirx.AllocBuffer)]
        at = next((k for k, (_, x) in enumerate(items) if x.same_as(first)), None)
        k, dropped = at, set()
        while k is not None and k >= 3 and \
                intrinsics.extern_name(items[k - 1][1]) == "tw_cp_async_wait<0>" and \
                intrinsics.extern_name(items[k - 2][1]) == "tw_cp_async_commit" and \
                only_cp_async(items[k - 3][1]) and not touches(items[k - 3][1], versioned.old):
            dropped.update((items[k - 1][0], items[k - 2][0]))
            k -= 3
        return q if not dropped else seq([x for j, x in enumerate(q.seq) if j not in dropped])

    return tvm_ffi.structural_map(body, (tirx.SeqStmt, visit))


def _check_turns(options, specialised: bool, span) -> None:
    if options.pingpong and not specialised:
        raise KernelError(f"{keys.WGMMA_PINGPONG} needs a warp-specialised T.Pipelined loop "
                          "(sm_90a, the kernel's only pipelined loop, its copies TMA loads, "
                          f"{keys.DISABLE_WARP_SPECIALIZED} not set); this kernel has none",
                          span_location(span))


def pipeline(options):
    """Software-pipelines every ``T.Pipelined`` loop with ``num_stages >= 2``; on sm_90a a
    kernel's only such loop, fed by TMA, gets a producer warpgroup (unless the pass config
    ``cuda.disable_warp_specialized`` says not to: ``options.warp_specialized``)."""

    def run(func):
        func = func.with_body(_allocations_before_pipelined_loops(func.body))
        loops = []
        tvm_ffi.structural_walk(func.body, (tirx.For, lambda s: loops.append(s) if int(
            s.annotations.get(keys.STAGES, 0)) >= 2 else None))
        if not loops:
            _check_turns(options, False, None)
            return func
        body, versions, specialised, cast = func.body, {}, False, None
        analyzer = tvm.sym.Analyzer()
        tx = find_thread(func).loop_var
        # T.no_set_max_nreg: a producer warpgroup keeps the kernel's register budget
        blocks = block_loops(func)[0]
        registers = not (blocks and keys.NO_SET_MAX_NREG in blocks[0].annotations)
        for loop in loops:
            done = _pipeline_loop(loop, body, analyzer, tx)
            if done is None:
                continue
            new_loop, versioned = done
            stages = int(loop.annotations[keys.STAGES])
            cp_async = not isinstance(new_loop, TmaPlan)  # its stages in cp.async groups
            if isinstance(new_loop, TmaPlan):
                split = new_loop.specialise(body, options.multicast, options.blocks_per_sm,
                                            options.pingpong, registers,
                                            options.producer_registers) \
                    if options.warp_specialized and len(loops) == 1 else None
                multicast = options.multicast and len(loops) == 1
                walked = new_loop.in_order_tiles(body, multicast) if split is None else None
                if split is not None:
                    specialised = True
                    body, new_loop = split, loop  # the loop is gone: nothing to swap
                elif walked is not None:
                    body, new_loop = walked, loop  # ... as in the tile loop rebuilt around it
                else:
                    new_loop, cast = new_loop.in_order(body, multicast)

            def swap(node, loop=loop, new_loop=new_loop):
                return new_loop if node.same_as(loop) else node

            def alloc(a, versioned=versioned):
                new = versioned.lookup(a.buffer)
                return a if new is None else tirx.AllocBuffer(new)

            body = tvm_ffi.structural_map(body, [(tirx.For, swap), (tirx.AllocBuffer, alloc)])
            if options.prologue_copies and cp_async and analyzer.can_prove(loop.extent > 0):
                body = _copies_join_prologue(body, new_loop, versioned)
            versions.update({b.name: stages for b in versioned.old})
        _check_turns(options, specialised, loops[0].span)
        if cast is not None:
            body = cast.clustered(body)
        func = func.with_body(resolve(body))  # copies of loops left alone: cp.async
        return func.with_attr(keys.VERSIONS, versions) if versions else func

    return prim_func_pass("CUDASoftwarePipeline", run)
