"""Loops the vector unit cannot do, on the scalar unit: ``GetValue``/``SetValue`` loops written
under a comment giving the reason."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import decode
from tvm import tirx

from ..analysis.buffers import flat_index
from ..facts import ops
from ..facts.dtypes import ctype
from ..facts.keys import SCALAR_KEY
from ..facts.terms import statement_term
from .table import RULES, rule


def emit_scalar_loop(em, loop) -> None:
    """The loop; one of one trip whose variable its body does not use as its body alone, with
    no C++ scope around it, so the names it binds stay visible to the statements after it."""
    em.line(f"// scalar fallback on the S pipe (GetValue/SetValue): "
            f"{str(loop.annotations[SCALAR_KEY])}")
    one_trip = isinstance(loop.extent, tirx.IntImm) and int(loop.extent.value) == 1
    used = []
    tvm_ffi.structural_walk(loop.body, (tirx.Var, lambda v: used.append(v)
                                        if v.same_as(loop.loop_var) else None))
    _scalar_stmt(em, loop.body if one_trip and not used else loop)


def _scalar_stmt(em, s):
    if isinstance(s, tirx.SeqStmt):
        for child in s.seq:
            _scalar_stmt(em, child)
    elif isinstance(s, tirx.For):
        em.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent))
        v = em.var(s.loop_var)
        with em.block(f"for (int32_t {v} = {em.expr(s.min)}; {v} < "
                      f"{em.expr(s.min + s.extent)}; ++{v})"):
            _scalar_stmt(em, s.body)
    elif isinstance(s, tirx.IfThenElse):
        # a branch on tile data the selects of transforms.scalar_nest could not take: the
        # scalar unit stalls on its reads (the sync pass puts their flags in front)
        with em.block(f"if ({em.expr(s.condition)})"):
            _scalar_stmt(em, s.then_case)
        if s.else_case is not None:
            em.lines[-1] += " else {"
            em.depth += 1
            _scalar_stmt(em, s.else_case)
            em.depth -= 1
            em.line("}")
    elif isinstance(s, tirx.Bind):  # auto: a value read by GetValue is lazy on the emulator
        em.line(f"auto {em.var(s.var)} = TW_CAST({ctype(str(s.var.ty))}, {em.expr(s.value)});")
    elif isinstance(s, tirx.BufferStore):
        em.line(f"{em.buf(s.buffer)}.SetValue({em.expr(flat_index(s.buffer, s.indices))}, "
                f"TW_CAST({ctype(str(s.buffer.dtype))}, {em.expr(s.value)}));")
    elif isinstance(s, tirx.Evaluate) and (call := decode(s)) is not None and \
            call.name in ops.SCALAR_STATEMENTS:
        RULES[call.name](em, call)  # T.device_assert / T.print of an element in the loop
    else:
        raise KernelError(f"backend 'ascend' cannot run {statement_term(s)} on the scalar "
                          "unit", span_location(getattr(s, "span", None)))


@rule(ops.COUNTER.name)
def rule_counter(em, call) -> None:
    """A scalar register: ``int32_t c = v;`` where declared, ``c = v;`` where assigned."""
    var = call.operands["counter"]
    value = em.expr(call.operands["value"])
    em.line(f"{ctype(str(var.ty)) + ' ' if call.attrs['declare'] else ''}{em.var(var)} = "
            f"{value};")
