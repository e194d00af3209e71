"""Rows for data movement and matrix tiles: copies (partial tiles in every dimension,
transposes, strides, regions), fill, GEMM in every transpose and loop form, layouts and
swizzles, softmax, RMSNorm, attention, and the debug ops."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T

from .model import FLOATS, INTEGERS, Kernel, rand, two_d

BASE = ("prim_func", "Tensor", "Kernel", "ceildiv")


def _copy(dtype, M, N, bm=16, bn=16):
    @T.prim_func
    def copy(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            F = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], S)
            T.copy(S, F)
            T.copy(F, B[by * bm, bx * bn])

    return copy


def _copy_3d(dtype, B, M, N, bb=2, bm=8, bn=8):
    @T.prim_func
    def copy_3d(A: T.Tensor((B, M, N), dtype), C: T.Tensor((B, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), T.ceildiv(B, bb),
                      threads=128) as (bx, by, bz):
            S = T.alloc_shared((bb, bm, bn), dtype)
            T.copy(A[bz * bb, by * bm, bx * bn], S)
            T.copy(S, C[bz * bb, by * bm, bx * bn])

    return copy_3d


def _copy_views(dtype, M, N, bm=8, bn=16):
    """Transposed tiles, a stride-2 gather, a sub-rectangle at a column offset, a row of a 2-D
    tensor as a 1-D tile, and a T.region."""
    half = N // 2

    @T.prim_func
    def copy_views(A: T.Buffer((M, N), dtype), At: T.Tensor((N, M), dtype),
                   Ev: T.Tensor((M, half), dtype), Sub: T.Tensor((M, half), dtype),
                   Row: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            St = T.alloc_shared((bn, bm), dtype)
            F = T.alloc_fragment((bm, half), dtype)
            R = T.alloc_fragment((N,), dtype)
            T.copy(A[by * bm, bx * bn], S)
            for i, j in T.Parallel(bn, bm):
                St[i, j] = S[j, i]
            T.copy(St, At[bx * bn, by * bm])
            if bx == 0:
                for i, j in T.Parallel(bm, half):
                    if by * bm + i < M:
                        Ev[by * bm + i, j] = A[by * bm + i, 2 * j + 1]
                T.copy(T.region(A[by * bm, half], "r", bm, half), F)
                T.copy(F, Sub[by * bm, 0])
                if by == 0:
                    T.copy(A[1, 0:N], R)
                    T.copy(R, Row[0:N])

    return copy_views


def _copy_views_ref(a):
    n = a.shape[1]
    return [a.T.contiguous(), a[:, 1::2][:, : n // 2], a[:, n // 2: n // 2 * 2], a[1]]


def _strided(dtype, M, N, bm=8, bn=16):
    """T.StridedTensor parameters: a column block of a wider matrix (its row stride a
    symbol), a transposed view (both strides symbols, the subscript form) and one the kernel
    writes, every other column of a wider buffer (a constant column stride)."""
    sa, ta, tb, sc = T.dynamic("sa, ta, tb, sc")

    @T.prim_func
    def strided_tensors(A: T.StridedTensor((M, N), (sa, 1), dtype),
                        At: T.StridedTensor[(M, N), (ta, tb), dtype],
                        C: T.StridedTensor((M, N), (sc, 2), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            F = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], S)
            for i, j in T.Parallel(bm, bn):
                F[i, j] = S[i, j] * 2 + At[by * bm + i, bx * bn + j]
            T.copy(F, C[by * bm, bx * bn])

    return strided_tensors


def _strided_inputs(torch, gen, dtype, M, N):
    wide = rand(torch, gen, (M, N + 5), dtype)
    return [wide[:, 2:N + 2], rand(torch, gen, (N, M), dtype).t(),
            torch.zeros(M, 2 * N, dtype=getattr(torch, dtype))[:, ::2]]


def _fill(dtype, M, N, bm=16, bn=16):
    @T.prim_func
    def fill(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            F = T.alloc_fragment((bm, bn), dtype)
            Z = T.alloc_fragment((bm, bn), dtype)
            T.fill(F, 1.5)
            T.clear(Z)
            T.copy(A[by * bm, bx * bn], Z)
            for i, j in T.Parallel(bm, bn):
                F[i, j] = F[i, j] + Z[i, j]
            T.copy(F, B[by * bm, bx * bn])

    return fill


def _elementwise(dtype, M, N, bm=16, bn=16):
    @T.prim_func
    def elementwise(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                    C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                if by * bm + i < M and bx * bn + j < N:
                    C[by * bm + i, bx * bn + j] = A[by * bm + i, bx * bn + j] * 2.0 + \
                        B[by * bm + i, bx * bn + j]

    return elementwise


def _elementwise_vectors(dtype, M, N, bm=8, bn=256):
    """Whole 8 x 256 tiles, 16 elements a thread: the nests a backend may move by vectors
    (CUDA: 16-byte accesses): arithmetic in the dtype; float32 arithmetic on converted
    elements and a row's scale (a load that does not move along the row) into float32 and
    back into the dtype."""
    @T.prim_func
    def elementwise_vectors(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                            S: T.Tensor((M,), "float32"), C: T.Tensor((M, N), dtype),
                            D: T.Tensor((M, N), "float32"), E: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                r, c = by * bm + i, bx * bn + j
                C[r, c] = A[r, c] * 2.0 + B[r, c]
            for i, j in T.Parallel(bm, bn):
                r, c = by * bm + i, bx * bn + j
                D[r, c] = T.Cast("float32", A[r, c]) * S[r] + T.Cast("float32", B[r, c])
                E[r, c] = T.Cast(dtype, T.max(T.Cast("float32", A[r, c]), 0.0) * S[r])

    return elementwise_vectors


def _elementwise_vectors_ref(a, b, s):
    return [a * 2.0 + b, a * s[:, None] + b, a.clamp(min=0) * s[:, None]]


def _broadcast(dtype, M, N, bm=16, bn=16):
    @T.prim_func
    def broadcast(A: T.Tensor((M, N), dtype), R: T.Tensor((M, N), dtype),
                  C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_fragment((bm, bn), dtype)
            rows = T.alloc_fragment((bm, bn), dtype)
            cols = T.alloc_buffer((bm, bn), dtype, scope="local.fragment")  # TVM script's form
            T.copy(A[by * bm, bx * bn], tile)
            for i, j in T.Parallel(bm, bn):
                rows[i, j] = tile[0, j]
                cols[i, j] = tile[i, 0]
            T.copy(rows, R[by * bm, bx * bn])
            T.copy(cols, C[by * bm, bx * bn])

    return broadcast


def _broadcast_ref(a, bm=16, bn=16):
    """Each tile's first row repeated down the tile, and its first column across it."""
    import torch

    rows = torch.arange(a.shape[0]) // bm * bm
    cols = torch.arange(a.shape[1]) // bn * bn
    return [a[rows, :], a[:, cols]]


# GEMM and attention tiles are multiples of the 16x8x16 tensor-core instruction and split evenly
# over 4 warps, so accelerator backends are tested on their tensor-core path, not a fallback.
def gemm_kernel(dtype, M, N, K, trans_a=False, trans_b=False, stages=2, bm=32, bn=32, bk=16,
          pipelined=True):
    a_shape, b_shape = ((K, M) if trans_a else (M, K)), ((N, K) if trans_b else (K, N))
    as_shape, bs_shape = ((bk, bm) if trans_a else (bm, bk)), ((bn, bk) if trans_b else (bk, bn))

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            loop = T.Pipelined(T.ceildiv(K, bk), num_stages=stages) if pipelined else \
                T.serial(T.ceildiv(K, bk))
            for k in loop:
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm


def _gemm_dynamic(dtype, bm=32, bn=32, bk=16):
    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")

    @T.prim_func
    def gemm_dynamic(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                     C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm_dynamic


def _gemm_layouts(dtype, M, N, K, bm=32, bn=32, bk=16):
    """A GEMM whose shared tiles carry annotated layouts (an XOR swizzle and a Fragment), with
    rasterised blocks, a warp policy, and ``clear_accum`` on the first K step."""

    def xor_swizzle(i, j):
        return i, ((j // 8) ^ (i % 2)) * 8 + j % 8

    @T.prim_func
    def gemm_layouts(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                     C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({A_s: T.Layout((bm, bk), xor_swizzle),
                               B_s: T.Fragment((bk, bn), forward_index_fn=lambda i, j: (i, j))})
            T.use_swizzle(panel_size=2, order="row")
            T.fill(C_f, 7.0)  # clear_accum discards it
            for k in T.serial(T.ceildiv(K, bk)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, policy=T.GemmWarpPolicy.FullRow, clear_accum=k == 0)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm_layouts


def _gemm_inputs(torch, gen, dtype, M, N, K, trans_a=False, trans_b=False, **_):
    a = rand(torch, gen, (K, M) if trans_a else (M, K), dtype)
    b = rand(torch, gen, (N, K) if trans_b else (K, N), dtype)
    return [a, b]


def _gemm_ref(trans_a=False, trans_b=False):
    def ref(a, b):
        return [(a.T if trans_a else a) @ (b.T if trans_b else b)]

    return ref


def _softmax(dtype, M, N, bm=4):
    scale = 1.44269504

    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            row_max = T.alloc_fragment((bm,), "float32")
            row_sum = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * scale)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * bm, 0])

    return softmax


def _rmsnorm(dtype, M, N, bm=4, eps=1e-6):
    @T.prim_func
    def rmsnorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            sq = T.alloc_fragment((bm, N), "float32")
            ss = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i in T.Parallel(bm):
                ss[i] = T.rsqrt(ss[i] / N + eps)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * ss[i] * W[j]
            T.copy(x, Y[bx * bm, 0])

    return rmsnorm


def attention_kernel(dtype, S, D, bm=32, bn=16):
    scale = (1.0 / D) ** 0.5 * 1.44269504

    @T.prim_func
    def attention(Q: T.Tensor((S, D), dtype), K: T.Tensor((S, D), dtype),
                  V: T.Tensor((S, D), dtype), Out: T.Tensor((S, D), dtype)):
        with T.Kernel(T.ceildiv(S, bm), threads=128) as bx:
            Q_s = T.alloc_shared((bm, D), dtype)
            K_s = T.alloc_shared((bn, D), dtype)
            V_s = T.alloc_shared((bn, D), dtype)
            s = T.alloc_fragment((bm, bn), "float32")
            p = T.alloc_fragment((bm, bn), dtype)
            acc = T.alloc_fragment((bm, D), "float32")
            m = T.alloc_fragment((bm,), "float32")
            m_prev = T.alloc_fragment((bm,), "float32")
            rescale = T.alloc_fragment((bm,), "float32")
            row = T.alloc_fragment((bm,), "float32")
            total = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.fill(acc, 0)
            T.fill(total, 0)
            T.fill(m, -T.infinity("float32"))
            for k in T.Pipelined(T.ceildiv(S, bn), num_stages=1):
                T.copy(K[k * bn, 0], K_s)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.if_then_else(k * bn + j < S, 0, -T.infinity("float32"))
                T.gemm(Q_s, K_s, s, transpose_B=True)
                T.copy(m, m_prev)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(bm):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.exp2(s[i, j] * scale - m[i] * scale)
                T.reduce_sum(s, row, dim=1)
                for i in T.Parallel(bm):
                    total[i] = total[i] * rescale[i] + row[i]
                T.copy(s, p)
                for i, j in T.Parallel(bm, D):
                    acc[i, j] = acc[i, j] * rescale[i]
                T.copy(V[k * bn, 0], V_s)
                T.gemm(p, V_s, acc)
            for i, j in T.Parallel(bm, D):
                acc[i, j] = acc[i, j] / total[i]
            T.copy(acc, Out[bx * bm, 0])

    return attention


def attention_reference(q, k, v):
    s = (q @ k.T) / q.shape[1] ** 0.5
    return [s.softmax(dim=1) @ v]


def _debug(dtype, N, bn=8):
    @T.prim_func
    def debug(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            x = T.alloc_fragment((bn,), dtype)
            T.copy(A[bx * bn], x)
            if bx == 0:
                T.print(x, msg="conformance tile")
                T.print(bx, msg="conformance value")
            T.device_assert(bx >= 0, "block index is non-negative")
            T.copy(x, B[bx * bn])

    return debug


def probe_kernel(dtype="float32"):
    """A kernel with no tile ops (a ``T.Parallel`` loop): every backend can lower it."""

    @T.prim_func
    def probe(A: T.Tensor((8,), dtype), B: T.Tensor((8,), dtype)):
        with T.Kernel(1, threads=32) as _bx:
            for i in T.Parallel(8):
                B[i] = A[i]

    return probe


MN = {"full": {"M": 32, "N": 32}, "partial": {"M": 40, "N": 24}}
GEMM_SHAPES = {"full": {"M": 32, "N": 32, "K": 32}, "partial": {"M": 40, "N": 24, "K": 40}}
GEMM = (*BASE, "gemm", "alloc_shared", "alloc_fragment", "clear", "copy")


def _gemm_rows():
    rows = []
    for suffix, ta, tb in (("", False, False), ("_tn", True, False), ("_nt", False, True),
                           ("_tt", True, True)):
        rows.append(Kernel(
            f"gemm{suffix}", (*GEMM, "Pipelined"), ("gemm", "copy", "fill"),
            lambda dtype, M, N, K, _ta=ta, _tb=tb: gemm_kernel(dtype, M, N, K, _ta, _tb),
            lambda torch, gen, dtype, M, N, K, _ta=ta, _tb=tb: _gemm_inputs(
                torch, gen, dtype, M, N, K, _ta, _tb),
            _gemm_ref(ta, tb), GEMM_SHAPES, reduction=lambda K, **_: K,
            doc=f"C = {'A^T' if ta else 'A'} @ {'B^T' if tb else 'B'}, float32 accumulator"))
    return rows


def _gemv_rows():
    """Decode GEMVs: one row of A (M = 1: a (1, K) tile of A, also with the weights stored
    [N, K]) and one column of B (N = 1: a (K, 1) tile); a backend may take a path without
    tensor cores for them."""
    rows = []
    for name, ta, tb, tile, shape, what in (
            ("gemv", False, False, {"bm": 1}, {"M": 1, "N": 40, "K": 40}, "a row of A"),
            ("gemv_nt", False, True, {"bm": 1}, {"M": 1, "N": 40, "K": 40},
             "a row of A against weights stored [N, K]"),
            ("gemv_column", False, False, {"bn": 1}, {"M": 40, "N": 1, "K": 40},
             "a column of B"),
            ("gemv_column_tn", True, False, {"bn": 1}, {"M": 40, "N": 1, "K": 40},
             "a column of B against A stored [K, M]")):
        rows.append(Kernel(
            name, (*GEMM, "Pipelined"), ("gemm", "copy", "fill"),
            lambda dtype, M, N, K, _ta=ta, _tb=tb, _tile=tile: gemm_kernel(
                dtype, M, N, K, _ta, _tb, **_tile),
            lambda torch, gen, dtype, M, N, K, _ta=ta, _tb=tb: _gemm_inputs(
                torch, gen, dtype, M, N, K, _ta, _tb),
            _gemm_ref(ta, tb), {"partial": shape}, reduction=lambda K, **_: K,
            doc=f"T.gemm of {what} (a one-wide tile keeps its unit dimension; it was refused "
                "as not 2-D)"))
    return rows


ROWS = (
    Kernel("copy", (*BASE, "alloc_shared", "alloc_fragment", "copy"), ("copy",), _copy, two_d,
           lambda a: [a], MN, doc="global -> shared -> fragment -> global"),
    Kernel("copy_column", (*BASE, "alloc_shared", "alloc_fragment", "copy"), ("copy",),
           lambda dtype, M, N: _copy(dtype, M, N, bm=8, bn=1), two_d, lambda a: [a],
           {"partial": {"M": 20, "N": 1}},
           doc="(8, 1) tiles of a column: a tile keeps its shape when the region it fills has "
               "its rank (found by the fuzzer: it was copied as (1, 8))"),
    Kernel("copy_3d", (*BASE, "alloc_shared", "copy"), ("copy",), _copy_3d,
           lambda torch, gen, dtype, B, M, N: [rand(torch, gen, (B, M, N), dtype)],
           lambda a: [a], {"partial": {"B": 5, "M": 19, "N": 13}},
           doc="a 3-D grid over a 3-D tensor with partial tiles in every dimension"),
    Kernel("copy_views", (*BASE, "Buffer", "alloc_shared", "alloc_fragment", "copy", "region",
                          "Parallel"), ("copy",), _copy_views, two_d, _copy_views_ref,
           {"full": {"M": 16, "N": 32}, "partial": {"M": 20, "N": 26}}, out_idx=(1, 2, 3, 4),
           doc="a transposed tile, a stride-2 gather, a sub-rectangle through T.region, a row "
               "of a 2-D tensor as a 1-D tile"),
    Kernel("strided_tensors", (*BASE, "StridedTensor", "dynamic", "alloc_shared",
                               "alloc_fragment", "copy", "Parallel"), ("copy",), _strided,
           _strided_inputs, lambda a, at, c: [a * 2 + at],
           {"full": {"M": 16, "N": 32}, "partial": {"M": 20, "N": 26}}, out_idx=(),
           inplace=(2,), features=("strided_tensors",),
           doc="non-contiguous tensors addressed with their strides: T.copy from a column "
               "block and into every other column, elements of a transposed view"),
    Kernel("fill", (*BASE, "fill", "clear", "Parallel", "alloc_fragment", "copy"),
           ("fill", "copy"), _fill, two_d, lambda a: [a + 1.5], MN,
           doc="T.fill and T.clear, then an elementwise add"),
    Kernel("elementwise", (*BASE, "Parallel"), (), _elementwise,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype)],
           lambda a, b: [a * 2.0 + b], MN, doc="T.Parallel with a bounds guard"),
    Kernel("elementwise_vectors", (*BASE, "Parallel", "Cast", "max"), (), _elementwise_vectors,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (M,), "float32")],
           _elementwise_vectors_ref, {"full": {"M": 16, "N": 512}}, out_idx=(3, 4, 5),
           doc="elementwise nests over whole tiles, with conversions and a row's scale: the "
               "shapes a backend moves by vectors (CUDA's 16-byte accesses)"),
    Kernel("broadcast", (*BASE, "alloc_fragment", "alloc_buffer", "copy", "Parallel"), ("copy",),
           _broadcast,
           two_d, _broadcast_ref, MN, out_idx=(1, 2), dtypes=(*FLOATS, *INTEGERS),
           doc="a tile's row and column broadcast over the tile, in every dtype (found by the "
               "fuzzer: Ascend broadcast an int8 row with Add, which A2 computes on 16- and "
               "32-bit integers only)"),
    *_gemm_rows(),
    *_gemv_rows(),
    Kernel("gemm_serial", (*GEMM, "serial"), ("gemm", "copy", "fill"),
           lambda dtype, M, N, K: gemm_kernel(dtype, M, N, K, pipelined=False), _gemm_inputs,
           _gemm_ref(), {"partial": {"M": 24, "N": 40, "K": 40}},
           reduction=lambda K, **_: K, doc="K loop with T.serial instead of T.Pipelined"),
    Kernel("gemm_pipelined", (*GEMM, "Pipelined"), ("gemm", "copy", "fill"),
           lambda dtype, M, N, K: gemm_kernel(dtype, M, N, K, stages=3), _gemm_inputs,
           _gemm_ref(), {"partial": {"M": 24, "N": 24, "K": 72}},
           reduction=lambda K, **_: K, doc="T.Pipelined with num_stages=3"),
    Kernel("gemm_dynamic", (*GEMM, "Pipelined", "dynamic"), ("gemm", "copy", "fill"),
           lambda dtype, M, N, K: _gemm_dynamic(dtype), _gemm_inputs, _gemm_ref(),
           {"dynamic": {"M": 40, "N": 24, "K": 40}}, reduction=lambda K, **_: K,
           doc="M, N, K read from the arguments (T.dynamic)"),
    Kernel("gemm_layouts", (*GEMM, "serial", "fill", "annotate_layout", "Layout", "Fragment",
                            "use_swizzle", "GemmWarpPolicy"), ("gemm", "copy", "fill"),
           _gemm_layouts, _gemm_inputs, _gemm_ref(), {"partial": {"M": 40, "N": 72, "K": 48}},
           reduction=lambda K, **_: K,
           doc="annotated shared layouts (XOR swizzle, T.Fragment), T.use_swizzle, "
               "GemmWarpPolicy.FullRow and clear_accum on the first K step"),
    Kernel("softmax", (*BASE, "alloc_fragment", "copy", "reduce_max", "reduce_sum", "exp2",
                       "Parallel"), ("copy", "reduce_max", "reduce_sum"), _softmax, two_d,
           lambda x: [x.softmax(dim=1)], {"full": {"M": 8, "N": 32}, "partial": {"M": 10,
                                                                                "N": 20}},
           reduction=lambda N, **_: N),
    Kernel("rmsnorm", (*BASE, "alloc_fragment", "copy", "reduce_sum", "rsqrt", "Parallel"),
           ("copy", "reduce_sum"), _rmsnorm,
           lambda torch, gen, dtype, M, N: [rand(torch, gen, (M, N), dtype),
                                             rand(torch, gen, (N,), dtype)],
           lambda x, w: [x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * w],
           {"full": {"M": 8, "N": 32}, "partial": {"M": 10, "N": 20}},
           reduction=lambda N, **_: N),
    Kernel("attention", (*GEMM, "Pipelined", "fill", "infinity", "if_then_else", "reduce_max",
                         "reduce_sum", "exp2", "Parallel"),
           ("copy", "fill", "gemm", "reduce_max", "reduce_sum"), attention_kernel,
           lambda torch, gen, dtype, S, D: [rand(torch, gen, (S, D), dtype) for _ in range(3)],
           attention_reference, {"full": {"S": 16, "D": 16}, "partial": {"S": 20, "D": 16}},
           reduction=lambda S, D: max(S, D),
           doc="flash attention with online softmax, one head"),
    Kernel("debug", (*BASE, "alloc_fragment", "copy", "print", "device_assert"),
           ("copy", "print_tile", "print_value", "device_assert"), _debug,
           lambda torch, gen, dtype, N: [rand(torch, gen, (N,), dtype)],
           lambda a: [a], {"partial": {"N": 12}},
           doc="T.print of a tile and a value, T.device_assert that holds"),
)
