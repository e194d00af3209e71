"""Lowering of the CUDA dialect (``tilewright_cuda.language``): TMA, mbarriers, register
budgets, warp-specialised roles and clusters. Needs sm_90 or newer.

- Rules (one per dialect op, in ``lowering.RULES``) emit calls of ``include/tw_hopper.h``. A TMA
  names its descriptor as ``tw.cuda.tensormap(tensor, box..., swizzle)``; barrier and tile
  addresses are ``tw.cuda.shared_addr(element)`` until the shared pool is placed.
- Roles: ``with T.ws(g):`` becomes, right after ``bind_threads``, a nested ``threadIdx.x``
  loop over the role's threads, so rules and ``distribute`` spread tile ops over the role only;
  ``insert_sync`` gives each role named barriers (``bar.sync 1 + first group, threads``) and
  leaves the hand-over between roles to the user's mbarriers; ``finish`` turns each role into
  ``if (lo <= threadIdx.x < hi)`` over ``threadIdx.x - lo``.
- ``finish`` also deduplicates descriptors (same tensor, box and swizzle: one descriptor),
  numbers them, and records what the launcher needs to build them (``cuTensorMapEncodeTiled``)
  in the function attribute ``tw.cuda.tensormaps``; codegen (``finish_source``) passes them as
  ``const __grid_constant__`` kernel parameters after the others, and adds
  ``__cluster_dims__`` for ``T.ClusterKernel``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext, StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from . import ops, passes, swizzle
from . import rows as row_vectors
from .language.dialect import CLUSTER_KEY, WARPGROUP, WS_KEY
from .lowering import (
    MMA_ACC,
    is_sync,
    mma_acc_registers,
    register_lowering,
    sync,
    thread_var,
)

HEADER = (Path(__file__).parent / "include" / "tw_hopper.h").read_text()
ROLE_KEY = "tw.cuda.role"  # annotation of a role's thread loop: its first thread
TENSORMAPS_ATTR = "tw.cuda.tensormaps"
CLUSTER_ATTR = "tw.cuda.cluster_dims"
SWIZZLE_BYTES = {3: 128, 2: 64, 1: 32}
MAX_BOX = 256


# -- helpers ---------------------------------------------------------------------------------
def _require(call: TileOpCall, ctx: RuleContext, feature: str, arch_specific: bool = False):
    arch = ctx.options
    ok = arch is not None and arch.sm >= 90 and (not arch_specific or arch.name.endswith("a"))
    if not ok:
        need = "sm_90a (or sm_100a)" if arch_specific else "sm_90 or newer"
        raise KernelError(
            f"T.{call.name} needs {need} ({feature}); the target architecture is "
            f"{getattr(arch, 'name', '?')}: compile for 'cuda -arch=sm_90a' or use portable ops")


def shared_addr(load) -> tvm.ir.Call:
    return tirx.call_intrin("handle", ops.SHARED_ADDR, load)


def _extern(name: str, *args) -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def _const(e) -> int | None:
    return int(e.value) if isinstance(e, tirx.IntImm) else (e if isinstance(e, int) else None)


def _leader(ctx: RuleContext, body: list) -> tirx.Stmt:
    """``body`` run by the first thread of the block, or of the enclosing role."""
    tx, _ = thread_var(ctx)
    return tirx.IfThenElse(tx == 0, tirx.SeqStmt(body) if len(body) > 1 else body[0], None)


# -- barriers --------------------------------------------------------------------------------
@register_lowering(ops.INIT_BARRIERS.name)
def lower_alloc_barrier(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarriers with transaction counts")
    buf = call.operands["barriers"].buffer
    counts = [int(c) for c in call.attrs["counts"].split(",")]
    inits = [_extern("tw_mbar_init", shared_addr(tirx.BufferLoad(buf, [tirx.const(i, "int32")])),
                     tirx.const(c, "uint32")) for i, c in enumerate(counts)]
    inits.append(_extern("tw_fence_barrier_init"))
    return tirx.SeqStmt([_leader(ctx, inits), sync()])


@register_lowering(ops.ARRIVE.name)
def lower_arrive(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarriers")
    return _extern("tw_mbar_arrive", shared_addr(call.operands["barrier"]))


@register_lowering(ops.WAIT_PARITY.name)
def lower_wait_parity(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarrier try_wait.parity")
    return _extern("tw_mbar_wait", shared_addr(call.operands["barrier"]),
                   call.operands["parity"])


@register_lowering(ops.EXPECT_TX.name)
def lower_expect_tx(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarrier transaction counts")
    return _leader(ctx, [_extern("tw_mbar_expect_tx", shared_addr(call.operands["barrier"]),
                                 tirx.Cast("uint32", call.operands["bytes"]))])


@register_lowering(ops.FENCE_PROXY_ASYNC.name)
def lower_fence_proxy_async(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "the async proxy")
    return _extern("tw_fence_proxy_async")


@register_lowering(ops.TMA_STORE_WAIT.name)
def lower_tma_store_wait(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "TMA bulk groups")
    return tirx.SeqStmt([_extern(f"tw_tma_store_wait<{int(call.attrs['count'])}>"), sync()])


@register_lowering(ops.SET_MAX_NREG.name)
def lower_set_max_nreg(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "setmaxnreg", arch_specific=True)
    kind = "inc" if call.attrs["is_inc"] else "dec"
    return _extern(f"tw_setmaxnreg_{kind}<{int(call.attrs['reg_count'])}>")


@register_lowering(ops.WS.name)
def lower_ws(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "warpgroup-specialised roles")
    return tirx.Evaluate(tirx.const(0, "int32"))


@register_lowering(ops.CLUSTER.name)
def lower_cluster(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "thread-block clusters")
    return tirx.Evaluate(tirx.const(0, "int32"))


# -- TMA -------------------------------------------------------------------------------------
def _check_shared_region(region, what: str):
    """The shared region must be one row-major block: unit dims, then full dims."""
    shape = [_const(d) for d in region.buffer.shape]
    extents = [_const(e) for e in region.extents]
    first = next((i for i, e in enumerate(extents) if e != 1), len(extents))
    for d in range(first + 1, len(extents)):
        if extents[d] != shape[d] or _const(region.starts[d]) != 0:
            raise KernelError(f"{what}: the shared region of {region.buffer.name!r} must be "
                              "contiguous (leading single indices, then whole trailing "
                              "dimensions), e.g. S[stage, :, :]")


@register_lowering(ops.TMA_COPY.name)
def lower_tma_copy(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "the Tensor Memory Accelerator")
    src, dst = call.operands["src"], call.operands["dst"]
    if str(src.buffer.scope()) == "global":
        return _leader(ctx, tma_load(src, dst, shared_addr(call.operands["barrier"])))
    # every thread's shared writes must reach the async proxy before one thread stores
    stores = tma_store(src, dst)
    return tirx.SeqStmt([_extern("tw_fence_proxy_async"), sync(), _leader(ctx, stores)])


def tma_load(src, dst, barrier, what: str = "T.tma_copy") -> list:
    """The statements one thread issues to load the global region ``src`` into the shared
    region ``dst`` through TMA, completing on ``barrier`` (its expected bytes raised first,
    no arrival). Raises KernelError when TMA cannot move the tile."""
    return _tma(src, dst, barrier, what)


def tma_store(src, dst, what: str = "T.tma_copy") -> list:
    """The statements one thread issues to store the shared region ``src`` to the global
    region ``dst`` through TMA, in one commit group."""
    return [*_tma(dst, src, None, what), _extern("tw_tma_store_commit")]


def _tma(g, s, bar, what: str) -> list:
    """Loads (``bar`` given) or stores between the global region ``g`` and the shared region
    ``s``: a swizzled tile moves as one box per column block of its layout."""
    load = bar is not None
    if str(g.buffer.dtype) != str(s.buffer.dtype):
        raise KernelError(f"{what}: {g.buffer.name!r} is {g.buffer.dtype} but "
                          f"{s.buffer.name!r} is {s.buffer.dtype}; TMA does not convert")
    extents = [_const(e) for e in g.extents]
    if any(e is None for e in extents):
        raise KernelError(f"{what}: the global region of {g.buffer.name!r} needs constant "
                          f"extents (the TMA box), got {list(g.extents)}")
    rank = len(extents)
    if rank > 5:
        raise KernelError(f"{what}: TMA handles tensors of up to 5 dimensions, "
                          f"{g.buffer.name!r} has {rank}")
    _check_shared_region(s, what)
    itemsize = tvm.runtime.DataType(str(g.buffer.dtype)).bits // 8
    box = list(reversed(extents))  # innermost first
    coords = list(reversed(list(g.starts)))
    layout = swizzle.layout_of(s.buffer)
    blocks, mode = 1, 0
    if layout is not None:
        width, bits = layout
        if itemsize != 2 or box[0] * itemsize % width:
            raise KernelError(f"{what}: {s.buffer.name!r} has a swizzled layout of {width}-byte "
                              f"columns; the tile's rows ({box[0]} x {itemsize} bytes) must be "
                              "a multiple of it")
        whole = all(_const(e) == _const(d) for e, d in zip(s.extents[-2:], s.buffer.shape[-2:]))
        if not whole:
            raise KernelError(f"{what}: {s.buffer.name!r} has a swizzled layout; TMA moves it "
                              "whole (every row and column of the tile)")
        blocks, mode = box[0] * itemsize // width, SWIZZLE_BYTES[bits]
        box[0] = width // itemsize
    if box[0] * itemsize % 16:
        raise KernelError(f"{what}: the innermost box extent of {g.buffer.name!r} is "
                          f"{box[0] * itemsize} bytes; TMA needs a multiple of 16 bytes")
    for extent in box:
        if not 1 <= extent <= MAX_BOX:
            raise KernelError(f"{what}: box extent {extent} of {g.buffer.name!r} is outside "
                              f"1..{MAX_BOX}, TMA's limit per dimension")
    tile = 1
    for e in extents:
        tile *= e
    descriptor = tirx.call_intrin("handle", ops.TENSORMAP,
                                  tirx.BufferLoad(g.buffer, [tirx.const(0, "int32")] * rank),
                                  *[tirx.const(b, "int32") for b in box],
                                  tirx.const(mode, "int32"))
    rows = tile // (box[0] * blocks)
    stmts = []
    if load:
        stmts.append(_extern("tw_mbar_expect_tx", bar, tirx.const(tile * itemsize, "uint32")))
    base = shared_addr(tirx.BufferLoad(s.buffer, list(s.starts)))
    for b in range(blocks):
        # column block b of a swizzled tile starts rows x width bytes after the tile
        smem = tirx.call_extern("handle", "tw_offset_bytes", base,
                                tirx.const(b * rows * box[0] * itemsize, "int32")) if b else base
        c = list(coords)
        c[0] = c[0] + b * box[0] if b else c[0]
        c = [tirx.Cast("int32", x) if str(x.ty) != "int32" else x
             for x in (tirx.const(v, "int32") if isinstance(v, int) else v for v in c)]
        if load:
            stmts.append(_extern(f"tw_tma_load_{rank}d", descriptor, bar, smem, *c))
        else:
            stmts.append(_extern(f"tw_tma_store_{rank}d", descriptor, smem, *c))
    return stmts


# -- roles (T.ws) ----------------------------------------------------------------------------
def _role_loops(node) -> list:
    found = []
    tvm_ffi.structural_walk(node, (tirx.For, lambda s: found.append(s)
                                   if ROLE_KEY in s.annotations else None), order="pre")
    return found


def bind_roles():
    """``T.ws`` regions become nested ``threadIdx.x`` loops over the role's threads."""

    def run(func):
        tx_loop = passes.find_thread(func)
        threads = int(tx_loop.extent.value)

        def visit(stmt):
            if str(stmt.attr_key) != WS_KEY:
                return stmt
            groups = [int(g) for g in str(stmt.value.value).split(",")]
            lo, n = groups[0] * WARPGROUP, len(groups) * WARPGROUP
            if lo + n > threads:
                raise KernelError(f"T.ws({', '.join(map(str, groups))}) needs threads up to "
                                  f"{lo + n}; the kernel has {threads}",
                                  span_location(stmt.span))
            var = tirx.Var(f"tx_ws{groups[0]}", "int32")
            iv = tirx.IterVar(tvm.ir.Range(0, n), var, tirx.IterVar.ThreadIndex,
                              passes.THREAD_TAG)
            return tirx.For(var, 0, n, tirx.ForKind.THREAD_BINDING, stmt.body,
                            thread_binding=iv, annotations={ROLE_KEY: lo}, span=stmt.span)

        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AttrStmt, visit)))

    return prim_func_pass("CUDABindRoles", run)


def _map_roles(func, fn):
    """``func`` with each role loop's body replaced by ``fn(loop)``."""

    def visit(loop):
        if ROLE_KEY not in loop.annotations:
            return loop
        return rebuild_for(loop, body=fn(loop))

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, visit)))


def distribute_roles():
    """``T.Parallel`` nests inside a role are spread over the role's threads."""

    def run(func):
        return _map_roles(func, lambda loop: passes.Distribute(
            loop.loop_var, int(loop.extent.value)).visit(loop.body))

    return prim_func_pass("CUDADistributeRoles", run)


def _flatten(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return [x for s in stmt.seq for x in _flatten(s)]
    return [stmt]


def _is_role(stmt) -> bool:
    return isinstance(stmt, tirx.For) and ROLE_KEY in stmt.annotations


class _DropRoleSyncs(StmtMutator):
    """A block-wide barrier between two roles is dropped: roles hand data over through
    mbarriers, and a ``__syncthreads`` there would serialise them."""

    def visit_SeqStmt(self, stmt):
        return self._clean(_flatten(stmt), loop_body=False)

    def visit_For(self, stmt):
        if ROLE_KEY in stmt.annotations:
            return stmt
        body = _flatten(stmt.body)
        if len(body) > 1:
            loop_body = stmt.kind != tirx.ForKind.THREAD_BINDING
            return rebuild_for(stmt, body=self._clean(body, loop_body=loop_body))
        return super().visit_For(stmt)

    def _clean(self, items, loop_body: bool):
        items = [self.visit(s) if not is_sync(s) else s for s in items]
        real = [s for s in items if not is_sync(s)]
        out = []
        for i, s in enumerate(items):
            if is_sync(s):
                before = [x for x in items[:i] if not is_sync(x)]
                after = [x for x in items[i + 1:] if not is_sync(x)]
                prev = before[-1] if before else (real[-1] if loop_body and real else None)
                nxt = after[0] if after else None
                if prev is not None and nxt is not None and _is_role(prev) and _is_role(nxt):
                    continue
            out.append(s)
        return tirx.SeqStmt(out) if len(out) != 1 else out[0]


def _named_barriers(body, lo: int, n: int):
    ident = tirx.const(1 + lo // WARPGROUP, "int32")

    def visit(stmt):
        if is_sync(stmt):
            return _extern("tw_named_barrier_sync", ident, tirx.const(n, "int32"))
        return stmt

    return tvm_ffi.structural_map(body, (tirx.Evaluate, visit))


def insert_sync():
    """``passes.insert_sync`` for the block, then barriers inside each role as named barriers
    of its threads (id ``1 + first warpgroup``); none between roles."""

    def run(func):
        mod = passes.insert_sync()(tvm.IRModule({"main": func}))
        func = mod["main"]
        if not _role_loops(func.body):
            return func
        func = func.with_body(_DropRoleSyncs().visit(func.body))

        def sync_role(loop):
            body, _ = passes.Syncs(loop.loop_var).run(loop.body, (set(), set()))
            return _named_barriers(body, int(loop.annotations[ROLE_KEY]),
                                   int(loop.extent.value))

        return _map_roles(func, sync_role)

    return prim_func_pass("CUDAInsertSyncRoles", run)


def role_registers():
    """mma accumulators (and their row vectors, rows.py) used inside a role are laid out over
    the role's warps: give them the register count of that role (before ``place_memory``
    sizes them for the whole block)."""

    def run(func):
        roles = _role_loops(func.body)
        if not roles:
            return func
        users: dict = {}
        for loop in roles:
            for buf in _buffers_in(loop.body):
                if str(buf.scope()) == MMA_ACC or row_vectors.is_rows(buf):
                    users.setdefault(buf, set()).add(int(loop.extent.value))
        remap = {}
        for buf, sizes in users.items():
            if len(sizes) > 1 or _used_outside(func, buf):
                raise KernelError(f"fragment {buf.name!r} is used in T.ws roles of different "
                                  "sizes or also outside them; keep an accumulator's uses "
                                  "(T.clear, T.gemm, T.copy) in one role")
            if row_vectors.is_rows(buf):  # a row vector of an accumulator (rows.py)
                count = row_vectors.registers(buf, sizes.pop())
                remap[buf] = tirx.decl_buffer((count,), buf.dtype, buf.name, scope="local")
                continue
            n = int(buf.shape[1].value)
            count = -(-mma_acc_registers(buf, sizes.pop()) // n)
            remap[buf] = tirx.decl_buffer((count, n), buf.dtype, buf.name, scope="local")
        body = tvm_ffi.structural_map(func.body, (tirx.Buffer, lambda b: remap.get(b, b)))
        return func.with_body(body)

    return prim_func_pass("CUDARoleRegisters", run)


def _buffers_in(node) -> list:
    found = []

    def add(x):
        buf = x.source if isinstance(x, tvm.ir.TensorLoad) else x.buffer
        if not any(b.same_as(buf) for b in found):
            found.append(buf)

    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, add), (tirx.BufferStore, add)])
    return found


def _used_outside(func, buf) -> bool:
    stripped = _map_roles(func, lambda loop: tirx.Evaluate(tirx.const(0, "int32")))
    return any(b.same_as(buf) for b in _buffers_in(stripped.body))


# -- finish ----------------------------------------------------------------------------------
def _param_index(func, buffer) -> int:
    for i, p in enumerate(func.params):
        if p.same_as(buffer) or (hasattr(p, "name") and str(p.name) == str(buffer.name)):
            return i
    raise KernelError(f"T.tma_copy: {buffer.name!r} is not a kernel parameter; TMA reads and "
                      "writes the kernel's global tensors")


def finish():
    """After ``place_memory``: descriptors deduplicated and numbered, shared addresses made
    plain, roles turned into thread-range branches, cluster dims recorded."""

    def run(func):
        table, entries = {}, []

        def rewrite(call):
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.name == ops.SHARED_ADDR:
                return tirx.address_of(call.args[0])
            if call.op.name == ops.TENSORMAP:
                buf = call.args[0].source
                box = [int(a.value) for a in call.args[1:-1]]
                mode = int(call.args[-1].value)
                key = (str(buf.name), tuple(box), mode)
                if key not in table:
                    table[key] = len(entries)
                    entries.append({"kind": "tensormap", "param": _param_index(func, buf),
                                    "name": f"tw_tmap_{len(entries)}", "tensor": str(buf.name),
                                    "dtype": str(buf.dtype), "rank": len(box), "box": box,
                                    "swizzle": mode})
                return tirx.call_extern("handle", "TW_TMAP", tirx.const(table[key], "int32"))
            return call

        body = tvm_ffi.structural_map(func.body, (tvm.ir.Call, rewrite))
        tx = passes.find_thread(func).loop_var

        def role_branch(loop):
            if ROLE_KEY not in loop.annotations:
                return loop
            lo, n = int(loop.annotations[ROLE_KEY]), int(loop.extent.value)
            inner = passes.substitute(loop.body, {loop.loop_var: tx - lo} if lo else
                                       {loop.loop_var: tx})
            cond = tx < n if lo == 0 else tirx.And(tx >= lo, tx < lo + n)
            return tirx.IfThenElse(cond, inner, None, span=loop.span)

        body = tvm_ffi.structural_map(body, (tirx.For, role_branch))
        func = func.with_body(body)
        if entries:
            func = func.with_attr(TENSORMAPS_ATTR, json.dumps(entries))
        block = func.body
        if isinstance(block, tirx.For) and CLUSTER_KEY in block.annotations:
            dims = [int(d) for d in block.annotations[CLUSTER_KEY]]
            func = func.with_attr(CLUSTER_ATTR, json.dumps(dims))
        return func

    return prim_func_pass("CUDAFinishDialect", run)


# -- codegen ---------------------------------------------------------------------------------
_MARK = 'extern "C" __global__'


def blocks_per_sm(func) -> int:
    """The blocks per SM the kernel is built for (pass config ``cuda.blocks_per_sm``)."""
    from .pipeline import BLOCKS_ATTR

    return int(func.attrs[BLOCKS_ATTR]) if func.attrs is not None and \
        BLOCKS_ATTR in func.attrs else 1


def launch_bounds(text: str, blocks: int) -> str:
    """``__launch_bounds__(threads, blocks)``: ptxas keeps to the registers that many blocks
    per SM leave each thread."""
    return re.sub(r"__launch_bounds__\((\d+)(, \d+)?\)", rf"__launch_bounds__(\1, {blocks})",
                  text)


def finish_source(func, text: str, meta: dict) -> tuple[str, dict]:
    """The dialect's part of the CUDA source and launch description: descriptor parameters,
    ``__cluster_dims__``, and ``tw_hopper.h`` when the kernel uses it."""
    maps = json.loads(str(func.attrs[TENSORMAPS_ATTR])) if TENSORMAPS_ATTR in func.attrs else []
    cluster = json.loads(str(func.attrs[CLUSTER_ATTR])) if CLUSTER_ATTR in func.attrs else None
    at = text.find(_MARK)
    if at < 0 or not (maps or cluster or "tw_mbar_" in text or "tw_named_barrier" in text or
                      "tw_setmaxnreg" in text or "tw_fence_proxy" in text or
                      "tw_tma_" in text or "tw_gemm_wgmma" in text):
        return text, meta
    head, kernel = text[:at], text[at:]
    if maps:
        extra = ", ".join(f"const __grid_constant__ tw_tensormap {m['name']}" for m in maps)
        kernel = _add_params(kernel, f" {meta['entry']}(", extra)
        meta = {**meta, "params": [*meta["params"], *maps]}
    if "tw_setmaxnreg_" in kernel:  # setmaxnreg needs the register count at entry fixed
        kernel = launch_bounds(kernel, blocks_per_sm(func))
    if cluster:
        dims = f"__cluster_dims__({cluster[0]}, {cluster[1]}, {cluster[2]}) "
        kernel = kernel.replace(f"{_MARK} void ", f"{_MARK} void {dims}")
        meta = {**meta, "cluster_dims": cluster}
    if "tw_gemm_wgmma" in kernel:  # the shared-A and register-A (_rs) forms
        from . import wgmma

        kernel = wgmma.source(kernel) + kernel
    return head + HEADER + "\n" + kernel, meta


def _add_params(text: str, opening: str, extra: str) -> str:
    """``extra`` appended to the parameter list of every declaration of the kernel (TVM
    writes a prototype, then the definition); parameters are plain types, so the first
    ``)`` closes the list."""
    out, at = [], 0
    while (start := text.find(opening, at)) >= 0:
        line = text[text.rfind("\n", 0, start) + 1:start]
        close = text.find(")", start)
        if "__global__" in line:
            inner = text[start + len(opening):close].strip()
            out.append(text[at:close] + (", " if inner else "") + extra)
        else:
            out.append(text[at:close])
        at = close
    out.append(text[at:])
    return "".join(out)


def strip_attrs(func):
    from .pipeline import BLOCKS_ATTR

    for key in (TENSORMAPS_ATTR, CLUSTER_ATTR, BLOCKS_ATTR):
        if key in func.attrs:
            func = func.without_attr(key)
    return func
