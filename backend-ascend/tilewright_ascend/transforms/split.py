"""Cube/vector split of portable kernels that use ``T.gemm`` and vector tiles.

The kernel body becomes two programs with the same loops: a cube program (``T.Scope("C")``:
GM -> L1 copies, GEMMs, L0C -> GM) and a vector program (``T.Scope("V")``: everything else).
They meet in GM workspaces, one per handoff channel, allocated by the executor at launch
(``ascend.workspaces``: one tile per AI core group and slot), ordered by cross-core flags:

- an accumulator the vector code also touches is handed over in one of two ways. When every
  vector use comes after the last GEMM into it (a GEMM with an epilogue), the cube
  accumulates the whole K loop in L0C and hands the result over once, before the first vector
  use. Otherwise (the accumulator is rescaled or masked between GEMMs, as in flash
  attention) each GEMM computes into a fresh L0C tile and the vector core adds the handed-over
  product to its UB copy;
- a GEMM operand the vector code writes (or reads) lives in UB for the vector core and is
  handed to an L1 copy before each GEMM that uses it.

A channel is ``full`` (producer -> consumer: ``set_cross_flag`` after the producer's write on
its pipe, ``wait_cross_flag`` before the consumer's read). Inside a loop a channel has two
workspace slots (iteration % 2) and an ``empty`` flag back (consumer -> producer) that the
producer waits for before it overwrites a slot, from the third iteration on; the consumer
sends it after its read except in the last two iterations, so every set is waited.

The vector program runs on both vector cores of the group. When it works row by row
(:mod:`.rowsplit`), each vector core takes half of the rows of every vector tile and of every
workspace tile; otherwise its data work runs on AIV0 only (each statement under
``vid == 0``). Either way both vector cores take part in every cross-core handshake: the
cube's sets count up both, and its waits need a set from each.
"""

from __future__ import annotations

import functools

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region, decode, make_call, tile_ops_in
from tvm import tirx

from ..analysis.buffers import buffers_in, loads_and_stores
from ..facts import ops
from ..facts.events import CROSS_IDS
from ..facts.paths import DUAL_COPY_PATHS, GM, UB
from .rowsplit import split_rows


def _flat(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _seq(stmts):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _is_loop(stmt) -> bool:
    return isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING and \
        str(stmt.annotations.get("tw.loop", "")) != "parallel"


def _ordered(stmts) -> dict:
    """The buffers ``stmts`` refer to, in the order they first appear (a dict used as an
    ordered set, so that everything derived from it is deterministic)."""
    found: dict = {}

    def add(b):
        if isinstance(b, tirx.Buffer):
            found.setdefault(b, None)

    for stmt in stmts:
        tvm_ffi.structural_walk(stmt, (tirx.Buffer, add), order="pre")
    return found


def _is_zero_fill(call) -> bool:
    value = call.operands.get("value")
    return call.name == "fill" and isinstance(value, (tirx.IntImm, tirx.FloatImm)) and \
        value.value == 0


class Split:
    """Splits one kernel body; see the module doc."""

    def __init__(self, stmts: list, local: set, cid, vid, blocks: int, sids: int = 0):
        """``local``: the kernel's on-chip buffers; ``sids``: the vector sub-cores of a
        ``T.MixedKernel`` (0: a kernel the compiler splits by itself)."""
        self.stmts, self.cid, self.vid, self.sids = stmts, cid, vid, sids
        self.local = set(local)
        self.blocks = blocks
        self.next_id = 0
        self.tails: dict = {}  # loop -> vector statements that end each of its iterations
        self.workspaces: list = []
        self.new_allocs: list = []
        self.scopes: dict = {}  # buffer -> Ascend memory, for buffers the split decides
        gemms = [c for s in stmts for c in _calls(s) if c.name == "gemm"]
        order = _ordered(stmts)
        operands = {c.operands[o].buffer for c in gemms for o in "AB"}
        accumulators = {c.operands["C"].buffer for c in gemms}
        self.operands = [b for b in order if b in operands]
        self.accumulators = [b for b in order if b in accumulators]
        self.shared_operands: list = []  # known after the first classification
        touched: set = set()
        self.has_vector = False  # whether the kernel needs the vector cores at all
        for leaf in _leaves(stmts):
            dual = _dual_copy(leaf)
            if dual is not None:  # only its UB tile is the vector core's
                touched |= {r.buffer for r in dual.operands.values()
                            if str(r.buffer.scope()) == UB}
                self.has_vector = True
            elif self._leaf_core(leaf, cube_only=self.accumulators) == "V":
                touched |= buffers_in(leaf)
                self.has_vector = True
        self.shared_operands = [b for b in self.operands if b in touched]
        shared_acc = [b for b in self.accumulators if b in touched]
        # accumulators whose vector uses all follow their last GEMM: one handoff
        self.handoff_at: dict = {}
        for acc in shared_acc:
            gemm_at = [i for i, s in enumerate(stmts)
                       if any(c.name == "gemm" and c.operands["C"].buffer.same_as(acc)
                              for c in _calls(s))]
            vec_at = [i for i, s in enumerate(stmts) if not self._zero_fill_of(s, acc) and
                      any(acc in buffers_in(leaf) and self._leaf_core(
                          leaf, cube_only=self.accumulators) == "V" for leaf in _leaves([s]))]
            if vec_at and min(vec_at) > max(gemm_at):
                self.handoff_at[acc] = min(vec_at)
        self.per_gemm = [b for b in shared_acc if b not in self.handoff_at]
        dual = {c.operands["src"].buffer for leaf in _leaves(stmts)
                if (c := _dual_copy(leaf)) is not None}
        for acc in shared_acc if self.sids else ():
            if acc in self.per_gemm or acc in dual:
                raise KernelError(
                    f"in a T.MixedKernel the vector code takes an accumulator from L0C once its "
                    f"GEMMs are done, by T.copy or T.dual_copy, but it uses {acc.name!r} "
                    f"{'between its GEMMs' if acc in self.per_gemm else 'with both'}",
                    span_location(self._first_use(stmts, acc).span))
        self.row_halves: dict = {}  # vector buffers split over AIV0/AIV1 -> their new shape
        self.shadow: dict = {}
        for buf in self.shared_operands:
            self.shadow[buf] = self._new_buffer(buf, "l1", "ascend.l1")
        for buf in shared_acc:
            self.shadow[buf] = self._new_buffer(buf, "l0c", "ascend.l0c")
        for buf in order:
            if buf in touched and (buf in operands or buf in accumulators):
                self.scopes[buf] = "ascend.ub"
        self.tmp = {buf: self._new_buffer(buf, "part", "ascend.ub") for buf in self.per_gemm}

    # -- classification -------------------------------------------------------------------
    @staticmethod
    def _zero_fill_of(stmt, buf) -> bool:
        call = decode(stmt)
        return call is not None and _is_zero_fill(call) and \
            call.operands["dst"].buffer.same_as(buf)

    def _first_use(self, stmts, buf):
        """The first statement of the vector code that uses ``buf``."""
        return next(leaf for leaf in _leaves(stmts) if buf in buffers_in(leaf) and _dual_copy(
            leaf) is None and self._leaf_core(leaf, cube_only=self.accumulators) == "V")

    def _leaf_core(self, leaf, cube_only) -> str:
        if self.sids and isinstance(leaf, tirx.IfThenElse) and leaf.else_case is None:
            leaf = leaf.then_case  # T.gemm(..., clear_accum=cond): the cube clears L0C
        call = decode(leaf)
        if call is None:
            return "V"
        if call.name in ("gemm", ops.LOAD_L0.name):
            return "C"
        if call.name == "copy":
            src, dst = call.operands["src"], call.operands["dst"]
            s, d = str(src.buffer.scope()), str(dst.buffer.scope())
            if s == "global" and dst.buffer in self.operands and \
                    dst.buffer not in self.shared_operands:
                return "C"
            if d == "global" and src.buffer in cube_only:
                return "C"
        if call.name == "fill" and _is_zero_fill(call) and \
                call.operands["dst"].buffer in cube_only:
            return "C"
        return "V"

    def _new_buffer(self, old, suffix: str, scope: str):
        buf = tirx.decl_buffer(old.shape, old.dtype, f"{old.name}_{suffix}", scope="shared")
        self.scopes[buf] = scope
        self.local.add(buf)
        self.new_allocs.append(tirx.AllocBuffer(buf))
        return buf

    # -- handoffs ---------------------------------------------------------------------------
    def _flag_id(self, span) -> tirx.IntImm:
        if self.next_id >= CROSS_IDS:
            raise KernelError(f"the cube/vector split of this kernel needs more than {CROSS_IDS} "
                              f"cross-core flags (ids 0-{CROSS_IDS - 1}); use fewer GEMMs per "
                              "loop",
                              span_location(span))
        self.next_id += 1
        return tirx.IntImm("int32", self.next_id - 1)

    def _channel(self, buf, src, dst, loop, src_pipe, dst_pipe, span):
        """(producer statements, consumer statements) moving ``src`` to ``dst`` through a
        fresh workspace; ``src_pipe``/``dst_pipe`` write and read the workspace."""
        return self._handoff(buf.name, Region.full(src), Region.full(dst), tuple(buf.shape),
                             loop, (src_pipe, dst_pipe), span)

    def _handoff(self, name, src: Region, dst: Region, shape: tuple, loop, pipes, span,
                 halves=(None, None)):
        """:meth:`_channel` of regions through a workspace tile of ``shape``; ``halves``: the
        axis of the tile along which the producer writes, and the consumer reads, only this
        vector sub-core's half of it (:func:`half`), or None for the whole tile."""
        slots = 2 if loop is not None else 1
        ws = tirx.decl_buffer((self.blocks, slots, *shape), src.buffer.dtype,
                              f"ws_{name}_{len(self.workspaces)}", scope="global")
        self.workspaces.append(ws)
        slot = tirx.floormod(loop.loop_var - loop.min, 2) if loop is not None else \
            tirx.IntImm("int32", 0)
        zeros = [tirx.IntImm("int32", 0)] * len(shape)
        region = Region(ws, (self.cid, slot, *zeros), (1, 1, *shape))
        put_ws, get_ws = (region if axis is None else half(region, axis + 2, self.vid)
                          for axis in halves)
        full = self._flag_id(span)
        src_pipe, dst_pipe = pipes
        put = [make_call("copy", {"src": src, "dst": put_ws}, span=span),
               make_call(ops.SET_CROSS_FLAG.name, {"event_id": full}, {"pipe": src_pipe},
                         span)]
        get = [make_call(ops.WAIT_CROSS_FLAG.name, {"event_id": full}, span=span),
               make_call("copy", {"src": get_ws, "dst": dst}, span=span)]
        if loop is not None:
            empty = self._flag_id(span)
            i = loop.loop_var - loop.min
            put.insert(0, tirx.IfThenElse(i >= 2, make_call(
                ops.WAIT_CROSS_FLAG.name, {"event_id": empty}, span=span), None))
            get.append(tirx.IfThenElse(i < loop.extent - 2, make_call(
                ops.SET_CROSS_FLAG.name, {"event_id": empty}, {"pipe": dst_pipe}, span), None))
        return put, get

    def _gemm(self, stmt, call, loop):
        cube, vec = [], []
        sub = {}
        for o in "AB":
            x = call.operands[o].buffer
            if x in self.shared_operands:
                put, get = self._channel(x, x, self.shadow[x], loop, "mte3", "mte2", stmt.span)
                vec += put
                cube += get
                sub[x] = self.shadow[x]
        c = call.operands["C"].buffer
        if c in self.shadow:
            sub[c] = self.shadow[c]
        gemm = tvm_ffi.structural_map(stmt, (tirx.Buffer, lambda b: sub.get(b, b)))
        if c not in self.per_gemm:
            return cube + [gemm], vec
        if not call.attrs["clear_accum"]:  # a fresh product each time; the vector core adds
            new = decode(gemm)
            gemm = make_call("gemm", new.operands, {**new.attrs, "clear_accum": True},
                             span=stmt.span)
        put, get = self._channel(c, self.shadow[c], self.tmp[c], loop, "fix", "mte2", stmt.span)
        part = Region.full(self.tmp[c])
        if call.attrs["clear_accum"]:
            combine = make_call("copy", {"src": part, "dst": Region.full(c)}, span=stmt.span)
        else:
            # the vector path's add: one instruction, or one per row of a padded tile
            combine = make_call(ops.VBIN.name, {"dst": Region.full(c), "src0": Region.full(c),
                                                "src1": part}, {"op": "add"}, span=stmt.span)
        return cube + [gemm] + put, vec + get + [combine]

    def _dual(self, stmt, call, loop):
        """(cube, vector) statements of a ``T.dual_copy``: vector sub-core ``vid`` moves its
        half of the full tile along ``axis``. GM <-> UB is the vector core's own copy; L0C ->
        UB is the cube's dual-destination Fixpipe into both sub-cores' UB, then a cross-core
        flag, where :func:`dual_destination` allows it, else a workspace (the cube's Fixpipe
        writes the whole tile, each sub-core reads its half); UB -> L1 goes through a
        workspace too (each sub-core writes its half, the cube waits for both and loads the
        whole tile into L1 in its NZ layout)."""
        src, dst = call.operands["src"], call.operands["dst"]
        axis = int(call.attrs["axis"])
        scopes = str(src.buffer.scope()), str(dst.buffer.scope())
        route = DUAL_COPY_PATHS[scopes].route
        copy = functools.partial(make_call, "copy", span=stmt.span)
        if route == "subcore" and scopes[0] == GM:
            return [], [copy({"src": half(src, axis, self.vid), "dst": dst})]
        if route == "subcore":
            return [], [copy({"src": src, "dst": half(dst, axis, self.vid)})]
        name = f"{src.buffer.name}_{dst.buffer.name}"
        if route == "fixpipe" and dual_destination(src, axis):
            full = self._flag_id(stmt.span)
            cube = [make_call(ops.DUAL_FIXPIPE.name, {"src": src, "dst": dst}, {"axis": axis},
                              stmt.span),
                    make_call(ops.SET_CROSS_FLAG.name, {"event_id": full}, {"pipe": "fix"},
                              stmt.span)]
            vec = [make_call(ops.WAIT_CROSS_FLAG.name, {"event_id": full}, span=stmt.span)]
            if loop is not None:
                # the UB tile is written again next iteration: the cube waits until both
                # sub-cores are done with it, each releasing it after its last access of the
                # iteration (every pipe's, ordered by the synchronisation pass)
                empty = self._flag_id(stmt.span)
                i = loop.loop_var - loop.min
                cube.insert(0, tirx.IfThenElse(i >= 1, make_call(
                    ops.WAIT_CROSS_FLAG.name, {"event_id": empty}, span=stmt.span), None))
                self.tails.setdefault(loop, []).append(tirx.IfThenElse(
                    i < loop.extent - 1, make_call(
                        ops.RELEASE_CROSS_FLAG.name, {"event_id": empty, "tile": dst},
                        {"pipe": "v"}, stmt.span), None))
            return cube, vec
        if route == "fixpipe":  # the Fixpipe cannot split this N: the whole tile through GM
            return self._handoff(name, src, dst, tuple(src.extents), loop, ("fix", "mte2"),
                                 stmt.span, halves=(None, axis))
        vec, cube = self._handoff(name, src, dst, tuple(dst.extents), loop, ("mte3", "mte2"),
                                  stmt.span, halves=(axis, None))
        return cube, vec

    # -- the two programs -------------------------------------------------------------------
    def _guard(self, stmts):
        """Vector data work on AIV0 only; flags run on both vector cores."""
        out = []
        for s in stmts:
            if _is_sync(s):
                out.append(s)
            elif _is_loop(s):
                out.append(_loop_like(s, _seq(self._guard(_flat(s.body)))))
            else:
                out.append(tirx.IfThenElse(tirx.EQ(self.vid, 0), s, None))
        return out

    def _build(self, stmts, loop, top: bool):
        cube, vec = [], []
        for index, s in enumerate(stmts):
            if top:
                for acc, at in self.handoff_at.items():
                    if at == index:
                        put, get = self._channel(acc, self.shadow[acc], acc, None, "fix", "mte2",
                                                 s.span)
                        cube += put
                        vec += get
            if _is_loop(s):
                if loop is not None and any(c.name == "gemm" for c in _calls(s)):
                    raise KernelError("the cube/vector split handles GEMMs at most one loop "
                                      "deep; flatten the loops around this T.gemm",
                                      span_location(s.span))
                c, v = self._build(_flat(s.body), s, False)
                v += self.tails.pop(s, [])
                if c:
                    cube.append(_loop_like(s, _seq(c)))
                if v:
                    fresh = tirx.Var(str(s.loop_var.name), s.loop_var.ty)
                    body = tvm_ffi.structural_map(_seq(v), (tirx.Var, lambda x, lv=s.loop_var,
                                                            f=fresh: f if x.same_as(lv) else x))
                    vec.append(_loop_like(s, body, fresh))
                continue
            call = decode(s)
            gemm_under = call is None and any(c.name == "gemm" for c in _calls(s))
            tiles = sorted(b.name for b in loads_and_stores(s.condition)[0]
                           if str(b.scope()) != GM) \
                if gemm_under and isinstance(s, tirx.IfThenElse) else []
            if tiles:
                raise KernelError(f"this condition around a T.gemm reads the tile "
                                  f"{tiles[0]!r}, which only the vector core holds: backend "
                                  "'ascend' does not compile a GEMM under it",
                                  span_location(s.span))
            if gemm_under:
                raise KernelError("the cube/vector split handles T.gemm at the top level of the "
                                  "kernel or one loop deep, not under a condition or a let "
                                  "(as T.Persistent produces); backend 'ascend' does not "
                                  "compile this kernel", span_location(s.span))
            if call is not None and call.name == ops.DUAL_COPY.name:
                c, v = self._dual(s, call, loop)
                cube += c
                vec += v
                continue
            if call is not None and call.name == "gemm":
                c, v = self._gemm(s, call, loop)
                cube += c
                vec += v
                continue
            cube_only = [b for b in self.accumulators if b not in self.per_gemm and not (
                b in self.handoff_at and (not top or index >= self.handoff_at[b]))]
            if self._leaf_core(s, cube_only) == "C":
                cube.append(tvm_ffi.structural_map(
                    s, (tirx.Buffer, lambda b: self.shadow.get(b, b)
                        if b in self.accumulators else b)))
            else:
                vec.append(s)
        return cube, vec

    def run(self):
        """(cube statements, vector statements)."""
        cube, vec = self._build(self.stmts, None, True)
        if self.sids:  # T.MixedKernel: the vector code is written per sub-core
            return cube, vec if self.sids == 2 else self._guard(vec)
        tiles = [b for b in _ordered(vec) if b in self.local]
        halves = split_rows(vec, tiles, self.vid)
        if halves is None:
            return cube, self._guard(vec)
        self.row_halves = halves[1]
        return cube, halves[0]


def _loop_like(loop, body, var=None):
    return tirx.For(var if var is not None else loop.loop_var, loop.min, loop.extent,
                    loop.kind, body, annotations=loop.annotations, span=loop.span)


def half(region: Region, axis: int, vid) -> Region:
    """Vector sub-core ``vid``'s half of ``region`` along ``axis``."""
    size = region.extents[axis] // 2
    starts, extents = list(region.starts), list(region.extents)
    starts[axis] = starts[axis] + vid * size
    extents[axis] = size
    return Region(region.buffer, tuple(starts), tuple(extents))


def dual_destination(src: Region, axis: int) -> bool:
    """Whether the L0C -> UB ``T.dual_copy`` of ``src`` split along ``axis`` is one Fixpipe
    into both sub-cores' UB: an M split, or an N split with N a multiple of 32
    (``FixpipeL0cToUB`` of dav_3510; M is even already). In a loop the cube waits, before each
    Fixpipe but the first, for both sub-cores to release their UB tile at the end of the
    previous iteration (``release_cross_flag``)."""
    n = src.extents[-1]
    m_split = axis == len(src.extents) - 2
    return m_split or (isinstance(n, tirx.IntImm) and int(n) % 32 == 0)


def _dual_copy(stmt):
    call = decode(stmt)
    return call if call is not None and call.name == ops.DUAL_COPY.name else None


def _is_sync(stmt) -> bool:
    """A cross-core flag, or one under the iteration condition of a looped channel."""
    call = decode(stmt.then_case if isinstance(stmt, tirx.IfThenElse) else stmt)
    return call is not None and call.name in ops.SYNC_OPS


def _calls(stmt) -> list:
    return tile_ops_in(stmt)


def _leaves(stmts):
    for s in stmts:
        if _is_loop(s):
            yield from _leaves(_flat(s.body))
        elif isinstance(s, tirx.SeqStmt):
            yield from _leaves(list(s.seq))
        else:
            yield s
