"""Automatic synchronisation for Ascend kernels written without flags.

A kernel (or ``T.Scope`` body) that uses no ``set_flag``/``wait_flag``/barrier gets them
inserted here, at buffer granularity:

- each tile op is a list of accesses (pipe, buffer, read/write), from the op's data path;
  a serial loop or branch is one item whose accesses are its body's;
- for every access, the nearest earlier conflicting access (at least one write) of each other
  pipe is a dependency; in a loop body the search wraps around to the previous iteration
  (a loop-carried dependency);
- a dependency P -> C becomes ``SetFlag<P_C>`` right after the producer and ``WaitFlag<P_C>``
  right before the consumer, so the two pipes overlap in between; a loop-carried one is set
  at the end of its producer, waited before its consumer, raised once before the loop and
  drained once after it;
- a dependency implied by another of the same event (a later producer on the same pipe whose
  consumer comes no later) is pruned; same-pipe dependencies of the vector or cube pipes get a
  ``PipeBarrier``;
- every remaining dependency takes its own event id, 0-7 per event; more is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.errors import KernelError, span_location
from tilewright.ir import decode, make_call, tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from . import ops
from .language.dialect import SCOPE_KEY
from .passes import PLAN_KEY
from .sync import HARD_EVENTS
from .vector import SCALAR_KEY

VERSION_KEY = "ascend.versions"  # set by the multi-buffering pass

_COPY_PIPE = {("global", "ascend.ub"): "mte2", ("global", "ascend.l1"): "mte2",
              ("ascend.ub", "global"): "mte3", ("ascend.l1", "ascend.l0a"): "mte1",
              ("ascend.l1", "ascend.l0b"): "mte1", ("ascend.l0c", "global"): "fix",
              ("ascend.ub", "ascend.ub"): "v"}


@dataclass(frozen=True)
class Access:
    pipe: str
    buffer: str
    write: bool


def _loads_stores(stmt):
    import tvm
    import tvm_ffi

    loads, stores = [], []
    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, lambda x: loads.append(x.source.name)),
                                   (tirx.BufferStore, lambda x: stores.append(x.buffer.name))])
    return loads, stores


def accesses(stmt) -> list[Access]:
    """What ``stmt`` reads and writes, on which pipe (on-chip buffers only)."""
    call = decode(stmt)
    if call is not None:
        return _op_accesses(call)
    if isinstance(stmt, tirx.For) and SCALAR_KEY in stmt.annotations:  # GetValue/SetValue
        loads, stores = _loads_stores(stmt)
        return [Access("s", str(b), False) for b in loads] + \
            [Access("s", str(b), True) for b in stores]
    if isinstance(stmt, tirx.For) and str(stmt.annotations.get("tw.loop", "")) == "parallel":
        loads, stores = _loads_stores(stmt)
        return [Access("v", str(b), False) for b in loads] + \
            [Access("v", str(b), True) for b in stores]
    out = []
    for child in _children(stmt):
        out.extend(accesses(child))
    return out


def _children(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.For):
        return [stmt.body]
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, tirx.AttrStmt):
        return [stmt.body]
    return []


def _op_accesses(call) -> list[Access]:
    name = call.name
    if name == "copy":
        src, dst = call.operands["src"], call.operands["dst"]
        pipe = _COPY_PIPE.get((str(src.buffer.scope()), str(dst.buffer.scope())))
        if pipe is None:
            return []  # the codegen reports the missing data path
        return [Access(pipe, str(src.buffer.name), False), Access(pipe, str(dst.buffer.name), True)]
    if name == "ascend.gemm_v0":
        return [Access("mte1", str(call.operands["A"].buffer.name), False),
                Access("mte1", str(call.operands["B"].buffer.name), False),
                Access("m", str(call.operands["C"].buffer.name), False),
                Access("m", str(call.operands["C"].buffer.name), True)]
    if name == "ascend.mma":
        return [Access("m", str(call.operands[o].buffer.name), o == "C") for o in "ABC"] + \
            [Access("m", str(call.operands["C"].buffer.name), False)]
    if name == "ascend.dump_tensor":
        return [Access("s", str(call.operands["src"].buffer.name), False)]
    if name == "ascend.tile.vbrc" and call.attrs["axis"] == "row":  # row scalars: GetValue
        return [Access("s", str(call.operands["vec"].buffer.name), False),
                Access("v", str(call.operands["src"].buffer.name), False),
                Access("v", str(call.operands["dst"].buffer.name), True)]
    if name.startswith("atomic_") and hasattr(call.operands["src"], "buffer"):
        return [Access("mte3", str(call.operands["src"].buffer.name), False)]
    if name == "print_tile":
        return [Access("s", str(call.operands["buf"].buffer.name), False)]
    if name.startswith("ascend.tile."):
        return [Access("v", str(r.buffer.name), o == "dst")
                for o, r in call.operands.items() if hasattr(r, "buffer")]
    return []


def _global(name: str, scopes: dict) -> bool:
    return scopes.get(name, "global") == "global"


class _Inserter:
    def __init__(self, scopes: dict, plan: dict | None = None):
        self.scopes = scopes
        self.next_id: dict[str, int] = {}
        # buffers the memory plan lets share bytes conflict like one buffer
        self.aliases: set[tuple[str, str]] = set()
        items = list((plan or {}).items())
        for i, (x, (sx, ox, nx)) in enumerate(items):
            for y, (sy, oy, ny) in items[i + 1:]:
                if sx == sy and ox < oy + ny and oy < ox + nx:
                    self.aliases |= {(x, y), (y, x)}

    def same(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.aliases

    def event_id(self, event: str, span) -> int:
        n = self.next_id.get(event, 0)
        if n >= 8:
            raise KernelError(f"automatic synchronisation needs more than 8 flags of event "
                              f"{event}; split the kernel or synchronise it by hand",
                              span_location(span))
        self.next_id[event] = n + 1
        return n

    def deps(self, items, looped: bool, versions: dict):
        """(producer index, consumer index, P, C, carried, versions) for a sequence of items;
        ``versions`` is the stage count of the buffer (1 when it is not multi-buffered)."""
        acc = [[a for a in accesses(s) if not _global(a.buffer, self.scopes)] for s in items]
        found = []
        n = len(items)
        for j in range(n):
            for a in acc[j]:
                seen_pipes = set()
                order = list(range(j - 1, -1, -1))
                if looped:
                    order += list(range(n - 1, j - 1, -1))
                for i in order:
                    for b in acc[i]:
                        if not self.same(a.buffer, b.buffer) or not (a.write or b.write) or \
                                b.pipe in seen_pipes:
                            continue
                        seen_pipes.add(b.pipe)
                        found.append((i, j, b.pipe, a.pipe, i >= j,
                                      int(versions.get(a.buffer, 1))))
        return sorted(set(found))

    @staticmethod
    def prune(deps):
        kept = []
        for d in deps:
            i, j = d[0], d[1]
            implied = any(o != d and o[2:] == d[2:] and o[0] >= i and o[1] <= j for o in deps)
            if not implied:
                kept.append(d)
        return kept

    def sequence(self, stmts: list, looped: bool, loop=None):
        """Rewrite a list of statements (one loop body or scope body); returns (stmts,
        prologue, epilogue) where the last two wrap a loop for its carried flags."""
        versions = dict(loop.annotations.get(VERSION_KEY, {})) if loop is not None else {}
        stmts = [self.visit(s) for s in stmts]
        before = [[] for _ in stmts]
        after = [[] for _ in stmts]
        prologue, epilogue = [], []
        for i, j, p, c, carried, stages in self.prune(self.deps(stmts, looped, versions)):
            span = stmts[j].span if hasattr(stmts[j], "span") else None
            if p == c:
                if p in ("v", "m") and not carried:
                    before[j].append(make_call(ops.PIPE_BARRIER.name, {}, {"pipe": p}, span))
                continue
            event = f"{p}_{c}".upper()
            if event not in HARD_EVENTS:
                before[j].append(make_call(ops.BARRIER_ALL.name, {}, {}, span))
                continue
            ids = [self.event_id(event, span) for _ in range(stages)]
            flag = {"src": p, "dst": c}
            eid = tirx.IntImm("int32", ids[0])
            if stages > 1:  # one flag per buffer version: id = base + iteration % stages
                eid = eid + tirx.floormod(loop.loop_var - loop.min,
                                          tirx.IntImm("int32", stages))
            after[i].append(make_call(ops.SET_FLAG.name, {"event_id": eid}, flag, span))
            before[j].append(make_call(ops.WAIT_FLAG.name, {"event_id": eid}, flag, span))
            if carried:
                for n in ids:
                    fixed = {"event_id": tirx.IntImm("int32", n)}
                    prologue.append(make_call(ops.SET_FLAG.name, fixed, flag, span))
                    epilogue.append(make_call(ops.WAIT_FLAG.name, fixed, flag, span))
        out = []
        for b, s, a in zip(before, stmts, after):
            out.extend(b)
            out.extend(s.seq if isinstance(s, tirx.SeqStmt) else [s])
            out.extend(a)
        return out, prologue, epilogue

    def visit(self, stmt):
        if isinstance(stmt, tirx.For) and str(stmt.annotations.get("tw.loop", "")) in \
                ("serial", "pipelined", "unroll"):
            body, pro, epi = self.sequence(_flat(stmt.body), looped=True, loop=stmt)
            loop = tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, tirx.SeqStmt(body)
                            if len(body) > 1 else body[0], annotations=stmt.annotations,
                            span=stmt.span)
            return tirx.SeqStmt([*pro, loop, *epi]) if pro else loop
        if isinstance(stmt, tirx.IfThenElse):  # each branch is synchronised on its own
            then, _, _ = self.sequence(_flat(stmt.then_case), looped=False)
            other = None
            if stmt.else_case is not None:
                other, _, _ = self.sequence(_flat(stmt.else_case), looped=False)
                other = tirx.SeqStmt(other) if len(other) > 1 else other[0]
            return tirx.IfThenElse(stmt.condition, tirx.SeqStmt(then) if len(then) > 1
                                   else then[0], other, span=stmt.span)
        return stmt


def _flat(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def has_manual_sync(func) -> bool:
    """Whether the kernel has hand-written intra-core synchronisation (cross-core flags, which
    order whole cores, do not count)."""
    cross = (ops.SET_CROSS_FLAG.name, ops.WAIT_CROSS_FLAG.name)
    return any(c.name in ops.SYNC_OPS and c.name not in cross for c in tile_ops_in(func))


def _rewrite_scopes(stmt, inserter):
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SCOPE_KEY:
        body, _, _ = inserter.sequence(_flat(stmt.body), looped=False)
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, tirx.SeqStmt(body)
                             if len(body) > 1 else body[0], span=stmt.span)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_rewrite_scopes(s, inserter) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                        _rewrite_scopes(stmt.body, inserter), thread_binding=stmt.thread_binding,
                        annotations=stmt.annotations, span=stmt.span)
    return stmt


def insert_sync():
    """The pass: kernels with hand-written synchronisation are left untouched."""

    def run(func):
        if has_manual_sync(func):
            return func
        from .passes import allocations

        scopes = {str(a.buffer.name): str(a.buffer.scope()) for a in allocations(func)}
        plan = {str(k): (str(v[0]), int(v[1]), int(v[2]))
                for k, v in (func.attrs.get(PLAN_KEY) or {}).items()}
        return func.with_body(_rewrite_scopes(func.body, _Inserter(scopes, plan)))

    return prim_func_pass("AscendInsertSync", run)
