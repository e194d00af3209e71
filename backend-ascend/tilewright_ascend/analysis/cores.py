"""Which core runs a tile op written outside ``T.Scope``: from the memories of its operands,
its data path or the pipes of its flags."""

from __future__ import annotations

from tilewright.ir import Region

from ..facts import ops
from ..facts.arch import MEMORIES
from ..facts.events import PIPE_CORE


def _mem_core(scope: str):
    memory = MEMORIES.get(scope)
    return (memory.core,) if memory is not None else None


def core_of(call):
    """The cores (("AIC",), ("AIV",) or both) an op outside ``T.Scope`` belongs to; None when
    only a scope can tell."""
    name = call.name
    if name in (ops.GEMM_V0.name, ops.MMA.name, ops.DUAL_FIXPIPE.name):
        return ("AIC",)
    if name.startswith(ops.PREFIX + "tile."):
        return ("AIV",)
    if name in (ops.SET_FLAG.name, ops.WAIT_FLAG.name):
        cores = {PIPE_CORE.get(call.attrs["src"]), PIPE_CORE.get(call.attrs["dst"])} - {None}
        return tuple(cores) if len(cores) == 1 else ("AIC", "AIV") if not cores else None
    if name == ops.PIPE_BARRIER.name:
        core = PIPE_CORE.get(call.attrs["pipe"])
        return (core,) if core else ("AIC", "AIV")
    if name in (ops.SET_CROSS_FLAG.name, ops.RELEASE_CROSS_FLAG.name):
        core = PIPE_CORE.get(call.attrs["pipe"])
        return (core,) if core else None
    if name == ops.WAIT_CROSS_FLAG.name:
        return None
    if name in (ops.BARRIER_ALL.name, ops.PRINTF.name):
        return ("AIC", "AIV")
    regions = [v for v in call.operands.values() if isinstance(v, Region)]
    cores = {_mem_core(str(r.buffer.scope())) for r in regions} - {None}
    return cores.pop() if len(cores) == 1 else ("AIC", "AIV")
