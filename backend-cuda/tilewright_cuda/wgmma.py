"""The ``wgmma`` GEMM variant (sm_90a): ``wgmma.mma_async.m64nNk16`` with both operands read
from swizzled shared tiles (swizzle.py) through matrix descriptors (include/tw_wgmma.h).

It is the first entry of ``lowering.gemm_variants()``; :func:`misfit` says why a gemm does not
take it. The accumulator stays the ``local.mma_acc`` register fragment: the m64nNk16 D layout
is that layout's ``(warps x 1)`` warp grid when each warp owns 16 rows (M = 64 per
warpgroup). :func:`mark_accumulators` (after layout inference) marks such fragments so that
``lowering.acc_grid`` gives them that grid, and every op touching them agrees.

Register A (``tw_gemm_wgmma_rs``, wgmma's register-A form): a 16-bit fragment written only by
a ``T.copy`` from such an accumulator and read only as the A operand of wgmma gemms
(FlashAttention's P) stays in registers in the accumulator's layout, which for each k16 step
is the m64k16 A fragment layout (:func:`keep_a_in_registers`); the copy is a pairwise
convert, and the gemm needs neither a shared store of A nor a fence or barrier for it.
"""

from __future__ import annotations

from pathlib import Path

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import TileOpCall, tile_ops_in
from tilewright.transform import RuleContext, prim_func_pass
from tvm import tirx

from . import lowering as lw  # lowering imports this module: use its names at call time
from . import swizzle, tma

HEADER = (Path(__file__).parent / "include" / "tw_wgmma.h").read_text()
WARPGROUP = 128
DTYPES = (("float16", "float16", "float32"), ("bfloat16", "bfloat16", "float32"))


def _chunk(n: int, block: int) -> int | None:
    """The N of one wgmma: all of ``n`` up to 256, else the largest multiple of the B tile's
    column block (``block`` elements) that divides ``n``."""
    if n <= 256:
        return n
    for nc in range(256, 7, -8):
        if n % nc == 0 and nc % block == 0:
            return nc
    return None


def shape_misfit(call: TileOpCall, arch, threads: int, a_in_registers: bool = False
                 ) -> str | None:
    """Why the gemm cannot be a wgmma, the accumulator's layout aside; None when it can. With
    ``a_in_registers`` A is the 2-D register fragment the register-A form reads (whole,
    [M, K]) instead of a swizzled shared tile."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    if arch is None or arch.name != "sm_90a":
        return "wgmma needs sm_90a"
    dtypes = (str(a.buffer.dtype), str(b.buffer.dtype), str(c.buffer.dtype))
    if dtypes not in DTYPES:
        return f"operand dtypes {dtypes} are not (float16|bfloat16, same, float32)"
    if call.attrs["transpose_A"]:
        return "A in registers must be [M, K]" if a_in_registers else \
            "A must be stored [M, K] (K-major) for the wgmma descriptor"
    for name, region in ((("B", b),) if a_in_registers else (("A", a), ("B", b))):
        layout = swizzle.layout_of(region.buffer)
        if layout is None or len(region.buffer.shape) != 2:
            return f"{name} is not a swizzled 2-D shared tile (swizzle.py)"
        if not all(lw._const(s) == 0 for s in region.starts):
            return f"{name} is read in part"
    if a_in_registers and (not all(lw._const(s) == 0 for s in a.starts) or [
            lw._const(e) for e in a.extents] != [lw._const(e) for e in a.buffer.shape]):
        return "A is read in part"
    if lw.scope(c.buffer) != lw.MMA_ACC or len(lw.non_unit(c)) != 2:
        return "C is not a 2-D register accumulator (local.mma_acc)"
    m, n = (lw._const(e) for e in c.extents)
    k = lw._const(a.extents[1])
    if threads % WARPGROUP or m != 64 * (threads // WARPGROUP) or \
            (a_in_registers and lw._const(a.extents[0]) != m):
        return f"M = {m} is not 64 rows per warpgroup of the {threads} threads"
    width_b = swizzle.layout_of(b.buffer)[0]
    if None in (n, k) or k % 16 or n % 8 or _chunk(n, width_b // 2) is None:
        return f"tile N x K = {n} x {k} does not split into m64nNk16 instructions"
    return None


def is_register_a(buffer) -> bool:
    """Whether ``buffer`` is a 16-bit A fragment in registers (:func:`keep_a_in_registers`)."""
    return lw.scope(buffer) == lw.MMA_ACC and str(buffer.dtype) in ("float16", "bfloat16")


def rs_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why the gemm cannot be a register-A wgmma with A the 2-D register fragment it reads."""
    return shape_misfit(call, arch, threads, a_in_registers=True)


def misfit(call: TileOpCall, ctx: RuleContext) -> str | None:
    _, threads = lw.thread_var(ctx)
    if is_register_a(call.operands["A"].buffer):
        problem = rs_misfit(call, ctx.options, threads)
        if problem is None and int(call.operands["C"].buffer.data_alignment) != lw.WGMMA_ACC:
            problem = "C does not have the wgmma accumulator layout"
        if problem is not None:  # layout inference checked this: no other variant reads it
            raise KernelError(f"T.gemm reads {call.operands['A'].buffer.name!r} from "
                              f"registers as wgmma's A, but {problem}")
        return None
    problem = shape_misfit(call, ctx.options, threads)
    if problem is None and int(call.operands["C"].buffer.data_alignment) != lw.WGMMA_ACC:
        problem = "C does not have the wgmma accumulator layout"
    return problem


def lower_gemm_wgmma(call: TileOpCall, ctx: RuleContext):
    """Each warpgroup issues the wgmma steps of its 64 rows; the operands' writers fence
    their shared stores to the async proxy first (a barrier of the block or role)."""
    from .hopper import shared_addr

    if is_register_a(call.operands["A"].buffer):
        return lower_gemm_wgmma_rs(call, ctx)
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    tx, _ = lw.thread_var(ctx)
    n, k = lw._const(c.extents[1]), lw._const(a.extents[1])
    (width_a, _), (width_b, _) = swizzle.layout_of(a.buffer), swizzle.layout_of(b.buffer)
    b_mn = not call.attrs["transpose_B"]
    rows_a, rows_b = lw._const(a.buffer.shape[0]), lw._const(b.buffer.shape[0])
    bf16 = "true" if str(a.buffer.dtype) == "bfloat16" else "false"
    nc = _chunk(n, width_b // 2)
    name = (f"tw_gemm_wgmma<{n}, {k}, {nc}, {bf16}, {'true' if b_mn else 'false'}, {rows_a}, "
            f"{width_a}, {rows_b}, {width_b}>")
    return _issue(call, ctx, name, shared_addr(_origin(a.buffer)), shared_addr(_origin(b.buffer)),
                  tx)


def _origin(buffer):
    zero = tirx.const(0, "int32")
    return tirx.BufferLoad(buffer, [zero, zero])


def _issue(call: TileOpCall, ctx: RuleContext, name: str, a, b, tx):
    """``name(a, b, &C, warpgroup)`` after the operands' writers fenced their shared stores
    to the async proxy (a barrier of the block or role), waiting for its own group; the
    accumulator cleared first for ``clear_accum``."""
    c = call.operands["C"]
    gemm = tirx.Evaluate(tirx.call_extern("void", name, a, b, tirx.address_of(
        _origin(c.buffer)), tirx.floordiv(tx, WARPGROUP)))
    fence = tirx.Evaluate(tirx.call_extern("void", "tw_fence_proxy_async"))
    stmts = [fence, lw.sync(), gemm, wait(0)]
    if call.attrs["clear_accum"]:
        stmts.insert(0, lw.lower_fill(lw._fill_call(c), ctx))
    return tirx.SeqStmt(stmts)


RS = "tw_gemm_wgmma_rs<"  # not "tw_gemm_wgmma<": pipeline.py matches that for shared A


def lower_gemm_wgmma_rs(call: TileOpCall, ctx: RuleContext):
    """The register-A form: each thread passes its A registers (the k16 steps' m64k16 A
    fragments, in order), B is read through its descriptor as in the shared form. Only B's
    writers need the async-proxy fence and barrier (``drop_redundant_fences`` removes them
    where nothing wrote B since the last ones)."""
    from .hopper import shared_addr

    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    tx, _ = lw.thread_var(ctx)
    n, k = lw._const(c.extents[1]), lw._const(a.extents[1])
    width_b, _ = swizzle.layout_of(b.buffer)
    b_mn = not call.attrs["transpose_B"]
    bf16 = "true" if str(a.buffer.dtype) == "bfloat16" else "false"
    name = (f"{RS}{n}, {k}, {_chunk(n, width_b // 2)}, {bf16}, {'true' if b_mn else 'false'}, "
            f"{lw._const(b.buffer.shape[0])}, {width_b}>")
    # argument order A, B, C as in the other tw_gemm* calls (passes._Access reads them so)
    return _issue(call, ctx, name, tirx.address_of(_origin(a.buffer)),
                  shared_addr(_origin(b.buffer)), tx)


def convert_registers(src, dst, ctx: RuleContext):
    """``T.copy`` of a wgmma accumulator into a register A fragment of the same shape and
    layout: register ``r`` of one is register ``r`` of the other, converted a pair at a time
    (``tw_wgmma_pack``: one ``cvt`` to f16x2/bf16x2 per 32-bit A register)."""
    _, threads = lw.thread_var(ctx)
    r = tirx.Var("r", "int32")
    pack = tirx.Evaluate(tirx.call_extern(
        "void", "tw_wgmma_pack",
        tirx.address_of(tirx.BufferLoad(dst.buffer, lw.register_index(dst.buffer, r * 2))),
        tirx.BufferLoad(src.buffer, lw.register_index(src.buffer, r * 2)),
        tirx.BufferLoad(src.buffer, lw.register_index(src.buffer, r * 2 + 1))))
    return tirx.For(r, 0, lw.mma_acc_registers(src.buffer, threads) // 2, tirx.ForKind.UNROLLED,
                    pack)


WAIT = "tw_wgmma_wait<"


def wait(groups: int) -> tirx.Stmt:
    """Retire this warpgroup's wgmma groups until at most ``groups`` are in flight (a gemm
    waits for its own, ``0``; pipeline.py keeps one in flight across a pipelined loop)."""
    return tirx.Evaluate(tirx.call_extern("void", f"{WAIT}{groups}>"))


def mark_accumulators(arch):
    """Register accumulators that only gemms fitting wgmma write get the wgmma layout (the
    ``data_alignment`` mark read by ``lowering.acc_grid``)."""

    def run(func):
        from .passes import find_thread

        block = int(find_thread(func).extent.value)
        fits: dict = {}
        for call in tile_ops_in(func):
            if call.name != "gemm":
                continue
            for name in ("A", "B", "C"):
                buf = call.operands[name].buffer
                if lw.scope(buf) == lw.MMA_ACC:
                    ok = name == "C" and \
                        shape_misfit(call, arch, _threads_of(func, call, block)) is None
                    fits[buf] = fits.get(buf, True) and ok
        chosen = [buf for buf, ok in fits.items() if ok]
        if not chosen:
            return func
        remap = {buf: tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope=lw.MMA_ACC,
                                       data_alignment=lw.WGMMA_ACC) for buf in chosen}
        return func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.Buffer, lambda b: remap.get(b, b))))

    return prim_func_pass("CUDAMarkWgmmaAccumulators", run)


def keep_a_in_registers(arch):
    """A 2-D float16/bfloat16 fragment whose only writes are whole ``T.copy``s from a wgmma
    accumulator of its shape, whose only reads are as the whole A operand of gemms that fit
    the register-A wgmma (:func:`rs_misfit`, C a wgmma accumulator with as many rows per
    warpgroup), and which nothing else touches becomes registers in the accumulator's layout
    (scope ``local.mma_acc``, marked ``WGMMA_ACC``, 16-bit). Runs after
    :func:`mark_accumulators`; any other fragment, and every fragment of a kernel with
    ``T.ws`` roles, keeps its place in shared memory."""

    def run(func):
        from .hopper import _role_loops
        from .passes import _full, find_thread

        if _role_loops(func.body):  # T.ws roles: not yet (nor emulated: see tw_wgmma.h)
            return func
        block = int(find_thread(func).extent.value)
        frags = set()
        tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, lambda a: frags.add(a.buffer) if
                                            lw.scope(a.buffer) == "local.fragment" and
                                            str(a.buffer.dtype) in ("float16", "bfloat16") and
                                            len(a.buffer.shape) == 2 else None))
        if not frags:
            return func
        regions, ok, written, read = {f: 0 for f in frags}, {f: True for f in frags}, set(), set()
        for call in tile_ops_in(func):
            for op in call.schema.operands:
                region = call.operands.get(op.name)
                if op.kind == "expr" or not hasattr(region, "buffer") or \
                        region.buffer not in frags:
                    continue
                buf, threads = region.buffer, _threads_of(func, call, block)
                regions[buf] += 1
                if call.name == "copy" and op.name == "dst":
                    good = _converts_accumulator(call, threads)
                    written.add(buf)
                elif call.name == "gemm" and op.name == "A":
                    c = call.operands["C"].buffer
                    good = _full(region) and int(c.data_alignment) == lw.WGMMA_ACC and \
                        rs_misfit(call, arch, threads) is None
                    read.add(buf)
                else:
                    good = False
                ok[buf] = ok[buf] and good
        uses = {f: 0 for f in frags}

        def count(node):
            buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
            if buf in uses:
                uses[buf] += 1

        tvm_ffi.structural_walk(func.body, [(tvm.ir.TensorLoad, count),
                                            (tirx.BufferStore, count)])
        chosen = [f for f in frags if ok[f] and f in written and f in read and
                  uses[f] == regions[f]]
        if not chosen:
            return func
        remap = {f: tirx.decl_buffer(f.shape, f.dtype, f.name, scope=lw.MMA_ACC,
                                     data_alignment=lw.WGMMA_ACC) for f in chosen}
        func = func.with_body(tvm_ffi.structural_map(
            func.body, (tirx.Buffer, lambda b: remap.get(b, b))))
        if func.attrs is not None and swizzle.ATTR in func.attrs:  # no longer shared tiles
            names = {str(f.name) for f in chosen}
            func = func.with_attr(swizzle.ATTR, {k: v for k, v in func.attrs[swizzle.ATTR].items()
                                                 if str(k) not in names})
        return func

    return prim_func_pass("CUDAWgmmaRegisterA", run)


def _converts_accumulator(call: TileOpCall, threads: int) -> bool:
    """A whole copy of a float32 wgmma accumulator into a fragment of its shape, the
    accumulator's rows 64 per warpgroup of the threads running the copy."""
    from .passes import _full

    src, dst = call.operands["src"], call.operands["dst"]
    shape = [lw._const(e) for e in src.buffer.shape]
    return _full(src) and _full(dst) and lw.scope(src.buffer) == lw.MMA_ACC and \
        int(src.buffer.data_alignment) == lw.WGMMA_ACC and str(src.buffer.dtype) == "float32" \
        and shape == [lw._const(e) for e in dst.buffer.shape] and threads % WARPGROUP == 0 \
        and shape[0] == 64 * (threads // WARPGROUP)


def drop_redundant_fences():
    """A register-A wgmma is lowered behind ``fence.proxy.async; __syncthreads()`` for B's
    writers (A needs neither). The pair is dropped (``tw_mbar_wait``s between it and the gemm
    stay) when B needs no fence here: every write of every shared tile the gemm reads is a
    TMA load (async proxy, made visible by the mbarrier wait each thread does before the gemm,
    as pipelined TMA loops have it), or the same statement list holds an earlier ``fence;
    sync`` pair after which nothing writes (or lands ``cp.async`` copies into) those tiles.
    FlashAttention's P @ V: P in registers, V a TMA (or cp.async) pipeline tile. Runs after
    pipelining, before barrier insertion."""

    def run(func):
        from .pipeline import VERSIONS_ATTR

        calls = []
        tvm_ffi.structural_walk(func.body, (tvm.ir.Call, lambda c: calls.append(c) if (
            _extern(c) or "").startswith(RS) else None))
        if not calls:
            return func
        versions = {str(k): int(v) for k, v in func.attrs[VERSIONS_ATTR].items()} \
            if func.attrs is not None and VERSIONS_ATTR in func.attrs else {}
        return func.with_body(_drop_fences(func.body, versions, _tma_only(func.body)))

    return prim_func_pass("CUDAWgmmaDropFences", run)


def _extern(stmt) -> str | None:
    return tma.extern_name(stmt.value if isinstance(stmt, tirx.Evaluate) else stmt)


def _tma_only(body) -> set:
    """Shared buffers whose every write in ``body`` is a TMA load (``tw_tma_load_*``): a
    buffer stored to, or whose address another call takes (gemm operands aside), is not."""
    from .ops import SHARED_ADDR
    from .passes import _is_address_of

    loaded, other = set(), set()

    def addressed(e, shared_addr: bool = True) -> list:
        found = []
        tvm_ffi.structural_walk(e, (tvm.ir.Call, lambda c: found.append(c.args[0].source) if (
            _is_address_of(c) or (shared_addr and isinstance(c.op, tvm.ir.Op) and
                                  c.op.name == SHARED_ADDR))
            and isinstance(c.args[0], tvm.ir.TensorLoad) else None))
        return found

    def call(c):
        name = _extern(c)
        if name is None:
            return
        if name.startswith("tw_gemm"):  # wgmma operands (shared_addr) are only read
            other.update(addressed(c, shared_addr=False))
        elif name.startswith("tw_tma_load_"):
            loaded.update(addressed(c.args[3]))  # (map, barrier, destination, coordinates...)
        else:
            other.update(addressed(c))

    tvm_ffi.structural_walk(body, [(tvm.ir.Call, call),
                                   (tirx.BufferStore, lambda st: other.add(st.buffer))])
    return {b for b in loaded if not any(b.same_as(o) for o in other)}


def _drop_fences(stmt, versions: dict, tma_only: set):
    from tilewright.transform import rebuild_for

    from .passes import _Access

    if isinstance(stmt, tirx.SeqStmt):
        out: list = []
        flat = tma.flat([stmt])
        for s in (_drop_fences(x, versions, tma_only) for x in flat):
            name = _extern(s) or ""
            if name.startswith(RS):
                j = len(out)
                while j > 0 and _extern(out[j - 1]) == "tw_mbar_wait":
                    j -= 1
                if j >= 2 and lw.is_sync(out[j - 1]) and \
                        _extern(out[j - 2]) == "tw_fence_proxy_async":
                    reads = _Access(s, versions).reads
                    if all(any(buf.same_as(t) for t in tma_only) for buf, _ in reads) or \
                            _fenced_before(out[:j - 2], reads, versions):
                        del out[j - 2:j]
            out.append(s)
        if len(out) == len(flat) and all(a.same_as(b) for a, b in zip(out, flat)):
            return stmt  # nothing dropped here: the nesting stays as it was
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]
    if isinstance(stmt, tirx.For):
        body = _drop_fences(stmt.body, versions, tma_only)
        return stmt if body.same_as(stmt.body) else rebuild_for(stmt, body=body)
    if isinstance(stmt, tirx.IfThenElse):
        then_case = _drop_fences(stmt.then_case, versions, tma_only)
        else_case = None if stmt.else_case is None else \
            _drop_fences(stmt.else_case, versions, tma_only)
        if then_case.same_as(stmt.then_case) and (else_case is None or
                                                   else_case.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case, span=stmt.span)
    return stmt


def _fenced_before(before: list, reads, versions: dict) -> bool:
    """Whether ``before`` holds a ``fence; sync`` pair followed by statements none of which
    writes what ``reads`` names (nor waits for cp.async copies)."""
    from .passes import _Access, _conflict

    for j in range(len(before) - 1, 0, -1):
        s = before[j]
        if lw.is_sync(s) and _extern(before[j - 1]) == "tw_fence_proxy_async":
            return True
        acc = _Access(s, versions)
        if acc.lands or _conflict(reads, acc.writes | acc.issued):
            return False
    return False


def _threads_of(func, call, block: int) -> int:
    """Threads that run ``call``: its T.ws role's, else the block's."""
    from .hopper import _role_loops

    for loop in _role_loops(func.body):
        if any(c.stmt.same_as(call.stmt) for c in tile_ops_in(loop.body)):
            return int(loop.extent.value)
    return block


# -- device code -------------------------------------------------------------------------------
def instruction(nc: int, bf16: bool, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_m64k16<NC, BF16, B_MN>``: one wgmma."""
    regs = nc // 2
    kind = "bf16" if bf16 else "f16"
    outs = ", ".join(f"%{i}" for i in range(regs))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (f"template <> __device__ inline void tw_wgmma_m64k16<{nc}, {str(bf16).lower()}, "
            f"{str(b_mn).lower()}>(float* d, unsigned long long da, unsigned long long db) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k16.f32.{kind}.{kind} {{{outs}}}, '
            f'%{regs}, %{regs + 1}, p, 1, 1, 0, {int(b_mn)};\\n}}\\n"\n'
            f'    : {operands}\n    : "l"(da), "l"(db), "r"(1));\n}}\n')


def instruction_rs(nc: int, bf16: bool, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_m64k16_rs<NC, BF16, B_MN>``: one wgmma with A
    from four 32-bit registers (``{a0, a1, a2, a3}``; the register form has no A transpose)."""
    regs = nc // 2
    kind = "bf16" if bf16 else "f16"
    outs = ", ".join(f"%{i}" for i in range(regs))
    a_regs = ", ".join(f"%{regs + i}" for i in range(4))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (f"template <> __device__ inline void tw_wgmma_m64k16_rs<{nc}, "
            f"{str(bf16).lower()}, {str(b_mn).lower()}>(float* d, const unsigned* a, "
            f"unsigned long long db) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k16.f32.{kind}.{kind} {{{outs}}}, '
            f'{{{a_regs}}}, %{regs + 4}, p, 1, 1, {int(b_mn)};\\n}}\\n"\n'
            f'    : {operands}\n    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), '
            f'"r"(1));\n}}\n')


def source(text: str) -> str:
    """``tw_wgmma.h`` plus the instruction specialisations the kernel text uses."""
    import re

    parts = [HEADER, "#ifndef TW_HOST_EMULATION"]
    seen = set()
    for match in re.finditer(r"tw_gemm_wgmma(_rs)?<\d+, \d+, (\d+), (true|false), "
                             r"(true|false),", text):
        key = (int(match.group(2)), match.group(3) == "true", match.group(4) == "true")
        make = instruction_rs if match.group(1) else instruction
        if (make, key) not in seen:
            seen.add((make, key))
            parts.append(make(*key))
    parts.append("#endif")
    return "\n".join(parts) + "\n"
