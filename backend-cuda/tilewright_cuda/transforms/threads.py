"""The ``bind_threads`` phase: the block's program runs on ``threads`` threads, wrapped in
one ``threadIdx.x`` loop (``T.use_swizzle`` remaps the block indices here), and each ``T.ws``
role becomes a nested ``threadIdx.x`` loop over the role's threads, so rules and distribution
spread tile ops over the role only. First, an ``if`` / ``elif`` chain on the dialect's thread
index (``T.get_thread_binding``) whose branches select whole warps becomes ``T.ws``
roles, and any other tile op under an ``if`` on the index is refused at the ``if``; before
that, an element's atomic in such thread-level code becomes each thread's own
(:func:`thread_atomics`)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import ATOMIC_KINDS, ATOMIC_PREV, MEMORY_ORDERS, Region, decode
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from .. import intrinsics, keys, ops
from ..analysis.ir import (
    block_loops,
    find_thread,
    index_dependent,
    seq,
    substitute,
    thread_index_buffers,
    threads_of,
)
from ..keys import WARP, WARPGROUP


def bind_threads():
    """The block's program runs on ``threads`` threads: wrap it in a ``threadIdx.x`` loop.
    (A 2-D or 3-D ``threads`` is flattened; the language exposes no thread index.) Any count
    up to the hardware's ``keys.MAX_THREADS`` (the last warp may be partial); more is an
    error at the ``T.Kernel`` line."""

    def run(func):
        loops, inner = block_loops(func)
        threads = threads_of(func)
        if threads > keys.MAX_THREADS:
            shape = [int(t) for t in loops[0].annotations[keys.THREADS]]
            raise KernelError(
                f"T.Kernel threads={shape[0] if threads == shape[0] else tuple(shape)} gives "
                f"{threads} threads per block, but a CUDA block has at most "
                f"{keys.MAX_THREADS}: use fewer threads (each runs more of the tile ops)",
                span_location(loops[0].span))
        loops, inner = _rasterise(loops, inner)
        tx = tirx.Var("tx", "int32")
        iv = tirx.IterVar(tvm.ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, keys.THREAD_TAG)
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
    if not loops or keys.SWIZZLE not in loops[0].annotations or len(loops) < 2:
        return loops, inner
    panel, order = loops[0].annotations[keys.SWIZZLE]
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
    annotations = {k: v for k, v in loops[0].annotations.items() if str(k) != keys.SWIZZLE}
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


def bind_roles():
    """``T.ws`` regions become nested ``threadIdx.x`` loops over the role's threads."""

    def run(func):
        tx_loop = find_thread(func)
        threads = int(tx_loop.extent.value)

        def visit(stmt):
            if str(stmt.attr_key) != keys.WS:
                return stmt
            lo, hi = _role_threads(stmt)
            if hi > threads:
                raise KernelError(f"the T.ws role of threads {lo}..{hi - 1} needs threads up "
                                  f"to {hi}; the kernel has {threads}",
                                  span_location(stmt.span))
            name = f"tx_ws{lo // WARPGROUP}" if lo % WARPGROUP == 0 else f"tx_ws_t{lo}"
            var = tirx.Var(name, "int32")
            iv = tirx.IterVar(tvm.ir.Range(0, hi - lo), var, tirx.IterVar.ThreadIndex,
                              keys.THREAD_TAG)
            return tirx.For(var, 0, hi - lo, tirx.ForKind.THREAD_BINDING, stmt.body,
                            thread_binding=iv, annotations={keys.ROLE: lo}, span=stmt.span)

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AttrStmt, visit)))

    return prim_func_pass("CUDABindRoles", run)


def _role_threads(stmt) -> tuple[int, int]:
    """``[lo, hi)``: the threads of the role a ``keys.WS`` AttrStmt wraps (its value
    ``"lo:hi"``)."""
    lo, hi = str(stmt.value.value).split(":")
    return int(lo), int(hi)


def _thread_range(cond, is_index) -> tuple[int, int] | None:
    """``[lo, hi)`` of the thread index that ``cond`` selects when it is a conjunction of
    comparisons of the index with constants (``tx < 128``, ``tx >= 128 and tx < 256``), else
    None."""
    if isinstance(cond, tirx.And):
        a, b = _thread_range(cond.a, is_index), _thread_range(cond.b, is_index)
        return None if a is None or b is None else (max(a[0], b[0]), min(a[1], b[1]))
    flipped = {tirx.LT: tirx.GT, tirx.LE: tirx.GE, tirx.GT: tirx.LT, tirx.GE: tirx.LE}
    kind = type(cond)
    if kind not in flipped:
        return None
    x, c = cond.a, cond.b
    if isinstance(x, tirx.IntImm):
        x, c, kind = c, x, flipped[kind]
    if not is_index(x) or not isinstance(c, tirx.IntImm):
        return None
    c = int(c.value)
    inf = 1 << 30
    return {tirx.LT: (0, c), tirx.LE: (0, c + 1), tirx.GT: (c + 1, inf),
            tirx.GE: (c, inf)}[kind]


def _role_branches(stmt, is_index, threads: int) -> list | None:
    """``[(lo, hi, body)]`` of an ``if`` / ``elif`` chain whose conditions select disjoint
    warp-aligned ranges ``[lo, hi)`` of the thread index (a final ``else`` the one range left),
    else None."""
    branches, taken = [], []
    node = stmt
    while node is not None:
        if isinstance(node, tirx.IfThenElse):
            rng, body, node = _thread_range(node.condition, is_index), node.then_case, \
                node.else_case
        else:  # a final else: the one range left, when it is one
            rest = [t for t in range(0, threads, WARP)
                    if not any(lo <= t < hi for lo, hi in taken)]
            if not rest or rest != list(range(rest[0], rest[-1] + WARP, WARP)):
                return None
            rng, body, node = (rest[0], rest[-1] + WARP), node, None
        if rng is None:
            return None
        lo, hi = max(rng[0], 0), min(rng[1], threads)
        if lo >= hi or lo % WARP or hi % WARP or \
                any(lo < end and start < hi for start, end in taken):
            return None
        taken.append((lo, hi))
        branches.append((lo, hi, body))
    return branches


def thread_ranges_as_roles():
    """TileLang's warp specialisation by hand, ``if tx < 32: ... elif tx >= 32 and tx <
    96: ... else: ...`` on ``T.get_thread_binding()`` of a 1-D block, becomes roles (as
    ``T.ws``'s, keys.WS ``"lo:hi"``) when every branch selects whole warps (disjoint ranges
    whose ends are multiples of 32 threads) and one holds a tile op: each branch is a role
    of its threads, its tile ops spread over them and its barriers named barriers of them. Any other
    condition is left to :func:`refuse_thread_conditioned_tile_ops`."""

    def run(func):
        calls = [c for c in _tile_calls(func.body) if c.name == ops.THREAD_BINDING.name]
        indices = [c.operands["dst"].buffer for c in calls if int(c.attrs["dim"]) == 0 and
                   [int(t) for t in c.attrs["threads"].split(",")][1:] == [1, 1]]
        if not indices:
            return func
        threads = threads_of(func)

        def is_index(e) -> bool:
            return isinstance(e, tvm.ir.TensorLoad) and any(e.source.same_as(i)
                                                            for i in indices)

        made = []  # the bodies of the roles made here: an `if` inside one stays an `if`

        def visit(stmt):
            if _first_block_op(stmt) is None or _in_role(func.body, stmt) or \
                    any(_contains(body, stmt) for body in made):
                return stmt
            branches = _role_branches(stmt, is_index, threads)
            if branches is None:
                return stmt
            made.extend(body for _, _, body in branches)
            return seq([tirx.AttrStmt(tirx.IntImm("int32", 0), keys.WS,
                                      tvm.ir.StringImm(f"{lo}:{hi}"), body, span=stmt.span)
                        for lo, hi, body in branches])

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.IfThenElse, visit),
                                                     order="pre"))

    return prim_func_pass("CUDAThreadRangesAsRoles", run)


def _in_role(body, stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(body, (tirx.AttrStmt, lambda a: found.append(a) if
                                   str(a.attr_key) == keys.WS and _contains(a.body, stmt)
                                   else None))
    return bool(found)


def _contains(node, target) -> bool:
    found = []
    tvm_ffi.structural_walk(node, (tirx.IfThenElse, lambda s: found.append(s) if
                                   s.same_as(target) else None))
    return bool(found)


def thread_atomics(chosen):
    """TileLang's thread-level atomics. In code whose threads are already individual, under an
    ``if`` / ``while`` on T.get_thread_binding's index or naming its element or value with
    that index (directly or through variables computed from it), ``T.atomic_add/max/min/...``
    or ``T.atomic_store`` of one element (``A[i]``; the one-element region ``A[i:i+1]`` is a
    tile op, the block's) is
    one atomic of each calling thread, as in TileLang (``tl.atomic_add_elem_op``), and becomes
    that thread's ``tw_atomic_<kind>`` call here; so does the form returning the previous
    value, whatever memory it is stored to (block code makes it once per block,
    transforms.block_code). Elsewhere an element's atomic keeps its portable meaning: once per
    block in block code, each iteration's in ``T.Parallel`` (rules.atomic). An element type
    the architecture's atomics lack is an error at the atomic's line."""

    def run(func):
        indices = thread_index_buffers(func.body)
        if not indices:
            return func
        mutator = _ThreadAtomics(index_dependent(func.body, indices), chosen.arch.sm)
        return func.with_body(mutator.visit(func.body))

    return prim_func_pass("CUDAThreadAtomics", run)


class _ThreadAtomics(StmtMutator):
    def __init__(self, reads_index, sm: int):
        super().__init__()
        self.reads_index, self.sm, self.guards = reads_index, sm, 0

    def _guarded(self, cond, visit):
        dependent = bool(self.reads_index(cond))
        self.guards += dependent
        try:
            return visit()
        finally:
            self.guards -= dependent

    def visit_IfThenElse(self, stmt):
        return self._guarded(stmt.condition, lambda: super(_ThreadAtomics, self)
                             .visit_IfThenElse(stmt))

    def visit_While(self, stmt):
        return self._guarded(stmt.condition, lambda: super(_ThreadAtomics, self)
                             .visit_While(stmt))

    def visit_For(self, stmt):
        if str(stmt.annotations.get(keys.LOOP, "")) == "parallel":
            return stmt  # each iteration's atomic already (rules.atomic)
        return super().visit_For(stmt)

    def _per_thread(self, *exprs) -> bool:
        return self.guards > 0 or any(self.reads_index(e) for e in exprs)

    def _atomic(self, kind: str, load, value, order: int, span):
        try:
            if kind == "store":
                return intrinsics.atomic_store(load, value, order)
            return intrinsics.atomic(kind, load, value, self.sm, order)
        except KernelError as exc:
            raise KernelError(exc.message, span_location(span)) from None

    def visit_Evaluate(self, stmt):
        call = decode(stmt)
        if call is None or call.name not in _KINDS or not call.attrs["element"] or \
                isinstance(call.operands["src"], Region):
            return stmt  # not an element's (a region's, A[i:i+1] too, is the block's)
        dst, value = call.operands["dst"], call.operands["src"]
        if not self._per_thread(value, *dst.starts):
            return stmt
        load = tirx.BufferLoad(dst.buffer, list(dst.starts))
        return tirx.Evaluate(self._atomic(_KINDS[call.name], load, value,
                                          MEMORY_ORDERS[call.attrs["memory_order"]], stmt.span),
                             span=stmt.span)

    def visit_BufferStore(self, stmt):
        prevs = _atomic_prevs(stmt.value)
        if not prevs or not self._per_thread(*stmt.indices, *(a for c in prevs for a in c.args)):
            return stmt
        made = [(c, self._atomic(ATOMIC_PREV[c.op.name], c.args[0], c.args[1],
                                 c.args[2].value, stmt.span)) for c in prevs]

        def swap(c):
            return next((new for old, new in made if old.same_as(c)), c)

        value = tvm_ffi.structural_map(stmt.value, (tvm.ir.Call, swap))
        return tirx.BufferStore(stmt.buffer, value, stmt.indices, span=stmt.span)


# op -> kind, as the core names them (an atomic store's "store")
_KINDS = {**{f"atomic_{kind}": kind for kind in ATOMIC_KINDS}, "atomic_store": "store"}


def _atomic_prevs(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV else None))
    return found


def refuse_thread_conditioned_tile_ops():
    """A tile op (or ``T.Parallel`` loop) under an ``if`` on ``T.get_thread_binding``'s
    index (or on a value computed from it, :func:`analysis.ir.index_dependent`) is an error at
    the ``if``'s line: tile ops are spread over every thread of the block (or role), so the
    threads the condition leaves out would skip their share of it and the barriers inside it.
    Thread-dependent code is scalar code; a warp-aligned range of threads is a role
    (:func:`thread_ranges_as_roles`)."""

    def run(func):
        indices = thread_index_buffers(func.body)
        if not indices:
            return func
        reads_index = index_dependent(func.body, indices)
        refused = []  # (the op, the if): raised after the walk (FFI callbacks wrap errors)

        def visit(stmt):
            if reads_index(stmt.condition):
                bad = _first_block_op(stmt)
                if bad is not None:
                    refused.append((bad, stmt))

        tvm_ffi.structural_walk(func.body, (tirx.IfThenElse, visit), order="pre")
        if refused:
            bad, stmt = refused[0]
            raise KernelError(
                f"{bad} under a condition on the thread index (T.get_thread_binding): a tile "
                "op is spread over every thread of the block, not only over those the "
                "condition selects; write the thread-dependent part as scalar code, or give "
                "those threads a T.ws role", span_location(stmt.span))
        return func

    return prim_func_pass("CUDARefuseThreadConditionedTileOps", run)


def _tile_calls(node) -> list:
    found = []
    tvm_ffi.structural_walk(node, (tirx.Evaluate, lambda s: found.append(decode(s))))
    return [c for c in found if c is not None]


def _first_block_op(node) -> str | None:
    """How the user wrote the first tile op of the block inside ``node``, or None."""
    found = []

    def visit(stmt):
        if isinstance(stmt, tirx.For) and str(stmt.annotations.get(keys.LOOP, "")) == \
                "parallel":
            found.append("a T.Parallel loop")
        elif isinstance(stmt, tirx.Evaluate):
            call = decode(stmt)
            if call is not None and call.name not in ops.PER_THREAD:
                found.append(f"T.{call.name}")

    tvm_ffi.structural_walk(node, [(tirx.For, visit), (tirx.Evaluate, visit)], order="pre")
    return found[0] if found else None
