"""Kernels written with the CUDA dialect (``tilewright_cuda.language``), for the dialect tests
(test_cuda_dialect.py builds them, test_cuda_dialect_emulate.py runs them on the host)."""

from contextlib import nullcontext

import tilewright_cuda.language as T
import torch
from cuda_cases import Case


def tma_gemm(M=256, N=256, K=128, bM=128, bN=128, bK=64, stages=2, dtype="float16"):
    """A TMA + mbarrier pipeline (full/empty barrier per stage), one role."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((stages, bM, bK), dtype)
            B_s = T.alloc_shared((stages, bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            T.clear(C_l)
            for ko in T.serial(T.ceildiv(K, bK)):
                s = ko % stages
                T.mbarrier_wait_parity(empty[s], ((ko // stages) % 2) ^ 1)
                T.tma_copy(A[by * bM:(by + 1) * bM, ko * bK:(ko + 1) * bK], A_s[s, :, :],
                           barrier=full[s])
                T.tma_copy(B[ko * bK:(ko + 1) * bK, bx * bN:(bx + 1) * bN], B_s[s, :, :],
                           barrier=full[s])
                T.mbarrier_arrive(full[s])
                T.mbarrier_wait_parity(full[s], (ko // stages) % 2)
                T.gemm(A_s[s, :, :], B_s[s, :, :], C_l)
                T.mbarrier_arrive(empty[s])
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def tma_gemm_swizzled(M=256, N=256, K=128, bM=128, bN=128, bK=64, dtype="float16"):
    """2-D operand tiles: layout inference swizzles them (layout.Swizzled), so the TMA boxes are
    128-byte column blocks with SWIZZLE_128B and the mma.sync gemm reads them swizzled."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            full = T.alloc_barrier(128)
            empty = T.alloc_barrier(128)
            T.clear(C_l)
            for ko in T.serial(T.ceildiv(K, bK)):
                T.mbarrier_wait_parity(empty, (ko % 2) ^ 1)
                T.tma_copy(A[by * bM:(by + 1) * bM, ko * bK:(ko + 1) * bK], A_s, barrier=full)
                T.tma_copy(B[ko * bK:(ko + 1) * bK, bx * bN:(bx + 1) * bN], B_s, barrier=full)
                T.mbarrier_arrive(full)
                T.mbarrier_wait_parity(full, ko % 2)
                T.gemm(A_s, B_s, C_l)
                T.mbarrier_arrive(empty)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def ws_gemm(M=256, N=256, K=128, bM=128, bN=128, bK=32, num_stages=2, dtype="float16"):
    """The warp-specialised GEMM of the seeds: warpgroup 1 loads with TMA, warpgroup 0
    computes; registers move from the loader to the compute role."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_shared = T.alloc_shared((num_stages, bM, bK), dtype)
            B_shared = T.alloc_shared((num_stages, bK, bN), dtype)
            C_local = T.alloc_fragment((bM, bN), "float32")
            mbars = T.alloc_barrier([128, 128] * num_stages)
            with T.ws(1):
                T.dec_max_nreg(40)
            with T.ws(0):
                T.inc_max_nreg(232)
                T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=num_stages):
                with T.ws(1):
                    T.mbarrier_wait_parity(mbarrier=mbars[ko % num_stages + num_stages],
                                           parity=((ko // num_stages) % 2) ^ 1)
                    T.tma_copy(A[by * bM:(by + 1) * bM, ko * bK:(ko + 1) * bK],
                               A_shared[ko % num_stages, :, :], barrier=mbars[ko % num_stages])
                    T.tma_copy(B[ko * bK:(ko + 1) * bK, bx * bN:(bx + 1) * bN],
                               B_shared[ko % num_stages, :, :], barrier=mbars[ko % num_stages])
                    T.mbarrier_arrive(mbarrier=mbars[ko % num_stages])
                with T.ws(0):
                    T.mbarrier_wait_parity(mbarrier=mbars[ko % num_stages],
                                           parity=(ko // num_stages) % 2)
                    T.gemm(A_shared[ko % num_stages, :, :], B_shared[ko % num_stages, :, :],
                           C_local)
                    T.mbarrier_arrive(mbarrier=mbars[ko % num_stages + num_stages])
            with T.ws(0):
                T.copy(C_local, C[by * bM, bx * bN])

    return main


def ws_store(M=256, N=128, bM=64, bN=64, dtype="float32", tilelang_names=False):
    """Role 1 loads a tile with TMA; role 0 adds one and stores it with TMA
    (``tilelang_names``: through T.barrier_arrive / T.barrier_wait)."""
    arrive = T.barrier_arrive if tilelang_names else T.mbarrier_arrive
    wait = T.barrier_wait if tilelang_names else T.mbarrier_wait_parity

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            O = T.alloc_shared((bM, bN), dtype)
            bar = T.alloc_barrier([128])
            with T.ws(1):
                T.tma_copy(A[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], S, barrier=bar[0])
                arrive(bar[0])
            with T.ws(0):
                wait(bar[0], 0)
                for i, j in T.Parallel(bM, bN):
                    O[i, j] = S[i, j] + 1.0
                T.tma_copy(O, B[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN])
                T.tma_store_wait()

    return main


def cluster_scale(M=256, N=128, bM=64, bN=64, dtype="float16"):
    """TMA load, scale, TMA store, in clusters of 2x1 blocks."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128,
                             cluster_dims=(2, 1)) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            O = T.alloc_shared((bM, bN), dtype)
            bar = T.alloc_barrier(128)
            T.tma_copy(A[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], S, barrier=bar)
            T.mbarrier_arrive(bar)
            T.mbarrier_wait_parity(bar, 0)
            for i, j in T.Parallel(bM, bN):
                O[i, j] = S[i, j] * 2.0
            T.tma_copy(O, B[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN])
            T.tma_store_wait()

    return main


def head_copy(B=2, H=3, D=64, bN=32, dtype="float16"):
    """The seeds' ``K[bz, by, k:k + block_N, :]`` into one version of a staged tile and back:
    a 4-D tensor with a symbolic sequence length."""
    S = T.symbolic("S")

    @T.prim_func
    def main(K: T.Tensor((B, H, S, D), dtype), O: T.Tensor((B, H, S, D), dtype)):
        with T.Kernel(T.ceildiv(S, bN), H, B, threads=128) as (bx, by, bz):
            K_s = T.alloc_shared((2, bN, D), dtype)
            bar = T.alloc_barrier([128, 128])
            T.tma_copy(K[bz, by, bx * bN:(bx + 1) * bN, :], K_s[1, :, :], barrier=bar[1])
            T.mbarrier_arrive(bar[1])
            T.mbarrier_wait_parity(bar[1], 0)
            T.tma_copy(K_s[1, :, :], O[bz, by, bx * bN:(bx + 1) * bN, :])
            T.tma_store_wait()

    return main


def pipelined_gemm(M=256, N=256, K=256, bM=128, bN=128, bK=64, stages=3, dtype="float16",
                   keep_registers=True):
    """A portable T.Pipelined GEMM: on sm_90a the pipeline adds a TMA producer warpgroup;
    ``keep_registers`` says T.no_set_max_nreg() (no registers move between the roles)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            if keep_registers:
                T.no_set_max_nreg()
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def thread_index(blocks=3):
    """T.get_thread_binding: each thread of a (32, 4)-thread block writes its own indices; a
    128-thread block's threads fill a shared tile by their index (scalar code), which a
    T.Parallel loop reads reversed. Inside a T.ws role the index is still the block's."""

    @T.prim_func
    def main(O: T.Tensor((blocks, 4, 32), "int32"), R: T.Tensor((blocks, 128), "int32"),
             W: T.Tensor((blocks, 256), "int32")):
        with T.Kernel(blocks, threads=(32, 4)) as bx:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            O[bx, tk, tn] = tn + tk * 100 + bx * 1000
        with T.Kernel(blocks, threads=256) as bx:
            S = T.alloc_shared((128,), "int32")
            tx = T.get_thread_binding()
            if tx < 128:
                S[tx] = tx * 2 + bx
            for i in T.Parallel(128):
                R[bx, i] = S[127 - i]
            with T.ws(1):
                W[bx, T.get_thread_binding()] = bx - T.get_thread_binding()
            with T.ws(0):
                W[bx, T.get_thread_binding()] = bx + T.get_thread_binding()

    return main


# T.import_source: the user's device code (a template, as TileLang's dequantisers are)
WIDEN_SOURCE = """
template <typename T1, typename T2>
__device__ void tw_test_widen(const T1 *src, T2 *dst, int n, int scale) {
  for (int i = 0; i < n; ++i) {
    dst[i] = (T2)((int)src[i] * scale);
  }
}
"""


def extern_call(blocks=2, n=4):
    """T.import_source + T.call_extern on T.access_ptr pointers, in a macro used twice (the
    source is placed once): each thread widens its ``n`` int8 values of a shared tile through
    the user's function into a per-thread array (TVM's argument order), then once more, scaled
    by 2, straight into the global output (the ``dtype=`` order, a pointer to an element).
    The macro finds its block with T.get_block_binding; a third output is
    T.shift_left / T.shift_right of the thread index, a fourth T.dp4a of each thread's four
    int8 values with themselves (plus 7)."""

    @T.macro
    def widen(S, O, P):
        T.import_source(WIDEN_SOURCE)
        bx = T.get_block_binding(0)
        tx = T.get_thread_binding()
        src = T.alloc_local((n,), "int8")
        dst = T.alloc_local((n,), "float32")
        for v in T.serial(n):
            src[v] = S[tx * n + v]
        T.call_extern("handle", "tw_test_widen", T.access_ptr(src, "r"),
                      T.access_ptr(dst, "w"), n, 1)
        for v in T.serial(n):
            O[bx, tx * n + v] = dst[v]
        T.call_extern("tw_test_widen", T.access_ptr(src, "r"),
                      T.access_ptr(P[bx, tx * n], "w", n), n, 2, dtype="handle")

    @T.prim_func
    def main(A: T.Tensor((blocks, 128 * n), "int8"), O: T.Tensor((blocks, 128 * n), "float32"),
             P: T.Tensor((blocks, 128 * n), "float32"), Q: T.Tensor((blocks, 128), "int32"),
             D: T.Tensor((blocks, 128), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            S = T.alloc_shared((128 * n,), "int8")
            T.copy(A[bx, :], S)
            widen(S, O, P)
            tx = T.get_thread_binding()
            Q[bx, tx] = T.shift_left(1, tx % 16) + T.shift_right(-4096, bx + 1)
            acc = T.alloc_local((1,), "int32")
            acc[0] = 7
            T.dp4a(S[tx * 4], S[tx * 4], acc[0])
            D[bx, tx] = acc[0]
        with T.Kernel(blocks, threads=128):
            S2 = T.alloc_shared((128 * n,), "int8")
            T.copy(A[0, :], S2)
            widen(S2, O, P)

    return main


def thread_allreduce(rows=16, group=8):
    """TVM's thread allreduce as TileLang's GEMV examples write it: a (group, rows) thread
    block; the threads of a row combine their values along threadIdx.x with a sum (the row's
    first thread stores it) and a max (every thread stores it)."""

    def scope(combine):
        return T.attr(T.comm_reducer(combine, [T.cast(0, "float32")]), "reduce_scope",
                      T.reinterpret(T.uint64(0), dtype="handle"))

    @T.prim_func
    def main(A: T.Tensor((2, rows, group), "float32"), S: T.Tensor((2, rows), "float32"),
             M: T.Tensor((2, rows, group), "float32")):
        with T.Kernel(2, threads=(group, rows)) as bx:
            acc = T.alloc_local((1,), "float32")
            total = T.alloc_local((1,), "float32")
            top = T.alloc_local((1,), "float32")
            kr = T.thread_binding(0, group, thread="threadIdx.x")
            ni = T.thread_binding(0, rows, thread="threadIdx.y")
            acc[0] = A[bx, ni, kr]
            with scope(lambda x, y: x + y):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], kr,
                                                  dtype="handle"))
            with scope(lambda x, y: T.max(x, y)):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, top[0], kr,
                                                  dtype="handle"))
            if kr == 0:
                S[bx, ni] = total[0]
            M[bx, ni, kr] = top[0]

    return main


def hand_wgmma(M=128, N=128, K=256, bM=64, bN=64, bK=64, dtype="float16", wait_late=False,
               roles_by_if=False):
    """TileLang's hand-synchronised Hopper form (deepseek_v32's sparse MLA): warpgroup 1
    copies A and B tiles (B stored [N, K]) with T.ptx_cp_async, 16 bytes a thread a call,
    and arrives on ``ready`` with T.cp_async_barrier_noinc once they land; warpgroup 0 issues
    each K step as two T.wgmma_gemm groups (the two halves of K) onto one accumulator and
    retires them with T.wait_wgmma before it frees the tiles. ``wait_late``: the accumulator
    is read before the wait (refused); ``roles_by_if``: the roles are TileLang's ``if tx >=
    128: ... else: ...`` instead of ``T.ws`` (they become ``T.ws`` roles)."""
    H = bK // 2
    chunks = bM * H // 8 // 128  # 16-byte copies per thread per half tile

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A0 = T.alloc_shared((bM, H), dtype)
            A1 = T.alloc_shared((bM, H), dtype)
            B0 = T.alloc_shared((bN, H), dtype)
            B1 = T.alloc_shared((bN, H), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            ready = T.alloc_barrier(128)
            free = T.alloc_barrier(128)
            tx = T.get_thread_binding()

            # TileLang's own form of the roles: `if tx >= 128:` / `if tx < 128:` (no T.ws)
            producer, consumer = (nullcontext(), nullcontext()) if roles_by_if else \
                (T.ws(1), T.ws(0))
            with producer:
                if tx >= 128 if roles_by_if else True:
                    for ko in T.serial(K // bK):
                        T.mbarrier_wait_parity(free, (ko % 2) ^ 1)
                        for r in T.serial(chunks):
                            row = (r * 128 + tx - 128) // (H // 8)
                            col = (r * 128 + tx - 128) % (H // 8) * 8
                            for h, a_s, b_s in ((0, A0, B0), (1, A1, B1)):
                                k = ko * bK + h * H + col
                                T.ptx_cp_async(T.access_ptr(a_s[row, col], "w", 8),
                                               T.access_ptr(A[by * bM + row, k], "r", 8), 8)
                                T.ptx_cp_async(T.access_ptr(b_s[row, col], "w", 8),
                                               T.access_ptr(B[bx * bN + row, k], "r", 8), 8)
                        T.cp_async_barrier_noinc(ready)
            with consumer:
                if tx < 128 if roles_by_if else True:
                    T.clear(C_l)
                    for ko in T.serial(K // bK):
                        T.mbarrier_wait_parity(ready, ko % 2)
                        T.wgmma_gemm(A0, B0, C_l, transpose_B=True)
                        T.wgmma_gemm(A1, B1, C_l, transpose_B=True)
                        if wait_late:
                            for i, j in T.Parallel(bM, bN):
                                C_l[i, j] = C_l[i, j] * 0.5
                        T.wait_wgmma(1)
                        T.wait_wgmma(0)
                        T.mbarrier_arrive(free)
                    T.copy(C_l, C[by * bM, bx * bN])

    return main


def warp_shuffle(n=64):
    """TVM's T.tvm_warp_shuffle as TileLang's Hadamard transform writes it: each thread takes
    the value of its XOR-1 neighbour over the whole warp, and of the next lane in its group of
    8 lanes (lane 8 wraps to 0 of the group)."""

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((2, n), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding(0)
            v = T.alloc_local((1,), "float32")
            v[0] = A[tx]
            B[0, tx] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], (tx ^ 1) % 32, 32, 32)
            B[1, tx] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], tx % 8 + 1, 8, 32)

    return main


def wide_tma_copy(rows=64, cols=576, dtype="bfloat16"):
    """T.tma_copy of a tile wider than TMA's 256-element box (576 columns: one box of the
    tensor seen as [rows, 3, 192]; 320 rows: 256 + 64), then a plain copy out."""

    @T.prim_func
    def main(Q: T.Tensor((rows, cols), dtype), O: T.Tensor((rows, cols), dtype)):
        with T.Kernel(1, threads=128):
            Q_s = T.alloc_shared((rows, cols), dtype)
            bar = T.alloc_barrier(128)
            T.tma_copy(Q[0:rows, :], Q_s, barrier=bar)
            T.mbarrier_arrive(bar)
            T.mbarrier_wait_parity(bar, 0)
            T.copy(Q_s, O)

    return main


def grouped_copies(stages=2, rows=16, cols=64, wait=True, commit=True, steps=4, wait_count=0):
    """Each of 128 threads copies 16 bytes of a (rows, cols) half tile per step with
    T.ptx_cp_async into the stage ``k % stages``, commits a group (T.ptx_commit_group) and
    waits for it (T.ptx_wait_group(0)) before the block reads the stage."""

    @T.prim_func
    def main(A: T.Tensor((steps, rows, cols), "float16"),
             O: T.Tensor((steps, rows, cols), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((stages, rows, cols), "float16")
            tx = T.get_thread_binding()
            for k in T.serial(steps):
                T.ptx_cp_async(T.access_ptr(S[k % stages, tx // 8, tx % 8 * 8], "w", 8),
                               T.access_ptr(A[k, tx // 8, tx % 8 * 8], "r", 8), 8)
                if commit:
                    T.ptx_commit_group()
                if wait:
                    T.ptx_wait_group(wait_count)
                for i, j in T.Parallel(rows, cols):
                    O[k, i, j] = S[k % stages, i, j] * 2

    return main


def prefetched_copies(stages=3, rows=16, cols=64, steps=6, wait=None):
    """A ``stages``-deep cp.async pipeline: the first ``stages - 1`` steps are copied ahead,
    each iteration prefetches step ``k + stages - 1`` into stage ``(k + stages - 1) % stages``,
    commits (an empty group past the end) and waits with T.ptx_wait_group(stages - 1) (or
    ``wait``), which leaves the prefetches of other stages in flight, then the block reads
    stage ``k % stages``."""
    ahead = stages - 1 if wait is None else wait

    @T.prim_func
    def main(A: T.Tensor((steps, rows, cols), "float16"),
             O: T.Tensor((steps, rows, cols), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((stages, rows, cols), "float16")
            tx = T.get_thread_binding()
            for s in T.serial(stages - 1):
                T.ptx_cp_async(T.access_ptr(S[s, tx // 8, tx % 8 * 8], "w", 8),
                               T.access_ptr(A[s, tx // 8, tx % 8 * 8], "r", 8), 8)
                T.ptx_commit_group()
            for k in T.serial(steps):
                if k + stages - 1 < steps:
                    T.ptx_cp_async(
                        T.access_ptr(S[(k + stages - 1) % stages, tx // 8, tx % 8 * 8], "w", 8),
                        T.access_ptr(A[k + stages - 1, tx // 8, tx % 8 * 8], "r", 8), 8)
                T.ptx_commit_group()
                T.ptx_wait_group(ahead)
                for i, j in T.Parallel(rows, cols):
                    O[k, i, j] = S[k % stages, i, j] * 2

    return main


def grid_sum(blocks=4, n=128):
    """Each block writes its row, T.sync_grid(), then each block reads its neighbour's row:
    wrong values unless every block's write came before every read (a cooperative launch)."""

    @T.prim_func
    def main(A: T.Tensor((blocks, n), "float32"), W: T.Tensor((blocks, n), "float32"),
             O: T.Tensor((blocks, n), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            for i in T.Parallel(n):
                W[bx, i] = A[bx, i] * 2
            T.sync_grid()
            for i in T.Parallel(n):
                O[bx, i] = W[(bx + 1) % blocks, i] + W[bx, i]

    return main


def cases():
    """``(name, kernel, cuda_cases.Case)`` of each dialect kernel at a size with partial
    tiles where the kernel allows them: the GPU checks (bench/checks.py) run them."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    def nan(*shape, dtype=torch.float32):
        return torch.full(shape, float("nan"), dtype=dtype)

    def gemm(M, N, K, dtype):
        a, b = rand(M, K, dtype=dtype), rand(K, N, dtype=dtype)
        return Case((a, b, nan(M, N)), (2,), [a.double() @ b.double()], reduction=K)

    a32, a16 = rand(200, 136), rand(200, 128, dtype=torch.float16)
    k = rand(2, 3, 100, 64, dtype=torch.float16)
    return [
        ("tma_gemm", tma_gemm(200, 136, 104), gemm(200, 136, 104, torch.float16)),
        ("tma_gemm_swizzled", tma_gemm_swizzled(), gemm(256, 256, 128, torch.float16)),
        ("ws_gemm", ws_gemm(dtype="float32"), gemm(256, 256, 128, torch.float32)),
        ("ws_store", ws_store(200, 136), Case((a32, nan(200, 136)), (1,), [a32 + 1])),
        ("cluster_scale", cluster_scale(200, 128),
         Case((a16, nan(200, 128, dtype=torch.float16)), (1,), [a16 * 2])),
        ("head_copy", head_copy(), Case((k, nan(2, 3, 100, 64, dtype=torch.float16)), (1,),
                                        [k])),
        ("pipelined_gemm_keep_registers", pipelined_gemm(),
         gemm(256, 256, 256, torch.float16)),
        ("ws_store_tilelang_names", ws_store(200, 136, tilelang_names=True),
         Case((a32, nan(200, 136)), (1,), [a32 + 1])),
        ("thread_index", thread_index(), Case(
            (torch.full((3, 4, 32), -1, dtype=torch.int32),
             torch.full((3, 128), -1, dtype=torch.int32),
             torch.full((3, 256), -1, dtype=torch.int32)), (0, 1, 2),
            [torch.arange(32).view(1, 1, 32) + 100 * torch.arange(4).view(1, 4, 1) +
             1000 * torch.arange(3).view(3, 1, 1),
             (127 - torch.arange(128)).view(1, 128) * 2 + torch.arange(3).view(3, 1),
             torch.cat([torch.arange(3).view(3, 1) + torch.arange(128).view(1, 128),
                        torch.arange(3).view(3, 1) - torch.arange(128, 256).view(1, 128)],
                       dim=1)], tol={"rtol": 0, "atol": 0})),
        ("extern_call", extern_call(), _extern_call_case(g)),
        ("thread_allreduce", thread_allreduce(), _allreduce_case(rand(2, 16, 8))),
        ("hand_wgmma", hand_wgmma(), _nk_gemm(rand(128, 256, dtype=torch.float16),
                                                rand(128, 256, dtype=torch.float16))),
        ("warp_shuffle", warp_shuffle(), _shuffle_case(rand(64))),
        ("hand_wgmma_roles_by_if", hand_wgmma(roles_by_if=True),
         _nk_gemm(rand(128, 256, dtype=torch.float16), rand(128, 256, dtype=torch.float16))),
        ("wide_tma_copy", wide_tma_copy(), _same(rand(64, 576, dtype=torch.bfloat16))),
        ("tall_tma_copy", wide_tma_copy(320, 64, "float16"),
         _same(rand(320, 64, dtype=torch.float16))),
        ("grouped_copies", grouped_copies(), _same(rand(4, 16, 64, dtype=torch.float16), 2)),
        ("prefetched_copies", prefetched_copies(),
         _same(rand(6, 16, 64, dtype=torch.float16), 2)),
        ("grid_sum", grid_sum(), _grid_sum_case(rand(4, 128))),
    ]


def _same(a, scale=1):
    return Case((a, torch.full_like(a, float("nan"))), (1,), [a * scale],
                tol={"rtol": 0, "atol": 0})


def _grid_sum_case(a):
    return Case((a, torch.full_like(a, float("nan")), torch.full_like(a, float("nan"))),
                (1, 2), [a * 2, a.roll(-1, 0) * 2 + a * 2])


def _shuffle_case(a):
    lane = torch.arange(64)
    group = lane // 8 * 8
    want = torch.stack([a[lane ^ 1], a[group + (lane % 8 + 1) % 8]])
    return Case((a, torch.full((2, 64), float("nan"))), (1,), [want],
                tol={"rtol": 0, "atol": 0})


def _nk_gemm(a, b):
    """A gemm of ``a`` [M, K] and ``b`` stored [N, K]."""
    return Case((a, b, torch.full((a.shape[0], b.shape[0]), float("nan"))), (2,),
                [a.double() @ b.double().T], reduction=a.shape[1])


def _allreduce_case(a):
    return Case((a, torch.full((2, 16), float("nan")), torch.full((2, 16, 8), float("nan"))),
                (1, 2), [a.sum(-1), a.amax(-1, keepdim=True).expand(2, 16, 8)],
                tol={"rtol": 1e-6, "atol": 1e-6})


def _extern_call_case(g):
    """extern_call's inputs and expected outputs (the second kernel overwrites block 0's rows
    with the same values and block 1's with block 0's)."""
    a = torch.randint(-128, 128, (2, 512), generator=g, dtype=torch.int8)
    wide = a[0].float().repeat(2, 1)
    tx, bx = torch.arange(128).view(1, 128), torch.arange(2).view(2, 1)
    q = (1 << (tx % 16)) + (-4096 >> (bx + 1))
    squares = (a.int() ** 2).view(2, 128, 4).sum(2) + 7
    return Case((a, torch.full((2, 512), float("nan")), torch.full((2, 512), float("nan")),
                 torch.full((2, 128), -1, dtype=torch.int32),
                 torch.full((2, 128), -1, dtype=torch.int32)), (1, 2, 3, 4),
                [wide, wide * 2, q.to(torch.int32), squares.to(torch.int32)],
                tol={"rtol": 0, "atol": 0})


def carried_group_gemm(num_stages):
    """A pipelined GEMM whose hand-issued wgmma group stays in flight into the next
    iteration (each iteration retires all but its own group)."""
    @T.prim_func
    def main(A: T.Tensor((64, 256), "float16"), B: T.Tensor((64, 256), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(4, num_stages=num_stages):
                T.copy(A[0, ko * 64], A_s)
                T.copy(B[0, ko * 64], B_s)
                T.wgmma_gemm(A_s, B_s, C_l, transpose_B=True)
                T.wait_wgmma(1)
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main
