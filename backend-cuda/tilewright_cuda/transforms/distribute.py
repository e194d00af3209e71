"""The ``distribute`` phase: every outermost ``T.Parallel`` nest (the user's and the rules')
is spread over the block's threads (a role's, inside a ``T.ws`` role): a strided loop over its
fused iteration space, 16-byte vectors per thread where the body allows, each thread's own
registers for nests over register accumulators, row vectors and spread fragments."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from .. import intrinsics, keys, layout
from ..analysis import dequant, layouts
from ..analysis.ir import (
    accessed,
    buffers_in,
    find_thread,
    is_parallel,
    map_roles,
    pure_call,
    row_step,
    substitute,
    unit_inner,
    uses,
)
from ..keys import WARP


class Distribute(StmtMutator):
    """Each outermost ``T.Parallel`` nest becomes a strided loop over its fused iteration
    space: thread ``t`` runs iterations ``t, t + threads, ...``; a nest over register
    accumulators or row vectors, a loop over each thread's registers; a nest over spread
    fragments, the same iterations as an unrolled loop over the registers that hold them. Each
    such loop is marked ``keys.SPREAD``: its iterations are the nest's, independent of one
    another, so barrier insertion takes it as one statement (a barrier before it, none between
    its iterations). A nest whose only effects are stores to thread-local storage (not
    reducers) runs whole in every thread (``layouts.runs_whole``)."""

    def __init__(self, tx, threads: int):
        super().__init__()
        self.tx, self.threads = tx, threads

    def visit_For(self, stmt):
        if not is_parallel(stmt):
            return super().visit_For(stmt)
        loops, body = [], stmt
        while is_parallel(body):
            loops.append(body)
            body = body.body
        body = _strip(body)
        registers = self._accumulators(body)
        if registers:
            return self._per_register(loops, body, registers)
        vectors = self._row_vectors(body)
        if vectors:
            return self._per_row(loops, body, vectors[0])
        spread = [b for b in buffers_in(body) if layout.is_spread(b)]
        if spread:
            return self._per_spread(loops, body, spread)
        # reducers take per-thread partial updates, so their nests are spread too
        if layouts.runs_whole(body):
            for loop in reversed(loops):
                body = tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, body)
            return body
        return self._spread(loops, body)

    @staticmethod
    def _accumulators(body) -> list:
        return [b for b in buffers_in(body) if layout.is_accumulator(b)]

    @staticmethod
    def _row_vectors(body) -> list:
        return [b for b in buffers_in(body) if layout.is_rows(b)]

    def _per_row(self, loops, body, vec):
        """A 1-D nest over row vectors in registers (layout.RowVector): each thread runs the rows it
        holds, row ``i`` of register ``s``; the vectors are indexed by ``s``. Of the four lanes
        that hold a row, the first stores the row's element of a shared row buffer
        (``logsum[i] += logsum_1[i]`` adds once; infer_layout admits such a read-modify-write
        only in a nest that stores no row vector)."""
        s = tirx.Var("s", "int32")
        first = tirx.floormod(tirx.floormod(self.tx, WARP), 4) == 0

        def once(st):
            if layout.memory(st.buffer) in ("shared", "shared.dyn"):
                return tirx.IfThenElse(first, st, None)
            return st

        inner = tvm_ffi.structural_map(_row_registers(body, s), (tirx.BufferStore, once))
        inner = substitute(inner, {loops[0].loop_var: layout.row(vec, s, self.threads,
                                                                  self.tx)})
        return tirx.For(s, 0, layout.row_registers(vec, self.threads), tirx.ForKind.UNROLLED,
                        inner, annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _per_register(self, loops, body, registers):
        """A nest over accumulators in registers (infer_layout checked that it indexes them
        ``[i, j]`` by its two loop variables, and gave accumulators that meet in a nest one
        shape and layout, or that it reads one at ``[i + c, j]``, ``layouts.shifted_read``):
        each thread runs the iterations of the elements it holds, ``(i, j)`` of register ``r``
        in the mma layout (``(row - c, col)`` when that iteration is in the nest)."""
        acc = registers[0]
        if len(registers) == 1 and layout.is_register_a(acc):
            found = dequant.match_registers(
                loops, body, acc, lambda r: layout.element(acc, r, self.threads, self.tx),
                self.threads, self.tx, self.analyzer)
            if found is not None:
                return self._dequantised_registers(loops, acc, found)
        r = tirx.Var("r", "int32")
        row, col = layout.element(acc, r, self.threads, self.tx)
        shift = _shift(body, registers, loops[0].loop_var)
        body = _row_registers(body, layout.row_of_register(acc, r))
        first = row if _is_zero(shift) else row - shift
        inner = substitute(body, {loops[0].loop_var: first, loops[1].loop_var: col})
        if not _is_zero(shift):
            inner = tirx.IfThenElse(tirx.all(row - shift >= 0, row - shift < loops[0].extent),
                                    inner, None)
        index = layout.register_index(acc, r)

        def held(buf) -> bool:
            return any(buf.same_as(b) for b in registers)

        def load(e):
            return tirx.BufferLoad(e.source, index) if held(e.source) else e

        def store(st):
            return tirx.BufferStore(st.buffer, st.value, index) if held(st.buffer) else st

        inner = tvm_ffi.structural_map(inner, [(tvm.ir.TensorLoad, load),
                                               (tirx.BufferStore, store)])
        return tirx.For(r, 0, layout.registers(acc, self.threads), tirx.ForKind.UNROLLED,
                        inner, annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _dequantised_registers(self, loops, acc, found):
        """A dequantisation nest over a register A operand (``dequant.match_registers``):
        each thread's registers in runs of eight, one ``tw_dequant_u4x8_f16_a`` call (one
        32-bit load of codes) a run, unrolled."""
        call = intrinsics.call(
            "tw_dequant_u4x8_f16_a",
            tirx.address_of(tirx.BufferLoad(acc, layout.register_index(acc, found.first))),
            tirx.address_of(found.codes), found.zero, found.scale)
        return tirx.For(found.run, 0, found.runs, tirx.ForKind.UNROLLED, call,
                        annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _per_spread(self, loops, body, spread):
        """A nest over spread fragments (layout.Spread; infer_layout checked that it indexes
        each at the iteration's own element, ``layouts.spread_index``): thread ``tx`` runs
        iterations ``k * threads + tx`` of the fused space, ``k`` the register that holds the
        element, unrolled so that the registers keep constant indices."""
        count = layout.spread_registers(spread[0].shape, self.threads)
        for buf in spread:
            if layout.spread_registers(buf.shape, self.threads) != count:
                raise KernelError(f"CUDA internal error: a T.Parallel nest touches spread "
                                  f"fragments of different sizes ({buf.name!r})",
                                  span_location(loops[0].span))

        def check(node):
            buf = accessed(node)
            if layout.is_spread(buf) and not layouts.spread_index(list(node.indices), loops,
                                                                  buf.shape):
                raise KernelError(f"CUDA internal error: spread fragment {buf.name!r} is "
                                  "indexed at another iteration's element",
                                  span_location(loops[0].span))

        tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, check), (tirx.BufferStore, check)])
        k = tirx.Var("k", "int32")
        flat, mapping, stride = k * self.threads + self.tx, {}, 1
        big = [loop for loop in loops if int(loop.extent.value) != 1]
        for loop in loops:
            mapping[loop.loop_var] = tirx.const(0, "int32")
        for loop in reversed(big):  # the outermost takes what is left: no modulo
            extent = int(loop.extent.value)
            value = tirx.floordiv(flat, stride) if stride > 1 else flat
            mapping[loop.loop_var] = value if loop is big[0] else tirx.floormod(value, extent)
            stride *= extent

        def load(e):
            return tirx.BufferLoad(e.source, layout.spread_register_index(e.source, k)) \
                if layout.is_spread(e.source) else e

        def store(st):
            return tirx.BufferStore(st.buffer, st.value,
                                    layout.spread_register_index(st.buffer, k)) \
                if layout.is_spread(st.buffer) else st

        inner = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load),
                                              (tirx.BufferStore, store)])
        return tirx.For(k, 0, count, tirx.ForKind.UNROLLED, substitute(inner, mapping),
                        annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _spread(self, loops, body):
        found = dequant.match(loops, body, self.analyzer)
        if found is not None:
            return self._dequantised(loops, found)
        guard, inner = _guard(body)
        vector = self._vectorized(loops, inner, guard)
        if vector is None:
            vector = self._staged(loops, inner, guard)
        if vector is not None:
            return vector
        extents = [loop.extent for loop in loops]
        total = extents[0]
        for e in extents[1:]:
            total = total * e
        total = self.analyzer.simplify(total)
        threads = self.threads
        it = tirx.Var("it", "int32")
        flat = it * threads + self.tx
        mapping, stride = {}, None
        for loop, extent in reversed(list(zip(loops, extents))):
            value = flat if stride is None else tirx.floordiv(flat, stride)
            if loop is not loops[0]:
                value = tirx.floormod(value, extent)
            mapping[loop.loop_var] = loop.min + value if not _is_zero(loop.min) else value
            stride = extent if stride is None else stride * extent
        inner = substitute(body, mapping)
        whole = isinstance(total, tirx.IntImm) and int(total.value) % threads == 0
        if not whole:
            inner = tirx.IfThenElse(flat < total, inner, None)
        count = self.analyzer.simplify(tirx.floordiv(total + threads - 1, threads))
        return tirx.For(it, 0, count, tirx.ForKind.SERIAL, inner,
                        annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _dequantised(self, loops, found):
        """A dequantisation nest (``analysis.dequant``): thread ``t`` takes the runs of
        ``dequant.RUN`` elements ``t, t + threads, ...`` of the fused space, one
        ``tw_dequant_u4x8_f16`` call a run."""
        extents = [int(loop.extent.value) for loop in loops]
        extents[-1] //= dequant.RUN
        total = math.prod(extents)
        it = tirx.Var("it", "int32")
        flat = it * self.threads + self.tx
        mapping, stride = {}, 1
        for loop, extent in reversed(list(zip(loops, extents))):
            value = flat if stride == 1 else tirx.floordiv(flat, stride)
            if loop is not loops[0]:
                value = tirx.floormod(value, extent)
            mapping[loop.loop_var] = value * dequant.RUN if loop is loops[-1] else value
            stride *= extent
        store = found.store
        inner = intrinsics.call(
            "tw_dequant_u4x8_f16",
            tirx.address_of(tirx.BufferLoad(store.buffer, list(store.indices))),
            tirx.address_of(found.codes), found.zero, found.scale)
        inner = substitute(inner, mapping)
        if total % self.threads:
            inner = tirx.IfThenElse(flat < total, inner, None)
        # zero points and scales staged in shared memory: unrolled, or ptxas unrolls the
        # 16 calls of W4A16's 128 x 128 tiles only 4 times (a branch and the address
        # arithmetic in the loop; examples/gemm_w4a16.py, stage_scales). Read from global
        # memory they are unrolled already, and the unroll request would reschedule the
        # measured default (its loop 527 -> 519 instructions)
        kind = tirx.ForKind.UNROLLED if found.staged else tirx.ForKind.SERIAL
        return tirx.For(it, 0, -(-total // self.threads), kind, inner,
                        annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _vector_width(self, loops, body) -> int | None:
        """Elements per 16-byte vector when every thread can take whole vectors: the body is
        plain stores of loads and arithmetic (no call, cast or branch) to global or shared
        buffers of one type of ``VECTOR_TYPES``, each indexed by the innermost loop variable
        with unit stride in its contiguous last dimension at a 16-byte aligned start, and the
        constant iteration space splits evenly into vectors for all threads."""
        stmts = _stores(body)
        total = _constant_space(loops)
        if stmts is None or total is None:
            return None
        accesses, calls = [], []
        for st in stmts:
            accesses.append((st.buffer, list(st.indices)))
            tvm_ffi.structural_walk(st.value, [
                (tvm.ir.TensorLoad, lambda e: accesses.append((e.source, list(e.indices)))),
                (tvm.ir.Call, calls.append), (tirx.Cast, calls.append)])
        if calls:
            return None
        # one type of VECTOR_TYPES (no cast: TVM's vector code for 16-bit types mixed with
        # float32 arithmetic, 8 lanes through ulonglong4, does not compile)
        dtypes = {str(buf.dtype) for buf, _ in accesses}
        if len(dtypes) != 1 or next(iter(dtypes)) not in VECTOR_TYPES:
            return None
        vec = VECTOR_BYTES * 8 // tvm.runtime.DataType(next(iter(dtypes))).bits
        if not self._splits(loops, total, vec):
            return None
        j = loops[-1].loop_var
        if not all(self._aligned(buf, indices, j, vec) for buf, indices in accesses):
            return None
        return vec

    def _splits(self, loops, total: int, vec: int) -> bool:
        """Whether rows of the nest split into vectors of ``vec`` and the space into whole
        vectors for every thread."""
        return int(loops[-1].extent.value) % vec == 0 and total % (vec * self.threads) == 0

    def _aligned(self, buf, indices, j, vec: int) -> bool:
        """Whether the access ``buf[indices]`` reads or writes ``vec`` adjacent elements at
        an aligned start for each vector of the innermost loop variable ``j``: global or
        shared memory, ``j`` in the last index only, plus an offset that is a multiple of
        ``vec``, rows a multiple of ``vec`` apart."""
        q = tirx.Var("q", "int32")
        if str(buf.scope()) not in ("global", "shared", "shared.dyn") or not indices or \
                any(uses(i, j) for i in indices[:-1]):
            return False
        offset = self.analyzer.simplify(indices[-1] - j)
        if uses(offset, j) or not self.analyzer.can_prove(
                tirx.floormod(substitute(offset, {j: q * vec}), vec) == 0):
            return False
        return unit_inner(buf) and (len(buf.shape) == 1 or self.analyzer.can_prove(
            tirx.floormod(row_step(buf), vec) == 0))

    def _lanes(self, loops, vec: int, it, v) -> dict:
        """Loop variable -> its value at lane ``v`` of thread ``tx``'s vector ``it`` (vectors
        ``tx, tx + threads, ...`` of the fused space)."""
        base = (it * self.threads + self.tx) * vec  # the vector's first element, flat
        mapping, stride = {}, 1
        for loop in reversed(loops):
            extent = int(loop.extent.value)
            value = base if stride == 1 else tirx.floordiv(base, stride)
            if loop is not loops[0]:
                value = tirx.floormod(value, extent)
            mapping[loop.loop_var] = value + v if stride == 1 else value
            stride *= extent
        return mapping

    def _vectorized(self, loops, body, guard=None):
        """Thread ``t`` takes the 16-byte vectors ``t, t + threads, ...`` of the fused space:
        a serial loop over them around a vectorised loop over one vector's elements, which
        TVM's code generator turns into 128-bit loads and stores; under ``guard`` (the nest's
        condition, the same for every element of a vector: ``_lane_uniform``) tested once a
        vector."""
        vec = self._vector_width(loops, body)
        if vec is None or not self._lane_uniform(guard, loops[-1].loop_var, vec):
            return None
        total = _constant_space(loops)
        it, v = tirx.Var("it", "int32"), tirx.Var("v", "int32")
        inner = tirx.For(v, 0, vec, tirx.ForKind.VECTORIZED,
                         substitute(body, self._lanes(loops, vec, it, v)))
        return tirx.For(it, 0, total // (vec * self.threads), tirx.ForKind.SERIAL,
                        self._guarded(inner, guard, loops, vec, it),
                        annotations={keys.SPREAD: 1}, span=loops[0].span)

    def _guarded(self, stmt, guard, loops, vec: int, it):
        """``stmt`` (a vector's statements) under ``guard`` at the vector's first element."""
        if guard is None:
            return stmt
        return tirx.IfThenElse(substitute(guard, self._lanes(loops, vec, it, 0)), stmt, None)

    def _lane_uniform(self, guard, j, vec: int) -> bool:
        """Whether the condition ``guard`` has one value for all ``vec`` elements of a vector
        (``j`` the innermost loop variable, each vector starting at a multiple of ``vec``):
        it is a conjunction of terms that do not use ``j`` and comparisons ``a < b`` /
        ``a <= b`` (``>`` / ``>=`` the other way round) whose ``a`` grows by one with ``j``
        and whose ``b - a`` at a vector's start is a multiple of ``vec`` (``b - a + 1`` for
        ``<=``): a column bound ``bx * 512 + j < N`` with ``N`` a multiple of ``vec``."""
        if guard is None:
            return True
        q = tirx.Var("q", "int32")
        for term in _conjuncts(guard):
            if not uses(term, j):
                continue
            if isinstance(term, (tirx.GT, tirx.GE)):
                term = (tirx.LT if isinstance(term, tirx.GT) else tirx.LE)(term.b, term.a)
            if not isinstance(term, (tirx.LT, tirx.LE)) or _loads(term):
                return False
            room = term.b - term.a  # falls by one a step of j
            step = self.analyzer.simplify(substitute(room, {j: j + 1}) - room)
            if not isinstance(step, tirx.IntImm) or int(step.value) != -1:
                return False
            edge = room if isinstance(term, tirx.LT) else room + 1
            if not self.analyzer.can_prove(
                    tirx.floormod(substitute(edge, {j: q * vec}), vec) == 0):
                return False
        return True

    def _staged(self, loops, body, guard=None):
        """A nest whose values convert or call math (``B[i, j] = T.exp(T.Cast("float32",
        A[i, j]))``), or mix element types, with every store and every load that moves with
        the innermost loop variable vectorisable (``_aligned``): each thread takes vectors of
        ``16 / widest element bytes`` iterations; for each store in order, the loads that
        move with ``j`` are copied into registers by vector loads, the values computed lane
        by lane (unrolled), and stored by one vector store. Loads that do not move with
        ``j`` stay in the lane's expression. A ``guard`` (the nest's one ``if``) must have
        one value for a vector's elements (``_lane_uniform``) and is tested once a vector.
        None when a value loads conditionally (``T.if_then_else``, a select: the load must
        not be hoisted) or calls a function with an effect, or an access cannot be a
        vector."""
        stmts = _stores(body)
        total = _constant_space(loops)
        if stmts is None or total is None:
            return None
        j = loops[-1].loop_var
        moving, widest = [], 0
        for st in stmts:
            if not _lane_safe(st.value):
                return None
            loads = _distinct([e for e in _loads(st.value) if uses(e, j)])
            moving.append(loads)
            for buf in [st.buffer, *(e.source for e in loads)]:
                if str(buf.dtype) not in STAGED_TYPES:
                    return None
                widest = max(widest, tvm.runtime.DataType(str(buf.dtype)).bits // 8)
        vec = VECTOR_BYTES // widest
        if not self._splits(loops, total, vec) or \
                not self._lane_uniform(guard, loops[-1].loop_var, vec):
            return None
        for st, loads in zip(stmts, moving, strict=True):
            if not all(self._aligned(acc, list(acc_indices), j, vec) for acc, acc_indices in
                       [(st.buffer, st.indices), *((e.source, e.indices) for e in loads)]):
                return None
        it = tirx.Var("it", "int32")
        seq = []
        for n, (st, loads) in enumerate(zip(stmts, moving, strict=True)):
            registers = []
            for k, load in enumerate(loads):
                reg = tirx.decl_buffer((vec,), load.source.dtype, f"{load.source.name}_v{n}{k}",
                                       scope="local")
                v = tirx.Var("v", "int32")
                seq += [tirx.AllocBuffer(reg), tirx.For(
                    v, 0, vec, tirx.ForKind.VECTORIZED,
                    tirx.BufferStore(reg, substitute(load, self._lanes(loops, vec, it, v)),
                                     [v]))]
                registers.append(reg)
            out = tirx.decl_buffer((vec,), st.buffer.dtype, f"{st.buffer.name}_v{n}",
                                   scope="local")
            v = tirx.Var("v", "int32")
            value = _replace_loads(st.value, loads, [tirx.BufferLoad(r, [v]) for r in registers])
            seq += [tirx.AllocBuffer(out), tirx.For(
                v, 0, vec, tirx.ForKind.UNROLLED,
                tirx.BufferStore(out, substitute(value, self._lanes(loops, vec, it, v)), [v]))]
            v = tirx.Var("v", "int32")
            lanes = self._lanes(loops, vec, it, v)
            seq.append(tirx.For(v, 0, vec, tirx.ForKind.VECTORIZED, tirx.BufferStore(
                st.buffer, tirx.BufferLoad(out, [v]), [substitute(i, lanes) for i in st.indices])))
        return tirx.For(it, 0, total // (vec * self.threads), tirx.ForKind.SERIAL,
                        self._guarded(tirx.SeqStmt(seq), guard, loops, vec, it),
                        annotations={keys.SPREAD: 1}, span=loops[0].span)


VECTOR_BYTES = 16
# the element types whose elementwise nests take 16-byte vectors: 4 lanes of 32 bits (float4,
# int4) or 8 of 16 (uint4 read as half2 / nv_bfloat162 pairs)
VECTOR_TYPES = ("float32", "int32", "float16", "bfloat16")
# the element types a staged nest (Distribute._staged) moves by vectors: lanes of 8, 16 or 32
# bits in 4, 8 or 16 bytes (TVM's CUDA vector types: char4 / int2 / int4, half4 / uint4,
# float2 / float4 ...)
STAGED_TYPES = ("float32", "int32", "uint32", "float16", "bfloat16", "int8", "uint8")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")  # pure, but evaluates one side only


def _guard(body) -> tuple:
    """``(condition, statements)`` of a nest body that is one ``if`` without ``else``,
    ``(None, body)`` for any other."""
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        return body.condition, body.then_case
    return None, body


def _conjuncts(cond) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _stores(body) -> list | None:
    """The statements of a nest body that is only buffer stores, else None."""
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    return stmts if all(isinstance(st, tirx.BufferStore) for st in stmts) else None


def _constant_space(loops) -> int | None:
    """The size of a nest's iteration space when its loops start at 0 with constant extents."""
    if not all(isinstance(loop.extent, tirx.IntImm) and _is_zero(loop.min) for loop in loops):
        return None
    return math.prod(int(loop.extent.value) for loop in loops)


def _loads(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, found.append))
    return found


def _distinct(loads) -> list:
    out = []
    for load in loads:
        if not any(tvm_ffi.structural_equal(load, o) for o in out):
            out.append(load)
    return out


def _replace_loads(expr, loads, values):
    def visit(e):
        for load, value in zip(loads, values, strict=True):
            if tvm_ffi.structural_equal(e, load):
                return value
        return e

    return tvm_ffi.structural_map(expr, (tvm.ir.TensorLoad, visit))


def _lane_safe(expr) -> bool:
    """Whether every load in ``expr`` runs whenever it is evaluated (no ``Select`` or
    ``if_then_else``, whose unchosen side C does not evaluate) and its calls are pure math
    (no atomic or external function), so that its loads may be made before it, by vector."""
    bad = []

    def call(c):
        if not pure_call(c) or c.op.same_as(_IF_THEN_ELSE):
            bad.append(c)

    tvm_ffi.structural_walk(expr, [(tvm.ir.Call, call), (tirx.Select, bad.append)])
    return not bad


def _row_registers(body, s):
    """Row vectors (layout.RowVector) read or written in ``body`` index their register ``s``."""
    def load(e):
        return tirx.BufferLoad(e.source, [s]) if layout.is_rows(e.source) else e

    def store(st):
        return tirx.BufferStore(st.buffer, st.value, [s]) if layout.is_rows(st.buffer) \
            else st

    return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])


def _shift(body, registers, var):
    """``c`` of the register accumulators' row index ``var + c`` in ``body`` (zero when they
    are indexed by ``var`` itself)."""
    rows = []
    tvm_ffi.structural_walk(body, [
        (tvm.ir.TensorLoad, lambda e: rows.append(e.indices[0])
         if any(e.source.same_as(b) for b in registers) else None),
        (tirx.BufferStore, lambda st: rows.append(st.indices[0])
         if any(st.buffer.same_as(b) for b in registers) else None)])
    shifts = [layouts.row_shift(ix, var) for ix in rows]
    return shifts[0] if len(shifts) == 1 and shifts[0] is not None else tirx.const(0, "int32")


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e.value) == 0


def _strip(stmt):
    """Drop ``T.Parallel`` annotations below a distributed nest (they run serially)."""
    def visit(loop):
        if any(str(k).startswith("tw.") for k in loop.annotations):
            return rebuild_for(loop, annotations={k: v for k, v in loop.annotations.items()
                                                  if not str(k).startswith("tw.")})
        return loop

    return tvm_ffi.structural_map(stmt, (tirx.For, visit))


def distribute():
    def run(func):
        tx_loop = find_thread(func)
        mutator = Distribute(tx_loop.loop_var, int(tx_loop.extent.value))
        return func.with_body(mutator.visit(func.body))

    return prim_func_pass("CUDADistributeParallel", run)


def distribute_roles():
    """``T.Parallel`` nests inside a role are spread over the role's threads."""

    def run(func):
        return map_roles(func, lambda loop: Distribute(
            loop.loop_var, int(loop.extent.value)).visit(loop.body))

    return prim_func_pass("CUDADistributeRoles", run)
