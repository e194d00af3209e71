"""Ascend passes: memory-scope checks and memory planning.

Planning gives every on-chip buffer a byte offset in its memory (32-byte aligned, bump
allocation in program order, ``T.annotate_address`` placements first) and records the plan as
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

from .arch import ALIGN, MEMORIES, SHORT

PLAN_KEY = "ascend.memory_plan"
ADDRESS_KEY = "ascend.address"
PORTABLE_SCOPES = {"shared", "shared.dyn", "local.fragment", "local", "local.var"}


def dtype_bytes(dtype: str) -> int:
    bits = int("".join(c for c in dtype if c.isdigit()) or 8)
    return 1 if dtype == "bool" else max(1, bits // 8)


def buffer_bytes(buf) -> int:
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
    out = []
    for n, call in enumerate(gemm_calls(func)):
        a, b, c = call.operands["A"], call.operands["B"], call.operands["C"]
        m, nn = (int(e) for e in [x for x in c.extents if int(x) != 1] or [1, 1])
        kl0 = call.attrs["kL0Size"]
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


def plan(func) -> dict:
    """name -> (scope, offset, bytes) for every on-chip buffer of ``func``."""
    fixed = {}
    loop = func.body
    if isinstance(loop, tirx.For) and ADDRESS_KEY in loop.annotations:
        fixed = {str(k): int(v) for k, v in loop.annotations[ADDRESS_KEY].items()}
    items = [(str(a.buffer.name), str(a.buffer.scope()), buffer_bytes(a.buffer), a.span)
             for a in allocations(func)] + hidden_buffers(func)
    result, top = {}, dict.fromkeys(MEMORIES, 0)
    for name, scope, size, span in sorted(items, key=lambda it: it[0] not in fixed):
        limit = MEMORIES[scope][1]
        where = span_location(span)
        if name in fixed:
            offset = fixed[name]
            if offset % ALIGN:
                raise KernelError(f"buffer {name!r} ({size} bytes) is placed at {SHORT[scope]} "
                                  f"offset {offset}, which is not {ALIGN}-byte aligned", where)
        else:
            offset = -(-top[scope] // ALIGN) * ALIGN
        if offset + size > limit:
            raise KernelError(f"buffer {name!r} needs {size} bytes of {SHORT[scope]} at offset "
                              f"{offset}, but {SHORT[scope]} holds {limit} bytes (limit "
                              f"exceeded by {offset + size - limit} bytes)", where)
        top[scope] = max(top[scope], offset + size)
        result[name] = (scope, offset, size)
    return result


def plan_memory():
    def run(func):
        check_scopes(func)
        table = {k: [v[0], v[1], v[2]] for k, v in plan(func).items()}
        return func.with_attr(PLAN_KEY, table)

    return prim_func_pass("AscendPlanMemory", run)
