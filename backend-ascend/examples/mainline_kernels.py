"""The seed's Ascend 950 examples in TileLang mainline's Ascend dialect
(``tilewright_ascend.language.mainline``, target ``ascend-950``): the vector add with
``T.annotate_buffer_versions`` (its body a ``T.Parallel`` nest, the same in ``T.SimtVF``, or
register code in ``T.SimdVF``), a softmax and an RMSNorm in ``T.SimdVF`` register code, GEMMs
through L1 and through L0A/L0B, the seed's GEMM + ReLU in ``T.MixedKernel`` with
``T.dual_copy`` (the ReLU on SIMT threads), and two kernels of SIMT threads indexed by
``T.get_thread_binding()``: a transpose (with the compiler's barrier) and a row softmax. The
compiler assigns the cores, inserts the synchronisation (the SIMT barriers too) and versions
the buffers.

Run: python backend-ascend/examples/mainline_kernels.py  (uses the CPU emulator without an NPU)
"""

import tilewright
import tilewright_ascend.language.mainline as T
import torch
from tilewright_ascend.executor import last_run_stats

TARGET = "ascend-950"


def vector_add(N, tile=1024, blocks=2, stages=2, versions="same", body="parallel"):
    """C = A + B: each of ``blocks`` blocks loads a tile of A and B per step of a
    ``T.Pipelined`` loop, adds on the vector unit and stores; ``versions`` is what
    ``T.annotate_buffer_versions`` gives each tile (default: ``stages``); ``body`` is
    ``parallel`` (a T.Parallel nest), ``simt`` (the nest in T.SimtVF) or ``simd`` (T.simd
    register instructions, 64 float32 lanes each, in T.SimdVF)."""
    iterations = N // (tile * blocks)
    spec = stages if versions == "same" else versions

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(blocks) as bx:
            a = T.alloc_shared((tile,), "float32")
            b = T.alloc_shared((tile,), "float32")
            c = T.alloc_shared((tile,), "float32")
            T.annotate_buffer_versions({a: spec, b: spec, c: spec})
            for step in T.Pipelined(iterations, num_stages=stages):
                begin = (step * blocks + bx) * tile
                T.copy(A[begin : begin + tile], a)
                T.copy(B[begin : begin + tile], b)
                if body == "parallel":
                    for i in T.Parallel(tile):
                        c[i] = a[i] + b[i]
                elif body == "simt":
                    with T.SimtVF(threads=1024):
                        for i in T.Parallel(tile):
                            c[i] = a[i] + b[i]
                else:
                    with T.SimdVF():
                        mask = T.simd.pset(32)
                        for g in T.serial(tile // 64):
                            ra = T.simd.vld(a[g * 64])
                            rb = T.simd.vld(b[g * 64])
                            T.simd.vsts(c[g * 64], T.simd.vadd(ra, rb, mask), mask)
                T.copy(c, C[begin : begin + tile])

    return main


def _lanes(N, lanes=64):
    """The registers of a row of ``N`` elements, ``lanes`` a register, and the tile width: a
    register reads and writes whole, so the UB row is padded to a whole number of them."""
    groups = list(range(-(-N // lanes)))
    return groups, len(groups) * lanes


def softmax(M, N, rows=4):
    """Y = softmax(X) along rows in ``T.SimdVF`` register code: each row is ``ceil(N / 64)``
    registers of float32; ``vmax`` across them and ``vcmax`` across the lanes give the row
    maximum, ``vdup`` broadcasts it, ``vexp`` of the difference, ``vadd`` + ``vcadd`` the sum,
    ``vdiv`` by its broadcast. Where ``N`` is not a multiple of 64 (rows of 200) the UB rows
    are padded to whole registers and the last register of a row works under the mask of its
    first ``N % 64`` lanes (``T.simd.pset(32, count=...)``): its maximum is reduced on its own,
    its inactive lanes are zero in the sum and are not stored."""
    lanes = 64
    groups, width = _lanes(N, lanes)
    full = [g for g in groups if (g + 1) * lanes <= N]

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M // rows) as bx:
            x = T.alloc_shared((rows, width), "float32")
            y = T.alloc_shared((rows, width), "float32")
            T.copy(X[bx * rows : bx * rows + rows, 0:N], x[0:rows, 0:N])
            with T.SimdVF():
                mask = T.simd.pset(32)
                masks = [mask if g in full else T.simd.pset(32, count=N - g * lanes)
                         for g in groups]
                for r in T.serial(rows):
                    tops = []
                    if full:
                        top = T.simd.vld(x[r, 0])
                        for g in full[1:]:
                            top = T.simd.vmax(top, T.simd.vld(x[r, g * lanes]), mask)
                        tops.append(T.simd.vcmax(top, mask))
                    if len(full) < len(groups):
                        g = groups[-1]
                        tops.append(T.simd.vcmax(T.simd.vld(x[r, g * lanes]), masks[g]))
                    top = tops[0] if len(tops) == 1 else T.simd.vmax(*tops, mask)
                    top = T.simd.vdup(top, mask)
                    exps = [T.simd.vexp(T.simd.vsub(T.simd.vld(x[r, g * lanes]), top, masks[g]),
                                        masks[g]) for g in groups]
                    total = exps[0]
                    for e in exps[1:]:
                        total = T.simd.vadd(total, e, mask)
                    total = T.simd.vdup(T.simd.vcadd(total, mask), mask)
                    for g, e in zip(groups, exps):
                        T.simd.vsts(y[r, g * lanes], T.simd.vdiv(e, total, masks[g]), masks[g])
            T.copy(y[0:rows, 0:N], Y[bx * rows : bx * rows + rows, 0:N])

    return main


def rmsnorm(M, N, rows=2, eps=1e-6, dtype="float16"):
    """Y = X / sqrt(mean(X^2) + eps) * W in ``T.SimdVF`` register code, computed in float32:
    64 ``dtype`` elements are loaded unpacked into the even lanes (``vld(..., dist="unpack")``)
    and widened by ``vcvt``; ``vmul``/``vadd`` + ``vcadd`` the sum of squares, ``vmuls`` by
    1/N, ``vadds`` eps, ``vsqrt`` and ``vdiv`` (the 950's register API has no rsqrt); the
    result narrowed by ``vcvt`` into the even lanes and stored packed (``dist="pack"``). Where
    ``N`` is not a multiple of 64 the UB rows are padded and the last 64 elements of a row are
    widened under the mask of their ``2 * (N % 64)`` 16-bit lanes and squared, narrowed and
    stored under that of their ``N % 64`` 32-bit lanes (``T.simd.pset(bits, count=...)``)."""
    lanes = 64
    groups, width = _lanes(N, lanes)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
             Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M // rows) as bx:
            x = T.alloc_shared((rows, width), dtype)
            w = T.alloc_shared((width,), dtype)
            y = T.alloc_shared((rows, width), dtype)
            T.copy(X[bx * rows : bx * rows + rows, 0:N], x[0:rows, 0:N])
            T.copy(W[0:N], w[0:N])
            with T.SimdVF():
                narrow, wide = T.simd.pset(16), T.simd.pset(32)
                tail = N - groups[-1] * lanes
                masks = {g: (narrow, wide) for g in groups}
                if tail < lanes:
                    masks[groups[-1]] = (T.simd.pset(16, count=2 * tail),
                                         T.simd.pset(32, count=tail))

                def widened(ref, g):
                    return T.simd.vcvt(T.simd.vld(ref, dist="unpack"), "float32", masks[g][0])

                for r in T.serial(rows):
                    squares = [T.simd.vmul(v, v, masks[g][1])
                               for g, v in ((g, widened(x[r, g * lanes], g)) for g in groups)]
                    total = squares[0]
                    for sq in squares[1:]:
                        total = T.simd.vadd(total, sq, wide)
                    mean = T.simd.vmuls(T.simd.vdup(T.simd.vcadd(total, wide), wide), 1.0 / N,
                                        wide)
                    scale = T.simd.vdiv(T.simd.vdup(1.0, wide),
                                        T.simd.vsqrt(T.simd.vadds(mean, eps, wide), wide), wide)
                    for g in groups:
                        m = masks[g][1]
                        out = T.simd.vmul(T.simd.vmul(widened(x[r, g * lanes], g), scale, m),
                                          widened(w[g * lanes], g), m)
                        T.simd.vsts(y[r, g * lanes], T.simd.vcvt(out, dtype, m), m, dist="pack")
            T.copy(y[0:rows, 0:N], Y[bx * rows : bx * rows + rows, 0:N])

    return main


def rmsnorm_reference(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def gemm(M, N, K, BM, BN, BK, l0=False, dtype="float16", transpose_A=False, transpose_B=False):
    """C = op(A) @ op(B) (float32 accumulation), K pipelined: ``T.gemm`` of the L1 tiles, or
    (``l0``) ``T.copy`` L1 -> L0A/L0B and ``T.gemm`` of the L0 tiles, whose layouts follow the
    GEMM's transpose flags. A transposed A is stored K x M, a transposed B N x K."""
    ta, tb = transpose_A, transpose_B
    a_tile, b_tile = ((BK, BM) if ta else (BM, BK)), ((BN, BK) if tb else (BK, BN))

    @T.prim_func
    def main(A: T.Tensor((K, M) if ta else (M, K), dtype),
             B: T.Tensor((N, K) if tb else (K, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel((M // BM) * (N // BN)) as bx:
            mi = bx // (N // BN)
            ni = bx % (N // BN)
            a = T.alloc_l1(a_tile, dtype)
            b = T.alloc_l1(b_tile, dtype)
            c = T.alloc_l0c((BM, BN), "float32")
            a0 = T.alloc_l0a(a_tile, dtype)
            b0 = T.alloc_l0b(b_tile, dtype)
            T.clear(c)
            for k in T.Pipelined(K // BK, num_stages=2):
                T.copy(A[k * BK, mi * BM] if ta else A[mi * BM, k * BK], a)
                T.copy(B[ni * BN, k * BK] if tb else B[k * BK, ni * BN], b)
                if l0:
                    T.copy(a, a0)
                    T.copy(b, b0)
                    T.gemm(a0, b0, c, transpose_A=ta, transpose_B=tb)
                else:
                    T.gemm(a, b, c, transpose_A=ta, transpose_B=tb)
            T.copy(c, C[mi * BM, ni * BN])

    return main


def gemm_relu(M, N, K, BM, BN, BK, split="m", dtype="float16"):
    """C = relu(A @ B) in a ``T.MixedKernel``: the cube accumulates a BM x BN tile in L0C over
    the K loop, ``T.dual_copy`` hands each vector sub-core its half (``split`` ``m``: BM/2 rows,
    ``n``: BN/2 columns) in UB, the ReLU runs in ``T.SimtVF`` and a second ``T.dual_copy``
    writes both halves to C (the seed's GEMM + ReLU)."""
    HM, HN = (BM // 2, BN) if split == "m" else (BM, BN // 2)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.MixedKernel((M // BM) * (N // BN), sids=2) as (bx, sid):
            m = bx // (N // BN) * BM
            n = bx % (N // BN) * BN
            A_l1 = T.alloc_l1((BM, BK), dtype)
            B_l1 = T.alloc_l1((BK, BN), dtype)
            C_l0c = T.alloc_l0c((BM, BN), "float32")
            C_ub = T.alloc_shared((HM, HN), "float32")
            T.clear(C_l0c)
            for k in T.Pipelined(K // BK, num_stages=2):
                T.copy(A[m, k * BK], A_l1)
                T.copy(B[k * BK, n], B_l1)
                T.gemm(A_l1, B_l1, C_l0c)
            T.dual_copy(C_l0c, C_ub)
            with T.SimtVF(threads=128):
                for i, j in T.Parallel(HM, HN):
                    C_ub[i, j] = T.max(C_ub[i, j], 0)
            T.dual_copy(C_ub, C[m : m + BM, n : n + BN], l2_cache_ctrl="NOTALLOC_PW")

    return main


def gemm_relu_loop(M, N, K, BM, BN, split="m", dtype="float16"):
    """C = relu(A @ B) with the ``T.dual_copy`` L0C -> UB in a loop: each ``T.MixedKernel``
    block keeps its BM rows of A in L1 and loops over the N tiles (``T.Pipelined`` for the
    cube/vector handoff, one version of each tile: the seed's flat pattern), each one
    GEMM over the whole K into L0C, the dual-destination Fixpipe into both sub-cores' UB
    (``split`` as in :func:`gemm_relu`), the ReLU on SIMT threads and the halves written to C;
    the cube's next Fixpipe waits until both sub-cores released their UB tile."""
    HM, HN = (BM // 2, BN) if split == "m" else (BM, BN // 2)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.MixedKernel(M // BM, sids=2) as (bx, sid):
            A_l1 = T.alloc_l1((BM, K), dtype)
            B_l1 = T.alloc_l1((K, BN), dtype)
            C_l0c = T.alloc_l0c((BM, BN), "float32")
            C_ub = T.alloc_shared((HM, HN), "float32")
            T.copy(A[bx * BM, 0], A_l1)
            for j in T.Pipelined(N // BN, num_stages=2):
                T.annotate_buffer_versions({B_l1: 1, C_l0c: 1, C_ub: 1})  # the flat pattern
                T.copy(B[0, j * BN], B_l1)
                T.gemm(A_l1, B_l1, C_l0c, clear_accum=True)
                T.dual_copy(C_l0c, C_ub)
                with T.SimtVF(threads=128):
                    for i, jj in T.Parallel(HM, HN):
                        C_ub[i, jj] = T.max(C_ub[i, jj], 0)
                T.dual_copy(C_ub, C[bx * BM : bx * BM + BM, j * BN : j * BN + BN])

    return main


def simt_transpose(N, scale=2.0):
    """Y = (scale * X)^T for an N x N tile in ``T.SimtVF(threads=N)`` with
    ``T.get_thread_binding()``: thread ``t`` scales row ``t`` into a UB tile, then writes row
    ``t`` of the result from column ``t`` of that tile, which the other threads wrote; the
    compiler puts the barrier (``asc_syncthreads()``) between the two loops."""

    @T.prim_func
    def main(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N, N), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((N, N), "float32")
            s = T.alloc_shared((N, N), "float32")
            y = T.alloc_shared((N, N), "float32")
            T.copy(X[bx * N, 0], x)
            with T.SimtVF(threads=N):
                t = T.get_thread_binding()
                for j in T.serial(N):
                    s[t, j] = x[t, j] * scale
                for j in T.serial(N):
                    y[t, j] = s[j, t]
            T.copy(y, Y[bx * N, 0])

    return main


def simt_transpose_2d(N, block=(16, 8), scale=2.0):
    """Y = (scale * X)^T for an N x N tile on a two-dimensional block of SIMT threads
    (``T.SimtVF(threads=(bx, by))``, ``T.get_thread_binding(0)`` and ``(1)`` the thread's
    column and row in the block): thread ``(tx, ty)`` scales the elements ``[ty + by * a,
    tx + bx * b]`` into a UB tile, then writes those of the result from the transposed ones,
    which other threads wrote; the compiler puts the barrier between the two loops. A
    ``T.Parallel`` nest after it is spread over all ``bx * by`` threads."""
    bx, by = block

    @T.prim_func
    def main(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N, N), "float32")):
        with T.Kernel(1):
            x = T.alloc_shared((N, N), "float32")
            s = T.alloc_shared((N, N), "float32")
            y = T.alloc_shared((N, N), "float32")
            T.copy(X, x)
            with T.SimtVF(threads=(bx, by)):
                tx = T.get_thread_binding(0)
                ty = T.get_thread_binding(1)
                for a in T.serial(N // by):
                    for b in T.serial(N // bx):
                        s[ty + by * a, tx + bx * b] = x[ty + by * a, tx + bx * b] * scale
                for a in T.serial(N // by):
                    for b in T.serial(N // bx):
                        y[ty + by * a, tx + bx * b] = s[tx + bx * b, ty + by * a]
                for i, j in T.Parallel(N, N):
                    y[i, j] = y[i, j] + 1.0
            T.copy(y, Y)

    return main


def simt_through_gm(M, N, rows=8):
    """Z = 2 X and Y = Z + X with SIMT threads that store to and load from GM themselves
    (``asc_stcg``/``asc_ldcg``): a block of ``(N, rows)`` threads writes its rows of Z from a
    UB tile, the vector core copies them back from GM into UB (the compiler's V -> MTE2 flag
    between the threads' GM stores and that copy), and a second function adds the rows of X
    it loads from GM and writes Y to GM."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M // rows) as bx:
            x = T.alloc_shared((rows, N), "float32")
            w = T.alloc_shared((rows, N), "float32")
            T.copy(X[bx * rows, 0], x)
            with T.SimtVF(threads=(N, rows)):
                tx = T.get_thread_binding(0)
                ty = T.get_thread_binding(1)
                Z[bx * rows + ty, tx] = x[ty, tx] * 2.0
            T.copy(Z[bx * rows, 0], w)
            with T.SimtVF(threads=(N, rows)):
                tx = T.get_thread_binding(0)
                ty = T.get_thread_binding(1)
                Y[bx * rows + ty, tx] = w[ty, tx] + X[bx * rows + ty, tx]

    return main


def simt_softmax(M, N):
    """Y = softmax(X) along rows in ``T.SimtVF(threads=M)``: thread ``t`` owns row ``t`` (its
    maximum and sum in a UB tile, ``T.exp`` the SIMT API's ``expf``); no thread reads another's
    elements, so the compiler puts no barrier."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((M, N), "float32")
            y = T.alloc_shared((M, N), "float32")
            stats = T.alloc_shared((M, 2), "float32")  # per row: maximum, sum
            T.copy(X[bx * M, 0], x)
            with T.SimtVF(threads=M):
                t = T.get_thread_binding()
                stats[t, 0] = x[t, 0]
                stats[t, 1] = 0.0
                for j in T.serial(N):
                    stats[t, 0] = T.max(stats[t, 0], x[t, j])
                for j in T.serial(N):
                    y[t, j] = T.exp(x[t, j] - stats[t, 0])
                    stats[t, 1] = stats[t, 1] + y[t, j]
                for j in T.serial(N):
                    y[t, j] = y[t, j] / stats[t, 1]
            T.copy(y, Y[bx * M, 0])

    return main


def main():
    N = 16 * 1024
    a, b = torch.randn(N), torch.randn(N)
    for body in ("parallel", "simt", "simd"):
        add = tilewright.compile(vector_add(N, body=body), out_idx=[2], target=TARGET)
        torch.testing.assert_close(add(a, b), a + b)
        print(f"vector add ({body}), 2 versions: matches torch, MTE2 overlap "
              f"{last_run_stats()['mte2_overlap']:.3f}")
    x = torch.randn(16, 256)
    sm = tilewright.compile(softmax(16, 256), out_idx=[1], target=TARGET)
    torch.testing.assert_close(sm(x), torch.softmax(x, -1))
    print("softmax (T.SimdVF): matches torch")
    x, w = torch.randn(8, 256).half(), torch.randn(256).half()
    norm = tilewright.compile(rmsnorm(8, 256), out_idx=[2], target=TARGET)
    torch.testing.assert_close(norm(x, w), rmsnorm_reference(x, w), rtol=1e-3, atol=1e-3)
    print("RMSNorm in float16 (T.SimdVF): matches torch")
    x, y = torch.randn(128, 256).half(), torch.randn(256, 128).half()
    for l0 in (False, True):
        mm = tilewright.compile(gemm(128, 128, 256, 64, 64, 64, l0=l0), out_idx=[2],
                                target=TARGET)
        torch.testing.assert_close(mm(x, y), x.float() @ y.float(), rtol=1e-2, atol=5e-2)
        print(f"GEMM through {'L0A/L0B' if l0 else 'L1'}: matches torch, MTE2 overlap "
              f"{last_run_stats()['mte2_overlap']:.3f}")
    for split in ("m", "n"):
        mm = tilewright.compile(gemm_relu(128, 128, 256, 64, 64, 64, split=split), out_idx=[2],
                                target=TARGET)
        torch.testing.assert_close(mm(x, y), torch.relu(x.float() @ y.float()), rtol=1e-2,
                                   atol=5e-2)
        print(f"GEMM + ReLU in T.MixedKernel, {split.upper()}-split T.dual_copy: matches torch, "
              f"races {last_run_stats()['races']}")
    x = torch.randn(64, 64)
    transpose = tilewright.compile(simt_transpose(64), out_idx=[1], target=TARGET)
    torch.testing.assert_close(transpose(x), (2.0 * x).T)
    print(f"transpose across 64 SIMT threads (T.get_thread_binding, automatic barrier): "
          f"matches torch, races {last_run_stats()['races']}")
    x = torch.randn(32, 256)
    sm = tilewright.compile(simt_softmax(32, 256), out_idx=[1], target=TARGET)
    torch.testing.assert_close(sm(x), torch.softmax(x, -1))
    print(f"softmax, one row per SIMT thread: matches torch, races {last_run_stats()['races']}")


if __name__ == "__main__":
    main()
