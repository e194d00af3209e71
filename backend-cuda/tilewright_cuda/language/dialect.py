"""The CUDA dialect calls (Hopper and newer). Each checks its operands at the user's line and
emits one tile op (``tilewright_cuda.ops``); ``tilewright_cuda.rules.dialect`` lowers them."""

from __future__ import annotations

import tvm
from tilewright.ir import matrix_dims
from tilewright.language import Kernel as _PortableKernel
from tilewright.language import builder as B
from tilewright.language import sync_grid as core_sync_grid
from tilewright.language import sync_threads
from tilewright.language.buffer import (
    TileBuffer,
    as_int,
    declare,
    region_of,
    resolve,
    shape_str,
    squeeze,
    to_expr,
)
from tilewright.language.extension import DialectSupport
from tilewright.language.threads import (
    attr,
    comm_reducer,
    evaluate,
    get_thread_binding,
    thread_binding,
    tvm_thread_allreduce,
)
from tvm import tirx

from .. import intrinsics, ops
from ..keys import CLUSTER as CLUSTER_KEY
from ..keys import IMPORT_SOURCE as IMPORT_SOURCE_KEY
from ..keys import NO_SET_MAX_NREG as NO_SET_MAX_NREG_KEY
from ..keys import WARPGROUP
from ..keys import WS as WS_KEY

BARRIER_PREFIX = "mbarrier"

_D = DialectSupport(__file__)
error, _location, _emit = _D.error, _D.location, _D.emit
span = _D.span  # the source span of the user's line, for statements a dialect helper emits


# -- kernels and roles -----------------------------------------------------------------------
class Kernel(_PortableKernel):
    """``with T.Kernel(gx, gy, threads=128, prelude=code) as (bx, by):`` — the portable kernel;
    ``prelude`` (TileLang's) is CUDA device code of the user's for :func:`call_extern`, placed
    before the kernel as :func:`import_source` places it."""

    def __init__(self, *grid, threads=128, prelude=None, **options):
        super().__init__(*grid, threads=threads, **options)
        self.prelude = prelude

    def __enter__(self):
        result = super().__enter__()
        if self.prelude is not None:
            import_source(self.prelude)
        return result


class ClusterKernel(Kernel):
    """``with T.ClusterKernel(gx, gy, threads=256, cluster_dims=(2, 1)) as (bx, by):`` — a
    kernel whose blocks are launched in thread-block clusters (``__cluster_dims__``)."""

    KEYWORDS = ("threads", "prelude", "cluster_dims")

    def __init__(self, *grid, cluster_dims=(1, 1, 1), threads=128, **options):
        dims = cluster_dims if isinstance(cluster_dims, (tuple, list)) else (cluster_dims,)
        if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d > 0 for d in dims):
            raise error(f"T.ClusterKernel cluster_dims must be 1 to 3 positive ints, got "
                        f"{cluster_dims!r}")
        self.cluster_dims = tuple(dims) + (1,) * (3 - len(dims))
        size = self.cluster_dims[0] * self.cluster_dims[1] * self.cluster_dims[2]
        if size > 8:
            raise error(f"T.ClusterKernel: a cluster of {size} blocks is above the portable "
                        "limit of 8 blocks")
        super().__init__(*grid, threads=threads, **options)
        for axis, (g, c) in enumerate(zip(self.grid, self.cluster_dims)):
            g = as_int(g)
            if isinstance(g, int) and g % c:
                raise error(f"T.ClusterKernel: grid dimension {axis} ({g}) is not a multiple of "
                            f"cluster dimension {c}")
        if len(self.grid) < 3 and any(c != 1 for c in self.cluster_dims[len(self.grid):]):
            raise error(f"T.ClusterKernel: cluster_dims {cluster_dims} has more non-unit "
                        f"dimensions than the grid ({len(self.grid)})")

    def __enter__(self):
        result = super().__enter__()
        builder = B.current("T.ClusterKernel")
        builder.kernel_annotations[CLUSTER_KEY] = list(self.cluster_dims)
        _emit(ops.CLUSTER.name, {}, {"dims": ",".join(map(str, self.cluster_dims))})
        return result


class ws:  # noqa: N801 - TileLang's name
    """``with T.ws(1):`` — code only warpgroup 1 (threads 128-255) runs; ``T.ws(0, 1)`` two
    groups. Inside, tile ops are spread over the role's threads, and barriers the role needs
    are named barriers of its threads only. Roles hand data over with mbarriers."""

    def __init__(self, *groups):
        if not groups or not all(isinstance(g, int) and g >= 0 for g in groups):
            raise error(f"T.ws takes warpgroup indices (non-negative ints), got {groups!r}")
        ordered = sorted(set(groups))
        if ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise error(f"T.ws warpgroups must be consecutive, got {groups!r}")
        self.groups = ordered

    def __enter__(self):
        builder = _D.kernel_builder("T.ws")
        if builder.enclosing("cuda_ws") is not None:
            raise error("T.ws blocks cannot be nested")
        threads = 1
        for t in builder.threads:
            threads *= t
        if threads % WARPGROUP or (self.groups[-1] + 1) * WARPGROUP > threads:
            raise error(f"T.ws({', '.join(map(str, self.groups))}) needs warpgroups of "
                        f"{WARPGROUP} threads up to thread {(self.groups[-1] + 1) * WARPGROUP}; "
                        f"the kernel has threads={threads}")
        self._span = B.span_of(_location())
        self._frame = builder.open("cuda_ws")
        _emit(ops.WS.name, {}, {"groups": ",".join(map(str, self.groups))})

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.ws")
        body = builder.close(self._frame)
        if exc_type is None:
            lo, hi = self.groups[0] * WARPGROUP, (self.groups[-1] + 1) * WARPGROUP
            builder.emit(tirx.AttrStmt(tirx.IntImm("int32", 0), WS_KEY,
                                       tvm.ir.StringImm(f"{lo}:{hi}"), body, span=self._span))
        return False


# -- register budget -------------------------------------------------------------------------
def set_max_nreg(reg_count: int, is_inc: int):
    """``setmaxnreg``: this warpgroup's registers per thread become ``reg_count`` (24-256, a
    multiple of 8); ``is_inc=1`` raises the budget, ``0`` releases registers."""
    if not isinstance(reg_count, int) or not 24 <= reg_count <= 256 or reg_count % 8:
        raise error(f"T.set_max_nreg: reg_count must be a multiple of 8 in 24..256, got "
                    f"{reg_count!r}")
    _emit(ops.SET_MAX_NREG.name, {}, {"reg_count": reg_count, "is_inc": int(bool(is_inc))})


def inc_max_nreg(reg_count: int):
    """Raise this warpgroup's register budget to ``reg_count`` (``setmaxnreg.inc``)."""
    set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count: int):
    """Lower this warpgroup's register budget to ``reg_count`` (``setmaxnreg.dec``)."""
    set_max_nreg(reg_count, 0)


def no_set_max_nreg():
    """The kernel keeps one register budget for all its threads: the producer warpgroup that
    the software pipeline adds on sm_90a (a warp-specialised ``T.Pipelined`` loop fed by TMA)
    gives no registers to the compute threads (no ``setmaxnreg``). Anywhere in the kernel
    body."""
    builder = _D.kernel_builder("T.no_set_max_nreg")
    builder.kernel_annotations[NO_SET_MAX_NREG_KEY] = True
    _emit(ops.NO_SET_MAX_NREG.name, {})


def disable_warp_group_reg_alloc():
    """TileLang's other name of :func:`no_set_max_nreg`."""
    builder = _D.kernel_builder("T.disable_warp_group_reg_alloc")
    builder.kernel_annotations[NO_SET_MAX_NREG_KEY] = True
    _emit(ops.NO_SET_MAX_NREG.name, {}, what="T.disable_warp_group_reg_alloc")


# -- mbarriers -------------------------------------------------------------------------------
def alloc_barrier(arrive_count):
    """``mbars = T.alloc_barrier([128] * 4)``: shared-memory mbarriers, each expecting that
    many arrivals per phase; ``mbars[i]`` is one barrier. Initialised where allocated."""
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    if not counts or not all(isinstance(c, int) and 0 < c < (1 << 20) for c in counts):
        raise error(f"T.alloc_barrier takes a positive arrival count or a list of them, got "
                    f"{arrive_count!r}")
    builder = B.current("T.alloc_barrier")
    if not builder.in_kernel():
        raise error("T.alloc_barrier must be used inside 'with T.Kernel(...)'")
    if builder.enclosing("parallel", "serial", "pipelined", "cuda_ws") is not None:
        raise error("T.alloc_barrier must be at the top of the kernel body, outside loops and "
                    "T.ws roles (every thread takes part in the initialisation)")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(f"{BARRIER_PREFIX}_{n}", (len(counts),), "uint64", "shared.dyn")
    builder.emit(tirx.AllocBuffer(buf, span=B.span_of(_location())))
    region = resolve(region_of(TileBuffer(buf), "T.alloc_barrier"), None, "T.alloc_barrier")
    _emit(ops.INIT_BARRIERS.name, {"barriers": region}, {"counts": ",".join(map(str, counts))})
    return TileBuffer(buf)


def is_barrier_buffer(buffer) -> bool:
    return str(buffer.dtype) == "uint64" and str(buffer.scope()).startswith("shared") and \
        str(buffer.name).startswith(BARRIER_PREFIX)


def _barrier(value, what: str):
    """One barrier as an expression: ``mbars[i]``, or ``mbars`` when it holds one."""
    if isinstance(value, TileBuffer) and is_barrier_buffer(value.buffer):
        if value.shape != (1,):
            raise error(f"{what}: {value.name!r} holds {value.shape[0]} barriers; index it "
                        f"({value.name}[i])")
        return tirx.BufferLoad(value.buffer, [tirx.const(0, "int32")])
    if isinstance(value, tvm.ir.TensorLoad) and is_barrier_buffer(value.source):
        return value
    raise error(f"{what} takes a barrier from T.alloc_barrier (mbars[i]), got "
                f"{type(value).__name__}")


def mbarrier_arrive(mbarrier):
    """Every calling thread arrives once on ``mbarrier``."""
    _emit(ops.ARRIVE.name, {"barrier": _barrier(mbarrier, "T.mbarrier_arrive")})


def mbarrier_wait_parity(mbarrier, parity):
    """Wait until the phase of ``mbarrier`` with this parity (0 or 1) has completed."""
    _emit(ops.WAIT_PARITY.name, {"barrier": _barrier(mbarrier, "T.mbarrier_wait_parity"),
                                 "parity": to_expr(parity, "int32")})


def mbarrier_expect_tx(mbarrier, tx):
    """One thread adds ``tx`` bytes to what ``mbarrier``'s current phase waits for."""
    _emit(ops.EXPECT_TX.name, {"barrier": _barrier(mbarrier, "T.mbarrier_expect_tx"),
                               "bytes": to_expr(tx, "int32")})


def barrier_arrive(barrier_id):
    """TileLang's other name of :func:`mbarrier_arrive` (lowered as ``T.mbarrier_arrive``)."""
    _emit(ops.ARRIVE.name, {"barrier": _barrier(barrier_id, "T.barrier_arrive")},
          what="T.barrier_arrive")


def barrier_wait(barrier_id, parity=None):
    """TileLang's other name of :func:`mbarrier_wait_parity` (lowered as
    ``T.mbarrier_wait_parity``): wait for the phase of ``barrier_id`` with this parity."""
    if parity is None:
        raise error("T.barrier_wait needs the phase parity to wait for: "
                    "T.barrier_wait(mbars[i], parity)")
    _emit(ops.WAIT_PARITY.name, {"barrier": _barrier(barrier_id, "T.barrier_wait"),
                                 "parity": to_expr(parity, "int32")}, what="T.barrier_wait")


# -- TMA -------------------------------------------------------------------------------------
def tma_copy(src, dst, barrier=None):
    """A tile through the Tensor Memory Accelerator, issued by one thread of the block (or of
    the T.ws role). Global -> shared: the barrier's expected bytes are raised and the load
    completes on ``barrier`` (wait with T.mbarrier_wait_parity; no arrival is made for the
    caller). Shared -> global: a TMA store in a commit group (T.tma_store_wait to reuse the
    shared tile). Descriptors are built by the compiler and passed with the launch."""
    src_ref, dst_ref = region_of(src, "T.tma_copy source"), region_of(dst, "T.tma_copy "
                                                                            "destination")
    if all(e is not None for e in src_ref[2]):
        src_r = resolve(src_ref, None, "T.tma_copy")
        dst_r = resolve(dst_ref, squeeze(src_r.extents) or (1,), "T.tma_copy destination")
    else:
        dst_r = resolve(dst_ref, None, "T.tma_copy")
        src_r = resolve(src_ref, squeeze(dst_r.extents) or (1,), "T.tma_copy source")
    scopes = (str(src_r.buffer.scope()), str(dst_r.buffer.scope()))
    if scopes[0] == "global" and scopes[1].startswith("shared"):
        if barrier is None:
            raise error("T.tma_copy from global to shared memory needs barrier=mbars[i]: the "
                        "load completes on that mbarrier")
        bar = _barrier(barrier, "T.tma_copy barrier")
    elif scopes[0].startswith("shared") and scopes[1] == "global":
        if barrier is not None:
            raise error("T.tma_copy from shared to global memory takes no barrier: wait for "
                        "stores with T.tma_store_wait()")
        bar = tirx.const(0, "int32")
    else:
        raise error(f"T.tma_copy copies global <-> shared memory; got {src_r.buffer.name!r} "
                    f"({scopes[0]}) -> {dst_r.buffer.name!r} ({scopes[1]})")
    if [as_int(e) for e in squeeze(src_r.extents)] != [as_int(e)
                                                        for e in squeeze(dst_r.extents)]:
        raise error(f"T.tma_copy shape mismatch: source {src_r.buffer.name!r} region has shape "
                    f"{shape_str(src_r.extents)} but destination {dst_r.buffer.name!r} region "
                    f"has shape {shape_str(dst_r.extents)}")
    _emit(ops.TMA_COPY.name, {"src": src_r, "dst": dst_r, "barrier": bar})


def tma_store_wait(count: int = 0):
    """Wait until at most ``count`` TMA store groups of this thread still read shared memory,
    then synchronise the block (or role) so the shared tiles can be overwritten."""
    if not isinstance(count, int) or count < 0:
        raise error(f"T.tma_store_wait count must be a non-negative int, got {count!r}")
    _emit(ops.TMA_STORE_WAIT.name, {}, {"count": count})


def fence_proxy_async():
    """``fence.proxy.async``: shared-memory writes made by threads become visible to TMA."""
    _emit(ops.FENCE_PROXY_ASYNC.name, {})


def fence_gpu():
    """``__threadfence()`` in every thread of the block, then the block's barrier: whatever
    the block's threads wrote before it is seen by every thread of the GPU before anything
    any of them does after it. A block that hands results in global memory to another block
    calls it between its stores and the ticket one of its threads takes
    (``T.atomic_add(..., return_prev=True)``), and the block whose ticket says the others
    are done calls it again before it reads what they wrote (the CUDA programming guide's
    ``__threadfence`` example: split-K's last slice adds the others' partial sums). Every
    thread of the block must reach it (a barrier): not under a condition on the thread
    index."""
    _emit(ops.FENCE_GPU.name, {})


# -- cp.async and hand-issued wgmma -----------------------------------------------------------
CP_ASYNC_BYTES = (4, 8, 16)


def _element_pointer(ptr, what: str, scope: str):
    """The element a ``T.access_ptr`` pointer names, checked to be in ``scope`` memory."""
    if not intrinsics.is_address_of(ptr) or not isinstance(ptr.args[0], tvm.ir.TensorLoad):
        raise error(f"{what} takes a pointer from T.access_ptr(buf[i, ...], ...), got "
                    f"{type(ptr).__name__}")
    load = ptr.args[0]
    if not str(load.source.scope()).startswith(scope):
        raise error(f"{what} must be in {scope} memory; {load.source.name!r} is in "
                    f"{load.source.scope()}")
    return load


def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems):
    """``T.ptx_cp_async(T.access_ptr(smem[i, j], "w", n), T.access_ptr(gmem[...], "r", n),
    n)``: the calling thread copies ``n`` elements (4, 8 or 16 bytes) from global to shared
    memory with ``cp.async`` (sm_80+), asynchronously: the copy has landed once the mbarrier
    phase that :func:`cp_async_barrier_noinc` arrives on completes, or after a
    :func:`ptx_commit_group` that takes it and the :func:`ptx_wait_group` that retires its
    group. A kernel whose copies nothing waits for is refused, and so is a read of a tile
    whose copies no wait follows yet. Both elements must be aligned to the copy's size."""
    dst = _element_pointer(dst_access_ptr, "T.ptx_cp_async destination", "shared")
    src = _element_pointer(src_access_ptr, "T.ptx_cp_async source", "global")
    n = as_int(num_elems)
    if not isinstance(n, int):
        raise error(f"T.ptx_cp_async copies a constant number of elements, got {num_elems!r}")
    if dst.source.dtype.bits != src.source.dtype.bits:
        raise error(f"T.ptx_cp_async copies bits: {src.source.name!r} ({src.source.dtype}) and "
                    f"{dst.source.name!r} ({dst.source.dtype}) differ in width")
    size = n * dst.source.dtype.bits // 8
    if size not in CP_ASYNC_BYTES:
        raise error(f"T.ptx_cp_async: {n} elements of {dst.source.dtype} are {size} bytes; "
                    f"cp.async copies {', '.join(map(str, CP_ASYNC_BYTES))} bytes")
    _emit(ops.CP_ASYNC.name, {"dst": dst_access_ptr, "src": src_access_ptr}, {"bytes": size})


# -- per-thread tensor-core primitives (TileLang's T.ptx_ldmatrix / T.ptx_mma) ----------------
LDMATRIX_NUMS = (1, 2, 4)
# mma.sync forms: (shape, A/B type, accumulator type) by PTX type names, as TileLang's emitter
# spells them -> (the element type of the A/B arrays, of the accumulators, 32-bit registers of
# A and of B); int4 operands are int8 arrays of two values a byte, the first in the low bits
MMA_FORMS = {
    ("m16n8k16", "fp16", "fp32"): ("float16", "float32", 4, 2),
    ("m16n8k16", "fp16", "fp16"): ("float16", "float16", 4, 2),
    ("m16n8k16", "bf16", "fp32"): ("bfloat16", "float32", 4, 2),
    ("m16n8k32", "int8", "int32"): ("int8", "int32", 4, 2),
    ("m16n8k32", "int4", "int32"): ("int8", "int32", 2, 1),
}


def _constant(value, what: str):
    n = as_int(value)
    if not isinstance(n, int):
        raise error(f"{what} must be a constant, got {value!r}")
    return n


def _size(buf):
    dims = [as_int(d) for d in buf.shape]
    if not all(isinstance(d, int) for d in dims):
        return None
    size = 1
    for d in dims:
        size *= d
    return size


def _fits(load, count: int, what: str):
    """A thread-local element ``load`` from which ``count`` elements are touched: within its
    1-D array when the index is a constant."""
    buf = load.source
    if len(buf.shape) != 1:
        raise error(f"{what} takes a 1-D thread-local array (T.alloc_local((n,), ...)); "
                    f"{buf.name!r} has shape {shape_str(buf.shape)}")
    start, size = as_int(load.indices[0]), _size(buf)
    if isinstance(start, int) and size is not None and start + count > size:
        raise error(f"{what}: {count} elements from {buf.name}[{start}] pass the end of "
                    f"{buf.name!r} ({size} elements)")


def ptx_ldmatrix(trans, num, src_access_ptr, dst_access_ptr):
    """``T.ptx_ldmatrix(trans, num, T.access_ptr(S[r, c], "r"), T.access_ptr(frag[i], "w"))``:
    ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` of the calling warp (sm_80+;
    every lane of the warp calls it together). Lane ``l`` gives the address of row ``l % 8``
    of 8x8 matrix ``l // 8`` (16 contiguous bytes of a shared tile, 16-byte aligned); its
    ``num`` 32-bit registers (matrix ``j``: row ``l // 4``, the pair of 16-bit columns
    ``2 (l % 4)``, or that pair of rows of column ``l // 4`` with ``trans``) land in the
    thread-local array from the given element on. 16-bit elements, or 8-bit ones without
    ``trans``."""
    t = _constant(trans, "T.ptx_ldmatrix trans")
    n = _constant(num, "T.ptx_ldmatrix num")
    if n not in LDMATRIX_NUMS:
        raise error(f"T.ptx_ldmatrix loads {', '.join(map(str, LDMATRIX_NUMS))} matrices "
                    f"(.x1, .x2, .x4), got num={n}")
    src = _element_pointer(src_access_ptr, "T.ptx_ldmatrix source", "shared")
    dst = _element_pointer(dst_access_ptr, "T.ptx_ldmatrix destination", "local")
    if str(dst.source.scope()) != "local":
        raise error(f"T.ptx_ldmatrix destination must be a thread's registers (T.alloc_local); "
                    f"{dst.source.name!r} is in {dst.source.scope()}")
    bits = dst.source.dtype.bits
    if src.source.dtype.bits != bits or bits not in (8, 16):
        raise error(f"T.ptx_ldmatrix moves 16-bit (or, without trans, 8-bit) elements into an "
                    f"array of the same width: {src.source.name!r} is {src.source.dtype}, "
                    f"{dst.source.name!r} is {dst.source.dtype}")
    if t and bits != 16:
        raise error(f"T.ptx_ldmatrix with trans transposes 16-bit elements; "
                    f"{src.source.name!r} is {src.source.dtype}: load 8-bit operands "
                    "k-contiguous, without trans")
    _fits(dst, n * 32 // bits, "T.ptx_ldmatrix destination")
    _emit(ops.PTX_LDMATRIX.name, {"src": src_access_ptr, "dst": dst_access_ptr},
          {"num": n, "trans": bool(t)})


def _fragment(data, offset, role: str):
    """The element ``offset`` of the thread-local array ``data`` (its ``.data``, or the
    buffer)."""
    if isinstance(data, TileBuffer):
        buf = data.buffer
    elif isinstance(getattr(data, "op", None), tvm.ir.Op) and data.op.name == "tirx.buffer_data":
        buf = data.args[0]
    else:
        raise error(f"T.ptx_mma operand {role} must be a thread-local array or its .data, got "
                    f"{type(data).__name__}")
    if str(buf.scope()) != "local":
        raise error(f"T.ptx_mma operand {role} must be in registers (T.alloc_local); "
                    f"{buf.name!r} is in {buf.scope()}")
    return tirx.BufferLoad(buf, [to_expr(offset, "int32")])


def ptx_mma(dtype, shape, a_layout, b_layout, a_precision, b_precision, c_precision,  # noqa: PLR0913
            a_data, a_offset, b_data, b_offset, c_data, c_offset, saturate=False):
    """``T.ptx_mma(accum_dtype, "m16n8k16", "row", "col", "fp16", "fp16", "fp32", A.data,
    a_off, B.data, b_off, C.data, c_off, False)`` (TVM's argument order): one
    ``mma.sync.aligned`` of the calling warp (sm_80+; every lane calls it together) on
    thread-local arrays: the 4 accumulators from ``C[c_off]`` += the A fragment (4 32-bit
    registers from ``A[a_off]``) times the B fragment (2 registers from ``B[b_off]``), in the
    PTX fragment layouts. Forms: m16n8k16 fp16 x fp16 -> fp32 or fp16, bf16 x bf16 -> fp32;
    m16n8k32 int8 x int8 -> int32, and int4 x int4 -> int32 (A 2 registers, B 1, of int8
    arrays holding two values a byte); A row-major, B column-major, no saturation."""
    form = (str(shape), str(a_precision), str(c_precision))
    if form not in MMA_FORMS or str(b_precision) != str(a_precision):
        known = "; ".join(f"{s} {a} x {a} -> {c}" for s, a, c in MMA_FORMS)
        raise error(f"T.ptx_mma: {shape} {a_precision} x {b_precision} -> {c_precision} is not "
                    f"an mma.sync form of the CUDA dialect (it has {known})")
    if (str(a_layout), str(b_layout)) != ("row", "col"):
        raise error(f"T.ptx_mma takes A 'row' and B 'col' (mma.sync's only layouts for these "
                    f"forms), got {a_layout!r}, {b_layout!r}")
    if _constant(saturate, "T.ptx_mma saturate"):
        raise error("T.ptx_mma: saturation (.satfinite) is not supported; pass False")
    operand_dtype, accum, a_registers, b_registers = MMA_FORMS[form]
    if str(dtype) != accum:
        raise error(f"T.ptx_mma: the result type {dtype} is not the accumulator type {accum} "
                    f"of {c_precision}")
    loads = {"A": _fragment(a_data, a_offset, "A"), "B": _fragment(b_data, b_offset, "B"),
             "C": _fragment(c_data, c_offset, "C")}
    for role, load in loads.items():
        want = accum if role == "C" else operand_dtype
        if str(load.source.dtype) != want:
            raise error(f"T.ptx_mma {form[0]} {form[1]} -> {form[2]}: operand {role} "
                        f"{load.source.name!r} is {load.source.dtype}, not {want}")
        registers = a_registers if role == "A" else b_registers
        count = 4 if role == "C" else registers * 32 // load.source.dtype.bits
        _fits(load, count, f"T.ptx_mma operand {role}")
    _emit(ops.PTX_MMA.name, {r: tirx.address_of(load) for r, load in loads.items()},
          {"shape": form[0], "a_dtype": "int4" if form[1] == "int4" else operand_dtype,
           "c_dtype": accum})


def cp_async_barrier_noinc(barrier):
    """``cp.async.mbarrier.arrive.noinc``: the calling thread arrives on ``barrier`` once
    every ``cp.async`` it issued before has landed (the arrival counts towards the barrier's
    count: each copying thread is one of its arrivals). Wait for the phase with
    T.mbarrier_wait_parity, then read the copied tiles."""
    _emit(ops.CP_ASYNC_BARRIER_NOINC.name,
          {"barrier": _barrier(barrier, "T.cp_async_barrier_noinc")})


def ptx_commit_group():
    """``cp.async.commit_group``: the calling thread's :func:`ptx_cp_async` copies issued
    since its last commit become one group, oldest first."""
    _emit(ops.PTX_COMMIT_GROUP.name, {})


def ptx_wait_group(num):
    """``cp.async.wait_group num``: the calling thread waits until at most its ``num`` newest
    committed groups are in flight (``0``: every committed copy has landed). The block's
    barrier before the copied tiles are read is inserted."""
    n = as_int(num)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise error(f"T.ptx_wait_group takes the number of groups left in flight, a constant "
                    f"int >= 0 (cp.async.wait_group's immediate), got {num!r}")
    _emit(ops.PTX_WAIT_GROUP.name, {}, {"count": n})


def sync_grid():
    """A barrier of the whole grid: every thread of every block arrives before any goes on,
    and the global memory writes made before it are visible after it. The kernel is launched
    cooperatively (all its blocks resident at once); a grid larger than the GPU holds at once
    is refused when the kernel is called, naming the grid and the limit. Not in a
    ``T.ClusterKernel`` (a cooperative launch has no clusters)."""
    if CLUSTER_KEY in B.current("T.sync_grid").kernel_annotations:
        raise error("T.sync_grid needs a cooperative launch, which has no thread-block "
                    "clusters: use T.Kernel, not T.ClusterKernel")
    core_sync_grid()


def _gemm_matrix(value, what: str):
    region = resolve(region_of(value, f"T.wgmma_gemm {what}"), None, f"T.wgmma_gemm {what}")
    dims = matrix_dims(region.extents)
    if dims is None:
        raise error(f"T.wgmma_gemm operand {what} ({region.buffer.name!r}) must be a 2-D tile, "
                    f"got shape {shape_str(region.extents)}")
    return region, [as_int(region.extents[d]) for d in dims]


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=None,  # noqa: N803
               clear_accum=False):
    """``C += op(A) @ op(B)`` issued as one asynchronous wgmma group of each warpgroup
    (sm_90a): A and B shared tiles (or A a 16-bit fragment the compiler keeps in registers),
    C a register accumulator in the wgmma layout ``T.gemm`` gives it on sm_90a. The call
    returns at once; :func:`wait_wgmma` retires the groups, and C (and a register A) may be
    touched only after that: the compiler refuses a kernel that does so sooner. A gemm that
    does not fit wgmma is an error, not a slower form. ``clear_accum`` may be a condition
    known at run time (``j == 0``): the group's first wgmma then takes it as its scale-d
    predicate (D = A B instead of D = A B + D), so nothing touches C outside the group."""
    a, (a0, a1) = _gemm_matrix(A, "A")
    b, (b0, b1) = _gemm_matrix(B, "B")
    c, (c0, c1) = _gemm_matrix(C, "C")
    m, ka = (a1, a0) if transpose_A else (a0, a1)
    kb, n = (b1, b0) if transpose_B else (b0, b1)
    if ka != kb or (m, n) != (c0, c1):
        raise error(f"T.wgmma_gemm shape mismatch: op(A) {a.buffer.name!r} is ({m}, {ka}), "
                    f"op(B) {b.buffer.name!r} ({kb}, {n}), C {c.buffer.name!r} ({c0}, {c1})")
    if not isinstance(clear_accum, bool):  # known at run time (j == 0): wgmma's scale-d
        clear_accum = to_expr(clear_accum)
        if str(clear_accum.ty) != "bool":
            raise error(f"T.wgmma_gemm clear_accum must be a bool or a condition, got "
                        f"{clear_accum!r} of type {clear_accum.ty}")
        if isinstance(clear_accum, tirx.IntImm):
            clear_accum = bool(clear_accum.value)
    name = getattr(policy, "value", policy) or "square"
    _emit(ops.WGMMA_GEMM.name, {"A": a, "B": b, "C": c},
          {"transpose_A": bool(transpose_A), "transpose_B": bool(transpose_B),
           "policy": str(name), "clear_accum": clear_accum})


def wait_wgmma(id: int):  # noqa: A002 - TileLang's name
    """``wgmma.wait_group id``: wait until at most ``id`` of this warpgroup's wgmma groups
    (:func:`wgmma_gemm`, one per call, oldest first) are still in flight."""
    if not isinstance(id, int) or isinstance(id, bool) or not 0 <= id <= 7:
        raise error(f"T.wait_wgmma takes the number of groups left in flight, 0..7, got "
                    f"{id!r}")
    _emit(ops.WAIT_WGMMA.name, {}, {"count": id})


def tvm_warp_shuffle(mask, value, lane, width, warp_size):
    """``T.tvm_warp_shuffle(mask, value, lane, width, warp_size)`` (TVM's, as TileLang writes
    it): the ``value`` that lane ``lane`` (modulo ``width``) of the calling thread's group of
    ``width`` lanes holds, ``__shfl_sync``. An expression; every thread of ``mask`` must call
    it together. ``warp_size`` is 32; ``width`` a power of two up to 32."""
    if as_int(warp_size) != 32:
        raise error(f"T.tvm_warp_shuffle: warp_size is 32 on CUDA, got {warp_size!r}")
    w = as_int(width)
    if not isinstance(w, int) or not 1 <= w <= 32 or w & (w - 1):
        raise error(f"T.tvm_warp_shuffle: width must be a power of two up to 32, got "
                    f"{width!r}")
    value = to_expr(value)
    return tirx.call_intrin(str(value.ty), ops.WARP_SHUFFLE, to_expr(mask, "uint32"), value,
                            to_expr(lane, "int32"), to_expr(w, "int32"))


# -- the user's CUDA source -------------------------------------------------------------------
ACCESS_MASKS = ("r", "w", "rw")


def access_ptr(value, access_mask: str = "r", extent=None):
    """``T.access_ptr(buf, "r")``: a pointer to the first element of a buffer, or with an
    element (``T.access_ptr(KV[b, i, 0], "r", 8)``) to that element, for a device function
    called with :func:`call_extern`. ``access_mask`` says what the callee does with the
    elements (``"r"``, ``"w"``, ``"rw"``); ``extent``, how many it touches from there (checked
    against the buffer's size when known)."""
    if access_mask not in ACCESS_MASKS:
        raise error(f"T.access_ptr access_mask must be one of {', '.join(ACCESS_MASKS)}, got "
                    f"{access_mask!r}")
    if isinstance(value, TileBuffer):
        buf, indices = value.buffer, [tirx.const(0, "int32") for _ in value.shape]
    elif isinstance(value, tvm.ir.TensorLoad):
        buf, indices = value.source, list(value.indices)
    else:
        raise error(f"T.access_ptr takes a buffer or one of its elements (buf[i, j]), got "
                    f"{type(value).__name__}")
    dims = [as_int(d) for d in buf.shape]
    size = None
    if all(isinstance(d, int) for d in dims):
        size = 1
        for d in dims:
            size *= d
    count = None if extent is None else as_int(extent)
    if isinstance(count, int) and (count <= 0 or (size is not None and count > size)):
        raise error(f"T.access_ptr extent {count} is outside 1..{size} (the size of "
                    f"{buf.name!r})")
    return tirx.address_of(tirx.BufferLoad(buf, indices))


def call_extern(*args, dtype=None):
    """``T.call_extern("handle", "decode", T.access_ptr(a, "r"), ...)`` (TVM's order: the
    result's type, the function's name, its arguments) or ``T.call_extern("decode", ...,
    dtype=...)``: every calling thread calls the device function ``decode`` of the kernel's
    CUDA source (:func:`import_source`) or of CUDA's headers, here, in program order. The call
    is a statement: what the function returns (of type ``dtype``) is discarded; results come
    back through pointers (:func:`access_ptr`). The compiler does not know what the function
    does: it takes every element whose address is passed as read and written."""
    args = list(args)
    if dtype is None:
        if len(args) < 2:
            raise error("T.call_extern takes the result's type and the function's name, then "
                        "its arguments: T.call_extern('handle', 'name', *args)")
        args = args[1:]  # TVM's order: the result's type first
    if not args or not isinstance(args[0], str) or not args[0].isidentifier():
        raise error(f"T.call_extern: the function's name must be a C identifier string, got "
                    f"{(args[0] if args else None)!r}")
    name, values = args[0], []
    for i, arg in enumerate(args[1:]):
        if isinstance(arg, TileBuffer):
            raise error(f"T.call_extern({name!r}): argument {i} is the buffer {arg.name!r}; "
                        f"pass a pointer to it, T.access_ptr({arg.name}, 'r')")
        if isinstance(arg, str):
            raise error(f"T.call_extern({name!r}): argument {i} is a string; the arguments "
                        "are numbers, expressions and pointers (T.access_ptr)")
        values.append(to_expr(arg))
    # a statement: whatever the function returns (``dtype``) is discarded
    _emit(ops.CALL_EXTERN.name, {"call": intrinsics.user_call("void", name, *values)})


def import_source(source: str):
    """``T.import_source(code)``: CUDA device code of the user's (``__device__`` functions,
    templates) placed once before the kernel in the generated file, for :func:`call_extern`.
    The same text imported again (a macro used twice, two kernels) is placed once."""
    if not isinstance(source, str) or not source.strip():
        raise error(f"T.import_source takes CUDA source text (a non-empty str), got "
                    f"{type(source).__name__}")
    builder = _D.kernel_builder("T.import_source")
    sources = builder.kernel_annotations.setdefault(IMPORT_SOURCE_KEY, [])
    if source not in sources:
        sources.append(source)
    _emit(ops.IMPORT_SOURCE.name, {}, {"chars": len(source)})


__all__ = ["ClusterKernel", "access_ptr", "alloc_barrier", "attr", "barrier_arrive",
           "barrier_wait", "call_extern", "comm_reducer", "cp_async_barrier_noinc",
           "dec_max_nreg",
           "disable_warp_group_reg_alloc", "evaluate", "fence_gpu", "fence_proxy_async",
           "get_thread_binding", "import_source", "inc_max_nreg", "mbarrier_arrive",
           "mbarrier_expect_tx", "mbarrier_wait_parity", "no_set_max_nreg", "ptx_commit_group",
           "ptx_cp_async", "ptx_wait_group", "set_max_nreg", "sync_grid", "sync_threads",
           "thread_binding", "tma_copy", "tma_store_wait",
           "tvm_thread_allreduce", "tvm_warp_shuffle", "wait_wgmma", "wgmma_gemm", "ws"]
