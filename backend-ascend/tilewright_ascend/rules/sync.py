"""Synchronisation: intra-core flags and barriers, cross-core flags; TileLang's programmatic
dependent launch, which has nothing to order here."""

from __future__ import annotations

from tilewright.ir import PDL_SYNC, PDL_TRIGGER

from ..facts import ops
from .table import rule


def _event(call) -> str:
    return f"HardEvent::{call.attrs['src'].upper()}_{call.attrs['dst'].upper()}"


@rule(ops.SET_FLAG.name)
def rule_set_flag(em, call) -> None:
    em.line(f"SetFlag<{_event(call)}>({em.expr(call.operands['event_id'])});")


@rule(ops.WAIT_FLAG.name)
def rule_wait_flag(em, call) -> None:
    em.line(f"WaitFlag<{_event(call)}>({em.expr(call.operands['event_id'])});")


@rule(ops.PIPE_BARRIER.name)
def rule_pipe_barrier(em, call) -> None:
    em.line(f"PipeBarrier<PIPE_{call.attrs['pipe'].upper()}>();")


@rule(ops.BARRIER_ALL.name)
def rule_barrier_all(em, call) -> None:
    em.line("PipeBarrier<PIPE_ALL>();")


@rule(ops.SET_CROSS_FLAG.name, ops.RELEASE_CROSS_FLAG.name)
def rule_set_cross_flag(em, call) -> None:
    em.line(f"CrossCoreSetFlag<{call.attrs['mode']}, PIPE_{call.attrs['pipe'].upper()}>"
            f"({em.expr(call.operands['event_id'])});")


@rule(ops.WAIT_CROSS_FLAG.name)
def rule_wait_cross_flag(em, call) -> None:
    em.line(f"CrossCoreWaitFlag({em.expr(call.operands['event_id'])});")


@rule(PDL_TRIGGER.name, PDL_SYNC.name)
def rule_pdl(em, call) -> None:
    """``T.pdl_trigger`` / ``T.pdl_sync``: a kernel starts after the one before it on the
    stream has finished, so there is nothing to let start early or to wait for."""
    em.line(f"// T.{call.name}(): kernels run one after another here")
