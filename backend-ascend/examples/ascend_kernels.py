"""The Ascend examples of the seeds, in the tilelang-ascend (A2/A3) dialect.

Run: python backend-ascend/examples/ascend_kernels.py  (uses the CPU emulator without an NPU)
"""

import tilewright
import tilewright_ascend.language as T
import torch

VEC_NUM = 2


def vec_add(M, N, block_M, block_N, dtype="float32"):
    """GM -> UB (MTE2), add on V, UB -> GM (MTE3), ordered by two barrier_all."""
    m_num, n_num = M // block_M, N // block_N

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, vid):
            bx = cid // n_num
            by = cid % n_num
            a_ub = T.alloc_ub((block_M // VEC_NUM, block_N), dtype)
            b_ub = T.alloc_ub((block_M // VEC_NUM, block_N), dtype)
            c_ub = T.alloc_ub((block_M // VEC_NUM, block_N), dtype)
            with T.Scope("V"):
                row = bx * block_M + vid * block_M // VEC_NUM
                T.copy(A[row, by * block_N], a_ub)
                T.copy(B[row, by * block_N], b_ub)
                T.barrier_all()
                T.tile.add(c_ub, a_ub, b_ub)
                T.barrier_all()
                T.copy(c_ub, C[row, by * block_N])

    return main


def vec_add_pipelined(M, N, block_M, block_N, sub_M, dtype="float32", stages=2):
    """Double-buffered add with hand-written flags: MTE3->MTE2 returns a slot, MTE2->V says
    a slot is loaded, V->MTE3 says it is computed."""
    m_num, n_num = M // block_M, N // block_N
    vec_proc = block_M // sub_M
    rows = sub_M // VEC_NUM

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, vid):
            bx = cid // n_num
            by = cid % n_num
            a_ub = T.alloc_ub((stages, rows, block_N), dtype)
            b_ub = T.alloc_ub((stages, rows, block_N), dtype)
            c_ub = T.alloc_ub((stages, rows, block_N), dtype)
            with T.Scope("V"):
                base = bx * block_M + vid * rows
                T.set_flag("mte3", "mte2", 0)
                T.set_flag("mte3", "mte2", 1)
                T.wait_flag("mte3", "mte2", 0)
                T.copy(A[base, by * block_N], a_ub[0, :, :])
                T.copy(B[base, by * block_N], b_ub[0, :, :])
                T.set_flag("mte2", "v", 0)
                for mm in T.serial(vec_proc):
                    cur = mm % stages
                    nxt = (mm + 1) % stages
                    if mm < vec_proc - 1:
                        T.wait_flag("mte3", "mte2", nxt)
                        T.copy(A[base + (mm + 1) * sub_M, by * block_N], a_ub[nxt, :, :])
                        T.copy(B[base + (mm + 1) * sub_M, by * block_N], b_ub[nxt, :, :])
                        T.set_flag("mte2", "v", nxt)
                    T.wait_flag("mte2", "v", cur)
                    for i, j in T.Parallel(rows, block_N):
                        c_ub[cur, i, j] = a_ub[cur, i, j] + b_ub[cur, i, j]
                    T.set_flag("v", "mte3", cur)
                    T.wait_flag("v", "mte3", cur)
                    T.copy(c_ub[cur, :, :], C[base + mm * sub_M, by * block_N])
                    T.set_flag("mte3", "mte2", cur)
                T.wait_flag("mte3", "mte2", 0)
                T.wait_flag("mte3", "mte2", 1)

    return main


def gemm(M, N, K, block_M, block_N, K_L1, dtype="float16", accum_dtype="float32", kL0Size=128):
    """GM -> L1 (MTE2), gemm_v0: L1 -> L0A/L0B (MTE1) -> MMAD (M) -> L0C, L0C -> GM (FIX)."""
    m_num, n_num = M // block_M, N // block_N

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, _):
            bx = cid // n_num
            by = cid % n_num
            A_L1 = T.alloc_L1((block_M, K_L1), dtype)
            B_L1 = T.alloc_L1((K_L1, block_N), dtype)
            C_L0 = T.alloc_L0C((block_M, block_N), accum_dtype)
            with T.Scope("C"):
                loop_k = T.ceildiv(K, K_L1)
                for k in T.serial(loop_k):
                    T.copy(A[bx * block_M, k * K_L1], A_L1)
                    T.copy(B[k * K_L1, by * block_N], B_L1)
                    T.barrier_all()
                    T.gemm_v0(A_L1, B_L1, C_L0, init=(k == 0), kL0Size=kL0Size)
                    T.barrier_all()
                T.copy(C_L0, C[bx * block_M, by * block_N])

    return main


def vec_add_conservative(M, N, block_M, block_N, sub_M, dtype="float32"):
    """The same work as :func:`vec_add_pipelined` with one buffer and each set/wait pair
    adjacent before its consumer: safe, but MTE2, V and MTE3 take turns."""
    m_num, n_num = M // block_M, N // block_N
    vec_proc = block_M // sub_M
    rows = sub_M // VEC_NUM

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, vid):
            bx = cid // n_num
            by = cid % n_num
            a_ub = T.alloc_ub((rows, block_N), dtype)
            b_ub = T.alloc_ub((rows, block_N), dtype)
            c_ub = T.alloc_ub((rows, block_N), dtype)
            with T.Scope("V"):
                base = bx * block_M + vid * rows
                for mm in T.serial(vec_proc):
                    T.set_flag("v", "mte2", 0)
                    T.wait_flag("v", "mte2", 0)
                    T.copy(A[base + mm * sub_M, by * block_N], a_ub)
                    T.copy(B[base + mm * sub_M, by * block_N], b_ub)
                    T.set_flag("mte3", "v", 0)
                    T.wait_flag("mte3", "v", 0)
                    T.set_flag("mte2", "v", 0)
                    T.wait_flag("mte2", "v", 0)
                    T.tile.add(c_ub, a_ub, b_ub)
                    T.set_flag("v", "mte3", 0)
                    T.wait_flag("v", "mte3", 0)
                    T.copy(c_ub, C[base + mm * sub_M, by * block_N])

    return main


def gemm_pipelined(M, N, K, block_M, block_N, K_L1, dtype="float16", accum_dtype="float32",
                   kL0Size=128, conservative=False):
    """GEMM with L1 double buffering and hand-written flags: MTE2 loads the next K tile while
    the cube works on the current one. ``conservative`` waits right after each set instead (a
    set is only raised again once its wait has cleared it: a second set of a raised flag is
    undefined behaviour)."""
    m_num, n_num = M // block_M, N // block_N
    loop_k = K // K_L1

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, _):
            bx = cid // n_num
            by = cid % n_num
            A_L1 = T.alloc_L1((2, block_M, K_L1), dtype)
            B_L1 = T.alloc_L1((2, K_L1, block_N), dtype)
            C_L0 = T.alloc_L0C((block_M, block_N), accum_dtype)
            with T.Scope("C"):
                if not conservative:  # both L1 slots start free
                    T.set_flag("mte1", "mte2", 0)
                    T.set_flag("mte1", "mte2", 1)
                for k in T.serial(loop_k):
                    cur = k % 2
                    if not conservative:
                        T.wait_flag("mte1", "mte2", cur)
                    T.copy(A[bx * block_M, k * K_L1], A_L1[cur, :, :])
                    T.copy(B[k * K_L1, by * block_N], B_L1[cur, :, :])
                    T.set_flag("mte2", "mte1", cur)
                    T.wait_flag("mte2", "mte1", cur)
                    T.gemm_v0(A_L1[cur, :, :], B_L1[cur, :, :], C_L0, init=(k == 0),
                              kL0Size=kL0Size)
                    T.set_flag("mte1", "mte2", cur)
                    if conservative:  # the next load waits here, right after the GEMM
                        T.wait_flag("mte1", "mte2", cur)
                if not conservative:
                    T.wait_flag("mte1", "mte2", 0)
                    T.wait_flag("mte1", "mte2", 1)
                T.set_flag("m", "fix", 0)
                T.wait_flag("m", "fix", 0)
                T.copy(C_L0, C[bx * block_M, by * block_N])

    return main


def vec_add_auto(M, N, block_M, block_N, sub_M, dtype="float32"):
    """The looped add written without any flag: the backend inserts them."""
    m_num, n_num = M // block_M, N // block_N
    vec_proc = block_M // sub_M
    rows = sub_M // VEC_NUM

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, vid):
            bx = cid // n_num
            by = cid % n_num
            a_ub = T.alloc_ub((rows, block_N), dtype)
            b_ub = T.alloc_ub((rows, block_N), dtype)
            c_ub = T.alloc_ub((rows, block_N), dtype)
            with T.Scope("V"):
                base = bx * block_M + vid * rows
                for mm in T.serial(vec_proc):
                    T.copy(A[base + mm * sub_M, by * block_N], a_ub)
                    T.copy(B[base + mm * sub_M, by * block_N], b_ub)
                    T.tile.add(c_ub, a_ub, b_ub)
                    T.tile.muls(c_ub, c_ub, 2.0)
                    T.copy(c_ub, C[base + mm * sub_M, by * block_N])

    return main


def gemm_auto(M, N, K, block_M, block_N, K_L1, dtype="float16", accum_dtype="float32",
              kL0Size=128, num_stages=0):
    """The gemm_v0 GEMM without barriers: the backend inserts the flags. With
    ``num_stages`` the K loop is ``T.Pipelined`` and the L1 tiles get that many versions."""
    m_num, n_num = M // block_M, N // block_N

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, _):
            bx = cid // n_num
            by = cid % n_num
            A_L1 = T.alloc_L1((block_M, K_L1), dtype)
            B_L1 = T.alloc_L1((K_L1, block_N), dtype)
            C_L0 = T.alloc_L0C((block_M, block_N), accum_dtype)
            with T.Scope("C"):
                for k in (T.Pipelined(K // K_L1, num_stages=num_stages) if num_stages
                          else T.serial(K // K_L1)):
                    T.copy(A[bx * block_M, k * K_L1], A_L1)
                    T.copy(B[k * K_L1, by * block_N], B_L1)
                    T.gemm_v0(A_L1, B_L1, C_L0, init=(k == 0), kL0Size=kL0Size)
                T.copy(C_L0, C[bx * block_M, by * block_N])

    return main


def vec_add_pipelined_auto(M, N, block_M, block_N, sub_M, dtype="float32", num_stages=2):
    """The looped add as a portable-style pipelined loop without flags: the backend gives the
    tiles two versions and inserts the flags (one event id per version)."""
    m_num, n_num = M // block_M, N // block_N
    vec_proc = block_M // sub_M
    rows = sub_M // VEC_NUM

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(m_num * n_num, is_npu=True) as (cid, vid):
            bx = cid // n_num
            by = cid % n_num
            a_ub = T.alloc_ub((rows, block_N), dtype)
            b_ub = T.alloc_ub((rows, block_N), dtype)
            c_ub = T.alloc_ub((rows, block_N), dtype)
            with T.Scope("V"):
                base = bx * block_M + vid * rows
                for mm in T.Pipelined(vec_proc, num_stages=num_stages):
                    T.copy(A[base + mm * sub_M, by * block_N], a_ub)
                    T.copy(B[base + mm * sub_M, by * block_N], b_ub)
                    for i, j in T.Parallel(rows, block_N):
                        c_ub[i, j] = a_ub[i, j] + b_ub[i, j]
                    T.copy(c_ub, C[base + mm * sub_M, by * block_N])

    return main


def dialect_tour(N=64, dtype="float32"):
    """Every T.tile instruction of the dialect once, on vector core 0, ordered by barriers (the
    chain of :func:`dialect_tour_reference`), with T.printf and T.dump_tensor on the way."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype),
             H: T.Tensor((N,), "float16")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a = T.alloc_ub((N,), dtype)
            b = T.alloc_ub((N,), dtype)
            t = T.alloc_ub((N,), dtype)
            h = T.alloc_ub((N,), "float16")
            with T.Scope("V"):
                if vid == 0:  # one vector core is enough
                    T.copy(A[0], a)
                    T.copy(B[0], b)
                    T.barrier_all()
                    T.tile.abs(b, b)  # b = |B| + 1 > 0 for ln, sqrt and reciprocal
                    T.barrier_all()
                    T.tile.adds(b, b, 1.0)
                    T.barrier_all()
                    for op in (T.tile.add, T.tile.sub, T.tile.mul, T.tile.div, T.tile.max,
                               T.tile.min):
                        op(t, a, b)
                        T.barrier_all()
                        T.tile.copy(a, t)
                        T.barrier_all()
                    for op in (T.tile.ln, T.tile.sqrt, T.tile.reciprocal, T.tile.exp, T.tile.relu):
                        op(t, b)
                        T.barrier_all()
                        T.tile.add(a, a, t)
                        T.barrier_all()
                    for op, x in ((T.tile.muls, 0.5), (T.tile.adds, 1.0), (T.tile.maxs, -2.0),
                                  (T.tile.mins, 4.0)):
                        op(a, a, x)
                        T.barrier_all()
                    T.tile.fill(t, 0.25)
                    T.barrier_all()
                    T.tile.add(a, a, t)
                    T.barrier_all()
                    T.tile.cast(h, a, "CAST_RINT")
                    T.barrier_all()
                    T.printf("block %d: tour done\n", cid)
                    T.dump_tensor(a, 7, 8)
                    T.barrier_all()
                    T.copy(a, Y[0])
                    T.copy(h, H[0])

    return main


def dialect_tour_reference(a, b):
    """What :func:`dialect_tour` computes, in torch."""
    b = b.abs() + 1
    for op in (torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum):
        a = op(a, b)
    for op in (torch.log, torch.sqrt, torch.reciprocal, torch.exp, torch.relu):
        a = a + op(b)
    a = (a * 0.5 + 1.0).clamp(-2.0, 4.0) + 0.25
    return a, a.half()


def mma_tile(M=48, N=32, K=64):
    """Hand-written cube path: GM -> L1 (T.copy), L1 -> L0A/L0B (T.copy), one T.mma, L0C -> GM."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a_l1 = T.alloc_L1((M, K), "float16")
            b_l1 = T.alloc_L1((K, N), "float16")
            a_l0 = T.alloc_L0A((M, K), "float16")
            b_l0 = T.alloc_L0B((K, N), "float16")
            c_l0 = T.alloc_L0C((M, N), "float32")
            with T.Scope("C"):
                T.copy(A[0, 0], a_l1)
                T.copy(B[0, 0], b_l1)
                T.barrier_all()
                T.copy(a_l1, a_l0)
                T.copy(b_l1, b_l0)
                T.barrier_all()
                T.mma(a_l0, b_l0, c_l0, init=True)
                T.barrier_all()
                T.copy(c_l0, C[0, 0])

    return main


TARGET = "ascend"


def main():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    add = tilewright.compile(vec_add(256, 256, 64, 128), out_idx=[-1], target=TARGET)
    torch.testing.assert_close(add(a, b), a + b)
    add2 = tilewright.compile(vec_add_pipelined(256, 256, 128, 128, 32), out_idx=[-1],
                              target=TARGET)
    torch.testing.assert_close(add2(a, b), a + b)
    x, y = torch.randn(128, 256).half(), torch.randn(256, 128).half()
    mm = tilewright.compile(gemm(128, 128, 256, 64, 64, 128), out_idx=[-1], target=TARGET)
    torch.testing.assert_close(mm(x, y).float(), x.float() @ y.float(), rtol=1e-2, atol=1e-2)
    a, b = torch.randn(64), torch.randn(64)
    tour = tilewright.compile(dialect_tour(), out_idx=[2, 3], target=TARGET)
    y, h = tour(a, b)
    ref, ref_h = dialect_tour_reference(a, b)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(h, ref_h, rtol=1e-3, atol=1e-3)
    x, y = torch.randn(48, 64).half(), torch.randn(64, 32).half()
    mma = tilewright.compile(mma_tile(), out_idx=[-1], target=TARGET)
    torch.testing.assert_close(mma(x, y), x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    print("the seed's add, double-buffered add and gemm_v0 GEMM, the dialect tour and the "
          "hand-written mma match torch")


if __name__ == "__main__":
    main()
