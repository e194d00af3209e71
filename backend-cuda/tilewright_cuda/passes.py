"""The CUDA backend's phases around tile-op lowering: thread binding, distribution of
``T.Parallel`` iterations over threads, barrier insertion, and shared-memory placement."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from . import rows as row_vectors
from . import swizzle
from .lowering import (
    MMA_ACC,
    OWN_ELEMENTS,
    ROWS_MARK,
    acc_grid,
    is_sync,
    mma_acc_element,
    mma_acc_registers,
    mma_misfit_for,
    register_index,
    sync,
)

LOOP_KEY = "tw.loop"
SPREAD = "tw.spread"  # marks a loop whose iterations are spread over the threads
THREAD_TAG = "threadIdx.x"
SMEM_ALIGN = 128


# -- bind_threads -----------------------------------------------------------------------------
def _block_loops(func):
    loops, stmt = [], func.body
    while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


def threads_of(func) -> int:
    loops, _ = _block_loops(func)
    if not loops or "tw.threads" not in loops[0].annotations:
        raise KernelError("the CUDA backend needs a kernel written with 'with T.Kernel(...)'")
    x, y, z = (int(t) for t in loops[0].annotations["tw.threads"])
    return x * y * z


def bind_threads():
    """The block's program runs on ``threads`` threads: wrap it in a ``threadIdx.x`` loop.
    (A 2-D or 3-D ``threads`` is flattened; the language exposes no thread index.)"""

    def run(func):
        loops, inner = _block_loops(func)
        threads = threads_of(func)
        loops, inner = _rasterise(loops, inner)
        tx = tirx.Var("tx", "int32")
        iv = tirx.IterVar(tvm.ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, THREAD_TAG)
        body = tirx.For(tx, 0, threads, tirx.ForKind.THREAD_BINDING, inner, thread_binding=iv)
        for loop in reversed(loops):
            body = rebuild_for(loop, body=body)
        return func.with_body(body)

    return prim_func_pass("CUDABindThreads", run)


def _rasterise(loops, inner):
    """``T.use_swizzle(panel, order)``: the launch's block ``(x, y)`` (linear ``x + y gx``)
    runs the program of another block, so that consecutive blocks walk a panel of ``panel``
    rows (``order="row"``; columns for ``"col"``) column by column, every other panel
    backwards: the blocks in flight together share their A rows and B columns in L2. A
    bijection of the grid (the last panel may be narrower); a 1-D grid is left alone."""
    if not loops or "tw.swizzle" not in loops[0].annotations or len(loops) < 2:
        return loops, inner
    panel, order = loops[0].annotations["tw.swizzle"]
    panel, order = int(panel), str(order)
    bx, by = loops[0].loop_var, loops[1].loop_var
    gx, gy = loops[0].extent, loops[1].extent
    lx, ly = tirx.Var("bx_launch", "int32"), tirx.Var("by_launch", "int32")
    linear = lx + ly * gx
    fdiv, fmod = tirx.floordiv, tirx.floormod
    if order == "row":  # panels of `panel` rows, each walked down its columns
        per = gx * panel
        index = fdiv(linear, per)
        offset = fmod(linear, per)
        stride = tirx.min(tirx.const(panel, "int32"), gy - index * panel)
        col = fdiv(offset, stride)
        new_x = tirx.Select(fmod(index, 2) == 1, gx - 1 - col, col)
        new_y = fmod(offset, stride) + index * panel
    else:  # panels of `panel` columns, each walked along its rows
        per = gy * panel
        index = fdiv(linear, per)
        offset = fmod(linear, per)
        stride = tirx.min(tirx.const(panel, "int32"), gx - index * panel)
        row = fdiv(offset, stride)
        new_y = tirx.Select(fmod(index, 2) == 1, gy - 1 - row, row)
        new_x = fmod(offset, stride) + index * panel
    inner = substitute(inner, {bx: new_x, by: new_y})
    annotations = {k: v for k, v in loops[0].annotations.items() if str(k) != "tw.swizzle"}
    loops = [rebuild_for(loops[0], loop_var=lx, annotations=annotations,
                         thread_binding=tirx.IterVar(loops[0].thread_binding.dom, lx,
                                                     tirx.IterVar.ThreadIndex,
                                                     loops[0].thread_binding.thread_tag)),
             rebuild_for(loops[1], loop_var=ly,
                         thread_binding=tirx.IterVar(loops[1].thread_binding.dom, ly,
                                                     tirx.IterVar.ThreadIndex,
                                                     loops[1].thread_binding.thread_tag)),
             *loops[2:]]
    return loops, inner


def find_thread(func):
    return block_loop(func.body)


def block_loop(body):
    """The block's ``threadIdx.x`` loop in ``body`` (not a T.ws role's, hopper.py), or None."""
    found = []
    tvm_ffi.structural_walk(body, (tirx.For, lambda s: found.append(s) if
                                   s.thread_binding is not None and
                                   str(s.thread_binding.thread_tag) == THREAD_TAG else None),
                           order="pre")
    return found[0] if found else None


# -- infer_layout -----------------------------------------------------------------------------
def _full(region) -> bool:
    return all(isinstance(s, tirx.IntImm) and int(s.value) == 0 for s in region.starts) and \
        all(isinstance(e, tirx.IntImm) and isinstance(d, tirx.IntImm) and
            int(e.value) == int(d.value) for e, d in zip(region.extents, region.buffer.shape))


def _parallel_nests(body) -> list:
    """The outermost ``T.Parallel`` nests: (loops of the nest, innermost body)."""
    found = []

    def visit(stmt):
        if isinstance(stmt, tirx.For) and str(stmt.annotations.get(LOOP_KEY, "")) == "parallel":
            loops, inner = [], stmt
            while isinstance(inner, tirx.For) and \
                    str(inner.annotations.get(LOOP_KEY, "")) == "parallel":
                loops.append(inner)
                inner = inner.body
            found.append((loops, inner))
            return
        for child in _children(stmt):
            visit(child)

    visit(body)
    return found


def _children(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
        return [stmt.body]
    return []


def _elementwise_uses(func, frags) -> dict:
    """Per fragment, (accesses inside ``T.Parallel`` nests that index it exactly by the nest's
    two loop variables over its whole shape, any other access inside a nest)."""
    good, bad = {f: 0 for f in frags}, {f: 0 for f in frags}
    for loops, _ in _parallel_nests(func.body):
        nest = loops[0]

        def visit(node, loops=loops):
            buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
            if buf not in good:
                return
            shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buf.shape]
            ok = len(loops) == 2 and len(node.indices) == 2 and all(
                isinstance(i, tirx.Var) and i.same_as(loop.loop_var) and
                isinstance(loop.extent, tirx.IntImm) and int(loop.extent.value) == extent and
                isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
                for i, loop, extent in zip(node.indices, loops, shape))
            (good if ok else bad)[buf] += 1

        tvm_ffi.structural_walk(nest, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
    return {f: (good[f], bad[f]) for f in frags}


def _register_candidates(func, arch, threads) -> dict:
    """Fragments that may live in registers in the mma accumulator layout: float32, 2-D,
    written by at least one ``mma.sync`` gemm as C, and otherwise only filled whole, copied
    from whole, reduced whole along rows into a shared row vector, or indexed ``[i, j]`` by
    the two loop variables of a ``T.Parallel`` nest over its whole shape. Maps each to True
    when its warps must own whole rows (rows reduced or touched element by element)."""
    from tilewright.ir import tile_ops_in

    frags = set()
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: frags.add(a.buffer) if
                                        str(a.buffer.scope()) == "local.fragment" and
                                        str(a.buffer.dtype) == "float32" and
                                        len(a.buffer.shape) == 2 else None))
    allowed, regions, fed = {f: True for f in frags}, {f: 0 for f in frags}, set()
    rows = set()
    for call in tile_ops_in(func):
        for op in call.schema.operands:
            region = call.operands[op.name]
            if op.kind == "expr" or not hasattr(region, "buffer") or region.buffer not in frags:
                continue
            buf = region.buffer
            regions[buf] += 1
            reduced = call.name.startswith("reduce_") and op.name == "src" and \
                int(call.attrs["dim"]) in (1, -1) and len(call.operands["dst"].extents) == 1 \
                and str(call.operands["dst"].buffer.scope()) in ("shared", "shared.dyn",
                                                                  "local.fragment")
            fits = _full(region) and (
                (call.name == "fill" and op.name == "dst") or
                (call.name == "copy" and op.name == "src") or reduced or
                (call.name == "gemm" and op.name == "C" and
                 mma_misfit_for(call, arch, threads) is None))
            allowed[buf] = allowed[buf] and fits
            if reduced:
                rows.add(buf)
            if fits and call.name == "gemm":
                fed.add(buf)
    uses = {f: 0 for f in frags}

    def count(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if buf in uses:
            uses[buf] += 1

    tvm_ffi.structural_walk(func.body, [(tvm.ir.TensorLoad, count), (tirx.BufferStore, count)])
    elementwise = _elementwise_uses(func, frags)
    chosen = {}
    for f in frags:
        good, bad = elementwise[f]
        if not (allowed[f] and f in fed and not bad and uses[f] == regions[f] + good):
            continue
        needs_rows = f in rows or good > 0
        marked = tirx.decl_buffer(f.shape, f.dtype, f.name, scope=MMA_ACC,
                                  data_alignment=ROWS_MARK if needs_rows else -1)
        if acc_grid(marked, threads) is not None:
            chosen[f] = needs_rows
    return chosen


def _swizzle_candidates(func, arch, threads, in_registers) -> dict:
    """Shared tiles (and fragments kept in shared memory) that get the swizzled layout of
    swizzle.py: float16/bfloat16, 2-D, and either read whole as A or B by at least one gemm
    taking the ``mma.sync`` path, never in part by such a gemm (its ldmatrix addressing needs
    the whole tile), or written whole from an accumulator in registers (an epilogue tile: a
    warp's pair stores then cover eight rows in eight distinct bank groups instead of one).
    Every other access is rewritten element by element in place_memory; pointer accesses
    (16-byte copies, pair stores) keep whole 16-byte chunks, which the swizzle never splits."""
    from tilewright.ir import tile_ops_in

    whole: dict = {}
    for call in tile_ops_in(func):
        if call.name == "copy" and call.operands["src"].buffer in in_registers:
            dst = call.operands["dst"]
            if str(dst.buffer.scope()) in ("shared", "shared.dyn") and len(dst.buffer.shape) == 2:
                whole[dst.buffer] = whole.get(dst.buffer, True) and _full(dst)
            continue
        if call.name != "gemm" or mma_misfit_for(call, arch, threads) is not None:
            continue
        for op in ("A", "B"):
            buf = call.operands[op].buffer
            if str(buf.scope()) in ("shared", "shared.dyn", "local.fragment") and \
                    buf not in in_registers and len(buf.shape) == 2:
                whole[buf] = whole.get(buf, True) and _full(call.operands[op])
    chosen = {}
    for buf, ok in whole.items():
        shape = [int(e.value) if isinstance(e, tirx.IntImm) else None for e in buf.shape]
        layout = swizzle.params(*shape, str(buf.dtype)) if ok and None not in shape else None
        if layout is not None:
            chosen[buf] = layout
    return chosen


def infer_layout(arch):
    """Layout inference. Fragments: one whose every use fits the mma accumulator layout
    becomes registers (scope ``local.mma_acc``); every other fragment stays a shared array
    visible to the whole block (see README, "Fragments"). Shared gemm operands: the swizzled
    layout of swizzle.py, marked on the buffer and recorded in the ``swizzle.ATTR`` attribute
    (name -> [W, B])."""
    def run(func):
        threads = threads_of(func)
        chosen = _register_candidates(func, arch, threads)
        swizzled = _swizzle_candidates(func, arch, threads, chosen)
        from .hopper import _role_loops
        vectors = set() if _role_loops(func.body) else \
            row_vectors.candidates(func, chosen, threads, _parallel_nests)
        if not chosen and not swizzled:
            return func
        remap = {f: tirx.decl_buffer(f.shape, f.dtype, f.name, scope=MMA_ACC,
                                     data_alignment=ROWS_MARK if rows else -1)
                 for f, rows in chosen.items()}
        remap.update({v: tirx.decl_buffer(v.shape, v.dtype, v.name, scope=row_vectors.MMA_ROWS)
                      for v in vectors})
        remap.update({b: swizzle.marked(b) for b in swizzled})
        func = func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.Buffer, lambda b: remap.get(b, b))))
        if swizzled:
            func = func.with_attr(swizzle.ATTR, {b.name: list(layout)
                                                 for b, layout in swizzled.items()})
        return func

    return prim_func_pass("CUDAInferLayout", run)


# -- distribute -------------------------------------------------------------------------------
def _stores(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda s: found.append(s.buffer)))
    return found


def _uses(node, var) -> bool:
    found = []
    tvm_ffi.structural_walk(node, (tirx.Var, lambda v: found.append(v) if v.same_as(var)
                                   else None))
    return bool(found)


def substitute(node, mapping: dict):
    def visit(v):
        for var, value in mapping.items():
            if v.same_as(var):
                return value
        return v

    return tvm_ffi.structural_map(node, (tirx.Var, visit))


class Distribute(StmtMutator):
    """Each outermost ``T.Parallel`` nest becomes a strided loop over its fused iteration
    space: thread ``t`` runs iterations ``t, t + threads, ...``. A nest whose only effects
    are stores to thread-local storage (not reducers) runs whole in every thread."""

    def __init__(self, tx, threads: int):
        super().__init__()
        self.tx, self.threads = tx, threads

    def visit_For(self, stmt):
        if str(stmt.annotations.get(LOOP_KEY, "")) != "parallel":
            return super().visit_For(stmt)
        loops, body = [], stmt
        while isinstance(body, tirx.For) and \
                str(body.annotations.get(LOOP_KEY, "")) == "parallel":
            loops.append(body)
            body = body.body
        body = _strip(body)
        registers = self._accumulators(body)
        if registers:
            return self._per_register(loops, body, registers[0])
        vectors = self._row_vectors(body)
        if vectors:
            return self._per_row(loops, body, vectors[0])
        # reducers take per-thread partial updates, so their nests are spread too
        stores = _stores(body)
        if stores and all(str(b.scope()) in ("local", "local.var") for b in stores):
            for loop in reversed(loops):
                body = tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, body)
            return body
        return self._spread(loops, body)

    @staticmethod
    def _accumulators(body) -> list:
        found = []

        def visit(node):
            buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
            if str(buf.scope()) == MMA_ACC and not any(buf.same_as(f) for f in found):
                found.append(buf)

        tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
        return found

    @staticmethod
    def _row_vectors(body) -> list:
        found = []

        def visit(node):
            buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
            if row_vectors.is_rows(buf):
                found.append(buf)

        tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, visit), (tirx.BufferStore, visit)])
        return found

    def _per_row(self, loops, body, vec):
        """A 1-D nest over row vectors in registers (rows.py): each thread runs the rows it
        holds, row ``i`` of register ``s``; the vectors are indexed by ``s``."""
        s = tirx.Var("s", "int32")
        inner = _row_registers(body, s)
        inner = substitute(inner, {loops[0].loop_var: row_vectors.row(vec, s, self.threads,
                                                                        self.tx)})
        return tirx.For(s, 0, row_vectors.registers(vec, self.threads), tirx.ForKind.UNROLLED,
                        inner, span=loops[0].span)

    def _per_register(self, loops, body, acc):
        """A nest over an accumulator in registers (infer_layout checked that it indexes
        ``[i, j]`` by its two loop variables): each thread runs the iterations of the elements
        it holds, ``(i, j)`` of register ``r`` in the mma layout."""
        r = tirx.Var("r", "int32")
        row, col = mma_acc_element(acc, r, self.threads, self.tx)
        body = _row_registers(body, row_vectors.of_accumulator(acc, r))
        inner = substitute(body, {loops[0].loop_var: row, loops[1].loop_var: col})
        index = register_index(acc, r)

        def load(e):
            return tirx.BufferLoad(e.source, index) if e.source.same_as(acc) else e

        def store(st):
            return tirx.BufferStore(acc, st.value, index) if st.buffer.same_as(acc) else st

        inner = tvm_ffi.structural_map(inner, [(tvm.ir.TensorLoad, load),
                                               (tirx.BufferStore, store)])
        return tirx.For(r, 0, mma_acc_registers(acc, self.threads), tirx.ForKind.UNROLLED,
                        inner, span=loops[0].span)

    def _spread(self, loops, body):
        vector = self._vectorized(loops, body)
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
        return tirx.For(it, 0, count, tirx.ForKind.SERIAL, inner, annotations={SPREAD: 1},
                        span=loops[0].span)


    def _vector_width(self, loops, body) -> int | None:
        """Elements per 16-byte vector when every thread can take whole vectors: the body is
        plain stores of loads and arithmetic (no call, cast or branch) to global or shared
        buffers of one 32-bit type, each indexed by the innermost loop variable with unit
        stride in its contiguous last dimension at a 16-byte aligned start, and the
        constant iteration space splits evenly into vectors for all threads."""
        stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        if not all(isinstance(st, tirx.BufferStore) for st in stmts):
            return None
        extents = [loop.extent for loop in loops]
        if not all(isinstance(e, tirx.IntImm) for e in extents) or \
                not all(_is_zero(loop.min) for loop in loops):
            return None
        total = 1
        for e in extents:
            total *= int(e.value)
        accesses, calls = [], []
        for st in stmts:
            accesses.append((st.buffer, list(st.indices)))
            tvm_ffi.structural_walk(st.value, [
                (tvm.ir.TensorLoad, lambda e: accesses.append((e.source, list(e.indices)))),
                (tvm.ir.Call, calls.append), (tirx.Cast, calls.append)])
        if calls:
            return None
        # 32-bit elements only: TVM's vector code for 16-bit types mixed with float32
        # arithmetic (8 lanes through ulonglong4) does not compile
        dtypes = {str(buf.dtype) for buf, _ in accesses}
        if len(dtypes) != 1 or next(iter(dtypes)) not in ("float32", "int32"):
            return None
        vec = VECTOR_BYTES // 4
        inner = int(extents[-1].value)
        if inner % vec or total % (vec * self.threads):
            return None
        j = loops[-1].loop_var
        q = tirx.Var("q", "int32")
        for buf, indices in accesses:
            if str(buf.scope()) not in ("global", "shared", "shared.dyn") or not indices or \
                    any(_uses(i, j) for i in indices[:-1]):
                return None
            offset = self.analyzer.simplify(indices[-1] - j)
            if _uses(offset, j) or not self.analyzer.can_prove(
                    tirx.floormod(substitute(offset, {j: q * vec}), vec) == 0):
                return None
            if len(buf.shape) > 1 and not self.analyzer.can_prove(
                    tirx.floormod(buf.shape[-1], vec) == 0):
                return None
        return vec

    def _vectorized(self, loops, body):
        """Thread ``t`` takes the 16-byte vectors ``t, t + threads, ...`` of the fused space:
        a serial loop over them around a vectorised loop over one vector's elements, which
        TVM's code generator turns into 128-bit loads and stores."""
        vec = self._vector_width(loops, body)
        if vec is None:
            return None
        extents = [int(loop.extent.value) for loop in loops]
        total = 1
        for e in extents:
            total *= e
        it, v = tirx.Var("it", "int32"), tirx.Var("v", "int32")
        base = (it * self.threads + self.tx) * vec  # the vector's first element, flat
        mapping, stride = {}, 1
        for loop, extent in reversed(list(zip(loops, extents))):
            value = base if stride == 1 else tirx.floordiv(base, stride)
            if loop is not loops[0]:
                value = tirx.floormod(value, extent)
            mapping[loop.loop_var] = value + v if stride == 1 else value
            stride *= extent
        inner = tirx.For(v, 0, vec, tirx.ForKind.VECTORIZED, substitute(body, mapping))
        return tirx.For(it, 0, total // (vec * self.threads), tirx.ForKind.SERIAL, inner,
                        annotations={SPREAD: 1}, span=loops[0].span)


VECTOR_BYTES = 16


def _row_registers(body, s):
    """Row vectors (rows.py) read or written in ``body`` index their register ``s``."""
    def load(e):
        return tirx.BufferLoad(e.source, [s]) if row_vectors.is_rows(e.source) else e

    def store(st):
        return tirx.BufferStore(st.buffer, st.value, [s]) if row_vectors.is_rows(st.buffer) \
            else st

    return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])


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


# -- insert_sync ------------------------------------------------------------------------------
def _shared(buffer) -> bool:
    return str(buffer.scope()) in ("shared", "shared.dyn", "local.fragment")


def _version_key(index, stages: int):
    """Which version of a pipelined tile an index names: ``("c", v)`` for a constant,
    ``("k", loop var, offset, stages)`` for ``floormod(var + offset, stages)``, else None."""
    if isinstance(index, tirx.IntImm):
        return ("c", int(index.value) % stages)
    if isinstance(index, tirx.FloorMod) and isinstance(index.b, tirx.IntImm) and \
            int(index.b.value) == stages:
        a = index.a
        if isinstance(a, tirx.Var):
            return ("k", hash(a), 0, stages)
        if isinstance(a, tirx.Add) and isinstance(a.a, tirx.Var) and isinstance(a.b, tirx.IntImm):
            return ("k", hash(a.a), int(a.b.value) % stages, stages)
    return None


def _overlap(k1, k2) -> bool:
    if k1 is None or k2 is None or k1[0] != k2[0]:
        return True
    if k1[0] == "c":
        return k1[1] == k2[1]
    return k1[1] != k2[1] or k1[2] == k2[2]


def _conflict(xs, ys) -> bool:
    return any(b1.same_as(b2) and _overlap(k1, k2) for b1, k1 in xs for b2, k2 in ys)


class NotPython(Exception):
    """An expression :func:`py_expr` cannot write as Python."""


_PY_BINARY = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//",
              tirx.FloorMod: "%", tirx.EQ: "==", tirx.NE: "!=", tirx.LT: "<", tirx.LE: "<=",
              tirx.GT: ">", tirx.GE: ">=", tirx.And: "and", tirx.Or: "or"}


def py_expr(e, names=None, truncating: bool = True) -> str:
    """Python source for an integer TIR expression. Variables are written by their names, or
    by the name ``names`` (a list of ``(var, name)``) gives them, any other one being
    :class:`NotPython` then. TIR's truncating ``Div``/``Mod`` become Python's floor ``//`` and
    ``%``, the same for non-negative operands (shape symbols); with ``truncating=False`` they
    are NotPython instead."""
    def py(x):
        return py_expr(x, names, truncating)

    if isinstance(e, int):
        return str(e)
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        if names is None:
            return str(e.name)
        name = next((n for v, n in names if v.same_as(e)), None)
        if name is None:
            raise NotPython(f"the variable {e.name}")
        return name
    if isinstance(e, tirx.Cast) and "int" in str(e.dtype):
        return py(e.value)
    op = _PY_BINARY.get(type(e))
    if op is None and truncating and isinstance(e, (tirx.Div, tirx.Mod)):
        op = "//" if isinstance(e, tirx.Div) else "%"
    if op is not None:
        return f"({py(e.a)} {op} {py(e.b)})"
    if isinstance(e, (tirx.Min, tirx.Max)):
        return f"{type(e).__name__.lower()}({py(e.a)}, {py(e.b)})"
    if isinstance(e, tirx.Select):
        return f"({py(e.true_value)} if {py(e.condition)} else {py(e.false_value)})"
    if isinstance(e, tirx.Not):
        return f"(not {py(e.a)})"
    raise NotPython(type(e).__name__)


def _is_address_of(e) -> bool:
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and \
        e.op.name == "tirx.address_of"


class _Access:
    """The shared-memory effects of a statement: ``reads`` and ``writes`` (visible to other
    threads after the next barrier), ``issued`` (cp.async writes, visible only after a wait
    and a barrier), and whether it waits for cp.async groups (``lands``). Entries are
    ``(buffer, version key)``."""

    def __init__(self, stmt, versions: dict):
        self.reads, self.writes, self.issued, self.lands = set(), set(), set(), False
        handled = []

        def entry(buf, indices):
            stages = versions.get(str(buf.name))
            key = _version_key(indices[0], stages) if stages and len(indices) == len(
                buf.shape) == 3 else None
            return buf, key

        def add(target, *sets):
            if _shared(target.source):
                for into in sets:
                    into.add(entry(target.source, target.indices))

        def extern(c):
            if not (isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.call_extern"):
                return
            name = str(c.args[0].value)
            ptrs = [a for a in c.args[1:] if _is_address_of(a)]
            if name.startswith("tw_cp_async_wait"):
                self.lands = True
            elif name.startswith("tw_cp_async16"):
                handled.extend(ptrs)
                add(ptrs[0].args[0], self.issued)
            elif name.startswith("tw_copy16"):  # 16 bytes, either way (global <-> shared)
                handled.extend(ptrs)
                add(ptrs[0].args[0], self.writes)
                add(ptrs[1].args[0], self.reads)
            elif name.startswith("tw_gemm"):  # A, B read; C (in shared memory) updated
                handled.extend(ptrs)
                for n, p in enumerate(ptrs):
                    add(p.args[0], self.reads, *([self.writes] if n >= 2 else []))

        tvm_ffi.structural_walk(stmt, (tvm.ir.Call, extern))
        skip = [p.args[0] for p in handled]

        def load(e):
            if _shared(e.source) and not any(e.same_as(x) for x in skip):
                self.reads.add(entry(e.source, e.indices))

        def store(s):
            if _shared(s.buffer):
                self.writes.add(entry(s.buffer, s.indices))

        def address(c):  # atomics and printing take element addresses
            if _is_address_of(c) and not any(c.same_as(h) for h in handled):
                add(c.args[0], self.writes)

        tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                       (tvm.ir.Call, address)])


def _rekey(entries, var_hash, fn):
    out = set()
    for buf, key in entries:
        out.add((buf, fn(key) if key is not None and key[0] == "k" and key[1] == var_hash
                 else key))
    return out


class Syncs:
    """Inserts ``__syncthreads()`` before a statement that reads shared memory written since
    the last barrier, or writes shared memory read or written since then. ``cp.async`` writes
    count as written at the ``wait_group`` that follows them. Versions of a pipelined tile
    (pipeline.py) are told apart, with the previous iteration's versions shifted by one on a
    loop's back edge. Statements whose control flow is the same in every thread of the block
    are entered; others are leaves. A state is (reads, writes, issued)."""

    def __init__(self, tx, versions: dict | None = None):
        self.tx, self.versions = tx, versions or {}

    def uniform(self, node) -> bool:
        return not _uses(node, self.tx)

    def run(self, stmt, state):
        if len(state) == 2:  # (reads, writes): nothing in flight
            state = (*state, set())
        reads, writes, issued = state
        if isinstance(stmt, tirx.SeqStmt):
            out = []
            for s in stmt.seq:
                s, state = self.run(s, state)
                out.append(s)
            return tirx.SeqStmt(out), state
        if is_sync(stmt):
            return stmt, (set(), set(), issued)
        if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING and \
                self.uniform(stmt.extent) and self.uniform(stmt.min) and \
                not self._is_spread(stmt):
            return self._loop(stmt, state)
        if isinstance(stmt, tirx.IfThenElse) and self.uniform(stmt.condition):
            then_case, s1 = self.run(stmt.then_case, state)
            else_case, s2 = (self.run(stmt.else_case, state) if stmt.else_case is not None
                             else (None, state))
            return (tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span),
                    tuple(a | b for a, b in zip(s1, s2)))
        acc = _Access(stmt, self.versions)
        if _conflict(acc.reads, writes) or _conflict(acc.writes | acc.issued, reads | writes):
            stmt, reads, writes = tirx.SeqStmt([sync(), stmt]), set(), set()
        reads, writes, issued = reads | acc.reads, writes | acc.writes, issued | acc.issued
        if acc.lands:
            writes, issued = writes | issued, set()
        return stmt, (reads, writes, issued)

    def _loop(self, stmt, state):
        """A barrier the first iteration needs goes before the loop; inside, only what one
        iteration needs after the previous one (its versions shifted back by one)."""
        reads, writes, issued = state
        acc = _Access(stmt.body, self.versions)
        before = None
        if not _starts_with_sync(stmt.body) and (
                _conflict(acc.reads, writes) or _conflict(acc.writes | acc.issued,
                                                          reads | writes)):
            before, reads, writes = sync(), set(), set()
        var = hash(stmt.loop_var)

        def back_edge(key):
            return (key[0], key[1], (key[2] - 1) % key[3], key[3])

        _, end = self.run(stmt.body, (set(), set(), set(issued)))
        end = tuple(_rekey(e, var, back_edge) for e in end)
        body, end = self.run(stmt.body, end)
        loop = rebuild_for(stmt, body=body)
        end = tuple(_rekey(e, var, lambda key: None) for e in end)
        after = (reads | end[0], writes | end[1], end[2])
        return (loop if before is None else tirx.SeqStmt([before, loop])), after

    def _is_spread(self, loop) -> bool:
        return SPREAD in loop.annotations or OWN_ELEMENTS in loop.annotations


def _starts_with_sync(body) -> bool:
    """A barrier comes before any shared access of ``body`` (cp.async waits may precede it)."""
    for s in (body.seq if isinstance(body, tirx.SeqStmt) else [body]):
        if is_sync(s):
            return True
        if not (isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) and
                isinstance(s.value.op, tvm.ir.Op) and s.value.op.name == "tirx.call_extern" and
                str(s.value.args[0].value).startswith("tw_cp_async_wait")):
            return False
    return False


def insert_sync():
    def run(func):
        from .pipeline import VERSIONS_ATTR

        versions = {str(k): int(v) for k, v in func.attrs[VERSIONS_ATTR].items()} \
            if func.attrs is not None and VERSIONS_ATTR in func.attrs else {}
        tx_loop = find_thread(func)
        body, _ = Syncs(tx_loop.loop_var, versions).run(tx_loop.body, (set(), set(), set()))
        new_loop = rebuild_for(tx_loop, body=body)
        return func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.For, lambda s: new_loop if s.same_as(tx_loop) else s)))

    return prim_func_pass("CUDAInsertSync", run)


# -- place_memory -----------------------------------------------------------------------------
def _bytes(buffer) -> int:
    n = 1
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            raise KernelError(f"shared buffer {buffer.name!r} needs a constant shape on the "
                              f"CUDA backend, got {list(buffer.shape)}")
        n *= int(extent.value)
    return n * tvm.runtime.DataType(str(buffer.dtype)).bits // 8


BLOCK_RESERVED_SHARED = 1024  # bytes of each resident block's shared memory the GPU keeps


def shared_bytes_per_block(arch, blocks: int = 1) -> int:
    """Dynamic shared memory one block may use when ``blocks`` blocks share an SM."""
    if blocks == 1:
        return arch.max_shared_bytes
    per_sm = arch.max_shared_bytes + BLOCK_RESERVED_SHARED
    return per_sm // blocks - BLOCK_RESERVED_SHARED


def place_memory(arch):
    """Shared buffers and fragments (design: fragments live in shared memory, see README)
    become views into one dynamic shared-memory pool, swizzled tiles (with all their pipeline
    versions) at multiples of ``swizzle.ALIGN`` with every access rewritten to the swizzled
    offset; thread-local scopes become registers (``local``). Fails when the pool exceeds
    what one block may use on ``arch``."""

    def run(func):
        from .pipeline import VERSIONS_ATTR

        versions = func.attrs[VERSIONS_ATTR] if func.attrs is not None and \
            VERSIONS_ATTR in func.attrs else {}
        allocs = []
        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, allocs.append))
        threads = int(find_thread(func).extent.value)
        offset, views, locals_ = 0, {}, {}
        for alloc in allocs:
            buf = alloc.buffer
            if _shared(buf):
                align = swizzle.ALIGN if swizzle.layout_of(buf) else SMEM_ALIGN
                offset = -(-offset // align) * align
                views[buf] = (buf, offset)
                offset += -(-_bytes(buf) // SMEM_ALIGN) * SMEM_ALIGN
            elif str(buf.scope()) == MMA_ACC:
                n = int(buf.shape[1].value)
                rows = -(-mma_acc_registers(buf, threads) // n)
                locals_[buf] = tirx.decl_buffer((rows, n), buf.dtype, buf.name, scope="local")
            elif row_vectors.is_rows(buf):
                locals_[buf] = tirx.decl_buffer((row_vectors.registers(buf, threads),),
                                                buf.dtype, buf.name, scope="local")
            elif str(buf.scope()) != "local":
                locals_[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope="local")
        from .hopper import blocks_per_sm

        blocks = blocks_per_sm(func)
        limit = shared_bytes_per_block(arch, blocks)
        if offset > limit:
            parts = ", ".join(f"{b.name} {_bytes(b)}" + (
                f" ({int(b.shape[0].value)} pipeline versions)" if str(b.name) in versions
                else "") for b, _ in views.values())
            each = "one block" if blocks == 1 else f"each of {blocks} blocks per SM " \
                "(cuda.blocks_per_sm)"
            raise KernelError(
                f"the kernel needs {offset} bytes of shared memory ({parts}), above the "
                f"{limit} bytes {each} may use on {arch.name}; use smaller tiles or fewer "
                "stages", span_location(func.body.span))
        pool = tirx.decl_buffer((max(offset, 16),), "uint8", "tw_smem", scope="shared.dyn")
        remap = dict(locals_)
        swizzled = []
        for buf, (old, at) in views.items():
            itemsize = tvm.runtime.DataType(str(old.dtype)).bits // 8
            shape = old.shape
            if swizzle.layout_of(old) is not None:  # one flat array, indexed by swizzle.py
                swizzled.append(buf)
                shape = (_bytes(old) // itemsize,)
            remap[buf] = tirx.decl_buffer(shape, old.dtype, old.name, data=pool.data,
                                          elem_offset=at // itemsize, scope="shared.dyn")

        def swizzled_view(buf):
            return next((remap[b] for b in swizzled if b.same_as(buf)), None)

        def load(e):
            view = swizzled_view(e.source)
            return e if view is None else tirx.BufferLoad(
                view, [swizzle.element_index(e.source, list(e.indices))])

        def store(st):
            view = swizzled_view(st.buffer)
            return st if view is None else tirx.BufferStore(
                view, st.value, [swizzle.element_index(st.buffer, list(st.indices))])

        def rewrite_alloc(stmt):
            if stmt.buffer in views:
                view = remap[stmt.buffer]
                return tirx.DeclBuffer(view, data=pool.data)
            if stmt.buffer in locals_:
                return tirx.AllocBuffer(remap[stmt.buffer])
            return stmt

        body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, rewrite_alloc)])
        if swizzled:
            body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load),
                                                 (tirx.BufferStore, store)])
        body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
        if views:
            tx_loop = find_thread(func.with_body(body))
            new_loop = rebuild_for(tx_loop, body=tirx.SeqStmt([tirx.AllocBuffer(pool),
                                                              tx_loop.body]))
            body = tvm_ffi.structural_map(
                body, (tirx.For, lambda s: new_loop if s.same_as(tx_loop) else s))
        return func.with_attr("tw.dyn_smem_bytes", offset if views else 0).with_body(body)

    return prim_func_pass("CUDAPlaceMemory", run)


def strip_annotations():
    """Frontend annotations (``tw.*``) are dropped; ``T.unroll`` loops become unrolled."""

    def visit(loop):
        if not any(str(k).startswith("tw.") for k in loop.annotations):
            return loop
        kind = loop.kind
        if str(loop.annotations.get(LOOP_KEY, "")) == "unroll":
            kind = tirx.ForKind.UNROLLED
        return rebuild_for(loop, kind=kind, annotations={
            k: v for k, v in loop.annotations.items() if not str(k).startswith("tw.")})

    return prim_func_pass("CUDAStripAnnotations", lambda f: f.with_body(
        tvm_ffi.structural_map(f.body, (tirx.For, visit))))
