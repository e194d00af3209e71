"""Lowering of the CUDA dialect (``tilewright_cuda.language``): mbarriers, TMA copies, the
async-proxy fence, register budgets, warp-specialised roles and clusters, hand-issued
``cp.async`` copies and wgmma waits, as calls of ``include/tw_hopper.h`` and
``include/tw_wgmma.h``; per-thread ``ldmatrix`` and ``mma.sync`` (sm_80+) of
``include/tw_mma.h``. Needs sm_90 or newer (``setmaxnreg``, ``T.wait_wgmma``: sm_90a;
``T.ptx_cp_async``: sm_80); an older architecture is an error naming the op and what it
needs. ``T.wgmma_gemm`` has no rule here: ``transforms.dialect`` makes it a gemm left in
flight, which ``rules.gemm`` lowers. Barrier and tile addresses are
``tw.cuda.shared_addr(element)`` until the shared pool is placed. ``T.ws`` and
``T.ClusterKernel`` leave nothing here: their regions and annotations are handled by the
transforms (roles in ``transforms.roles``, clusters in ``transforms.finish``)."""

from __future__ import annotations

import math

from tilewright.errors import KernelError
from tilewright.ir import TileOpCall
from tilewright.transform import RuleContext
from tvm import tirx

from .. import intrinsics, keys, ops
from ..analysis import gemm_fit
from . import tma
from .common import (
    SHUFFLE_FUNCTIONS,
    combine_lanes,
    combine_strided,
    leader,
    reduce_parts,
    thread_var,
    warp_lanes,
)
from .table import INTRINSIC_RULES, register


def _require(call: TileOpCall, ctx: RuleContext, feature: str, arch_specific: bool = False,
             since: int = 90):
    arch = ctx.options.arch
    ok = arch.sm >= since and (not arch_specific or arch.name.endswith("a"))
    if not ok:
        need = "sm_90a (or sm_100a)" if arch_specific else f"sm_{since} or newer"
        raise KernelError(
            f"T.{call.name} needs {need} ({feature}); the target architecture is "
            f"{arch.name}: compile for 'cuda -arch=sm_90a' or use portable ops")


def _whole_warps(call: TileOpCall, ctx: RuleContext, instruction: str):
    """A warp-wide instruction (``.sync.aligned``: every lane of the warp executes it
    together) needs a block of whole warps."""
    _, threads = thread_var(ctx)
    if threads % keys.WARP:
        raise KernelError(f"T.{call.name} issues {instruction}, which all {keys.WARP} lanes of a "
                          f"warp execute together, but {gemm_fit.partial_warp(threads)}")


@register(ops.INIT_BARRIERS.name)
def lower_alloc_barrier(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarriers with transaction counts")
    buf = call.operands["barriers"].buffer
    counts = [int(c) for c in call.attrs["counts"].split(",")]
    inits = [intrinsics.call("tw_mbar_init", _address(buf, i), tirx.const(c, "uint32"))
             for i, c in enumerate(counts)]
    inits.append(intrinsics.call("tw_fence_barrier_init"))
    return tirx.SeqStmt([leader(ctx, inits), intrinsics.sync()])


def _address(buffer, i: int):
    return intrinsics.shared_addr(tirx.BufferLoad(buffer, [tirx.const(i, "int32")]))


@register(ops.ARRIVE.name)
def lower_arrive(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarriers")
    return intrinsics.call("tw_mbar_arrive", intrinsics.shared_addr(call.operands["barrier"]))


@register(ops.WAIT_PARITY.name)
def lower_wait_parity(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarrier try_wait.parity")
    return intrinsics.call("tw_mbar_wait", intrinsics.shared_addr(call.operands["barrier"]),
                           call.operands["parity"])


@register(ops.EXPECT_TX.name)
def lower_expect_tx(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarrier transaction counts")
    return leader(ctx, [intrinsics.call("tw_mbar_expect_tx",
                                        intrinsics.shared_addr(call.operands["barrier"]),
                                        tirx.Cast("uint32", call.operands["bytes"]))])


@register(ops.FENCE_PROXY_ASYNC.name)
def lower_fence_proxy_async(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "the async proxy")
    return intrinsics.call("tw_fence_proxy_async")


@register(ops.TMA_STORE_WAIT.name)
def lower_tma_store_wait(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "TMA bulk groups")
    return tirx.SeqStmt([intrinsics.call(f"tw_tma_store_wait<{int(call.attrs['count'])}>"),
                         intrinsics.sync()])


@register(ops.SET_MAX_NREG.name)
def lower_set_max_nreg(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "setmaxnreg", arch_specific=True)
    _whole_warps(call, ctx, "setmaxnreg")
    for loop in ctx.loops:
        if keys.ROLE in loop.annotations and (int(loop.annotations[keys.ROLE]) % keys.WARPGROUP
                                              or int(loop.extent.value) % keys.WARPGROUP):
            lo = int(loop.annotations[keys.ROLE])
            raise KernelError(f"T.{call.name} issues setmaxnreg, which the {keys.WARPGROUP} "
                              f"threads of a warpgroup execute together, but its role is "
                              f"threads {lo}..{lo + int(loop.extent.value) - 1}: give it a role of "
                              "whole warpgroups")
    kind = "inc" if call.attrs["is_inc"] else "dec"
    return intrinsics.call(f"tw_setmaxnreg_{kind}<{int(call.attrs['reg_count'])}>")


@register(ops.WS.name)
def lower_ws(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "warpgroup-specialised roles")
    return tirx.Evaluate(tirx.const(0, "int32"))


@register(ops.NO_SET_MAX_NREG.name)
def lower_no_set_max_nreg(call: TileOpCall, ctx: RuleContext):
    """Nothing here: the pipeline reads the kernel's annotation (``keys.NO_SET_MAX_NREG``)."""
    return tirx.Evaluate(tirx.const(0, "int32"))


@register(ops.CLUSTER.name)
def lower_cluster(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "thread-block clusters")
    return tirx.Evaluate(tirx.const(0, "int32"))


@register(ops.TMA_COPY.name)
def lower_tma_copy(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "the Tensor Memory Accelerator")
    src, dst = call.operands["src"], call.operands["dst"]
    if str(src.buffer.scope()) == "global":
        return leader(ctx, tma.load(src, dst, intrinsics.shared_addr(call.operands["barrier"])))
    # every thread's shared writes must reach the async proxy before one thread stores
    stores = tma.store(src, dst)
    return tirx.SeqStmt([intrinsics.fence_proxy_async(), intrinsics.sync(),
                         leader(ctx, stores)])


@register(ops.THREAD_BINDING.name)
def lower_get_thread_binding(call: TileOpCall, ctx: RuleContext):
    """The block's ``threadIdx.x`` (the outermost thread loop, also inside a role), split
    into T.Kernel's thread dimensions (``x`` fastest), stored into the variable."""
    tx = next(loop.loop_var for loop in ctx.loops
              if loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None
              and str(loop.thread_binding.thread_tag) == keys.THREAD_TAG)
    threads = [int(t) for t in call.attrs["threads"].split(",")]
    dim = int(call.attrs["dim"])
    below = 1
    for t in threads[:dim]:
        below *= t
    value = tirx.floordiv(tx, below) if below > 1 else tx
    if below * threads[dim] < threads[0] * threads[1] * threads[2]:
        value = tirx.floormod(value, threads[dim])
    return tirx.BufferStore(call.operands["dst"].buffer, value, [tirx.const(0, "int32")])


@register(ops.CALL_EXTERN.name)
def lower_call_extern(call: TileOpCall, ctx: RuleContext):
    """The user's call, made by every thread that reaches it (any CUDA architecture: what the
    callee needs is NVRTC's to check)."""
    return tirx.Evaluate(call.operands["call"])


@register(ops.IMPORT_SOURCE.name)
def lower_import_source(call: TileOpCall, ctx: RuleContext):
    """Nothing here: the kernel's annotation ``keys.IMPORT_SOURCE`` carries the source to the
    code generator, which places it once before the kernels."""
    return tirx.Evaluate(tirx.const(0, "int32"))


@register(ops.THREAD_ALLREDUCE.name)
def lower_thread_allreduce(call: TileOpCall, ctx: RuleContext):
    """The group's values combined, every thread of the group getting the result. A group of
    consecutive threads along threadIdx's x dimension of up to a warp (a power of two) takes
    XOR shuffles of consecutive lanes of one warp; in a 1-D block the last group may have
    fewer threads (``T.warp_reduce_*`` in a block of 48 threads: its second warp has 16,
    ``common.combine_lanes``). A group along any dimension (the threads that share the other
    coordinates: ``stride`` = the product of the dimensions below it apart in the block's
    linear thread number ``x + X * (y + Y * z)``) takes ``common.combine_strided``: shuffles
    within each warp, and across warps a shared slot per warp and the block's barrier."""
    threads = [int(t) for t in call.attrs["threads"].split(",")]
    dim = int(call.attrs["dim"])
    group = int(call.attrs.get("width", 0)) or threads[dim]
    dst = call.operands["dst"].buffer
    _, _, merge = reduce_parts(call.attrs["combiner"], str(dst.dtype))
    first = tirx.BufferStore(dst, tirx.Cast(str(dst.dtype), call.operands["value"]),
                             [tirx.const(0, "int32")])
    tx, running = thread_var(ctx)
    block = math.prod(threads)
    if dim == 0 and group <= keys.WARP and keys.WARP % group == 0 and \
            (threads[0] % group == 0 or threads[1:] == [1, 1]):
        combined = combine_lanes(dst, merge, group, tx, block)
    elif group != threads[dim]:
        raise KernelError(
            f"T.tvm_thread_allreduce along threadIdx.{'xyz'[dim]} in runs of {group} threads "
            f"(threads={tuple(threads)}): the CUDA backend reduces runs of up to {keys.WARP} "
            "threads (a power of two) along x that divide it or fill a 1-D block, else the "
            "whole dimension")
    else:
        stride = math.prod(threads[:dim])
        if running < block and warp_lanes(group, stride) < group:
            raise KernelError(
                f"T.tvm_thread_allreduce along threadIdx.{'xyz'[dim]} ({group} threads "
                f"{stride} apart, threads={tuple(threads)}) in a role of {running} threads "
                "(T.ws, or a branch on the thread index selecting warps): its group spans "
                "warps, which the CUDA backend combines through shared memory at the block's "
                "barrier, and every thread of the block must reach that; in a role it reduces "
                "a group inside one warp (a power of two of threads a power of two apart, "
                f"spanning up to {keys.WARP}): move the reduction out of the branch")
        combined = combine_strided(dst, merge, group, stride, tx, block)
    return tirx.SeqStmt([first, *combined]) if combined else first


@register(ops.CP_ASYNC.name)
def lower_ptx_cp_async(call: TileOpCall, ctx: RuleContext):
    """The calling thread's ``cp.async`` of the op's bytes (``tw_cp_async_bytes<N>``)."""
    _require(call, ctx, "cp.async", since=80)
    return intrinsics.call(f"tw_cp_async_bytes<{int(call.attrs['bytes'])}>",
                           call.operands["dst"], call.operands["src"])


@register(ops.CP_ASYNC_BARRIER_NOINC.name)
def lower_cp_async_barrier_noinc(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "mbarriers")
    return intrinsics.call("tw_cp_async_mbar_arrive_noinc",
                           intrinsics.shared_addr(call.operands["barrier"]))


@register(ops.PTX_COMMIT_GROUP.name)
def lower_ptx_commit_group(call: TileOpCall, ctx: RuleContext):
    _require(call, ctx, "cp.async", since=80)
    return intrinsics.cp_async_commit()


@register(ops.PTX_WAIT_GROUP.name)
def lower_ptx_wait_group(call: TileOpCall, ctx: RuleContext):
    """``cp.async.wait_group``; the table marks it as landing the copies, so barrier
    insertion puts the block's barrier between it and the reads of the copied tiles."""
    _require(call, ctx, "cp.async", since=80)
    return intrinsics.cp_async_wait(int(call.attrs["count"]))


@register(ops.SYNC_GRID.name)
def lower_sync_grid(call: TileOpCall, ctx: RuleContext):
    """``tw_grid_sync()`` (cooperative groups' grid barrier); codegen marks a kernel calling it
    (the intrinsic's role ``grid_sync``) for a cooperative launch."""
    _require(call, ctx, "grid-wide barriers of a cooperative launch", since=70)
    return intrinsics.call("tw_grid_sync")


@register(ops.FENCE_GPU.name)
def lower_fence_gpu(call: TileOpCall, ctx: RuleContext):
    """``__threadfence()`` (``tw_fence_gpu``) in every thread, then the block's barrier, on
    every architecture the backend targets."""
    return tirx.SeqStmt([intrinsics.call("tw_fence_gpu"), intrinsics.sync()])


@register(ops.NAMED_BARRIER.name)
def lower_named_barrier(call: TileOpCall, ctx: RuleContext):
    """``bar.sync id, count`` (``tw_bar_sync``); the frontend checked the id and the count."""
    return intrinsics.call("tw_bar_sync", tirx.const(int(call.attrs["barrier_id"]), "int32"),
                           tirx.const(int(call.attrs["arrive_count"]), "int32"))


@register(ops.WAIT_WGMMA.name)
def lower_wait_wgmma(call: TileOpCall, ctx: RuleContext):
    """``wgmma.wait_group``, an instruction of sm_90a alone (sm_100a's MMA is tcgen05's)."""
    if ctx.options.arch.name != "sm_90a":
        raise KernelError(f"T.wait_wgmma needs sm_90a (wgmma); the target architecture is "
                          f"{ctx.options.arch.name}: compile for 'cuda -arch=sm_90a'")
    return intrinsics.wgmma_wait(int(call.attrs["count"]))


@register(ops.PTX_LDMATRIX.name)
def lower_ptx_ldmatrix(call: TileOpCall, ctx: RuleContext):
    """``tw_ldmatrix<num, trans>(registers, row)`` (``include/tw_mma.h``): the warp's
    ldmatrix, this lane's row address and its registers."""
    _require(call, ctx, "ldmatrix and mma.sync", since=80)
    _whole_warps(call, ctx, "ldmatrix")
    trans = "true" if call.attrs["trans"] else "false"
    return intrinsics.call(f"tw_ldmatrix<{int(call.attrs['num'])}, {trans}>",
                           call.operands["dst"], call.operands["src"])


@register(ops.PTX_MMA.name)
def lower_ptx_mma(call: TileOpCall, ctx: RuleContext):
    """``tw_mma_sync(C, A, B)`` (``include/tw_mma.h``): one mma.sync of the warp, its form
    chosen by the element types of the fragments (the frontend checked them against the
    shape); ``tw_mma_sync_s4`` for int4 operands packed in int8 arrays."""
    _require(call, ctx, "ldmatrix and mma.sync", since=80)
    _whole_warps(call, ctx, "mma.sync")
    name = "tw_mma_sync_s4" if call.attrs["a_dtype"] == "int4" else "tw_mma_sync"
    return intrinsics.call(name, call.operands["C"], call.operands["A"], call.operands["B"])


def lower_warp_shuffle(call):
    """``T.tvm_warp_shuffle``: ``__shfl_sync(mask, value, lane, width)`` (any architecture)."""
    return tirx.call_extern(call.dtype, SHUFFLE_FUNCTIONS["shfl_sync"], *call.args)


INTRINSIC_RULES[ops.WARP_SHUFFLE] = lower_warp_shuffle
