"""The two TMA forms of a ``T.Pipelined`` loop whose producers are all TMA loads:
issued in order by one thread of the block (:meth:`TmaPlan.in_order`), or by a producer
warpgroup added to the block while the kernel's own threads compute
(:meth:`TmaPlan.specialise`, sm_90a, TileLang's warp specialisation).

In both, the producers whose tiles the same consumer statement reads first form a *group*;
each group has one "full" mbarrier per pipeline version, completed by one arrival (the
issuing thread's) and the bytes of its loads, and waited for right before that consumer. So
FlashAttention's ``Q K^T`` starts while V is still in flight. A wgmma that reads only TMA tiles
and tiles written before the loop needs no barrier of its own
(``plan.without_wgmma_barriers``).

The producer warpgroup also serves a persistent kernel, whose pipelined loop sits in the
serial loop over tiles that ``T.Persistent`` makes (``persistent.TileLoop``): the producer walks
the tiles itself, computing each tile's indices on its own, so it loads the next tile's
first stages while the compute warpgroups store the last tile; both count the loop's
iterations across tiles, so versions and barrier phases carry on.

With ``pingpong`` (the pass config ``cuda.wgmma_pingpong``) the two compute warpgroups take
turns issuing each iteration's first wgmma gemm (:func:`take_turns`, FlashAttention-3's
inter-warpgroup overlap): warpgroup 0 issues, lets warpgroup 1 issue, and computes (a
softmax, say) while the tensor cores run warpgroup 1's gemm, and so on.

In both forms, a tile that two neighbouring blocks (blockIdx.x 2c and 2c + 1)
load from the same place -- the B tile of a GEMM whose rasterisation pairs blocks of one
column -- is loaded once for both: the two blocks form a cluster, each loads half of the
tile's TMA boxes and multicasts them into both blocks' shared memory (``multicast``, opt-in
with the pass config ``cuda.tma_multicast``); in order, in a persistent kernel too, whose two
blocks of a cluster then walk their tiles together (:meth:`TmaPlan.in_order_tiles`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.transform.walk import rebuild_for
from tvm import tirx

from ... import intrinsics, keys
from ...analysis.accesses import loaded_tiles, shared
from ...analysis.ir import (
    block_loop,
    buffers_in,
    flat,
    loads_in,
    role_loops,
    seq,
    stores,
    substitute,
    touches,
    uses,
)
from ...keys import WARP, WARPGROUP
from .multicast import CLUSTER, Multicast
from .persistent import Counter, TileLoop
from .plan import set_barrier, wgmma_calls

PRODUCER_REGISTERS = 40  # setmaxnreg budget of the producer warpgroup
# ... walking a persistent kernel's tiles (its own tile indices, guard and counter): with 40,
# ptxas spilled about 20 of the 8192^3 bench GEMM's producer values
PERSISTENT_PRODUCER_REGISTERS = 56
MAX_CONSUMER_REGISTERS = 240
# named barriers 9 and 10: the compute warpgroups' turns with ``pingpong`` (ids 1-8 are the
# barriers of T.ws roles, one per first warpgroup: transforms/sync)
TURN_BARRIER = 9
REGISTER_FILE = 65536  # 32-bit registers per SM, shared by its blocks (cuda.blocks_per_sm)
MULTICAST_AHEAD = 1  # k-tiles the in-order loads run ahead with multicast (TmaPlan.in_order)


@dataclass
class TmaPlan:
    """A pipelined loop planned by pipeline.py whose producers are TMA loads."""

    loop: Any  # the T.Pipelined loop
    stmts: list  # its body's statements, producers (TMA) and consumers
    producers: list  # indices of the producers in ``stmts``
    versioned: Any  # plan.Versioned: the tiles' versioned buffers
    overlap: bool  # a wgmma group stays in flight into the next iteration
    kept: list  # ``stmts`` with the wgmma barriers TMA makes needless replaced by None
    order: list  # the issue order of ``stmts``
    analyzer: Any
    tx: Any  # the block's threadIdx.x
    nested: bool  # inside another loop: the barriers are set up again on each of its rounds
    held: Any = None  # plan.HeldRegisters of a wgmma.sp kept in flight (``overlap``), or None

    # -- shared by both forms ----------------------------------------------------------------
    def __post_init__(self):
        self.stages = int(self.loop.annotations[keys.STAGES])
        self.readers = [k for k in self.order if k not in self.producers and
                        self.kept[k] is not None]
        self.group_of = {}
        for p in self.producers:
            tiles = loaded_tiles(self.stmts[p])
            self.group_of[p] = next((k for k in self.readers if touches(self.kept[k], tiles)),
                                    None)
        self.groups = sorted(set(self.group_of.values()), key=lambda k: len(self.readers)
                             if k is None else self.readers.index(k))
        self.i = tirx.Var(self.loop.loop_var.name, self.loop.loop_var.ty)

    def _barriers(self, extra: int):
        count = self.stages * len(self.groups) + extra
        return tirx.decl_buffer((count,), "uint64", f"{self.loop.loop_var.name}_stage_bar",
                                scope="shared.dyn")

    def _full(self, bars, version, g):
        return intrinsics.shared_addr(tirx.BufferLoad(bars, [version * len(self.groups) + g]))

    def _empty(self, bars, version):
        """``version``'s empty mbarrier (after the full ones): its readers released it."""
        return intrinsics.shared_addr(tirx.BufferLoad(
            bars, [self.stages * len(self.groups) + version]))

    def _released(self, bars, j):
        """Wait until fill ``j``'s version is free: fill j - S's readers released it (the
        empty barrier's phase of fill j's round of the versions)."""
        return intrinsics.call("tw_mbar_wait", self._empty(bars, tirx.floormod(j, self.stages)),
                               tirx.floormod(tirx.floordiv(j, self.stages) + 1, 2))

    def _release_in_cluster(self, bars, version) -> list:
        """Arrivals on ``version``'s empty barrier in both blocks of the cluster."""
        return [intrinsics.call("tw_mbar_arrive_cluster", self._empty(bars, version),
                                tirx.const(r, "uint32")) for r in range(CLUSTER)]

    def _leader(self, body: list):
        return tirx.IfThenElse(self.tx == 0, seq(body), None)

    def _produce(self, bars, at, version):
        """Stage ``at`` into ``version``: every producer's loads, then one arrival per group."""
        loads = [self.versioned.rewrite(
            set_barrier(self.stmts[p], self._full(bars, version, self.groups.index(
                self.group_of[p]))), self.loop.loop_var, self.loop.min + at, version)
            for p in self.producers]
        arrivals = [intrinsics.call("tw_mbar_arrive", self._full(bars, version, g))
                    for g in range(len(self.groups))]
        return seq([*loads, self._leader(arrivals)])

    def _init(self, bars, counts: list, once: bool = False) -> list:
        inits = [intrinsics.call("tw_mbar_init", intrinsics.shared_addr(tirx.BufferLoad(
            bars, [tirx.const(k, "int32")])), tirx.const(c, "uint32"))
            for k, c in enumerate(counts)]
        # set up again in a loop: every thread is past its last wait of the previous round
        again = [intrinsics.sync()] if self.nested and not once else []
        return [tirx.AllocBuffer(bars), *again,
                self._leader([*inits, intrinsics.call("tw_fence_barrier_init")]),
                intrinsics.sync()]

    def _steady(self, bars, specialised: bool = False, count=None) -> list:
        """One iteration's consumers, each group's wait before its first reader; in the
        in-order form a None where the refill goes (where the first producer stood).
        ``count``: the iteration's number among all the block's runs of the loop (its
        version and barrier phase), ``i`` by default."""
        count = self.i if count is None else count
        parity = tirx.floormod(tirx.floordiv(count, self.stages), 2)
        version = tirx.floormod(count, self.stages)
        out, refilled = [], False
        for index in self.order:
            if index in self.producers:
                if not specialised and not refilled:
                    out.append(None)  # where the in-order form refills
                    refilled = True
                continue
            if self.kept[index] is None:
                continue
            if index in self.groups:
                out.append(intrinsics.call("tw_mbar_wait", self._full(
                    bars, version, self.groups.index(index)), parity))
            out.append(self.versioned.rewrite(self.kept[index], self.loop.loop_var,
                                              self.loop.min + self.i, version))
        if None in self.groups:  # tiles no consumer reads: their loads still complete
            out.append(intrinsics.call("tw_mbar_wait", self._full(
                bars, version, self.groups.index(None)), parity))
        return out

    def _loop(self, body: list):
        annotations = {k: v for k, v in self.loop.annotations.items()
                       if str(k) not in keys.PIPELINE_HINTS}
        annotations[keys.COUNTED] = 1
        return tirx.For(self.i, 0, self.loop.extent, self.loop.kind, tirx.SeqStmt(body),
                        annotations=annotations, span=self.loop.span)

    # -- one thread of the block issues ------------------------------------------------------
    def _first_loads(self, bars, count: int, first=None, released=None) -> list:
        """The loop's first ``count`` loads (iterations 0 .. count - 1, each under ``i < n``
        where that is not provable) into their own versions, or into the versions from fill
        ``first`` on (a persistent kernel's tile: the fills count on over the tiles), each
        after ``released`` of its fill's number where given (the wait for its version)."""
        out = []
        for s in range(count):
            k = tirx.const(s, "int32")
            version = k if first is None else tirx.floormod(first + k, self.stages)
            copies = self._produce(bars, k, version)
            if released is not None:
                copies = seq([released(first + k), copies])
            in_range = k < self.loop.extent
            out.append(copies if self.analyzer.can_prove(in_range) else
                       tirx.IfThenElse(in_range, copies, None))
        return out

    def in_order(self, func_body=None, multicast: bool = False):
        """(the loop in order, its :class:`~.multicast.Multicast` or None)::

            init barriers; sync
            P(0) ... P(S-2)                             # thread 0: loads, then arrivals
            fence.proxy.async                           # earlier shared writes -> wgmma
            for i in range(n):
                __syncthreads()                         # iteration i-1's reads done
                if i + S-1 < n: P(i + S-1)              # refill the version read at i-1
                wait(full[i % S][g], (i / S) & 1); C(i) # per group, before its reader

        With a wgmma group left in flight the refill runs one stage less ahead, as in the
        cp.async form. With ``multicast`` (``func_body`` the kernel's body), tiles that pairs
        of blocks share are loaded once per pair, as in the specialised form: a version is
        then free once both blocks are past the barrier that ends its reads (``d`` = 1, or 2
        with a wgmma group in flight), so thread 0 releases each version there in both
        blocks (an "empty" mbarrier of two arrivals a version) and waits for the pair's
        release before a refill; the loads run one k-tile ahead (``a`` = 1: the in-order
        GEMM's 3 stages; its ``_s4`` row's second k-tile ahead bought nothing), and the stages
        beyond ``a + d`` let the other block be that many iterations behind::

                __syncthreads()
                if 0 <= i - d and i - d + S < n:            # thread 0: fill i - d read
                    arrive(empty[(i - d) % S]) in both blocks
                if j = i + a < n:                           # thread 0
                    wait(empty[j % S], ((j / S) & 1) ^ 1); P(j)  # fill j - S released
            ... after the loop: cluster barrier             # no arrival or load to come

        Both blocks run the same iterations (the pair shares the loop's extent)."""
        n, stages = self.loop.extent, self.stages
        cast = Multicast.plan(self, func_body) if multicast and not self.nested else None
        if cast is not None:
            self.stmts = cast.stmts
        full = stages * len(self.groups)
        bars = self._barriers(0 if cast is None else stages)
        done_by = 2 if self.overlap else 1  # iteration i's barrier ends fill i - done_by's reads
        ahead_by = stages - done_by if cast is None else min(stages - done_by, MULTICAST_AHEAD)
        prologue = self._first_loads(bars, ahead_by)
        ahead = self.i + ahead_by
        version = tirx.floormod(ahead, stages)
        refill = self._produce(bars, ahead, version)
        release = []
        if cast is not None:
            read = self.i - done_by  # its version written as i + S - d's: with a = S - d,
            freed = tirx.floormod(self.i + (stages - done_by), stages)  # the refill's counter
            release = [tirx.IfThenElse(tirx.all(read >= 0, read + stages < n), self._leader(
                self._release_in_cluster(bars, freed)), None)]
            refill = seq([self._leader([self._released(bars, ahead)]), refill])
        refill = tirx.IfThenElse(ahead < n, refill, None)
        steady = [refill if s is None else s for s in self._steady(bars)]
        steady = [*release, *steady]
        drain = [intrinsics.wgmma_wait(0)] if self.overlap else []
        if self.held is not None:
            prologue = [*self.held.start(), *prologue]
            drain.append(self.held.keep())
        init = self._init(bars, [1] * full + [CLUSTER] * (0 if cast is None else stages))
        if cast is not None:  # both blocks' barriers are set up before either reaches across
            init[-1] = intrinsics.call("tw_cluster_sync")
            drain.append(intrinsics.call("tw_cluster_sync"))
        return tirx.SeqStmt([*init, *prologue, intrinsics.fence_proxy_async(),
                             self._loop([intrinsics.sync(), *steady]), *drain]), cast

    def in_order_tiles(self, func_body, multicast: bool = False):
        """``func_body`` with the loop in order (:meth:`in_order`) where it sits in a
        persistent kernel's serial loop over tiles (``persistent.TileLoop``), its loads
        carrying on from tile to tile; None when the kernel does not allow it (as
        :meth:`specialise`: the tiles' other code touches the pipelined tiles, shared memory
        the loads read or a tensor they load from, the loads need values the tile stores or
        computes from memory or the thread index, or the loop's extent changes from tile to
        tile)::

            init barriers; sync                              # once
            if the first tile is the block's: P(0) ... P(a-1)   # its first loads
            for wave:                                        # the tile loop
                if guard: binds; code before the loop; b = count
                    fence.proxy.async
                    for i in range(n):                       # fill and iteration b + i
                        __syncthreads()
                        if i + a < n: P(b + i + a)
                        wait(full[(b + i) % S][g], ((b + i) / S) & 1); C(i)
                    if the next tile is the block's: P'(b + n) ... P'(b + n + a - 1)
                    drain; count = b + n; code after the loop    # (its epilogue)

        ``a`` is the in-order form's distance ahead (S - 1, S - 2 with a wgmma group in
        flight); ``P'`` the loads of the next tile, its binds recomputed for it. The next
        tile's first loads go where the last iteration's refill would have gone had the tile
        been longer: the barrier of iteration n - 1 ended the reads of every version they
        write (fills b + n - S + s <= b + n - 1 - d), so they need no barrier of their own and
        land while the block drains its wgmma groups and stores the tile. The barriers are set
        up once, and versions and phases count on over the tiles. A wgmma.sp kept in flight
        (``held``) has its two metadata register sets set up at each tile's start (its
        iterations' parity starts again) and held up to the drain, which retires every group
        before the next tile's first wgmma.sp writes a set.

        With ``multicast`` (:meth:`~.multicast.Multicast.plan` of the tile loop: blocks 2c and
        2c + 1 load a tile from the same place in every round both have one, and have a tile
        in the same rounds, else the kernel is refused) the pair walks its tiles together in
        a cluster, each block loading half of the shared tiles' boxes into both, as in
        :meth:`in_order`: ``a`` = 1, and the empty barriers' handshake counts on over the
        tiles like the full barriers' phases::

                    for i in range(n):
                        __syncthreads()
                        if b + i >= d: arrive(empty[(b + i - d) % S]) in both blocks
                        if i + a < n:
                            wait(empty[(b + i + a) % S], (((b + i + a) / S) & 1) ^ 1)
                            P(b + i + a)
                        ...
                    if the next tile is the block's:
                        wait(empty[(b + n) % S], (((b + n) / S) & 1) ^ 1); P'(b + n)
            cluster barrier                                  # after the tile loop

        A fill is released at the barrier ``d`` iterations after its read, counted over the
        tiles: the last ``d`` fills of a tile at the next tile's first iterations (the drain
        and that barrier have ended their reads), the block's last tile's never (no fill waits
        for them). The next tile's first load waits for the pair's release of fill
        b + n - S, made at iteration b + n - S + d <= b + n - 1 in both blocks, so it still
        goes before the epilogue. Both blocks run the same rounds and iterations, so their
        arrivals match one for one."""
        thread = block_loop(func_body)
        if thread is None:
            return None
        items = flat([thread.body])
        nest = TileLoop.find(items, self.loop)
        if nest is None or nest[1] is None:
            return None
        at, tiles = nest
        n, stages = self.loop.extent, self.stages
        if not tiles.independent(self.tx, self.versioned.old) or not tiles.invariant(n):
            return None

        computed = []  # the tile's values that cannot be recomputed for the next tile

        def pure(s):  # a value thread 0 can compute for the next tile
            return isinstance(s, tirx.Bind) and not uses(s, self.tx) and \
                not loads_in(s.value) and not any(uses(s.value, v) for v in computed)

        for s in tiles.before:
            if isinstance(s, tirx.Bind) and not pure(s):
                computed.append(s.var)
        if any(uses(self.stmts[p], v) for p in self.producers for v in computed):
            return None
        # ... nor what the tile code stores (shared memory, registers)
        tile_code = tiles.before + tiles.after
        stored = [b for s in tile_code for b in stores(s)]
        if any(touches(self.stmts[p], stored) for p in self.producers):
            return None
        # a tensor the loads read and the tile code touches (its epilogue may write what the
        # next tile's loads, issued before it, would read)
        read = [b for p in self.producers for b in buffers_in(self.stmts[p]) if not shared(b)]
        if any(touches(s, read) for s in tile_code):
            return None
        cast = Multicast.plan(self, func_body, tiles, pure) if multicast else None
        if cast is not None:
            self.stmts = cast.stmts
        done_by = 2 if self.overlap else 1
        ahead_by = stages - done_by if cast is None else min(stages - done_by, MULTICAST_AHEAD)
        full = stages * len(self.groups)
        bars = self._barriers(0 if cast is None else stages)
        counter, base = Counter.of(tiles, f"{self.loop.loop_var.name}_count")

        count = base + self.i
        ahead = self.i + ahead_by
        refill = self._produce(bars, ahead, tirx.floormod(count + ahead_by, stages))
        release, released = [], None
        if cast is not None:
            def released(j):  # thread 0 waits until both blocks released fill j - S
                return self._leader([self._released(bars, j)])

            # fill count - d, read up to this barrier (its version written as the refill's,
            # count + a, where a = S - d: one counter), released in both blocks; the last
            # tile's last d fills are never released (no fill waits for them)
            freed = tirx.floormod(count + (stages - done_by), stages)
            release = [tirx.IfThenElse(count >= done_by, self._leader(
                self._release_in_cluster(bars, freed)), None)]
            refill = seq([released(count + ahead_by), refill])
        refill = tirx.IfThenElse(ahead < n, refill, None)
        steady = [*release, *(refill if s is None else s for s in self._steady(bars, count=count))]
        wave = tiles.loop.loop_var
        following = tiles.for_round(self._first_loads(bars, ahead_by, base + n, released), pure,
                                    wave + 1, "next")
        drain = [intrinsics.wgmma_wait(0)] if self.overlap else []
        # a wgmma.sp kept in flight: its metadata registers, set up for each tile and held up
        # to the drain's retirement (the next tile's loads touch no register)
        held = [] if self.held is None else self.held.start()
        if self.held is not None:
            drain.append(self.held.keep())
        body = [*tiles.before, counter.bind(base), *held, intrinsics.fence_proxy_async(),
                self._loop([intrinsics.sync(), *steady]), following, *drain,
                counter.add(base, n), *tiles.after]
        first = tiles.for_round(self._first_loads(bars, ahead_by, tirx.const(0, "int32")), pure,
                                tiles.loop.min, "first")
        init = self._init(bars, [1] * full + [CLUSTER] * (0 if cast is None else stages),
                          once=True)
        walked = [tiles.rebuild(body)]
        if cast is not None:  # both blocks' barriers are set up before either reaches across;
            init[-1] = intrinsics.call("tw_cluster_sync")  # neither exits while the other
            walked.append(intrinsics.call("tw_cluster_sync"))  # may still arrive on its own
        new = rebuild_for(thread, body=seq([*items[:at], *init, *counter.start(), first,
                                            *walked, *items[at + 1:]]))
        out = tvm_ffi.structural_map(func_body, (tirx.For, lambda s: new if s.same_as(thread)
                                                 else s))
        return out if cast is None else cast.clustered(out)

    # -- a producer warpgroup issues ---------------------------------------------------------
    def specialise(self, func_body, multicast: bool = False, blocks: int = 1,
                   pingpong: bool = False, registers: bool = True, producer_registers: int = 0):
        """``func_body`` with one more warpgroup in the block that only issues the loads,
        or None when the kernel does not allow it (the loop is neither at the top of the
        block's program nor directly in a serial loop there whose other code leaves the
        pipelined tiles alone, the block has roles already, or no warpgroup fits)::

            init barriers; sync                            # every thread
            if tx >= T:                                    # the producer warpgroup
                setmaxnreg.dec 40
                if tx == T: for j in range(n):             # kept rolled: #pragma unroll 1
                    wait(empty[j % S], ((j / S) & 1) ^ 1)  # version j % S released
                    P(j)                                   # loads, then arrivals on full
            else:                                          # the kernel's T threads
                setmaxnreg.inc R
                code before the loop; fence.proxy.async; sync (named)
                for i in range(n):
                    wait(full[i % S][g], (i / S) & 1); C(i) ...
                    __syncwarp; lane 0: arrive(empty[i % S])  # (i-1: a wgmma in flight)
                code after the loop

        The kernel's threads keep their indices, so code lowered for them is unchanged;
        block-wide barriers among them become named barriers (hopper.insert_sync). With
        ``multicast``, tiles that pairs of blocks share are loaded once per pair
        (:class:`~.multicast.Multicast`); with ``pingpong`` the two compute warpgroups take
        turns issuing (:func:`take_turns`). ``producer_registers`` (not 0) replaces the
        producer's budget of 40 (56 walking a persistent kernel's tiles)."""
        thread = block_loop(func_body)
        if thread is None or role_loops(func_body):
            return None
        threads = int(thread.extent.value)
        if threads % WARPGROUP or threads + WARPGROUP > 1024:
            return None
        items = flat([thread.body])
        nest = TileLoop.find(items, self.loop)
        if nest is None:
            return None
        at, tiles = nest

        def pure(s):  # a value every role can compute for itself
            return isinstance(s, tirx.Bind) and not uses(s, self.tx) and not loads_in(s.value)

        top, before, moved = [], [], []
        for s in items[:at]:
            if isinstance(s, tirx.AllocBuffer) or pure(s):
                top.append(s)
            else:
                before.append(s)
                moved += [s.var] if isinstance(s, tirx.Bind) else []
        after = [s for s in items[at + 1:] if not isinstance(s, tirx.AllocBuffer)]
        top += [s for s in items[at + 1:] if isinstance(s, tirx.AllocBuffer)]
        if tiles is not None:
            if not tiles.independent(self.tx, self.versioned.old):
                return None  # the producer must not wait for the tiles' other code
            moved += [s.var for s in tiles.before if isinstance(s, tirx.Bind) and not pure(s)]
        if any(uses(self.stmts[p], v) for p in self.producers for v in moved):
            return None  # the loads need values the kernel's threads compute
        written = _shared_writes(before + (tiles.before + tiles.after if tiles else []))
        if any(touches(self.stmts[p], written) for p in self.producers):
            return None  # ... or read shared memory they write
        stages, n = self.stages, self.loop.extent
        full = stages * len(self.groups)
        bars = self._barriers(stages)
        cast = Multicast.plan(self, func_body) if multicast and tiles is None else None
        if cast is not None:
            self.stmts = cast.stmts

        # a persistent kernel's loop runs once per tile: versions and phases go on counting
        # from the iterations of its earlier tiles (``base``; 0 without a tile loop)
        name = self.loop.loop_var.name
        issued, issued_base = Counter.of(tiles, f"{name}_issued")
        consumed, consumed_base = Counter.of(tiles, f"{name}_consumed")
        j = tirx.Var(f"{name}_load", self.loop.loop_var.ty)
        refill = substitute(self._produce(bars, self.i, tirx.floormod(
            issued_base + self.i, stages)), {self.i: j})

        def released(j):  # the version load j writes is free (read by load j - S's readers)
            return self._released(bars, j)

        loads = [tirx.For(j, 0, n, tirx.ForKind.SERIAL,
                          tirx.SeqStmt([released(issued_base + j), refill]),
                          annotations={keys.COUNTED: 1, keys.DISABLE_UNROLL: True})]
        if tiles is not None:
            loads = [issued.start(), tiles.for_producer(
                [issued.bind(issued_base), *loads, issued.add(issued_base, n)], pure)]
        if cast is not None:  # stay until both blocks read every tile this one multicast
            loads.append(cast.drain(n, stages, released))
        kept = producer_registers or \
            (PRODUCER_REGISTERS if tiles is None else PERSISTENT_PRODUCER_REGISTERS)
        producer = [intrinsics.call(f"tw_setmaxnreg_dec<{kept}>")] if registers else []
        producer.append(tirx.IfThenElse(self.tx == 0, seq(loads), None))
        count = consumed_base + self.i
        steady = self._steady(bars, specialised=True, count=count)
        # one arrival per warp, once all its lanes are past their reads of the version
        # (__syncwarp orders them before lane 0's release)
        lane0 = tirx.floormod(self.tx, WARP) == 0

        def release(version):  # in every block of the cluster when tiles are multicast
            arrive = [intrinsics.call("tw_mbar_arrive", self._empty(bars, version))] \
                if cast is None else self._release_in_cluster(bars, version)
            return [intrinsics.call("__syncwarp"), tirx.IfThenElse(lane0, seq(arrive), None)]

        tail = []
        if self.overlap:  # version i-1 is free once this iteration retired its wgmma group
            steady.append(tirx.IfThenElse(self.i > 0, seq(release(tirx.floormod(
                count - 1, stages))), None))
            tail.append(intrinsics.wgmma_wait(0))
            if self.held is not None:  # the metadata registers live up to the last retirement
                tail.append(self.held.keep())
            if cast is not None or tiles is not None:  # the last version too: a producer
                tail.append(tirx.IfThenElse(n > 0, seq(release(tirx.floormod(  # waits for it
                    consumed_base + n - 1, stages))), None))
        else:
            steady += release(tirx.floormod(count, stages))
        loop = [self._loop(steady)]
        if pingpong:
            loop = take_turns(steady, self.tx, threads, self._loop)
        computed = [intrinsics.fence_proxy_async(), intrinsics.sync(), *loop, *tail]
        if self.held is not None:
            computed = [*self.held.start(), *computed]
        if tiles is not None:
            computed = [consumed.start(), tiles.rebuild([
                *tiles.before, consumed.bind(consumed_base), *computed,
                consumed.add(consumed_base, n), *tiles.after])]
        consumer = [*before, *computed, *after]
        if registers:  # (T.no_set_max_nreg: every thread keeps the kernel's budget)
            consumer.insert(0, intrinsics.call(
                f"tw_setmaxnreg_inc<{consumer_registers(threads, blocks, kept)}>"))
        roles = [_role(self.tx, threads, WARPGROUP, producer, "tx_load"),
                 _role(self.tx, 0, threads, consumer, "tx_compute")]
        counts = [1] * full + [threads // WARP * (1 if cast is None else CLUSTER)] * stages
        init = self._init(bars, counts, once=True)
        if cast is not None:  # both blocks' barriers are set up before either reaches across
            init[-1] = intrinsics.call("tw_cluster_sync")
        body = tirx.SeqStmt([*top, *init, *roles])
        block = tirx.IterVar(tvm.ir.Range(0, threads + WARPGROUP), self.tx,
                             tirx.IterVar.ThreadIndex, keys.THREAD_TAG)
        new = tirx.For(self.tx, 0, threads + WARPGROUP, tirx.ForKind.THREAD_BINDING, body,
                       thread_binding=block, annotations=thread.annotations, span=thread.span)
        out = tvm_ffi.structural_map(func_body, (tirx.For, lambda s: new if s.same_as(thread)
                                                 else s))
        return out if cast is None else cast.clustered(out)


def take_turns(steady: list, tx, threads: int, make_loop) -> list:
    """The compute loop (``make_loop`` of its iteration's statements ``steady``) with the two
    warpgroups taking turns at the iteration's first wgmma issue::

        if w == 1: bar.arrive(9, 256)            # warpgroup 0 goes first
        for i in range(n):
            ...
            bar.sync(9 + w, 256)                 # the other warpgroup has issued
            wgmma ...                            # this warpgroup's gemm
            bar.arrive(9 + 1 - w, 256)           # the other's turn
            ...
        if w == 0: bar.sync(9, 256)              # warpgroup 1's last arrival

    ``w`` is the warpgroup (threadIdx.x / 128); each barrier completes with one warpgroup's
    bar.sync and the other's bar.arrive, so the turns alternate strictly and both barriers
    end the loop with no arrival pending. The gemm must be issued by the iteration itself,
    not under a condition or in an inner loop (both warpgroups must reach each turn)."""
    if threads != 2 * WARPGROUP:
        raise KernelError(f"{keys.WGMMA_PINGPONG} needs two compute warpgroups (256 threads "
                          f"in T.Kernel); this kernel has {threads} threads")
    count = tirx.const(2 * WARPGROUP, "int32")
    w = tirx.floordiv(tx, WARPGROUP)

    def barrier(name, ident):
        return intrinsics.call(name, ident, count)

    out, taken = [], False
    for stmt in steady:
        items = flat([stmt])
        first = next((k for k, s in enumerate(items) if not taken and
                      isinstance(s, tirx.Evaluate) and intrinsics.role(s) == "wgmma"), None)
        if first is None:
            if not taken and wgmma_calls(stmt):
                break  # under a condition or in a loop: no turn there
            out.append(stmt)
            continue
        items[first:first + 1] = [
            barrier("tw_named_barrier_sync", TURN_BARRIER + w), items[first],
            barrier("tw_named_barrier_arrive", TURN_BARRIER + 1 - w)]
        out.append(seq(items))
        taken = True
    if not taken:
        raise KernelError(f"{keys.WGMMA_PINGPONG}: the pipelined loop issues no wgmma gemm of "
                          "its own (none, or only under a condition or in an inner loop)")
    first_turn = tirx.const(TURN_BARRIER, "int32")
    return [tirx.IfThenElse(w == 1, barrier("tw_named_barrier_arrive", first_turn), None),
            make_loop(out),
            tirx.IfThenElse(w == 0, barrier("tw_named_barrier_sync", first_turn), None)]


def _shared_writes(stmts: list) -> list:
    """The shared buffers (fragments too: they live there) ``stmts`` store to."""
    found = []

    def visit(store):
        if shared(store.buffer) and not any(store.buffer.same_as(b) for b in found):
            found.append(store.buffer)

    for s in stmts:
        tvm_ffi.structural_walk(s, (tirx.BufferStore, visit))
    return found


def consumer_registers(threads: int, blocks: int = 1,
                       producer: int = PRODUCER_REGISTERS) -> int:
    """The setmaxnreg budget of ``threads`` compute threads beside a producer warpgroup that
    keeps ``producer`` registers, with ``blocks`` blocks per SM: what the block gets at launch
    (an equal share of the register file, in steps of 8 per thread) less the producer's."""
    total = threads + WARPGROUP
    pool = REGISTER_FILE // blocks // total // 8 * 8 * total
    return min(MAX_CONSUMER_REGISTERS, (pool - WARPGROUP * producer) // threads // 8 * 8)


def _role(tx, lo: int, n: int, body: list, name: str):
    """``body`` (written for the block's ``tx``) as a role of ``n`` threads from ``lo``."""
    var = tirx.Var(name, "int32")
    iv = tirx.IterVar(tvm.ir.Range(0, n), var, tirx.IterVar.ThreadIndex, keys.THREAD_TAG)
    return tirx.For(var, 0, n, tirx.ForKind.THREAD_BINDING,
                    substitute(seq(body), {tx: var}), thread_binding=iv,
                    annotations={keys.ROLE: lo})
