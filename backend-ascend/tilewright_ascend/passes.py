"""Ascend passes: memory-scope checks and memory planning.

Planning gives every on-chip buffer a byte offset in its memory (32-byte aligned,
``T.annotate_address`` placements first, then first-fit by live range so that buffers never
live at the same time share bytes) and records the plan as
the function attribute ``ascend.memory_plan``: name -> [scope, offset, bytes]. A plan that
exceeds a memory, or a placement that breaks alignment, is a compile-time error naming the
buffer, its bytes and the limit.
"""

from __future__ import annotations

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import tile_ops_in
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from .arch import ALIGN, CUBE_SCOPES, MEMORIES, SHORT

PLAN_KEY = "ascend.memory_plan"
ADDRESS_KEY = "ascend.address"
PORTABLE_SCOPES = {"shared", "shared.dyn", "local.fragment", "local", "local.var",
                   "local.reducer.sum", "local.reducer.max", "local.reducer.min"}


def dtype_bytes(dtype: str) -> int:
    bits = int("".join(c for c in dtype if c.isdigit()) or 8)
    return 1 if dtype == "bool" else max(1, bits // 8)


def buffer_bytes(buf) -> int:
    """Bytes of a buffer; cube-memory tiles count whole fractals (see :mod:`.cube`)."""
    if str(buf.scope()) in CUBE_SCOPES:
        from .cube import padded_bytes

        return padded_bytes(buf)
    n = 1
    for s in buf.shape:
        n *= int(s)
    return n * dtype_bytes(str(buf.dtype))


def allocations(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda s: found.append(s)),
                            order="pre")
    return found


def gemm_calls(func) -> list:
    return [c for c in tile_ops_in(func) if c.name == "ascend.gemm_v0"]


def hidden_buffers(func) -> list[tuple[str, str, int, object]]:
    """The L0A/L0B staging tiles that each T.gemm_v0 needs: (name, scope, bytes, span)."""
    from .cube import gemm_dims, gemm_k

    out = []
    for n, call in enumerate(gemm_calls(func)):
        a, b = call.operands["A"], call.operands["B"]
        m, nn = gemm_dims(call)
        kl0 = gemm_k(call)[0]
        out.append((f"gemm{n}_l0a", "ascend.l0a", m * kl0 * dtype_bytes(str(a.buffer.dtype)),
                    call.span))
        out.append((f"gemm{n}_l0b", "ascend.l0b", kl0 * nn * dtype_bytes(str(b.buffer.dtype)),
                    call.span))
    return out


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


def plan(func, reuse: bool = True) -> dict:
    """name -> (scope, offset, bytes) for every on-chip buffer of ``func``.

    ``T.annotate_address`` placements come first; the other buffers are placed first-fit by
    live range (:mod:`.liveness`), so buffers that are never live at the same time share
    bytes. In a kernel with hand-written intra-core flags every buffer stays live throughout
    (its flags name buffers, not bytes); so does every buffer when ``reuse`` is False. The
    L0A/L0B staging tiles of the GEMMs share a pool above the user's buffers, each live at its
    own GEMM only.
    """
    from .liveness import first_fit, live_ranges
    from .sync_insert import has_manual_sync

    fixed = {}
    loop = func.body
    if isinstance(loop, tirx.For) and ADDRESS_KEY in loop.annotations:
        fixed = {str(k): int(v) for k, v in loop.annotations[ADDRESS_KEY].items()}
    user = [(str(a.buffer.name), str(a.buffer.scope()), buffer_bytes(a.buffer), a.span)
            for a in allocations(func)]
    hidden = hidden_buffers(func)
    ranges = {} if not reuse or has_manual_sync(func) else \
        live_ranges(func.body, {it[0] for it in user})
    for name, scope, size, span in user:
        if name in fixed and fixed[name] % ALIGN:
            raise KernelError(f"buffer {name!r} ({size} bytes) is placed at {SHORT[scope]} "
                              f"offset {fixed[name]}, which is not {ALIGN}-byte aligned",
                              span_location(span))
    result = {}
    for scope in MEMORIES:
        mine = [it for it in user if it[1] == scope]
        offsets = first_fit([(n, size, ranges.get(n), fixed.get(n)) for n, _, size, _ in mine],
                            ALIGN)
        top = max([offsets[n] + size for n, _, size, _ in mine] or [0])
        pool = [it for it in hidden if it[1] == scope]
        base = -(-top // ALIGN) * ALIGN
        offsets.update({n: base + o for n, o in first_fit(
            [(n, size, (i, i), None) for i, (n, _, size, _) in enumerate(pool)], ALIGN).items()})
        for name, _, size, span in mine + pool:
            offset, limit = offsets[name], MEMORIES[scope][1]
            if offset + size > limit:
                total = max(offsets[n] + sz for n, _, sz, _ in mine + pool)
                raise KernelError(
                    f"buffer {name!r} needs {size} bytes of {SHORT[scope]} at offset {offset}, "
                    f"but {SHORT[scope]} holds {limit} bytes (limit exceeded by "
                    f"{offset + size - limit} bytes; the plan needs {total} bytes with "
                    "buffers that are never live together sharing space)",
                    span_location(span))
            result[name] = (scope, offset, size)
    return result


def plan_memory(reuse: bool = True):
    def run(func):
        check_scopes(func)
        table = {k: [v[0], v[1], v[2]] for k, v in plan(func, reuse).items()}
        return func.with_attr(PLAN_KEY, table)

    return prim_func_pass("AscendPlanMemory", run)
