"""Pipes and hardware events of A2/A3 (dav-2201), shared by the dialect, passes and codegen.

The cube core (AIC) and the vector cores (AIV) of dav-2201 are separate cores, each with its own
pipes and its own event pool: ``HardEventAic`` and ``HardEventAiv`` in the vendor's
``impl/basic_api/kernel_event.h`` list the events each has. Event ids run 0-7, but the
SetFlag/WaitFlag documentation (``docs/zh/api/SIMD-API/基础API/同步控制/核内同步/
SetFlag-WaitFlag(ISASI).md``) keeps 6 (the system's) and 7 (TPipe's automatic synchronisation)
back, and on the cube core the ``TPipe`` constructor raises ``M_MTE1`` ids 0-2 and its
destructor waits for them (``impl/basic_api/kernel_tpipe_impl.h``): setting a raised flag
again is undefined behaviour.
"""

from __future__ import annotations

PIPES = ("s", "v", "m", "mte1", "mte2", "mte3", "fix")
EVENTS = {
    "AIC": frozenset({
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE3_MTE1", "MTE1_MTE3", "MTE2_M",
        "M_MTE2", "M_FIX", "FIX_M", "MTE3_MTE2", "MTE2_MTE3", "S_MTE2", "MTE2_S", "S_MTE3",
        "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S", "FIX_MTE3", "MTE1_FIX", "FIX_MTE1",
        "FIX_FIX"}),
    "AIV": frozenset({
        "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "V_V", "MTE3_MTE2", "MTE2_MTE3", "S_V", "V_S",
        "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S"}),
}
HARD_EVENTS = EVENTS["AIC"] | EVENTS["AIV"]
EVENT_IDS = 8  # ids 0-7 exist
USER_IDS = 6  # ids 0-5 are the kernel's; 6 and 7 are the vendor's
TPIPE_IDS = {("AIC", "M_MTE1"): (0, 1, 2)}  # raised by TPipe, waited by its destructor
# ids the lowering rules set and wait themselves (T.gemm_v0: MTE1_M 0 before each Mmad, and
# TPipe's M_MTE1 0 as "L0A/L0B free"; CreateVecIndex sets and waits S_V on the id TPipe's
# FetchEventID gives, the first id the kernel has not allocated from TPipe's pool: 0, since the
# generated code allocates none); automatic synchronisation leaves them alone
RULE_IDS = {("AIC", "MTE1_M"): (0,), ("AIC", "M_MTE1"): (0,), ("AIV", "S_V"): (0,)}
# pipes whose instructions touching the same bytes need a PipeBarrier of the pipe between them
# ("PipeBarrier(ISASI)": the vector pipe and the DMA pipes; the scalar unit keeps order, and
# PipeBarrier<PIPE_M> is kept as the cube's order of Mmads on one L0C tile)
BARRIER_PIPES = ("v", "m", "mte1", "mte2", "mte3", "fix")
CROSS_IDS = 11  # cross-core flags 0-10
# the core whose work a pipe is, for ops written outside T.Scope
PIPE_CORE = {"v": "AIV", "mte3": "AIV", "m": "AIC", "mte1": "AIC", "fix": "AIC"}


def event_name(src: str, dst: str) -> str:
    return f"{src}_{dst}".upper()


def event_cores(event: str) -> tuple[str, ...]:
    """The cores that have ``event`` (empty when neither does)."""
    return tuple(core for core in ("AIC", "AIV") if event in EVENTS[core])


def free_ids(core: str, event: str) -> tuple[int, ...]:
    """The ids of ``event`` on ``core`` that automatic synchronisation may use."""
    taken = {*TPIPE_IDS.get((core, event), ()), *RULE_IDS.get((core, event), ())}
    return tuple(i for i in range(USER_IDS) if i not in taken)
