"""``T.pdl_trigger`` / ``T.pdl_sync``: programmatic dependent launch (sm_90+).
``tw_pdl_trigger`` (``griddepcontrol.launch_dependents``) lets the next kernel on the stream
start; ``tw_pdl_sync`` (``griddepcontrol.wait``) waits for the previous kernels to finish and
their writes to be visible. Every thread runs them (``griddepcontrol.wait`` holds the thread
that executes it). Codegen launches a kernel calling ``tw_pdl_sync`` with programmatic stream
serialisation (the intrinsic's role ``pdl_sync``) and without ``__restrict__`` parameters,
which would let nvcc read them through the non-coherent read-only path (``ld.global.nc``), as
``T.__ldg`` does: that path need not see what the kernel it overlaps writes, so ``T.__ldg``
in such a kernel is refused. Below sm_90 there is no such launch: a kernel starts after the
previous one has finished, and both ops are nothing (``T.__ldg`` is then as safe as
anywhere)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import PDL_SYNC, PDL_TRIGGER, READ_ONLY_LOAD, TileOpCall
from tilewright.transform import RuleContext
from tvm import tirx

from .. import intrinsics
from .table import register

SINCE = 90  # griddepcontrol: sm_90 (PTX ISA 7.8)


@register(PDL_TRIGGER.name)
def lower_pdl_trigger(call: TileOpCall, ctx: RuleContext):
    if ctx.options.arch.sm < SINCE:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return intrinsics.call("tw_pdl_trigger")


@register(PDL_SYNC.name)
def lower_pdl_sync(call: TileOpCall, ctx: RuleContext):
    if ctx.options.arch.sm < SINCE:
        return tirx.Evaluate(tirx.const(0, "int32"))
    if _reads_read_only(ctx.loops[0] if ctx.loops else None):
        raise KernelError("T.pdl_sync in a kernel that reads through T.__ldg: the read-only "
                          "path need not see the writes of the kernel this one overlaps on "
                          "sm_90+; read those elements plainly")
    return intrinsics.call("tw_pdl_sync")


def _reads_read_only(kernel) -> bool:
    """Whether the kernel (its outermost loop) reads through ``T.__ldg``."""
    found = []
    if kernel is not None:
        tvm_ffi.structural_walk(kernel, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
            c.op, tvm.ir.Op) and c.op.name == READ_ONLY_LOAD else None))
    return bool(found)
