"""Dequantisation nests: a ``T.Parallel`` body that turns packed unsigned 4-bit codes into
float16 weights with one zero point and one scale per run of ``RUN`` consecutive elements,

    W[..., j] = (T.cast(T.unpack(Q[..., j // 2], j % 2, 4), "float16") - zero) * scale

(``examples/gemm_w4a16.py``), which the distribution transform gives to
``tw_dequant_u4x8_f16`` (``include/tw_dequant.h``), eight elements a call, instead of one
element a thread at a time; into a wgmma register A operand (:func:`match_registers`), to
``tw_dequant_u4x8_f16_a``, eight of a thread's registers a call. Only this form is taken,
with the roundings of the scalar code (the subtraction, then the product); bfloat16 weights
and signed codes keep the scalar path.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from .. import layout
from .ir import row_step, substitute, unit_inner, uses

RUN = 8  # elements a call: the eight 4-bit codes of a 32-bit word, 16 bytes of float16
_SHARED = ("shared", "shared.dyn")


@dataclass(frozen=True)
class Dequant:
    """A matched nest body: the float16 store, the load of the byte of codes, the zero point
    and the scale, all still in the nest's loop variables."""

    store: tirx.BufferStore
    codes: tvm.ir.TensorLoad
    zero: tirx.PrimExpr
    scale: tirx.PrimExpr
    staged: bool  # the zero point and scale load from shared memory only (or not at all)


def match(loops, body, analyzer) -> Dequant | None:
    """The dequantisation in ``body`` of the ``T.Parallel`` nest ``loops``, or None when the
    body is anything else or a run of ``RUN`` iterations along the innermost loop ``j`` is not
    one call's work: the store's last index ``j + c`` and the codes' ``j // 2 + d`` with ``c``
    a multiple of 8 and ``d`` of 4 (16-byte and 4-byte aligned runs, contiguous in shared
    memory; a swizzled tile keeps 16-byte chunks whole), the other indices and the zero point's
    and scale's free of ``j`` within a run."""
    j = loops[-1].loop_var
    extent = loops[-1].extent
    if not isinstance(body, tirx.BufferStore) or not isinstance(extent, tirx.IntImm) or \
            int(extent.value) % RUN or \
            not all(isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
                    for loop in loops):
        return None
    dst = body.buffer
    if str(dst.dtype) != "float16" or layout.memory(dst) not in _SHARED or \
            not _run_start(list(body.indices), j, RUN, dst, analyzer):
        return None
    parts = _parts(body.value)
    if parts is None:
        return None
    codes, shift, zero, scale = parts
    # T.unpack(Q[...], j % 2, 4): the low nibble at even j
    if not (uses(shift, j) and analyzer.can_prove(shift == tirx.floormod(j, 2) * 4)) or \
            str(codes.source.dtype) != "uint8" or \
            layout.memory(codes.source) not in _SHARED or \
            not _run_start(list(codes.indices), j, RUN // 2, codes.source, analyzer, half=True):
        return None
    if not all(_run_invariant(e, j, extent, analyzer) for e in (zero, scale)):
        return None
    return Dequant(body, codes, zero, scale, _reads_only_shared(zero) and
                   _reads_only_shared(scale))


# a run of a register A operand (layout.element of the wgmma layout): registers r0 + o of one
# row, columns c0 + 8 (o // 4) + o % 2 from r0's column c0, r0 = 16 c + 2 h (the k32 step
# c, the row half h); as pairs, registers r0 + 4 b and r0 + 4 b + 1 for b = 0..3. Per
# register: (o, the byte of its code from the word's first, the nibble in it): register
# 4 b + h is nibble b + 4 h of the word (tw_dequant_u4x8_f16_a)
A_RUN = tuple((4 * b + h, (b + 4 * h) // 2, (b + 4 * h) % 2) for b in range(4)
              for h in range(2))


@dataclass(frozen=True)
class RegisterDequant:
    """A matched nest over a register A operand: per run ``run`` (``runs`` of them), its
    first register ``first`` and the call's code address, zero point and scale, all in terms
    of ``run``."""

    runs: int
    run: tirx.Var
    first: tirx.PrimExpr
    codes: tvm.ir.TensorLoad  # the word's first byte
    zero: tirx.PrimExpr
    scale: tirx.PrimExpr


def match_registers(loops, body, acc, element, threads, tx, analyzer) -> RegisterDequant | None:
    """The dequantisation in ``body`` of a 2-D ``T.Parallel`` nest over the register A operand
    ``acc`` (float16), as runs of eight registers (``A_RUN``) whose codes are one 32-bit word:
    with ``(row, column) = element(r)`` (the nest's iteration of register ``r`` of thread
    ``tx``), over each run the codes are the nibbles of one 4-byte aligned word in the order
    ``A_RUN`` gives (examples/gemm_w4a16.py's wgmma order), the zero point and scale one
    value. Proved per run for every thread; None
    when any of it fails (the nest then runs a register at a time)."""
    if len(loops) != 2 or not isinstance(body, tirx.BufferStore) or \
            not body.buffer.same_as(acc) or str(acc.dtype) != "float16":
        return None
    parts = _parts(body.value)
    if parts is None:
        return None
    load, shift, zero, scale = parts
    rows, cols = (int(e.value) for e in acc.shape)
    count = rows * cols // threads
    if str(load.source.dtype) != "uint8" or layout.memory(load.source) not in _SHARED or \
            cols % 32 or count % 16 or not isinstance(load.source.shape[-1], tirx.IntImm) or \
            int(load.source.shape[-1].value) % 4:
        return None
    i, j = loops[0].loop_var, loops[1].loop_var

    def at(r, expr):
        row, col = element(r)
        return substitute(expr, {i: row, j: col})

    u = tirx.Var("u", "int32")
    first = tirx.floordiv(u, 2) * 16 + tirx.floormod(u, 2) * 2
    with analyzer.constraint_scope(tirx.all(tx >= 0, tx < threads)):
        for run in range(count // 8):
            r0 = tirx.const(run // 2 * 16 + run % 2 * 2, "int32")
            base = [at(r0, e) for e in load.indices]
            if not analyzer.can_prove(tirx.floormod(base[-1], 4) == 0):
                return None
            for o, step, half in A_RUN:
                r = r0 + o
                index = [at(r, e) for e in load.indices]
                steps = [*(tirx.const(0, "int32") for _ in index[:-1]),
                         tirx.const(step, "int32")]
                if not all(analyzer.can_prove(a - b == d) for a, b, d in
                           zip(index, base, steps)) or \
                        not analyzer.can_prove(at(r, shift) == 4 * half) or \
                        not all(_same_loads(at(r, e), at(r0, e), analyzer)
                                for e in (zero, scale)):
                    return None
    codes = tirx.BufferLoad(load.source, [at(first, e) for e in load.indices])
    return RegisterDequant(count // 8, u, first, codes, at(first, zero), at(first, scale))


def _same_loads(expr, other, analyzer) -> bool:
    """Whether ``expr`` and ``other`` are the same expression but for load indices that are
    provably equal."""
    a, b = [], []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, a.append))
    tvm_ffi.structural_walk(other, (tvm.ir.TensorLoad, b.append))
    if len(a) != len(b) or any(not x.source.same_as(y.source) for x, y in zip(a, b)):
        return False
    if not all(analyzer.can_prove(p == q) for x, y in zip(a, b)
               for p, q in zip(x.indices, y.indices)):
        return False

    def strip(e):
        return tvm_ffi.structural_map(e, (tvm.ir.TensorLoad,
                                          lambda t: tirx.const(0, str(t.ty))))

    return tvm_ffi.structural_equal(strip(expr), strip(other))


def _reads_only_shared(expr) -> bool:
    """Whether every load in ``expr`` reads shared memory."""
    memories = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad,
                                    lambda load: memories.append(layout.memory(load.source)))])
    return all(m in _SHARED for m in memories)


def _parts(value):
    """The pieces of ``((float16)((Q[...] >> shift) & 15) - zero) * scale`` (``T.unpack``'s
    nibble less its zero point, times its scale): (the byte load, the shift, the zero point,
    the scale), else None."""
    if not (isinstance(value, tirx.Mul) and isinstance(value.a, tirx.Sub) and
            isinstance(value.a.a, tirx.Cast) and str(value.a.a.ty) == "float16"):
        return None
    nibble = value.a.a.value
    if not (isinstance(nibble, tirx.BitwiseAnd) and isinstance(nibble.b, tirx.IntImm) and
            int(nibble.b.value) == 15 and isinstance(nibble.a, tirx.RShift) and
            isinstance(nibble.a.a, tvm.ir.TensorLoad)):
        return None
    shift = nibble.a.b
    return (nibble.a.a, shift.value if isinstance(shift, tirx.Cast) else shift, value.a.b,
            value.b)


def _run_start(indices, j, run, buf, analyzer, half=False) -> bool:
    """The last index is ``j + c`` (``j // 2 + c`` with ``half``), ``c`` free of ``j`` and a
    multiple of ``run``; the others free of ``j``; a row holds whole runs."""
    if not indices or any(uses(i, j) for i in indices[:-1]):
        return False
    position = tirx.floordiv(j, 2) if half else j
    offset = analyzer.simplify(indices[-1] - position)
    if uses(offset, j) or not analyzer.can_prove(tirx.floormod(offset, run) == 0):
        return False
    last = row_step(buf)
    return unit_inner(buf) and isinstance(last, tirx.IntImm) and int(last.value) % run == 0


def _run_invariant(expr, j, extent, analyzer) -> bool:
    """Whether ``expr`` has one value over each run ``j = RUN * q + v``, ``0 <= v < RUN``:
    free of ``j`` but in the indices of the loads it is made of, which the runs do not
    change."""
    q, v = tirx.Var("q", "int32"), tirx.Var("v", "int32")
    ok = [True]

    def check(load):
        for index in load.indices:
            if not uses(index, j):
                continue
            with analyzer.constraint_scope(tirx.all(q >= 0, q < int(extent.value) // RUN,
                                                    v >= 0, v < RUN)):
                inside = substitute(index, {j: q * RUN + v})
                first = substitute(index, {j: q * RUN})
                if not analyzer.can_prove(inside == first):
                    ok[0] = False

    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, check)])
    stripped = tvm_ffi.structural_map(expr, (tvm.ir.TensorLoad,
                                             lambda e: tirx.const(0, str(e.ty))))
    return ok[0] and not uses(stripped, j)
