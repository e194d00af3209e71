"""The CUDA dialect's tile ops, registered once in the core's schema registry.

Every op carries ``dialect="cuda"`` and ``backends=("cuda",)``: the core refuses them on any
other backend at compile time, naming the op. Names are the user's (``T.tma_copy`` is op
``tma_copy``) so that error messages quote what the kernel wrote.
"""

from __future__ import annotations

from tilewright.ir import (
    BLOCK_VOTE_OPS,
    NAMED_BARRIER,
    SYNC_GRID,
    THREAD_ALLREDUCE,  # noqa: F401 - the core's op; rules.dialect lowers it
    THREAD_BINDING,
    WARP_OPS,
)
from tilewright.ir.schema import (
    Attr,
    Operand,
    TileOpSchema,
    register_intrinsic,
    register_tile_op,
    register_tvm_op,
)

# The address of a shared-memory element (a barrier, a TMA destination). Kept apart from
# ``tirx.address_of`` until the shared pool is placed: insert_sync reads address_of as a write.
SHARED_ADDR = "tw.cuda.shared_addr"
# A TMA descriptor: (global tensor element 0, box extents innermost first..., swizzle bytes);
# replaced by a reference to a deduplicated kernel parameter when the kernel is finished.
TENSORMAP = "tw.cuda.tensormap"
# A call of the user's device function (T.call_extern): (function name, arguments...). Kept
# apart from ``call_extern`` (whose names the intrinsics table must know) until the kernel is
# finished: the analyses see an opaque call, each element address it takes written.
USER_CALL = "tw.cuda.user_call"
register_tvm_op(SHARED_ADDR, "the address of a shared-memory element (CUDA dialect)")
register_tvm_op(USER_CALL, "a call of a device function of the user's CUDA source "
                "(CUDA dialect)")
register_tvm_op(TENSORMAP, "a TMA tensor map of a global tensor (CUDA dialect)")


def _op(name: str, operands=(), attrs=(), doc: str = "") -> TileOpSchema:
    return register_tile_op(TileOpSchema(name, tuple(operands), tuple(attrs), doc,
                                         dialect="cuda", backends=("cuda",)))


_BAR = Operand("barrier", "read", kind="expr")
TMA_COPY = _op("tma_copy", (Operand("src", "read"), Operand("dst", "write"), _BAR), (),
               "a tile global -> shared (expect_tx + TMA load completing on the barrier) or "
               "shared -> global (TMA store + commit group), issued by one thread")
INIT_BARRIERS = _op("alloc_barrier", (Operand("barriers", "write"),),
                    (Attr("counts", str, ""),),
                    "initialise an array of mbarriers with their arrival counts")
ARRIVE = _op("mbarrier_arrive", (_BAR,), (), "every calling thread arrives on the mbarrier")
WAIT_PARITY = _op("mbarrier_wait_parity", (_BAR, Operand("parity", "read", kind="expr")), (),
                  "wait until the mbarrier phase of the given parity has completed")
EXPECT_TX = _op("mbarrier_expect_tx", (_BAR, Operand("bytes", "read", kind="expr")), (),
                "one thread raises the mbarrier's expected transaction bytes")
TMA_STORE_WAIT = _op("tma_store_wait", (), (Attr("count", int, 0),),
                     "wait until at most COUNT TMA store groups still read shared memory")
FENCE_PROXY_ASYNC = _op("fence_proxy_async", (), (),
                        "order generic-proxy shared-memory writes before async-proxy reads")
SET_MAX_NREG = _op("set_max_nreg", (), (Attr("reg_count", int, 0), Attr("is_inc", int, 0)),
                   "setmaxnreg: raise (is_inc=1) or lower the warpgroup's register budget")
WS = _op("ws", (), (Attr("groups", str, ""),),
         "start of a warp-specialised role: code run by the listed warpgroups only")
CLUSTER = _op("ClusterKernel", (), (Attr("dims", str, ""),),
              "the kernel's blocks form thread-block clusters of the given dims")

NO_SET_MAX_NREG = _op("no_set_max_nreg", (), (),
                      "the warp-specialised pipeline moves no registers between its roles")
CALL_EXTERN = _op("call_extern", (Operand("call", "read", kind="expr"),), (),
                  "a call of a device function of the user's CUDA source (T.import_source) or "
                  "of CUDA's, made by every calling thread; its value is discarded")
IMPORT_SOURCE = _op("import_source", (), (Attr("chars", int, 0),),
                    "the user's CUDA source, placed once before the kernel in the generated "
                    "file (the text travels in the kernel's annotation keys.IMPORT_SOURCE)")
CP_ASYNC = _op("ptx_cp_async", (Operand("dst", "write", kind="expr"),
                                 Operand("src", "read", kind="expr")),
               (Attr("bytes", int, 16),),
               "one thread's cp.async of BYTES (4, 8 or 16) from a global element to a shared "
               "element (pointers from T.access_ptr); landed at the mbarrier phase that "
               "T.cp_async_barrier_noinc arrives on, or at the T.ptx_wait_group after the "
               "T.ptx_commit_group that takes it")
CP_ASYNC_BARRIER_NOINC = _op("cp_async_barrier_noinc", (_BAR,), (),
                             "cp.async.mbarrier.arrive.noinc: the mbarrier receives the calling "
                             "thread's arrival once its earlier cp.async copies have landed")
PTX_COMMIT_GROUP = _op("ptx_commit_group", (), (),
                       "cp.async.commit_group: the calling thread's T.ptx_cp_async copies "
                       "since its last commit become one group")
PTX_WAIT_GROUP = _op("ptx_wait_group", (), (Attr("count", int, 0),),
                     "cp.async.wait_group COUNT: the calling thread waits until at most its "
                     "COUNT newest committed groups are in flight; the copies of the others "
                     "have landed")
FENCE_GPU = _op("fence_gpu", (), (),
                "__threadfence() in every thread of the block, then the block's barrier: the "
                "block's memory accesses before it are ordered before its accesses after it "
                "for every thread of the GPU")
WGMMA_GEMM = _op("wgmma_gemm", (Operand("A", "read"), Operand("B", "read"),
                                Operand("C", "readwrite")),
                 (Attr("transpose_A", bool, False), Attr("transpose_B", bool, False),
                  Attr("policy", str, "square"), Attr("clear_accum", bool, False)),
                 "C += op(A) @ op(B) as one asynchronous wgmma group of the warpgroup "
                 "(sm_90a), retired by T.wait_wgmma; the CUDA backend lowers it as T.gemm's "
                 "wgmma form without the wait (transforms.dialect)")
WAIT_WGMMA = _op("wait_wgmma", (), (Attr("count", int, 0),),
                 "wgmma.wait_group COUNT: at most COUNT of the warpgroup's wgmma groups stay "
                 "in flight")

PTX_LDMATRIX = _op("ptx_ldmatrix", (Operand("src", "read", kind="expr"),
                                     Operand("dst", "write", kind="expr")),
                   (Attr("num", int, 4), Attr("trans", bool, False)),
                   "ldmatrix.sync.aligned.m8n8.xNUM(.trans).b16 of the calling warp: each lane "
                   "gives the address of one 16-byte row of a shared tile (T.access_ptr); the "
                   "NUM 32-bit registers it receives go to its thread-local array")
PTX_MMA = _op("ptx_mma", (Operand("A", "read", kind="expr"), Operand("B", "read", kind="expr"),
                          Operand("C", "readwrite", kind="expr")),
              (Attr("shape", str, "m16n8k16"), Attr("a_dtype", str, "float16"),
               Attr("c_dtype", str, "float32")),
              "mma.sync.aligned.SHAPE.row.col of the calling warp on thread-local fragments: "
              "C (4 accumulators from the element) += A B (their registers from the elements), "
              "in the PTX fragment layouts; A_DTYPE int4: two values a byte of int8 arrays")

DIALECT_OPS = (TMA_COPY.name, INIT_BARRIERS.name, ARRIVE.name, WAIT_PARITY.name,
               EXPECT_TX.name, TMA_STORE_WAIT.name, FENCE_PROXY_ASYNC.name, SET_MAX_NREG.name,
               WS.name, CLUSTER.name,
               NO_SET_MAX_NREG.name, CALL_EXTERN.name, IMPORT_SOURCE.name,
               CP_ASYNC.name, CP_ASYNC_BARRIER_NOINC.name,
               PTX_COMMIT_GROUP.name, PTX_WAIT_GROUP.name, SYNC_GRID.name, FENCE_GPU.name,
               WGMMA_GEMM.name, WAIT_WGMMA.name, PTX_LDMATRIX.name,
               PTX_MMA.name)
# ops each calling thread runs for itself: fine under a condition on the thread index (the
# core's warp shuffles and votes too: the threads of the mask reach them together; not a
# block's vote, a barrier every thread of the block must reach)
PER_THREAD = frozenset({ARRIVE.name, WAIT_PARITY.name, FENCE_PROXY_ASYNC.name,
                        THREAD_BINDING.name, CP_ASYNC.name, CP_ASYNC_BARRIER_NOINC.name,
                        PTX_COMMIT_GROUP.name, PTX_WAIT_GROUP.name, NAMED_BARRIER.name,
                        PTX_LDMATRIX.name, PTX_MMA.name, *(WARP_OPS - BLOCK_VOTE_OPS)})

# T.tvm_warp_shuffle, an expression: (mask, value, source lane, width) -> the value of that lane
WARP_SHUFFLE = "tw.cuda.warp_shuffle"
register_intrinsic(WARP_SHUFFLE, "tvm_warp_shuffle",
                   "T.tvm_warp_shuffle: the value another lane of the warp holds (__shfl_sync)")
EXPRESSION_OPS = ("tvm_warp_shuffle",)  # capabilities of the expression intrinsics above
