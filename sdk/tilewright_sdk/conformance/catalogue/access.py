"""Rows for ways of reaching memory beside ``T.copy``: ``T.transpose`` between tiles, reads
through the read-only cache (``T.__ldg``) and TileLang's 32-bit word loads and stores
(``T.ldg32``, ``T.stg32``, ``T.lds32``, ``T.sts32``) of every element width they take."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T

from .model import FLOATS, Kernel, rand, two_d
from .tiles import BASE

# element dtype -> elements in a 32-bit word
WORD_DTYPES = {"float32": 1, "int32": 1, "float16": 2, "bfloat16": 2, "int16": 2, "int8": 4,
               "uint8": 4}


def _transpose(dtype, M, N, bm=8, bn=16):
    """A (bm, bn) tile of A transposed twice: shared -> fragment (bn, bm), written to B = A^T;
    and one stage of a (2, bm, bn) shared tile -> a float32 shared tile, written to C."""

    @T.prim_func
    def transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype),
                  C: T.Tensor((N, M), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((2, bm, bn), dtype)
            F = T.alloc_fragment((bn, bm), dtype)
            W = T.alloc_shared((bn, bm), "float32")
            T.copy(A[by * bm, bx * bn], S[1, :, :])
            T.transpose(S[1, :, :], F)
            T.copy(F, B[bx * bn, by * bm])
            T.transpose(S[1, :, :], W)
            T.copy(W, C[bx * bn, by * bm])

    return transpose


def _read_only(dtype, M, N, bm=8, bn=16):
    @T.prim_func
    def read_only(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                B[by * bm + i, bx * bn + j] = T.__ldg(A[by * bm + i, bx * bn + j]) + \
                    T.__ldg(A, (by * bm + i, N - 1 - (bx * bn + j)))

    return read_only


def _read_only_ref(a):
    return [a + a.flip(1)]


def _words(dtype, M, W, bm=4, bw=8):
    """Each 32-bit word of a row: its bits as an int32 (B), written back whole to Y and through
    a shared row to Z, and to P only at even words (a predicated load and store)."""
    n = WORD_DTYPES[dtype]

    @T.prim_func
    def words(X: T.Tensor((M, W * n), dtype), B: T.Tensor((M, W), "int32"),
              Y: T.Tensor((M, W * n), dtype), Z: T.Tensor((M, W * n), dtype),
              P: T.Tensor((M, W * n), dtype)):
        with T.Kernel(T.ceildiv(W, bw), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bw * n), dtype)
            for i, k in T.Parallel(bm, bw):
                r, w = by * bm + i, bx * bw + k
                B[r, w] = T.reinterpret(T.ldg32(X[r, w * n:w * n + n]), "int32")
                T.stg32(Y[r, w * n], T.ldg32(X[r, w * n]))
                T.sts32(S[i, k * n:k * n + n], T.ldg32(X[r, w * n]))
                T.stg32(P[r, w * n], T.ldg32(X[r, w * n], pred=w % 2 == 0), pred=w < W)
            for i, k in T.Parallel(bm, bw):
                T.stg32(Z[by * bm + i, (bx * bw + k) * n], T.lds32(S[i, k * n:k * n + n]))

    return words


def _words_inputs(torch, gen, dtype, M, W):
    return [rand(torch, gen, (M, W * WORD_DTYPES[dtype]), dtype, -100, 100)]


def _words_ref(x, dtype):
    import torch

    bits = x.to(getattr(torch, dtype))
    words = bits.view(torch.int32)
    n = WORD_DTYPES[dtype]
    even = (torch.arange(words.shape[1]) % 2 == 0).repeat_interleave(n)
    return [words, x, x, x * even]


ROWS = (
    Kernel("transpose", (*BASE, "alloc_shared", "alloc_fragment", "copy", "transpose"),
           ("copy", "transpose"), _transpose, two_d, lambda a: [a.T, a.T],
           {"full": {"M": 16, "N": 32}, "partial": {"M": 20, "N": 26}}, out_idx=(1, 2),
           dtypes=(*FLOATS, "int8", "int32"),
           doc="T.transpose of a stage of a shared tile into a fragment and, converted, into a "
               "float32 shared tile"),
    Kernel("read_only_load", (*BASE, "Parallel", "__ldg"), (), _read_only, two_d,
           _read_only_ref, {"full": {"M": 16, "N": 32}, "partial": {"M": 20, "N": 26}},
           dtypes=(*FLOATS, "int8", "int32", "int64"),
           doc="T.__ldg of an element and of a tensor at an index (the read-only cache on "
               "CUDA), past the tensor's edge at partial tiles"),
    Kernel("word_access", (*BASE, "Parallel", "alloc_shared", "reinterpret", "ldg32", "stg32",
                           "lds32", "sts32"), (), _words, _words_inputs, _words_ref,
           {"full": {"M": 8, "W": 16}, "partial": {"M": 6, "W": 13}}, out_idx=(1, 2, 3, 4),
           dtypes=tuple(WORD_DTYPES), ref_args=("dtype",), exact=True,
           doc="TileLang's 32-bit word loads and stores of 1, 2 and 4 elements, from global "
               "and shared memory, predicated, as integers and back"),
)


# the element dtypes of the vector rows: those of the word accesses, uint16 too
VECTOR_DTYPES = (*WORD_DTYPES, "uint16")


def _vectors(dtype, M, W, words, bm=4):
    """Vectors of ``dtype`` (T.<dtype>x<lanes>): each row's ``words``-word groups read as one
    vector (``T.ldg64`` / ``T.ldg128`` / ``T.ldg256``) and stored into a slice (Y) and, doubled
    lane by lane, into V; through a shared row (``T.sts`` / ``T.lds`` of the same width, at
    most 128 bits) to Z; predicated on even groups to P; each group's first word as an int32
    (``T.extract_lane``) to F; a 32-bit word as a vector of its elements, and two elements
    packed into a two-lane ``T.alloc_var`` and read back lane by lane, to Q."""
    n = WORD_DTYPES.get(dtype, 2)
    lanes = n * words
    group, groups, width = lanes, W // words, 32 * words
    vec, word_vec, pair = f"{dtype}x{lanes}", f"{dtype}x{n}", T.dtype(f"{dtype}x2")
    ldg, stg = getattr(T, f"ldg{width}"), getattr(T, f"stg{width}")
    shared = width <= 128
    lds, sts = (getattr(T, f"lds{width}"), getattr(T, f"sts{width}")) if shared else (ldg, stg)

    @T.prim_func
    def vectors(X: T.Tensor((M, W * n), dtype), Y: T.Tensor((M, W * n), dtype),
                V: T.Tensor((M, W * n), dtype), Z: T.Tensor((M, W * n), dtype),
                P: T.Tensor((M, W * n), dtype), F: T.Tensor((M, groups), "int32"),
                Q: T.Tensor((M, W * n), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as by:
            S = T.alloc_shared((bm, W * n), dtype)
            for i, g in T.Parallel(bm, groups):
                r, c = by * bm + i, g * group
                if r < M:
                    Y[r, c:c + lanes] = T.reinterpret(ldg(X[r, c:c + lanes]), vec)
                    v = T.reinterpret(ldg(X[r, c]), vec)
                    V[r, c:c + lanes] = v + v
                    stg(P[r, c:c + lanes], ldg(X[r, c:c + lanes], pred=g % 2 == 0))
                    F[r, g] = T.reinterpret(T.extract_lane(ldg(X[r, c]), 0), "int32")
                    if shared:
                        sts(S[i, c:c + lanes], ldg(X[r, c]))
            for i, k in T.Parallel(bm, W):
                r = by * bm + i
                if r < M:
                    if n > 1:
                        Q[r, k * n:k * n + n] = T.reinterpret(T.ldg32(X[r, k * n:k * n + n]),
                                                              word_vec)
                    else:
                        two = T.alloc_var(pair)
                        two = pair(X[r, k], X[r, k])
                        Q[r, k] = T.Select(k % 2 == 0, T.extract_lane(two, 0),
                                           T.extract_lane(two, 1))
            for i, g in T.Parallel(bm, groups):
                if by * bm + i < M:
                    if shared:
                        stg(Z[by * bm + i, g * group], lds(S[i, g * group:g * group + group]))
                    else:
                        stg(Z[by * bm + i, g * group], ldg(X[by * bm + i, g * group]))

    return vectors


def _vectors_inputs(torch, gen, dtype, M, W, words):
    return [rand(torch, gen, (M, W * WORD_DTYPES.get(dtype, 2)), dtype, 0, 60)]


def _vectors_ref(x, words, dtype):
    import torch

    t = getattr(torch, dtype)
    x = x.to(t)
    lanes = WORD_DTYPES.get(dtype, 2) * words
    even = (torch.arange(x.shape[1]) // lanes % 2 == 0)
    first = x.view(torch.int32)[:, ::words]
    doubled = (x.double() * 2).to(t)  # exact: the values are small integers
    return [x, doubled, x, torch.where(even, x, torch.zeros((), dtype=t)), first, x]


# the vectors the rows build: of each element dtype, and the words of the accesses
VECTOR_NAMES = tuple(f"{d}x{k}" for d in VECTOR_DTYPES
                     for k in {2, *(WORD_DTYPES.get(d, 2) * w for w in (1, 2, 4, 8))} if k > 1) \
    + ("uint32x2", "uint32x4", "uint32x8")

ROWS = (*ROWS,
        Kernel("vector_access", (*BASE, "Parallel", "alloc_shared", "alloc_var", "reinterpret",
                                 "Select",
                                 "extract_lane", "ldg32", "ldg64", "ldg128", "stg64", "stg128",
                                 "lds64", "lds128", "sts64", "sts128", "uint32",
                                 *(v for v in VECTOR_NAMES if T.dtype(v).bits * T.dtype(v).lanes
                                   <= 128)),
               (), _vectors, _vectors_inputs, _vectors_ref,
               {"full": {"M": 8, "W": 16, "words": 2}, "partial": {"M": 6, "W": 16, "words": 4}},
               out_idx=(1, 2, 3, 4, 5, 6), features=("vector_dtypes",), dtypes=VECTOR_DTYPES,
               ref_args=("words", "dtype"), exact=True,
               doc="vector dtypes (T.<dtype>x<lanes>): 64- and 128-bit word loads and stores "
                   "(global, shared, predicated) as vectors stored into slices, doubled lane by "
                   "lane, read lane by lane (T.extract_lane), a 32-bit word as a vector of its "
                   "elements, two elements packed into a T.alloc_var"),
        Kernel("wide_vector_access", (*BASE, "Parallel", "alloc_shared", "alloc_var", "Select",
                                      "reinterpret", "extract_lane", "ldg32", "ldg256", "stg256",
                                      "uint32", *VECTOR_NAMES),
               (), _vectors, _vectors_inputs, _vectors_ref,
               {"full": {"M": 8, "W": 16, "words": 8}}, out_idx=(1, 2, 3, 4, 5, 6),
               features=("vector_dtypes", "wide_vectors"), dtypes=VECTOR_DTYPES,
               ref_args=("words", "dtype"), exact=True,
               doc="the 256-bit word accesses T.ldg256 / T.stg256 as vectors of 8 words (backends "
                   "with the 'wide_vectors' feature: cpu and interp; CUDA's vector types hold 128 "
                   "bits)"),
        )
