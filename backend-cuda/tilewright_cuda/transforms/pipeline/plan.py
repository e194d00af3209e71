"""What a ``T.Pipelined`` loop is made of: its statements, which are producers (copies from
global into shared memory), the order they issue in, the versioned tiles, the copies' TMA
choices, and what its wgmma gemms allow (a group kept in flight, barriers TMA makes needless).
Both forms, cp.async (``pipeline/__init__``) and TMA (``pipeline/tma``), build on these."""

from __future__ import annotations

import warnings

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tvm import tirx

from ... import intrinsics, keys, layout
from ...analysis.accesses import producer_writes, shared
from ...analysis.ir import flat, loads_in, seq, touches, writes


def is_group_call(stmt) -> bool:
    """A cp.async commit or wait."""
    return isinstance(stmt, tirx.Evaluate) and intrinsics.role(stmt) == "group"


def strip_groups(stmt):
    """A producer without the commit/wait its copy rule added (the pipeline places them)."""
    if isinstance(stmt, tirx.SeqStmt):
        return seq([s for s in stmt.seq if not is_group_call(s)])
    return stmt


class Versioned:
    """Rewrites accesses of the versioned tiles: ``X[idx]`` -> ``Xv[version, idx]``."""

    def __init__(self, buffers: list, stages: int):
        self.old = buffers
        self.new = [layout.reshaped(b, (stages, *b.shape)) for b in buffers]

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


def hint(loop, key: str):
    """The loop's ``stage=`` or ``order=`` (``key``), one entry per statement of its body; None
    where it has none or gives them per ``group=`` of statements. Those are TileLang's
    schedule of the compute statements themselves (a warp-specialised software pipeline of
    gemms and softmax), which this backend does not implement: it pipelines the copies by
    itself, as without the hints (the results are the same), and says so."""
    value = loop.annotations.get(key)
    if value is None:
        return None
    if keys.GROUP in loop.annotations:
        warnings.warn(f"{span_location(loop.span) or 'T.Pipelined'}: the CUDA backend does not "
                      "schedule groups of compute statements (T.Pipelined group=); it ignores "
                      "order= and stage= there and pipelines the loop's copies by itself",
                      RuntimeWarning, stacklevel=2)
        return None
    return [int(x) for x in value]


def statements(loop):
    """(statements, indices of the producers) of a pipelined loop's body."""
    body = loop.body
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    # the copy rules' own commit/wait (flattened into the body) give way to the pipeline's
    stmts = [s for s in stmts if not is_group_call(s)]
    stage = hint(loop, keys.STAGE)
    if stage is None:
        return stmts, [i for i, s in enumerate(stmts)
                       if not branched(s) and producer_writes(resolve(s)) is not None]
    if len(stage) != len(stmts):
        raise KernelError(f"T.Pipelined stage= has {len(stage)} entries but the loop body has "
                          f"{len(stmts)} statements", span_location(loop.span))
    producers = [i for i, x in enumerate(stage) if x == 0]
    for i in producers:
        if producer_writes(resolve(stmts[i])) is None:
            raise KernelError(f"T.Pipelined stage 0 statement #{i} is not a copy from global "
                              "into shared memory; the CUDA backend prefetches only such "
                              "copies", span_location(loop.span))
    return stmts, producers


def branched(stmt) -> bool:
    """Whether ``stmt``, a statement of a pipelined loop's body, is a branch of the kernel (an
    ``if`` around copies, not a copy's TMA choice): its copies may not run in every iteration.
    Such copies are not prefetched and their tiles keep one version, as TileLang plans them
    (its PipelinePlanning: a conditionally executed copy advances no stage and is no async
    producer); block-causal varlen attention's dQ kernel loads K and V under
    ``if is_noisy_diag != 0``."""
    return isinstance(stmt, tirx.IfThenElse) and not is_choice(stmt)


def issue_order(loop, count: int) -> list[int]:
    order = hint(loop, keys.ORDER)
    if order is None:
        return list(range(count))
    if sorted(order) != list(range(count)):
        raise KernelError(f"T.Pipelined order= must be a permutation of 0..{count - 1}, got "
                          f"{order}", span_location(loop.span))
    return sorted(range(count), key=lambda i: order[i])


def is_choice(stmt) -> bool:
    """Whether ``stmt`` is a copy's choice between its TMA and cp.async forms (rules/tma)."""
    return isinstance(stmt, tirx.IfThenElse) and \
        intrinsics.extern_name(stmt.condition) == "tw_tma_choice"


def resolve(stmt, take_tma: bool = False):
    """``stmt`` with every choice replaced by one of its branches."""
    def visit(s):
        if not is_choice(s):
            return s
        return s.then_case if take_tma else s.else_case

    return tvm_ffi.structural_map(stmt, (tirx.IfThenElse, visit))


def set_barrier(stmt, barrier):
    """``stmt`` with the stage-barrier placeholder replaced by ``barrier`` (an address)."""
    return tvm_ffi.structural_map(stmt, (tvm.ir.Call, lambda c: barrier if
                                         intrinsics.extern_name(c) == "tw_stage_barrier" else c))


def without_wgmma_barriers(stmts: list, producers: list, tma_tiles: list) -> list:
    """The loop body's statements with None for each ``fence.proxy.async; __syncthreads``
    pair right before a wgmma whose operands are TMA tiles (made visible by their mbarrier)
    or tiles no consumer writes (fenced before the loop, ordered by the iteration's
    barrier)."""
    consumers = [s for k, s in enumerate(stmts) if k not in producers]
    kept = list(stmts)
    for k, s in enumerate(stmts):
        if k < 2 or k in producers or not isinstance(s, tirx.Evaluate) or \
                not wgmma_calls(s) or not intrinsics.is_sync(stmts[k - 1]) or \
                intrinsics.role(stmts[k - 2]) != "fence_async":
            continue
        operands = [buf for c in wgmma_calls(s) for arg in c.args[1:3]
                    for buf in loads_in(arg) if shared(buf)]
        if all(any(buf.same_as(t) for t in tma_tiles) or
               not any(writes(c, [buf]) for c in consumers) for buf in operands):
            kept[k - 1] = kept[k - 2] = None
    return kept


def one_barrier_for_wgmma(steady: list) -> list:
    """``wait; sync; refill; commit; fence.proxy.async; sync; wgmma ...`` (a wgmma gemm
    first among the consumers) -> ``wait; fence.proxy.async; sync; refill; commit; wgmma``:
    each thread's landed copies of this stage are fenced to the async proxy before the
    iteration's barrier, which then serves the wgmma too (the refill writes another
    version). One block-wide barrier per k-tile instead of two."""
    items = flat(steady)
    if len(items) < 6 or not intrinsics.is_sync(items[1]) or \
            intrinsics.extern_name(items[3]) != "tw_cp_async_commit":
        return steady
    fence, barrier, rest = items[4], items[5], items[6:]
    if not (intrinsics.role(fence) == "fence_async" and intrinsics.is_sync(barrier) and rest and
            wgmma_calls(rest[0])):
        return steady
    return [items[0], fence, items[1], items[2], items[3], *rest]


def wgmma_calls(stmt) -> list:
    """The wgmma gemm calls of ``stmt``."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if
                                   intrinsics.role(c) == "wgmma" else None))
    return found


def owned_registers(consumers: list) -> list:
    """The loop's wgmma gemm calls whose group reads registers of the call's own
    (``own_registers``: wgmma.sp's metadata, dead once the call returns)."""
    return [c for s in consumers for c in wgmma_calls(s) if intrinsics.of(c).own_registers]


def carries_wgmma_groups(consumers: list) -> bool:
    """Whether the loop body, followed in program order, ends with wgmma groups in flight:
    hand-issued groups (``T.wgmma_gemm``) that a ``T.wait_wgmma(n)`` with n > 0 leaves to
    the next iteration (W4A16's ``overlap_dequant``: the newest k-tile's). Such a group may
    still read the iteration's versions of the tiles when the next iteration starts."""
    pending = 0

    def visit(call):
        nonlocal pending
        if intrinsics.role(call) == "wgmma":
            pending += 1
        elif intrinsics.role(call) == "wgmma_wait":
            pending = min(pending, intrinsics.groups_left(call))

    for s in consumers:
        tvm_ffi.structural_walk(s, (tvm.ir.Call, visit))
    return pending > 0


def wgmma_can_overlap(consumers: list, tiles: list) -> bool:
    """Whether the loop's wgmma gemms may leave their group in flight into the next
    iteration: each reads only the pipelined tiles or shared tiles nothing in the loop
    writes, and its accumulator is touched by nothing else in the loop (not cleared, not
    read element-wise as FlashAttention's scores are). A gemm whose group reads registers of
    its own (``owned_registers``) may only where it is the loop's one wgmma gemm, its
    registers then the loop's (``HeldRegisters``); left in the call, the next iteration's
    code would reuse them under the wgmma.sp in flight."""
    calls = [c for s in consumers for c in wgmma_calls(s)]
    if not calls or (owned_registers(consumers) and len(calls) > 1):
        return False
    without = [tvm_ffi.structural_map(s, (tirx.Evaluate, lambda e: tirx.Evaluate(0) if
                                          wgmma_calls(e) else e)) for s in consumers]
    for call in calls:
        a, b, acc = (loads_in(arg) for arg in call.args[1:4])
        for buf in a + b:
            if not any(buf.same_as(t) for t in tiles) and any(writes(s, [buf])
                                                            for s in consumers):
                return False
        if any(touches(s, acc) for s in without):
            return False
    return True


class HeldRegisters:
    """The registers a loop's one wgmma.sp gemm keeps its metadata in while its group stays in
    flight (``intrinsics.hold_sparse_metadata``): two sets, the even iterations' and the odd
    ones', so that a k-tile's wgmma.sp never reads a register the next k-tile writes."""

    def __init__(self, call, loop_var):
        steps = intrinsics.sparse_metadata_steps(call)
        self.loop_var = loop_var
        self.even, self.odd = (tirx.decl_buffer((steps,), "uint32", f"sp_meta_{name}",
                                                scope="local") for name in ("even", "odd"))

    def rewrite(self, stmt):
        """``stmt`` (a consumer that waits for all but its own group) with its wgmma.sp on the
        held registers, picked by the parity of the iteration, and each wait followed by
        ``keep``."""
        def visit(e):
            if intrinsics.role(e) == "wgmma":
                return tirx.Evaluate(intrinsics.hold_sparse_metadata(
                    e.value, self.even, self.odd, tirx.floormod(self.loop_var, 2)))
            if intrinsics.role(e) == "wgmma_wait":
                return tirx.SeqStmt([e, self.keep()])
            return e

        return tvm_ffi.structural_map(stmt, (tirx.Evaluate, visit))

    def keep(self) -> tirx.Stmt:
        return intrinsics.keep_sparse_metadata(self.even, self.odd)

    def start(self) -> list:
        """The two sets' allocations, zeroed (the first waits keep the set no group wrote
        yet), before the loop's prologue."""
        return [tirx.AllocBuffer(self.even), tirx.AllocBuffer(self.odd),
                *(tirx.BufferStore(buf, tirx.const(0, "uint32"), [tirx.const(j, "int32")])
                  for buf in (self.even, self.odd) for j in range(int(buf.shape[0])))]


def keep_one_wgmma_group(stmt):
    """A consumer whose gemms wait for all but their own wgmma group (``wait_group 1``)."""
    def visit(e):
        return intrinsics.wgmma_wait(1) if intrinsics.waits_all(e, "wgmma_wait") else e

    return tvm_ffi.structural_map(stmt, (tirx.Evaluate, visit))
