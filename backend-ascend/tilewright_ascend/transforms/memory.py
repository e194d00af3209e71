"""Memory scopes and memory planning.

Planning gives every on-chip buffer a byte offset in its memory (aligned as the memory
requires, ``T.annotate_address`` placements first, then first-fit by live range so that buffers
never live at the same time share bytes) and records the plan as the function attribute
:data:`..facts.keys.PLAN_KEY`: ``[buffer, scope, offset, bytes]`` per buffer. The L0A/L0B
staging tiles of each ``T.gemm_v0`` are buffers the plan creates (:data:`STAGING_KEY`). A plan
that exceeds a memory, or a placement that breaks alignment, is a compile-time error naming the
buffer, its bytes and the limit.
"""

from __future__ import annotations

import dataclasses

from tilewright.errors import KernelError, span_location
from tilewright.ir import tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.accesses import has_manual_sync, has_simt
from ..analysis.buffers import allocations, buffer_bytes
from ..analysis.gemm import gemm_calls, gemm_dims, gemm_k
from ..analysis.liveness import first_fit, live_ranges
from ..facts.arch import MEMORIES, short
from ..facts.keys import ADDRESS_KEY, PLAN_KEY, STAGING_KEY
from ..facts.ops import SCRATCH_OPS
from ..facts.simt import memories_with_simt

# the portable language's on-chip scopes: the portable phase maps each tile to an Ascend memory
# (T.alloc_var and reducers are one-element or plain UB tiles)
PORTABLE_SCOPES = {"shared", "shared.dyn", "local.fragment", "local", "local.var",
                   "local.reducer.sum", "local.reducer.max", "local.reducer.min",
                   "local.reducer.bitand", "local.reducer.bitor", "local.reducer.bitxor"}


def check_scopes(func) -> None:
    """Every buffer must be in an Ascend memory by now (the portable phase assigns them)."""
    for alloc in allocations(func):
        scope = str(alloc.buffer.scope())
        if scope in PORTABLE_SCOPES:
            raise KernelError(
                f"buffer {alloc.buffer.name!r} is in the portable scope {scope!r} but no Ascend "
                "memory could be inferred for it", span_location(alloc.span))
        if scope not in MEMORIES:
            raise KernelError(f"buffer {alloc.buffer.name!r} has scope {scope!r}, which backend "
                              f"'ascend' does not know ({', '.join(MEMORIES)})",
                              span_location(alloc.span))


def staging_buffers(func) -> list:
    """Fresh (L0A, L0B, span) staging tiles for each T.gemm_v0: one K step of op(A) (m x k)
    and of op(B) (k x n)."""
    out = []
    for n, call in enumerate(gemm_calls(func)):
        (m, nn), kl0 = gemm_dims(call), gemm_k(call)[0]
        out.append((tirx.decl_buffer((m, kl0), call.operands["A"].buffer.dtype, f"gemm{n}_l0a",
                                     scope="ascend.l0a"),
                    tirx.decl_buffer((kl0, nn), call.operands["B"].buffer.dtype, f"gemm{n}_l0b",
                                     scope="ascend.l0b"),
                    call.span))
    return out


def _fixed_offsets(func) -> dict:
    loop = func.body
    if isinstance(loop, tirx.For) and ADDRESS_KEY in loop.annotations:
        return {str(k): int(v) for k, v in loop.annotations[ADDRESS_KEY].items()}
    return {}


def plan(func, staging, reuse: bool = True, memories=MEMORIES) -> dict:
    """buffer -> (scope, offset, bytes) for every on-chip buffer of ``func`` and the staging
    tiles ``staging`` of its GEMMs.

    ``T.annotate_address`` placements come first; the other buffers are placed first-fit by
    live range (:mod:`..analysis.liveness`), so buffers that are never live at the same time
    share bytes. In a kernel with hand-written intra-core flags every buffer stays live
    throughout (its flags name buffers, not bytes); so does every buffer when ``reuse`` is
    False. The staging tiles share a pool above the user's buffers, each live at its own GEMM.
    ``memories`` are the target architecture's (capacities differ between A2 and 950).
    """
    named = _fixed_offsets(func)
    user = [(a.buffer, str(a.buffer.scope()), buffer_bytes(a.buffer), a.span)
            for a in allocations(func)]
    fixed = {buf: named[str(buf.name)] for buf, *_ in user if str(buf.name) in named}
    hidden = [(buf, str(buf.scope()), buffer_bytes(buf), span)
              for pair in staging for buf, span in ((pair[0], pair[2]), (pair[1], pair[2]))]
    ranges = {} if not reuse or has_manual_sync(func) else \
        live_ranges(func.body, {it[0] for it in user})
    for buf, scope, size, span in user:
        align = MEMORIES[scope].align
        if buf in fixed and fixed[buf] % align:
            raise KernelError(f"buffer {buf.name!r} ({size} bytes) is placed at {short(scope)} "
                              f"offset {fixed[buf]}, which is not {align}-byte aligned",
                              span_location(span))
    result = {}
    for scope, memory in memories.items():
        mine = [it for it in user if it[1] == scope]
        offsets = first_fit([(b, size, ranges.get(b), fixed.get(b)) for b, _, size, _ in mine],
                            memory.align)
        top = max([offsets[b] + size for b, _, size, _ in mine] or [0])
        pool = [it for it in hidden if it[1] == scope]
        base = -(-top // memory.align) * memory.align
        offsets.update({b: base + o for b, o in first_fit(
            [(b, size, (i, i), None) for i, (b, _, size, _) in enumerate(pool)],
            memory.align).items()})
        for buf, _, size, span in mine + pool:
            offset, limit = offsets[buf], memory.capacity
            if offset + size > limit:
                total = max(offsets[b] + sz for b, _, sz, _ in mine + pool)
                raise KernelError(
                    f"buffer {buf.name!r} needs {size} bytes of {memory.short} at offset "
                    f"{offset}, but {memory.short} holds {limit} bytes (limit exceeded by "
                    f"{offset + size - limit} bytes; the plan needs {total} bytes with "
                    "buffers that are never live together sharing space)",
                    span_location(span))
            result[buf] = (scope, offset, size)
    return result


def read_plan(func) -> dict:
    """The memory plan of ``func``: buffer -> (scope, offset, bytes)."""
    return {entry[0]: (str(entry[1]), int(entry[2]), int(entry[3]))
            for entry in (func.attrs.get(PLAN_KEY) or [])}


def _calls_select(func) -> bool:
    return any(c.name in SCRATCH_OPS for c in tile_ops_in(func.body))


def memories_below(memories, scratch: int):
    """``memories`` with UB ending at ``scratch`` (the vendor's Select scratch,
    :attr:`..facts.arch.Arch.select_scratch`)."""
    ub = memories["ascend.ub"]
    return {**memories, "ascend.ub": dataclasses.replace(ub, capacity=min(ub.capacity,
                                                                          scratch))}


def plan_memory(reuse: bool = True, memories=MEMORIES, select_scratch: int | None = None):
    """The pass; a kernel with SIMT functions has the UB they leave
    (:func:`..facts.simt.memories_with_simt`), one that calls Select the UB below its scratch
    at ``select_scratch`` (None: the architecture's Select takes none)."""

    def run(func):
        check_scopes(func)
        staging = staging_buffers(func)
        mine = memories_with_simt(memories) if has_simt(func) else memories
        if select_scratch is not None and _calls_select(func):
            mine = memories_below(mine, select_scratch)
        table = plan(func, staging, reuse, mine)
        return func.with_attr(PLAN_KEY, [[b, s, o, n] for b, (s, o, n) in table.items()]) \
            .with_attr(STAGING_KEY, [[a, b] for a, b, _ in staging])

    return prim_func_pass("AscendPlanMemory", run)
