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

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region, decode, make_call
from tvm import tirx

from . import ops
from .rowsplit import split_rows

MAX_CROSS_ID = 10
WORKSPACES_KEY = "ascend.workspaces"


def _flat(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _seq(stmts):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _is_loop(stmt) -> bool:
    return isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING and \
        str(stmt.annotations.get("tw.loop", "")) != "parallel"


def _buffers(stmt) -> set[str]:
    found = set()

    def add(b):
        if isinstance(b, tirx.Buffer):
            found.add(str(b.name))

    tvm_ffi.structural_walk(stmt, (tirx.Buffer, add))
    return found


def _written(stmt) -> set[str]:
    call = decode(stmt)
    if call is not None:
        return {str(r.buffer.name) for r in call.regions("write")}
    found = set()
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda s: found.add(str(s.buffer.name))))
    return found


def _is_zero_fill(call) -> bool:
    value = call.operands.get("value")
    return call.name == "fill" and isinstance(value, (tirx.IntImm, tirx.FloatImm)) and \
        value.value == 0


class Split:
    """Splits one kernel body; see the module doc."""

    def __init__(self, stmts: list, buffers: dict, cid, vid, blocks: int):
        self.stmts, self.buffers, self.cid, self.vid = stmts, buffers, cid, vid
        self.blocks = blocks
        self.next_id = 0
        self.workspaces: list = []
        self.new_allocs: list = []
        self.scopes: dict[str, str] = {}
        gemms = [c for s in stmts for c in _calls(s) if c.name == "gemm"]
        self.operands = {str(c.operands[o].buffer.name) for c in gemms for o in "AB"}
        self.accumulators = {str(c.operands["C"].buffer.name) for c in gemms}
        self.shared_operands: set[str] = set()  # known after the first classification
        self.vector_touched = set()
        self.has_vector = False  # whether the kernel needs the vector cores at all
        for leaf in _leaves(stmts):
            if self._leaf_core(leaf, cube_only=self.accumulators) == "V":
                self.vector_touched |= _buffers(leaf)
                self.has_vector = True
        self.shared_operands = self.operands & self.vector_touched
        shared_acc = self.accumulators & self.vector_touched
        # accumulators whose vector uses all follow their last GEMM: one handoff
        self.handoff_at: dict[str, int] = {}
        for name in shared_acc:
            gemm_at = [i for i, s in enumerate(stmts)
                       if any(c.name == "gemm" and str(c.operands["C"].buffer.name) == name
                              for c in _calls(s))]
            vec_at = [i for i, s in enumerate(stmts) if not self._zero_fill_of(s, name) and
                      any(name in _buffers(leaf) and self._leaf_core(
                          leaf, cube_only=self.accumulators) == "V" for leaf in _leaves([s]))]
            if vec_at and min(vec_at) > max(gemm_at):
                self.handoff_at[name] = min(vec_at)
        self.per_gemm = shared_acc - set(self.handoff_at)
        self.row_halves: dict[str, list] = {}  # vector buffers split over AIV0/AIV1
        self.shadow = {}
        for name in self.shared_operands:
            self.shadow[name] = self._new_buffer(name, "l1", "ascend.l1")
        for name in shared_acc:
            self.shadow[name] = self._new_buffer(name, "l0c", "ascend.l0c")
        for name in self.vector_touched & (self.operands | self.accumulators):
            self.scopes[name] = "ascend.ub"
        self.tmp = {name: self._new_buffer(name, "part", "ascend.ub") for name in self.per_gemm}

    # -- classification -------------------------------------------------------------------
    @staticmethod
    def _zero_fill_of(stmt, name) -> bool:
        call = decode(stmt)
        return call is not None and _is_zero_fill(call) and \
            str(call.operands["dst"].buffer.name) == name

    def _leaf_core(self, leaf, cube_only) -> str:
        call = decode(leaf)
        if call is None:
            return "V"
        if call.name == "gemm":
            return "C"
        if call.name == "copy":
            src, dst = call.operands["src"], call.operands["dst"]
            s, d = str(src.buffer.scope()), str(dst.buffer.scope())
            if s == "global" and str(dst.buffer.name) in self.operands and \
                    str(dst.buffer.name) not in self.shared_operands:
                return "C"
            if d == "global" and str(src.buffer.name) in cube_only:
                return "C"
        if call.name == "fill" and _is_zero_fill(call) and \
                str(call.operands["dst"].buffer.name) in cube_only:
            return "C"
        return "V"

    def _new_buffer(self, name: str, suffix: str, scope: str):
        old = self.buffers[name]
        buf = tirx.decl_buffer(old.shape, old.dtype, f"{name}_{suffix}", scope="shared")
        self.buffers[str(buf.name)] = buf
        self.scopes[str(buf.name)] = scope
        self.new_allocs.append(tirx.AllocBuffer(buf))
        return buf

    # -- handoffs ---------------------------------------------------------------------------
    def _flag_id(self, span) -> tirx.IntImm:
        if self.next_id > MAX_CROSS_ID:
            raise KernelError("the cube/vector split of this kernel needs more than 11 "
                              "cross-core flags (ids 0-10); use fewer GEMMs per loop",
                              span_location(span))
        self.next_id += 1
        return tirx.IntImm("int32", self.next_id - 1)

    def _channel(self, buf, src, dst, loop, src_pipe, dst_pipe, span):
        """(producer statements, consumer statements) moving ``src`` to ``dst`` through a
        fresh workspace; ``src_pipe``/``dst_pipe`` write and read the workspace."""
        slots = 2 if loop is not None else 1
        ws = tirx.decl_buffer((self.blocks, slots, *buf.shape), buf.dtype,
                              f"ws_{buf.name}_{len(self.workspaces)}", scope="global")
        self.workspaces.append(ws)
        slot = tirx.floormod(loop.loop_var - loop.min, 2) if loop is not None else \
            tirx.IntImm("int32", 0)
        zeros = [tirx.IntImm("int32", 0)] * len(buf.shape)
        region = Region(ws, (self.cid, slot, *zeros), (1, 1, *buf.shape))
        full = self._flag_id(span)
        put = [make_call("copy", {"src": Region.full(src), "dst": region}, span=span),
               make_call(ops.SET_CROSS_FLAG.name, {"event_id": full}, {"pipe": src_pipe},
                         span)]
        get = [make_call(ops.WAIT_CROSS_FLAG.name, {"event_id": full}, span=span),
               make_call("copy", {"src": region, "dst": Region.full(dst)}, span=span)]
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
            if str(x.name) in self.shared_operands:
                put, get = self._channel(x, x, self.shadow[str(x.name)], loop, "mte3", "mte2",
                                         stmt.span)
                vec += put
                cube += get
                sub[x] = self.shadow[str(x.name)]
        c = call.operands["C"].buffer
        name = str(c.name)
        if name in self.shadow:
            sub[c] = self.shadow[name]
        gemm = tvm_ffi.structural_map(stmt, (tirx.Buffer, lambda b: sub.get(b, b)))
        if name not in self.per_gemm:
            return cube + [gemm], vec
        if not call.attrs["clear_accum"]:  # a fresh product each time; the vector core adds
            new = decode(gemm)
            gemm = make_call("gemm", new.operands, {**new.attrs, "clear_accum": True},
                             span=stmt.span)
        put, get = self._channel(c, self.shadow[name], self.tmp[name], loop, "fix", "mte2",
                                 stmt.span)
        part = Region.full(self.tmp[name])
        if call.attrs["clear_accum"]:
            combine = make_call("copy", {"src": part, "dst": Region.full(c)}, span=stmt.span)
        else:
            combine = make_call("ascend.tile.add", {"dst": Region.full(c),
                                                    "src0": Region.full(c), "src1": part},
                                span=stmt.span)
        return cube + [gemm] + put, vec + get + [combine]

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
                for name, at in self.handoff_at.items():
                    if at == index:
                        put, get = self._channel(self.buffers[name], self.shadow[name],
                                                 self.buffers[name], None, "fix", "mte2",
                                                 s.span)
                        cube += put
                        vec += get
            if _is_loop(s):
                if loop is not None and any(c.name == "gemm" for c in _calls(s)):
                    raise KernelError("the cube/vector split handles GEMMs at most one loop "
                                      "deep; flatten the loops around this T.gemm",
                                      span_location(s.span))
                c, v = self._build(_flat(s.body), s, False)
                if c:
                    cube.append(_loop_like(s, _seq(c)))
                if v:
                    fresh = tirx.Var(str(s.loop_var.name), s.loop_var.ty)
                    body = tvm_ffi.structural_map(_seq(v), (tirx.Var, lambda x, lv=s.loop_var,
                                                            f=fresh: f if x.same_as(lv) else x))
                    vec.append(_loop_like(s, body, fresh))
                continue
            call = decode(s)
            if call is None and any(c.name == "gemm" for c in _calls(s)):
                raise KernelError("the cube/vector split handles T.gemm at the top level of the "
                                  "kernel or one loop deep, not under a condition or a let "
                                  "(as T.Persistent produces); backend 'ascend' does not "
                                  "compile this kernel", span_location(s.span))
            if call is not None and call.name == "gemm":
                c, v = self._gemm(s, call, loop)
                cube += c
                vec += v
                continue
            cube_only = self.accumulators - set(self.per_gemm) - \
                {n for n, at in self.handoff_at.items() if not top or index >= at}
            if self._leaf_core(s, cube_only) == "C":
                cube.append(tvm_ffi.structural_map(
                    s, (tirx.Buffer, lambda b: self.shadow.get(str(b.name), b)
                        if str(b.name) in self.accumulators else b)))
            else:
                vec.append(s)
        return cube, vec

    def run(self):
        """(cube statements, vector statements)."""
        cube, vec = self._build(self.stmts, None, True)
        names = {n for n in _buffer_names(vec) if n in self.buffers}
        halves = split_rows(vec, [self.buffers[n] for n in names], self.vid)
        if halves is None:
            return cube, self._guard(vec)
        self.row_halves = halves[1]
        return cube, halves[0]


def _loop_like(loop, body, var=None):
    return tirx.For(var if var is not None else loop.loop_var, loop.min, loop.extent,
                    loop.kind, body, annotations=loop.annotations, span=loop.span)


def _is_sync(stmt) -> bool:
    """A cross-core flag, or one under the iteration condition of a looped channel."""
    call = decode(stmt.then_case if isinstance(stmt, tirx.IfThenElse) else stmt)
    return call is not None and call.name in ops.SYNC_OPS


def _buffer_names(stmts) -> set[str]:
    found = set()
    for s in stmts:
        found |= _buffers(s)
    return found


def _calls(stmt) -> list:
    from tilewright.ir import tile_ops_in

    return tile_ops_in(stmt)


def _leaves(stmts):
    for s in stmts:
        if _is_loop(s):
            yield from _leaves(_flat(s.body))
        elif isinstance(s, tirx.SeqStmt):
            yield from _leaves(list(s.seq))
        else:
            yield s
