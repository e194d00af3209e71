"""Portable ``T.copy`` into shared memory through the Tensor Memory Accelerator (sm_90+).

A copy from a global tensor into a whole swizzled shared tile (swizzle.py: TMA's own
``SWIZZLE_128B``/``64B``/``32B`` layouts) that is a statement of a ``T.Pipelined`` loop with two
or more stages can be one TMA load per column block of the tile, issued by one thread and
completing on an mbarrier of its pipeline stage, instead of ``cp.async`` chunks issued by
every thread. The copy rule cannot know yet whether the loop will be pipelined, so it emits a
*choice*, ``if (tw_tma_choice()) <TMA> else <cp.async>``; the pipeline phase (pipeline.py)
takes the TMA branch when every producer of a loop offers one and gives each stage its
mbarrier (replacing :data:`STAGE_BARRIER`), and :func:`resolve` takes the ``cp.async`` branch
of every choice left. Out-of-bounds parts of a box read as zero, as the ``cp.async`` path's do.

``T.copy(..., disable_tma=True)`` keeps one copy on ``cp.async``; the pass config
``cuda.disable_tma_lower`` (TileLang's ``tl.disable_tma_lower``) keeps all of them.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tvm import tirx

from . import swizzle

CHOICE = "tw_tma_choice"
STAGE_BARRIER = "tw_stage_barrier"  # the mbarrier of the copy's stage, set by pipeline.py
STAGES_KEY = "tw.num_stages"
DISABLE_KEY = "cuda.disable_tma_lower"
SWIZZLE_PERIOD = 1024  # bytes: a TMA destination with 128-byte swizzling starts at one


# -- small IR helpers shared by pipeline.py and tma_pipeline.py --------------------------------
def extern_name(node) -> str | None:
    """The function name of a ``call_extern``, else None."""
    if isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op) and \
            node.op.name == "tirx.call_extern":
        return str(node.args[0].value)
    return None


def call(name: str, *args) -> tirx.Stmt:
    """``name(args...);`` as a statement."""
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def flat(stmts: list) -> list:
    """``stmts`` with nested sequences spliced in."""
    out = []
    for st in stmts:
        out += flat(list(st.seq)) if isinstance(st, tirx.SeqStmt) else [st]
    return out


# -- the copy rule's side ----------------------------------------------------------------------


def _const(e) -> int | None:
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _pipelined(ctx: RuleContext) -> bool:
    """The copy runs directly in a ``T.Pipelined`` loop of two or more stages, outside T.ws
    roles (whose copies the kernel author synchronises)."""
    from .hopper import ROLE_KEY

    if any(ROLE_KEY in loop.annotations for loop in ctx.loops):
        return False
    inner = ctx.loops[-1] if ctx.loops else None
    return inner is not None and int(inner.annotations.get(STAGES_KEY, 0)) >= 2


def why_not(call: TileOpCall, ctx: RuleContext) -> str | None:
    """Why this copy stays on ``cp.async``; None when it may be a TMA load."""
    arch = ctx.options
    src, dst = call.operands["src"], call.operands["dst"]
    if arch is None or arch.sm < 90 or not getattr(arch, "tma", True):
        return "TMA needs sm_90+ and is not switched off"
    if call.attrs.get("disable_tma", False):
        return "T.copy(..., disable_tma=True)"
    if not _pipelined(ctx):
        return "not a statement of a T.Pipelined loop with num_stages >= 2"
    if str(src.buffer.scope()) != "global" or not str(dst.buffer.scope()).startswith("shared"):
        return "not a global -> shared copy"
    layout = swizzle.layout_of(dst.buffer)
    shape = [_const(d) for d in dst.buffer.shape]
    if layout is None or len(shape) != 2 or None in shape:
        return "the shared tile has no swizzled layout"
    if not all(_const(s) == 0 for s in dst.starts) or \
            [_const(e) for e in dst.extents] != shape:
        return "the copy fills part of the shared tile"
    if shape[0] * layout[0] % SWIZZLE_PERIOD:
        return "a column block of the tile is not a whole number of swizzle periods"
    if len(src.buffer.shape) > 1 and not ctx.can_prove(
            tirx.floormod(src.buffer.shape[-1], 8) == 0):
        return "the tensor's rows are not a multiple of 16 bytes (TMA's stride rule)"
    return None


def lower_copy(call: TileOpCall, ctx: RuleContext, fallback):
    """A choice between the TMA load of ``call`` and ``fallback`` (its ``cp.async`` lowering),
    or ``fallback`` when the copy cannot be a TMA load."""
    from .hopper import _leader, tma_load

    if why_not(call, ctx) is not None:
        return fallback
    barrier = tirx.call_extern("handle", STAGE_BARRIER)
    try:
        loads = tma_load(call.operands["src"], call.operands["dst"], barrier, "T.copy")
    except KernelError:  # a box TMA cannot move (too many dims, > 256 rows): keep cp.async
        return fallback
    return tirx.IfThenElse(tirx.call_extern("bool", CHOICE), _leader(ctx, loads), fallback)


def is_choice(stmt) -> bool:
    return isinstance(stmt, tirx.IfThenElse) and extern_name(stmt.condition) == CHOICE


def resolve(stmt, take_tma: bool = False):
    """``stmt`` with every choice replaced by one of its branches."""
    def visit(s):
        if not is_choice(s):
            return s
        return s.then_case if take_tma else s.else_case

    return tvm_ffi.structural_map(stmt, (tirx.IfThenElse, visit))


def loads(stmt) -> list:
    """The TMA load calls (``tw_tma_load_*``) of ``stmt``, in order."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if (
        extern_name(c) or "").startswith("tw_tma_load_") else None))
    return found


def loaded_tiles(stmt) -> list:
    """The shared tiles the TMA loads of ``stmt`` write."""
    found = []
    for call in loads(stmt):
        smem = call.args[3]
        while extern_name(smem) == "tw_offset_bytes":
            smem = smem.args[1]
        buf = smem.args[0].source  # tw.cuda.shared_addr(tile[...])
        if not any(buf.same_as(b) for b in found):
            found.append(buf)
    return found


def set_barrier(stmt, barrier):
    """``stmt`` with the stage-barrier placeholder replaced by ``barrier`` (an address)."""
    return tvm_ffi.structural_map(stmt, (tvm.ir.Call, lambda c: barrier
                                         if extern_name(c) == STAGE_BARRIER else c))
