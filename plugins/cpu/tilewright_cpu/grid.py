"""The block grid as one parallel loop over CPU workers, and the kernel's shared and fragment
tiles as per-worker host arrays."""

from __future__ import annotations

import math
import os

import tvm
import tvm_ffi
from tilewright.errors import TilewrightError
from tilewright.transform import prim_func_pass
from tvm import tirx

from . import runtime
from .irutil import const_int, flatten, is_no_op


def _scope_for(scope: str) -> str:
    return "local" if scope in ("local", "local.var") else "global"


def lower_scopes():
    """Shared and fragment tiles become per-block arrays in host memory."""

    def run(func):
        remap = {}

        def collect(stmt):
            buf = stmt.buffer
            scope = str(buf.scope())
            if scope not in ("global", "local"):
                remap[buf] = tirx.decl_buffer(buf.shape, buf.dtype, buf.name,
                                              scope=_scope_for(scope))

        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, collect))
        if not remap:
            return func
        body = tvm_ffi.structural_map(func.body, (tirx.Buffer, lambda b: remap.get(b, b)))
        return func.with_body(body)

    return prim_func_pass("CPULowerScopes", run)


STACK_BYTES = 1024  # TVM keeps a constant-size CPU allocation up to this size on the stack
CLAIM = "tw_atomic_add_int32"  # the C runtime's atomic fetch-and-add


def _claims_available() -> bool:
    """Whether kernels may call the C runtime (built with the host C compiler)."""
    try:
        runtime.load()
    except TilewrightError:
        return False
    return True


def _hoist(rest: list) -> tuple[list, list]:
    """Constant-size allocations nested in a block's statements too large for the stack (GEMM
    panels, deeper tiles) taken out, to be made once per worker: TVM would otherwise allocate
    them from its workspace pool at every iteration of the loops around them."""
    hoisted = []

    def take(stmt):
        shape = [const_int(d) for d in stmt.buffer.shape]
        if str(stmt.buffer.scope()) != "global" or any(d is None for d in shape):
            return stmt
        if math.prod(shape) * tvm.DataType(str(stmt.buffer.dtype)).bits // 8 <= STACK_BYTES:
            return stmt
        hoisted.append(stmt)
        return tirx.Evaluate(tirx.const(0, "int32"))

    rest = [flatten(tvm_ffi.structural_map(s, (tirx.AllocBuffer, take))) for s in rest]
    return [s for s in rest if not is_no_op(s)], hoisted


def _bind_block(loops: list, block) -> list:
    """``Bind`` statements giving each grid variable its value for the linear ``block``
    index. The first grid dimension (``blockIdx.x``) varies fastest, as a GPU dispatches
    blocks: kernels are written so that neighbours in x share data (the rows of A of a GEMM,
    the keys and values of an attention head), which then stays in cache between blocks."""
    binds, stride = [], None
    for loop in loops:
        value = block if stride is None else tirx.floordiv(block, stride)
        binds.append(tirx.Bind(loop.loop_var, tirx.floormod(value, loop.extent)
                               if loop is not loops[-1] else value))
        stride = loop.extent if stride is None else stride * loop.extent
    return binds


COUNTER_STRIDE = 16  # int32 elements between two shares' counters: one 64-byte line each


def _shared_blocks(loops: list, total, count: int, worker: tirx.Var, tiles: list,
                   rest: list) -> tirx.Stmt:
    """The grid as ``count`` workers over ``total`` blocks, each first running its own share
    (blocks ``[w * total // count, (w + 1) * total // count)``) and then helping the others,
    every block claimed from its share's counter (see :func:`lower_blocks`)."""
    counters = tirx.decl_buffer((count * COUNTER_STRIDE,), "int32", "next_block",
                                scope="global")
    mine = tirx.decl_buffer((1,), "int32", "block", scope="global")
    step, share = tirx.Var("step", "int32"), tirx.Var("share", "int32")
    owner = tirx.floormod(worker + step, count)
    start = tirx.floordiv(total * owner, count)
    end = tirx.floordiv(total * (owner + 1), count)
    claim = tirx.BufferStore(mine, tirx.call_extern(
        "int32", CLAIM, tirx.address_of(tirx.BufferLoad(counters, [owner * COUNTER_STRIDE])),
        tirx.const(1, "int32")) + start, [0])
    block = tirx.BufferLoad(mine, [0])
    blocks = tirx.While(block < end, tirx.SeqStmt([*_bind_block(loops, block), *rest, claim]))
    shares = tirx.For(step, 0, count, tirx.ForKind.SERIAL, tirx.SeqStmt([claim, blocks]))
    worker_body = tirx.SeqStmt([*tiles, tirx.AllocBuffer(mine), shares])
    grid = tirx.For(worker, 0, count, tirx.ForKind.PARALLEL, worker_body, span=loops[0].span)
    reset = tirx.For(share, 0, count, tirx.ForKind.SERIAL, tirx.BufferStore(
        counters, tirx.const(0, "int32"), [share * COUNTER_STRIDE]))
    return tirx.SeqStmt([tirx.AllocBuffer(counters), reset, grid])


def lower_blocks(workers: int | None = None):
    """The block grid becomes a parallel loop over ``workers`` CPU workers (the host's core
    count by default). Each worker owns a contiguous share of the blocks and runs it in order,
    claiming each block from its share's counter with an atomic increment; a worker whose share
    is done takes blocks from the others' shares the same way, so a worker slowed by other load
    on its core runs fewer blocks (where the C runtime cannot be built, worker ``w`` runs blocks
    ``w, w + workers, ...`` instead). The runtime runs worker ``i`` on thread ``i`` when it can,
    so a share's data stays in one core's caches from call to call. The kernel's tiles, and the
    larger buffers the tile ops' lowering made inside a block, are allocated once per worker,
    not once per block: a large tile allocated per block costs a fresh mapping and page faults
    every time. A function with several ``T.Kernel`` blocks runs them one after the other, each
    lowered so."""
    workers = workers or os.cpu_count() or 1

    def lower_grid(stmt):
        loops = []
        while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
            loops.append(stmt)
            stmt = stmt.body
        if not loops:
            return None
        body = list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
        rest, hoisted = _hoist([s for s in body if not isinstance(s, tirx.AllocBuffer)])
        tiles = [s for s in body if isinstance(s, tirx.AllocBuffer)] + hoisted
        total = loops[0].extent
        for loop in loops[1:]:
            total = total * loop.extent
        total = tvm.sym.Analyzer().simplify(total)
        count = min(int(total.value), workers) if isinstance(total, tirx.IntImm) else workers
        worker = tirx.Var("worker", "int32")
        if _claims_available():
            return _shared_blocks(loops, total, count, worker, tiles, rest)
        step = tirx.Var("step", "int32")
        steps = tirx.floordiv(total - worker + (count - 1), count)
        per_block = tirx.For(step, 0, steps, tirx.ForKind.SERIAL, tirx.SeqStmt(
            _bind_block(loops, worker + step * count) + rest))
        worker_body = tirx.SeqStmt([*tiles, per_block]) if tiles else per_block
        return tirx.For(worker, 0, count, tirx.ForKind.PARALLEL, worker_body,
                        span=loops[0].span)

    def run(func):
        stmts = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]
        lowered = [lower_grid(s) for s in stmts]
        if all(s is None for s in lowered):
            return func
        stmts = [new if new is not None else old for old, new in zip(stmts, lowered)]
        return func.with_body(flatten(stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)))

    return prim_func_pass("CPULowerBlocks", run)
