"""The ``wgmma`` GEMM variant (sm_90a): ``wgmma.mma_async.m64nNk16`` with both operands read
from swizzled shared tiles (swizzle.py) through matrix descriptors (include/tw_wgmma.h).

It is the first entry of ``lowering.GEMM_VARIANTS``; :func:`misfit` says why a gemm does not
take it. The accumulator stays the ``local.mma_acc`` register fragment: the m64nNk16 D layout
is that layout's ``(warps x 1)`` warp grid when each warp owns 16 rows (M = 64 per
warpgroup). :func:`mark_accumulators` (after layout inference) marks such fragments so that
``lowering.acc_grid`` gives them that grid, and every op touching them agrees.
"""

from __future__ import annotations

from pathlib import Path

import tvm_ffi
from tilewright.ir import TileOpCall, tile_ops_in
from tilewright.transform import RuleContext, prim_func_pass
from tvm import tirx

from . import lowering as lw  # lowering imports this module: use its names at call time
from . import swizzle

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


def shape_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why the gemm cannot be a wgmma, the accumulator's layout aside; None when it can."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    if arch is None or arch.name != "sm_90a":
        return "wgmma needs sm_90a"
    dtypes = (str(a.buffer.dtype), str(b.buffer.dtype), str(c.buffer.dtype))
    if dtypes not in DTYPES:
        return f"operand dtypes {dtypes} are not (float16|bfloat16, same, float32)"
    if call.attrs["transpose_A"]:
        return "A must be stored [M, K] (K-major) for the wgmma descriptor"
    for name, region in (("A", a), ("B", b)):
        layout = swizzle.layout_of(region.buffer)
        if layout is None or len(region.buffer.shape) != 2:
            return f"{name} is not a swizzled 2-D shared tile (swizzle.py)"
        if not all(lw._const(s) == 0 for s in region.starts):
            return f"{name} is read in part"
    if lw.scope(c.buffer) != lw.MMA_ACC or len(lw.non_unit(c)) != 2:
        return "C is not a 2-D register accumulator (local.mma_acc)"
    m, n = (lw._const(e) for e in c.extents)
    k = lw._const(a.extents[1])
    if threads % WARPGROUP or m != 64 * (threads // WARPGROUP):
        return f"M = {m} is not 64 rows per warpgroup of the {threads} threads"
    width_b = swizzle.layout_of(b.buffer)[0]
    if None in (n, k) or k % 16 or n % 8 or _chunk(n, width_b // 2) is None:
        return f"tile N x K = {n} x {k} does not split into m64nNk16 instructions"
    return None


def misfit(call: TileOpCall, ctx: RuleContext) -> str | None:
    _, threads = lw.thread_var(ctx)
    problem = shape_misfit(call, ctx.options, threads)
    if problem is None and int(call.operands["C"].buffer.data_alignment) != lw.WGMMA_ACC:
        problem = "C does not have the wgmma accumulator layout"
    return problem


def lower_gemm_wgmma(call: TileOpCall, ctx: RuleContext):
    """Each warpgroup issues the wgmma steps of its 64 rows; the operands' writers fence
    their shared stores to the async proxy first (a barrier of the block or role)."""
    from .hopper import shared_addr

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
    zero = tirx.const(0, "int32")
    gemm = tirx.Evaluate(tirx.call_extern(
        "void", name, shared_addr(tirx.BufferLoad(a.buffer, [zero, zero])),
        shared_addr(tirx.BufferLoad(b.buffer, [zero, zero])),
        tirx.address_of(tirx.BufferLoad(c.buffer, [zero, zero])),
        tirx.floordiv(tx, WARPGROUP)))
    fence = tirx.Evaluate(tirx.call_extern("void", "tw_fence_proxy_async"))
    stmts = [fence, lw.sync(), gemm, wait(0)]
    if call.attrs["clear_accum"]:
        stmts.insert(0, lw.lower_fill(lw._fill_call(c), ctx))
    return tirx.SeqStmt(stmts)


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


def source(text: str) -> str:
    """``tw_wgmma.h`` plus the instruction specialisations the kernel text uses."""
    import re

    parts = [HEADER, "#ifndef TW_HOST_EMULATION"]
    seen = set()
    for match in re.finditer(r"tw_gemm_wgmma<\d+, \d+, (\d+), (true|false), (true|false),",
                             text):
        key = (int(match.group(1)), match.group(2) == "true", match.group(3) == "true")
        if key not in seen:
            seen.add(key)
            parts.append(instruction(*key))
    parts.append("#endif")
    return "\n".join(parts) + "\n"
