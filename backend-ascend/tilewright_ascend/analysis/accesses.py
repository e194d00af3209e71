"""What each statement reads and writes, on which pipe: the input of the synchronisation and
multi-buffering passes. Buffers are the IR's buffer objects (identity), never names.

A tile op's accesses come from its data path (:mod:`..facts.paths`) or, for the ops that are
not copies, from the table below (a vector op's reads and writes are its schema's operand
effects, so a scratch operand such as a reduction's ``work`` counts as written); a
``T.Parallel`` nest and a ``T.SimtVF`` scope (a SIMT vector function) are vector work, a loop
the scalar unit runs (:data:`..facts.keys.SCALAR_KEY`) scalar work; a branch's or a while
loop's condition, a loop's bounds and a named value (a ``Bind``) read their tiles on the scalar
unit; any other statement
has the accesses of its children. CreateVecIndex (:data:`..facts.ops.VIDX`) writes its tile on
S, then on V, and sets and waits a flag of its own (:data:`VIDX_FLAG`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tilewright.ir import ATOMIC_OPS, decode, tile_ops_in
from tvm import tirx

from ..facts import ops
from ..facts.keys import SCALAR_KEY, SIMT_KEY
from ..facts.paths import path
from .buffers import loads_and_stores

# the flag S_V id 0 that CreateVecIndex sets on S and waits on V itself
# (:data:`..facts.events.RULE_IDS`), as a resource both pipes write: a CreateVecIndex's set is
# then ordered after the previous one's wait (a set of a raised flag is undefined behaviour)
VIDX_FLAG = tirx.decl_buffer((1,), "uint8", "tw_create_vec_index_flag", scope="ascend.ub")


@dataclass(frozen=True)
class Access:
    pipe: str
    buffer: object  # a tirx.Buffer
    write: bool
    # the region a tile copy moves (None: any element of the buffer)
    region: object = field(default=None, compare=False)
    # the op orders its later accesses after this one itself (CreateVecIndex's SetValue before
    # its Adds): a later statement depends on those, not on this one
    leads: bool = False


def accesses(stmt) -> list[Access]:
    """What ``stmt`` reads and writes, on which pipe."""
    call = decode(stmt)
    if call is not None:
        return op_accesses(call)
    if isinstance(stmt, tirx.For) and SCALAR_KEY in stmt.annotations:  # GetValue/SetValue
        return _loop_accesses(stmt, "s")
    if isinstance(stmt, tirx.For) and str(stmt.annotations.get("tw.loop", "")) == "parallel":
        return _loop_accesses(stmt, "v")
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SIMT_KEY:  # asc_vf_call: the V pipe
        return _loop_accesses(stmt, "v")
    out = []
    # a branch's or a while loop's condition, a loop's bounds, a named value (``v = f[0]``,
    # a Bind: ``float v = f.GetValue(0)``): GetValue on S
    read = [stmt.condition] if isinstance(stmt, (tirx.IfThenElse, tirx.While)) else \
        [stmt.min, stmt.extent] if isinstance(stmt, tirx.For) else \
        [stmt.value] if isinstance(stmt, tirx.Bind) else []
    for expr in read:
        loads, _ = loads_and_stores(expr)
        out += [Access("s", b, False) for b in loads if str(b.scope()) != "global"]
    for child in children(stmt):
        out.extend(accesses(child))
    return out


def _loop_accesses(loop, pipe: str) -> list[Access]:
    loads, stores = loads_and_stores(loop)
    return [Access(pipe, b, False) for b in loads] + [Access(pipe, b, True) for b in stores]


def children(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, (tirx.For, tirx.AttrStmt, tirx.While)):
        return [stmt.body]
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    return []


def _buf(call, operand):
    return call.operands[operand].buffer


def op_accesses(call) -> list[Access]:
    """The accesses of one tile op."""
    name = call.name
    if name in ("copy", ops.LOAD_L0.name):
        src, dst = _buf(call, "src"), _buf(call, "dst")
        route = path(src.scope(), dst.scope())
        if route is None:
            return []  # the codegen reports the missing data path
        return [Access(route.pipe, src, False, call.operands["src"]),
                Access(route.pipe, dst, True, call.operands["dst"])]
    if name == ops.RELEASE_CROSS_FLAG.name:  # after every earlier access of the tile
        return [Access(call.attrs["pipe"], _buf(call, "tile"), True)]
    if name == ops.DUAL_FIXPIPE.name:  # the cube's FIX pipe writes the vector cores' UB
        return [Access("fix", _buf(call, "src"), False), Access("fix", _buf(call, "dst"), True)]
    if name == ops.GEMM_V0.name:
        return [Access("mte1", _buf(call, "A"), False), Access("mte1", _buf(call, "B"), False),
                Access("m", _buf(call, "C"), False), Access("m", _buf(call, "C"), True)]
    if name == ops.MMA.name:
        return [Access("m", _buf(call, o), o == "C") for o in "ABC"] + \
            [Access("m", _buf(call, "C"), False)]
    if name in (ops.DUMP_TENSOR.name, "print_tile"):
        return []  # DumpTensor orders itself: PipeBarrier<PIPE_ALL> before and after its copy
    if name == ops.VBRC.name and call.attrs["axis"] in ("row", "one"):  # scalars: GetValue
        return [Access("s", _buf(call, "vec"), False), Access("v", _buf(call, "src"), False),
                Access("v", _buf(call, "dst"), True)]
    if name == ops.VIDX.name:  # CreateVecIndex: SetValue of the first block, then Adds on V
        dst = _buf(call, "dst")
        return [Access("s", dst, True, leads=True), Access("s", VIDX_FLAG, True, leads=True),
                Access("v", VIDX_FLAG, True), Access("v", dst, True)]
    if name in ATOMIC_OPS and hasattr(call.operands["src"], "buffer"):
        return [Access("mte3", _buf(call, "src"), False)]
    if name.startswith(ops.PREFIX + "tile."):  # the schema's effects: read, write or both
        return [Access("v", r.buffer, False) for r in call.regions("read")] + \
            [Access("v", r.buffer, True) for r in call.regions("write")]
    return []


def has_manual_sync(node) -> bool:
    """Whether the kernel has hand-written intra-core synchronisation (cross-core flags, which
    order whole cores, do not count)."""
    cross = (ops.SET_CROSS_FLAG.name, ops.WAIT_CROSS_FLAG.name, ops.RELEASE_CROSS_FLAG.name)
    return any(c.name in ops.SYNC_OPS and c.name not in cross for c in tile_ops_in(node))


def has_simt(func) -> bool:
    """Whether ``func`` runs SIMT vector functions (``T.SimtVF``)."""
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.AttrStmt, lambda a: found.append(a)
                                        if a.attr_key == SIMT_KEY else None))
    return bool(found)
