"""The CUDA backend's phases around tile-op lowering: thread binding, distribution of
``T.Parallel`` iterations over threads, barrier insertion, and shared-memory placement."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from .lowering import MMA_ACC, mma_acc_registers, mma_misfit_for, sync

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
        tx = tirx.Var("tx", "int32")
        iv = tirx.IterVar(tvm.ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, THREAD_TAG)
        body = tirx.For(tx, 0, threads, tirx.ForKind.THREAD_BINDING, inner, thread_binding=iv)
        for loop in reversed(loops):
            body = rebuild_for(loop, body=body)
        return func.with_body(body)

    return prim_func_pass("CUDABindThreads", run)


def find_thread(func):
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda s: found.append(s) if
                                        s.thread_binding is not None and
                                        str(s.thread_binding.thread_tag) == THREAD_TAG else None))
    return found[0]


# -- infer_layout -----------------------------------------------------------------------------
def _full(region) -> bool:
    return all(isinstance(s, tirx.IntImm) and int(s.value) == 0 for s in region.starts) and \
        all(isinstance(e, tirx.IntImm) and isinstance(d, tirx.IntImm) and
            int(e.value) == int(d.value) for e, d in zip(region.extents, region.buffer.shape))


def _register_candidates(func, arch, threads) -> set:
    """Fragments that may live in registers in the mma accumulator layout: float32, 2-D,
    written by at least one ``mma.sync`` gemm as C, and otherwise only filled whole or copied
    from whole — never indexed element by element."""
    from tilewright.ir import tile_ops_in

    frags = set()
    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: frags.add(a.buffer) if
                                        str(a.buffer.scope()) == "local.fragment" and
                                        str(a.buffer.dtype) == "float32" and
                                        len(a.buffer.shape) == 2 else None))
    allowed, regions, fed = {f: True for f in frags}, {f: 0 for f in frags}, set()
    for call in tile_ops_in(func):
        for op in call.schema.operands:
            region = call.operands[op.name]
            if op.kind == "expr" or not hasattr(region, "buffer") or region.buffer not in frags:
                continue
            buf = region.buffer
            regions[buf] += 1
            fits = _full(region) and (
                (call.name == "fill" and op.name == "dst") or
                (call.name == "copy" and op.name == "src") or
                (call.name == "gemm" and op.name == "C" and
                 mma_misfit_for(call, arch, threads) is None))
            allowed[buf] = allowed[buf] and fits
            if fits and call.name == "gemm":
                fed.add(buf)
    uses = {f: 0 for f in frags}

    def count(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if buf in uses:
            uses[buf] += 1

    tvm_ffi.structural_walk(func.body, [(tvm.ir.TensorLoad, count), (tirx.BufferStore, count)])
    return {f for f in frags if allowed[f] and f in fed and uses[f] == regions[f]}


def infer_layout(arch):
    """Layout inference for fragments: a fragment whose every use fits the mma accumulator
    layout becomes registers (scope ``local.mma_acc``); every other fragment stays a shared
    array visible to the whole block (see README, "Fragments")."""

    def run(func):
        chosen = _register_candidates(func, arch, threads_of(func))
        if not chosen:
            return func
        remap = {f: tirx.decl_buffer(f.shape, f.dtype, f.name, scope=MMA_ACC) for f in chosen}
        return func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.Buffer, lambda b: remap.get(b, b))))

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


def _substitute(node, mapping: dict):
    def visit(v):
        for var, value in mapping.items():
            if v.same_as(var):
                return value
        return v

    return tvm_ffi.structural_map(node, (tirx.Var, visit))


class _Distribute(StmtMutator):
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
        # reducers take per-thread partial updates, so their nests are spread too
        stores = _stores(body)
        if stores and all(str(b.scope()) in ("local", "local.var") for b in stores):
            for loop in reversed(loops):
                body = tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, body)
            return body
        return self._spread(loops, body)

    def _spread(self, loops, body):
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
        inner = _substitute(body, mapping)
        whole = isinstance(total, tirx.IntImm) and int(total.value) % threads == 0
        if not whole:
            inner = tirx.IfThenElse(flat < total, inner, None)
        count = self.analyzer.simplify(tirx.floordiv(total + threads - 1, threads))
        return tirx.For(it, 0, count, tirx.ForKind.SERIAL, inner, annotations={SPREAD: 1},
                        span=loops[0].span)


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
        mutator = _Distribute(tx_loop.loop_var, int(tx_loop.extent.value))
        return func.with_body(mutator.visit(func.body))

    return prim_func_pass("CUDADistributeParallel", run)


# -- insert_sync ------------------------------------------------------------------------------
def _shared(buffer) -> bool:
    return str(buffer.scope()) in ("shared", "shared.dyn", "local.fragment")


def _accesses(stmt):
    """(shared buffers read, shared buffers written) anywhere in ``stmt``."""
    reads, writes = set(), set()

    def load(e):
        if _shared(e.source):
            reads.add(e.source)

    def store(s):
        if _shared(s.buffer):
            writes.add(s.buffer)

    def call(c):  # atomics and printing take element addresses
        if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of":
            target = c.args[0]
            if _shared(target.source):
                writes.add(target.source)

    tvm_ffi.structural_walk(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                   (tvm.ir.Call, call)])
    return reads, writes


class _Syncs:
    """Inserts ``__syncthreads()`` before a statement that reads shared memory written since
    the last barrier, or writes shared memory read or written since then. Statements whose
    control flow is the same in every thread of the block are entered; others are leaves."""

    def __init__(self, tx):
        self.tx = tx

    def uniform(self, node) -> bool:
        return not _uses(node, self.tx)

    def run(self, stmt, state):
        reads, writes = state
        if isinstance(stmt, tirx.SeqStmt):
            out = []
            for s in stmt.seq:
                s, state = self.run(s, state)
                out.append(s)
            return tirx.SeqStmt(out), state
        if _is_sync(stmt):
            return stmt, (set(), set())
        if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING and \
                self.uniform(stmt.extent) and self.uniform(stmt.min) and \
                not self._is_spread(stmt):
            # a barrier the first iteration needs goes before the loop; inside, only what
            # one iteration needs after the previous one
            r, w = _accesses(stmt.body)
            before = None
            if (r & writes) or (w & (reads | writes)):
                before, state = sync(), (set(), set())
            _, end = self.run(stmt.body, (set(), set()))
            body, end = self.run(stmt.body, end)
            loop = rebuild_for(stmt, body=body)
            after = (state[0] | end[0], state[1] | end[1])
            return (loop if before is None else tirx.SeqStmt([before, loop])), after
        if isinstance(stmt, tirx.IfThenElse) and self.uniform(stmt.condition):
            then_case, s1 = self.run(stmt.then_case, state)
            else_case, s2 = (self.run(stmt.else_case, state) if stmt.else_case is not None
                             else (None, state))
            return (tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span),
                    (s1[0] | s2[0], s1[1] | s2[1]))
        r, w = _accesses(stmt)
        if (r & writes) or (w & (reads | writes)):
            return tirx.SeqStmt([sync(), stmt]), (set(r), set(w))
        return stmt, (reads | r, writes | w)

    def _is_spread(self, loop) -> bool:
        return SPREAD in loop.annotations


def _is_sync(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
        isinstance(stmt.value.op, tvm.ir.Op) and stmt.value.op.name == "tirx.tvm_storage_sync"


def insert_sync():
    def run(func):
        tx_loop = find_thread(func)
        body, _ = _Syncs(tx_loop.loop_var).run(tx_loop.body, (set(), set()))
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


def place_memory(arch):
    """Shared buffers and fragments (design: fragments live in shared memory, see README)
    become views into one dynamic shared-memory pool; thread-local scopes become registers
    (``local``). Fails when the pool exceeds what one block may use on ``arch``."""

    def run(func):
        allocs = []
        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, allocs.append))
        threads = int(find_thread(func).extent.value)
        offset, views, locals_ = 0, {}, {}
        for alloc in allocs:
            buf = alloc.buffer
            if _shared(buf):
                views[buf] = (buf, offset)
                offset += -(-_bytes(buf) // SMEM_ALIGN) * SMEM_ALIGN
            elif str(buf.scope()) == MMA_ACC:
                n = int(buf.shape[1].value)
                rows = -(-mma_acc_registers(buf, threads) // n)
                locals_[buf] = tirx.decl_buffer((rows, n), buf.dtype, buf.name, scope="local")
            elif str(buf.scope()) != "local":
                locals_[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope="local")
        if offset > arch.max_shared_bytes:
            parts = ", ".join(f"{b.name} {_bytes(b)}" for b, _ in views.values())
            raise KernelError(
                f"the kernel needs {offset} bytes of shared memory ({parts}), above the "
                f"{arch.max_shared_bytes} bytes one block may use on {arch.name}; use smaller "
                "tiles or fewer stages", span_location(func.body.span))
        pool = tirx.decl_buffer((max(offset, 16),), "uint8", "tw_smem", scope="shared.dyn")
        remap = dict(locals_)
        for buf, (old, at) in views.items():
            itemsize = tvm.runtime.DataType(str(old.dtype)).bits // 8
            remap[buf] = tirx.decl_buffer(old.shape, old.dtype, old.name, data=pool.data,
                                          elem_offset=at // itemsize, scope="shared.dyn")

        def rewrite_alloc(stmt):
            if stmt.buffer in views:
                view = remap[stmt.buffer]
                return tirx.DeclBuffer(view, data=pool.data)
            if stmt.buffer in locals_:
                return tirx.AllocBuffer(remap[stmt.buffer])
            return stmt

        body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, rewrite_alloc)])
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
