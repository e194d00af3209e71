"""``T.SimdVF`` vector functions (target ``ascend-950``): the scope becomes a ``__simd_vf__``
function of the arch-3510 register API, written before the kernel and started from the vector
core with ``asc_vf_call``; its register instructions are the ``Reg::`` calls
:data:`..facts.registers.REGISTER_OPS` names.

The function takes the UB tiles its instructions address (``__ubuf__ T*``, from
``GetPhyAddr()``) and the scalars of the kernel its body uses (loop variables, block index),
and declares its masks (``Reg::CreateMask`` of every lane; a mask of a count is declared there
and set by ``Reg::UpdateMask`` where ``T.simd.pset(bits, count=n)`` is written, from
``n`` in a ``uint32_t`` of its own) and registers (``Reg::RegTensor<T>``) first. The
register API does not order a function's own UB accesses: a load or store that may touch the
lanes of an earlier store (or a store those of an earlier load) of the same tile, in the order
the function is written, is preceded by ``Reg::LocalMemBar`` of that pair (``VEC_STORE`` ->
``VEC_LOAD``, ``VEC_LOAD`` -> ``VEC_STORE``, ``VEC_STORE`` -> ``VEC_STORE``). Accesses are
compared within one iteration of the function's loops; an access that meets another only in a
later iteration is not ordered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import tile_ops_in
from tvm import tirx

from ..facts import ops
from ..facts.dtypes import ctype, dtype_bytes
from ..facts.registers import (
    CAST_TRAITS,
    CREATE_MASK,
    MEMORY_BARRIER,
    REGISTER_OPS,
    VF_ATTRIBUTE,
    VF_LAUNCH,
)
from .regions import offset_expr, offset_of
from .table import rule

MASK_TYPES = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t"}


@dataclass
class VectorFunction:
    """The registers (index -> element type), masks (element widths) and stored tiles of one
    vector function, for the rules of its instructions."""

    registers: dict = field(default_factory=dict)
    masks: set = field(default_factory=set)
    counted: dict = field(default_factory=dict)  # mask register of a count -> its bits
    tiles: list = field(default_factory=list)
    # the UB accesses written so far: [kind, region, the kinds a barrier has ordered it before]
    accesses: list = field(default_factory=list)

    @staticmethod
    def register(index: int) -> str:
        return f"vreg{index}"

    @staticmethod
    def mask(bits: int, index: int = -1) -> str:
        """The mask of every ``bits``-bit lane, or mask register ``index`` of a count."""
        return f"mask_b{bits}" if index < 0 else f"pmask{index}"

    @staticmethod
    def count(index: int) -> str:
        return f"pcount{index}"


def _scan(body) -> VectorFunction:
    vf = VectorFunction()
    for call in tile_ops_in(body):
        if call.name not in ops.REGISTER_INSTRUCTIONS:
            raise KernelError("inside T.SimdVF only T.simd instructions and serial loops are "
                              f"allowed; this line lowers to the tile op {call.name!r}, not a "
                              "register instruction: move it before or after the 'with "
                              "T.SimdVF():' block", span_location(call.span))
        attrs = call.attrs
        if REGISTER_OPS[attrs["op"]].form == "mask":
            vf.counted[attrs["dst"]] = attrs["bits"]
            continue
        if attrs["dst"] >= 0:
            vf.registers[attrs["dst"]] = attrs["dtype"]
        if attrs["bits"] and attrs["mask"] < 0:
            vf.masks.add(attrs["bits"])
        if "ub" in call.operands:
            buf = call.operands["ub"].buffer
            if all(not buf.same_as(t) for t in vf.tiles):
                vf.tiles.append(buf)
    return vf


def _scalars(em, body) -> list:
    """The kernel's scalars ``body`` uses (named by the emitter already), in a fixed order."""
    found = []
    tvm_ffi.structural_walk(body, [(tirx.Var, found.append)])
    out = []
    for v in found:
        if v in em.var_names and all(not v.same_as(o) for o in out):
            out.append(v)
    return sorted(out, key=lambda v: em.var(v))


def emit_vector_function(em, attr) -> None:
    """``with T.SimdVF():`` (the AttrStmt ``attr``): its function into ``em.functions`` and the
    ``asc_vf_call`` that starts it here."""
    vf = _scan(attr.body)
    scalars = _scalars(em, attr.body)
    name = em.ident(f"{em.name}_vf")
    params = [*(f"__ubuf__ {ctype(t.dtype)}* {em.buf(t)}" for t in vf.tiles),
              *(f"{ctype(str(v.ty))} {em.var(v)}" for v in scalars)]
    lines, depth = em.lines, em.depth
    em.lines, em.depth, em.vf = [], 1, vf
    try:
        for bits in sorted(vf.masks):
            em.line(f"Reg::MaskReg {vf.mask(bits)} = "
                    f"{CREATE_MASK.format(T=MASK_TYPES[bits])};")
        for index in sorted(vf.counted):
            em.line(f"Reg::MaskReg {vf.mask(0, index)};")
            em.line(f"uint32_t {vf.count(index)};")
        for index, dtype in sorted(vf.registers.items()):
            em.line(f"Reg::RegTensor<{ctype(dtype)}> {vf.register(index)};")
        em.stmt(attr.body)
        body = em.lines
    finally:
        em.lines, em.depth, em.vf = lines, depth, None
    if any(REGISTER_OPS[op].form == "convert" for op in _ops(attr.body)):
        em.declare("\n".join(f"constexpr Reg::CastTrait {trait} = {{{init}}};"
                             for trait, init in CAST_TRAITS.values()))
    em.declare("\n".join([f"{VF_ATTRIBUTE} inline void {name}({', '.join(params)})", "{",
                          *body, "}"]))
    args = [*(f"(__ubuf__ {ctype(t.dtype)}*){em.buf(t)}.GetPhyAddr()" for t in vf.tiles),
            *(em.var(v) for v in scalars)]
    em.line(f"{VF_LAUNCH}<{name}>({', '.join(args)});")


def _ops(body) -> list[str]:
    return [c.attrs["op"] for c in tile_ops_in(body)]


def _vf(em, call) -> VectorFunction:
    if em.vf is None:
        raise KernelError("a T.simd register instruction outside T.SimdVF",
                          span_location(call.span))
    return em.vf


def _call(em, call, args: list[str], **template) -> None:
    instr = REGISTER_OPS[call.attrs["op"]]
    targs = instr.template.format(**template)
    em.line(f"Reg::{instr.function}{f'<{targs}>' if targs else ''}({', '.join(args)});")


def _address(em, region) -> str:
    offset = offset_of(em, region)
    return em.buf(region.buffer) if offset == "0" else f"{em.buf(region.buffer)} + {offset}"


def _may_meet(em, a, b) -> bool:
    if not a.buffer.same_as(b.buffer):
        return False
    start_a, start_b = offset_expr(a), offset_expr(b)
    n_a, n_b = (int(r.extents[-1]) for r in (a, b))
    return not (em.analyzer.can_prove(start_a + n_a <= start_b) or
                em.analyzer.can_prove(start_b + n_b <= start_a))


def _order(em, vf: VectorFunction, kind: str, region) -> None:
    """``LocalMemBar`` before this access for each earlier one of the tile it may meet."""
    pairs = []
    for before, other, ordered in vf.accesses:
        if "VEC_STORE" in (before, kind) and kind not in ordered and \
                (before, kind) not in pairs and _may_meet(em, other, region):
            pairs.append((before, kind))
    for before, after in pairs:
        em.line(MEMORY_BARRIER.format(before=before, after=after))
        for access in vf.accesses:
            if access[0] == before:
                access[2].add(after)
    vf.accesses.append([kind, region, set()])


@rule(ops.REG_LOAD.name)
def rule_reg_load(em, call) -> None:
    vf = _vf(em, call)
    region = call.operands["ub"]
    _order(em, vf, "VEC_LOAD", region)
    _call(em, call, [vf.register(call.attrs["dst"]), _address(em, region)],
          T=ctype(call.attrs["dtype"]))


@rule(ops.REG_STORE.name)
def rule_reg_store(em, call) -> None:
    vf = _vf(em, call)
    attrs = call.attrs
    _order(em, vf, "VEC_STORE", call.operands["ub"])
    _call(em, call, [_address(em, call.operands["ub"]), vf.register(attrs["src0"]),
                     vf.mask(attrs["bits"], attrs["mask"])], T=ctype(attrs["dtype"]))


@rule(ops.REG_OP.name)
def rule_reg_op(em, call) -> None:
    vf = _vf(em, call)
    attrs = call.attrs
    instr = REGISTER_OPS[attrs["op"]]
    dtype = attrs["dtype"]
    if instr.form == "mask":
        count = vf.count(attrs["dst"])
        em.line(f"{count} = (uint32_t)({em.expr(call.operands['scalar'])});")
        return em.line(f"{vf.mask(attrs['bits'], attrs['dst'])} = Reg::{instr.function}"
                       f"<{instr.template.format(T=ctype(dtype))}>({count});")
    dst, mask = vf.register(attrs["dst"]), vf.mask(attrs["bits"], attrs["mask"])
    srcs = [vf.register(attrs[s]) for s in ("src0", "src1") if attrs[s] >= 0]
    scalar = f"({ctype(dtype)}){em.expr(call.operands['scalar'])}"
    if instr.form == "fill":
        return _call(em, call, [dst, scalar, mask])
    if instr.form == "scalar":
        return _call(em, call, [dst, srcs[0], scalar, mask])
    if instr.form == "convert":
        source = vf.registers[attrs["src0"]]
        widen = dtype_bytes(dtype) > dtype_bytes(source)
        trait = CAST_TRAITS[("widen" if widen else "narrow", attrs["op"].split(".")[1])][0]
        return _call(em, call, [dst, srcs[0], mask], T=ctype(dtype), S=ctype(source),
                     trait=trait)
    return _call(em, call, [dst, *srcs, mask])
