"""The catalogue of portable kernels every backend is checked against.

Each :class:`Kernel` is a kernel factory (returning a ``T.prim_func``), the tile ops it uses, the
backend features it needs, how to make its inputs, and a torch reference computed in float64.
:func:`cases` expands the catalogue over dtypes and shape variants: ``full`` (whole tiles),
``partial`` (sizes that leave partial tiles at the edges) and ``dynamic`` (sizes read from the
arguments at every call). Shapes are small: the suite checks semantics, not speed, and must
stay quick on an interpreter.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations,
# which name the factory's local sizes.
from collections.abc import Callable
from dataclasses import dataclass, field

import tilewright.language as T

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Kernel:
    """One portable kernel of the catalogue.

    - ``make(dtype, **dims) -> PrimFunc``; ``dims`` come from a ``shapes`` variant;
    - ``inputs(torch, gen, dtype, **dims) -> list`` of the arguments the kernel is called with;
    - ``reference(*inputs) -> list`` of expected outputs (float64 inputs are given);
    - ``out_idx``: the parameters the kernel allocates and returns; ``inplace``: positions of
      arguments the kernel writes (checked after the call, e.g. atomics' accumulators);
    - ``reduction(**dims)``: the longest reduction behind an output element, for tolerances.
    """

    name: str
    ops: tuple[str, ...]
    make: Callable
    inputs: Callable
    reference: Callable
    shapes: dict
    out_idx: tuple[int, ...] = (-1,)
    inplace: tuple[int, ...] = ()
    reduction: Callable = lambda **dims: 1
    features: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = DTYPES
    doc: str = ""


@dataclass(frozen=True)
class Case:
    """A kernel at one dtype and one shape variant: one conformance test."""

    kernel: Kernel
    dtype: str
    variant: str
    dims: dict = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.kernel.name}-{self.dtype}-{self.variant}"

    @property
    def features(self) -> tuple[str, ...]:
        extra = {"partial": ("partial_tiles",), "dynamic": ("dynamic_shapes",)}
        return tuple(sorted({*self.kernel.features, *extra.get(self.variant, ())}))


def _randn(torch, gen, shape, dtype):
    return torch.randn(*shape, generator=gen).to(getattr(torch, dtype))


# -- kernels -----------------------------------------------------------------------------------
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


# GEMM and attention tiles are multiples of the 16x8x16 tensor-core instruction and split evenly
# over 4 warps, so accelerator backends are tested on their tensor-core path, not a fallback.
def _gemm(dtype, M, N, K, trans_a=False, trans_b=False, stages=2, bm=32, bn=32, bk=16,
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


def _reduce(kind):
    def make(dtype, M, N, bm=4):
        op = getattr(T, f"reduce_{kind}")

        @T.prim_func
        def reduce(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
            with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
                x = T.alloc_fragment((bm, N), "float32")
                y = T.alloc_fragment((bm,), "float32")
                T.copy(X[bx * bm, 0], x)
                op(x, y, dim=1)
                T.copy(y, Y[bx * bm])

        return reduce

    return make


def _reduce_cols(dtype, M, N, bn=8):
    @T.prim_func
    def reduce_cols(X: T.Tensor((M, N), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            x = T.alloc_fragment((M, bn), "float32")
            y = T.alloc_fragment((bn,), "float32")
            T.copy(X[0, bx * bn], x)
            T.reduce_sum(x, y, dim=0)
            T.copy(y, Y[bx * bn])

    return reduce_cols


def _cumsum(reverse):
    def make(dtype, M, N, bm=4):
        @T.prim_func
        def cumsum(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
                x = T.alloc_fragment((bm, N), "float32")
                y = T.alloc_fragment((bm, N), "float32")
                T.copy(X[bx * bm, 0], x)
                T.cumsum(x, y, dim=1, reverse=reverse)
                T.copy(y, Y[bx * bm, 0])

        return cumsum

    return make


def _atomic_tile(kind):
    def make(dtype, M, N, splits=3, bm=16, bn=16):
        op = getattr(T, f"atomic_{kind}")

        @T.prim_func
        def atomic(X: T.Tensor((splits, M, N), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=128) as (bx, by,
                                                                                        bz):
                x = T.alloc_fragment((bm, bn), dtype)
                T.copy(X[bz, by * bm, bx * bn], x)
                op(Y[by * bm, bx * bn], x)

        return atomic

    return make


def _atomic_scalar(dtype, N, bn=8):
    @T.prim_func
    def atomic_scalar(X: T.Tensor((N,), dtype), Y: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            for i in T.serial(bn):
                if bx * bn + i < N:
                    T.atomic_add(Y[0], T.cast(X[bx * bn + i], "float32"))

    return atomic_scalar


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


def _attention(dtype, S, D, bm=32, bn=16):
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


# -- inputs and references ---------------------------------------------------------------------
def _two_d(torch, gen, dtype, M, N, **_):
    return [_randn(torch, gen, (M, N), dtype)]


def _gemm_inputs(torch, gen, dtype, M, N, K, trans_a=False, trans_b=False, **_):
    a = _randn(torch, gen, (K, M) if trans_a else (M, K), dtype)
    b = _randn(torch, gen, (N, K) if trans_b else (K, N), dtype)
    return [a, b]


def _gemm_ref(trans_a=False, trans_b=False):
    def ref(a, b):
        return [(a.T if trans_a else a) @ (b.T if trans_b else b)]

    return ref


_REDUCE_REF = {
    "sum": lambda x: x.sum(dim=1),
    "max": lambda x: x.amax(dim=1),
    "min": lambda x: x.amin(dim=1),
    "abssum": lambda x: x.abs().sum(dim=1),
    "absmax": lambda x: x.abs().amax(dim=1),
}
_ATOMIC_REF = {
    "add": lambda y, x: y + x.sum(dim=0),
    "max": lambda y, x: torch_max(y, x.amax(dim=0)),
    "min": lambda y, x: torch_min(y, x.amin(dim=0)),
}


def torch_max(a, b):
    return a.maximum(b)


def torch_min(a, b):
    return a.minimum(b)


def _atomic_inputs(torch, gen, dtype, M, N, splits=3, **_):
    return [_randn(torch, gen, (splits, M, N), dtype), _randn(torch, gen, (M, N), dtype)]


def _softmax_ref(x):
    return [x.softmax(dim=1)]


def _rmsnorm_ref(x, w, eps=1e-6):
    return [x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w]


def _attention_ref(q, k, v):
    s = (q @ k.T) / q.shape[1] ** 0.5
    return [s.softmax(dim=1) @ v]


def _catalogue() -> tuple[Kernel, ...]:
    mn = {"full": {"M": 32, "N": 32}, "partial": {"M": 40, "N": 24}}
    kernels = [
        Kernel("copy", ("copy",), _copy, _two_d, lambda a: [a], mn,
               doc="global -> shared -> fragment -> global"),
        Kernel("fill", ("fill", "copy"), _fill, _two_d, lambda a: [a + 1.5], mn,
               doc="T.fill and T.clear, then an elementwise add"),
        Kernel("elementwise", (), _elementwise,
               lambda torch, gen, dtype, M, N: [_randn(torch, gen, (M, N), dtype),
                                                 _randn(torch, gen, (M, N), dtype)],
               lambda a, b: [a * 2.0 + b], mn, doc="T.Parallel with a bounds guard"),
    ]
    gemm_shapes = {"full": {"M": 32, "N": 32, "K": 32}, "partial": {"M": 40, "N": 24, "K": 40}}
    for suffix, ta, tb in (("", False, False), ("_tn", True, False), ("_nt", False, True),
                           ("_tt", True, True)):
        kernels.append(Kernel(
            f"gemm{suffix}", ("gemm", "copy", "fill"),
            lambda dtype, M, N, K, _ta=ta, _tb=tb: _gemm(dtype, M, N, K, _ta, _tb),
            lambda torch, gen, dtype, M, N, K, _ta=ta, _tb=tb: _gemm_inputs(
                torch, gen, dtype, M, N, K, _ta, _tb),
            _gemm_ref(ta, tb), gemm_shapes, reduction=lambda K, **_: K,
            doc=f"C = {'A^T' if ta else 'A'} @ {'B^T' if tb else 'B'}, float32 accumulator"))
    kernels += [
        Kernel("gemm_serial", ("gemm", "copy", "fill"),
               lambda dtype, M, N, K: _gemm(dtype, M, N, K, pipelined=False), _gemm_inputs,
               _gemm_ref(), {"partial": {"M": 24, "N": 40, "K": 40}},
               reduction=lambda K, **_: K, doc="K loop with T.serial instead of T.Pipelined"),
        Kernel("gemm_pipelined", ("gemm", "copy", "fill"),
               lambda dtype, M, N, K: _gemm(dtype, M, N, K, stages=3), _gemm_inputs,
               _gemm_ref(), {"partial": {"M": 24, "N": 24, "K": 72}},
               reduction=lambda K, **_: K,
               doc="T.Pipelined with num_stages=3"),
        Kernel("gemm_dynamic", ("gemm", "copy", "fill"),
               lambda dtype, M, N, K: _gemm_dynamic(dtype), _gemm_inputs, _gemm_ref(),
               {"dynamic": {"M": 40, "N": 24, "K": 40}}, reduction=lambda K, **_: K,
               doc="M, N, K read from the arguments (T.dynamic)"),
    ]
    red_shapes = {"full": {"M": 8, "N": 32}, "partial": {"M": 10, "N": 20}}
    for kind, ref in _REDUCE_REF.items():
        kernels.append(Kernel(
            f"reduce_{kind}", (f"reduce_{kind}", "copy"), _reduce(kind), _two_d,
            lambda x, _ref=ref: [_ref(x)], red_shapes, reduction=lambda N, **_: N,
            doc=f"row-wise reduce_{kind} of a fragment"))
    kernels += [
        Kernel("reduce_sum_dim0", ("reduce_sum", "copy"), _reduce_cols, _two_d,
               lambda x: [x.sum(dim=0)], {"partial": {"M": 12, "N": 20}},
               reduction=lambda M, **_: M, doc="reduction over the first dimension"),
        Kernel("cumsum", ("cumsum", "copy"), _cumsum(False), _two_d,
               lambda x: [x.cumsum(dim=1)], red_shapes, reduction=lambda N, **_: N),
        Kernel("cumsum_reverse", ("cumsum", "copy"), _cumsum(True), _two_d,
               lambda x: [x.flip(1).cumsum(dim=1).flip(1)], red_shapes,
               reduction=lambda N, **_: N),
    ]
    atomic_shapes = {"full": {"M": 16, "N": 16}, "partial": {"M": 20, "N": 24}}
    for kind, ref in _ATOMIC_REF.items():
        kernels.append(Kernel(
            f"atomic_{kind}", (f"atomic_{kind}", "copy"), _atomic_tile(kind), _atomic_inputs,
            lambda x, y, _ref=ref: [_ref(y, x)], atomic_shapes, out_idx=(), inplace=(1,),
            reduction=lambda **_: 3, doc=f"three blocks atomic_{kind} a tile into global Y"))
    kernels += [
        Kernel("atomic_add_scalar", ("atomic_add",), _atomic_scalar,
               lambda torch, gen, dtype, N: [_randn(torch, gen, (N,), dtype),
                                             torch.zeros(1)],
               lambda x, y: [y + x.sum()], {"partial": {"N": 20}}, out_idx=(), inplace=(1,),
               reduction=lambda N, **_: N, doc="every element atomically added to Y[0]"),
        Kernel("softmax", ("copy", "reduce_max", "reduce_sum"), _softmax, _two_d, _softmax_ref,
               red_shapes, reduction=lambda N, **_: N),
        Kernel("rmsnorm", ("copy", "reduce_sum"), _rmsnorm,
               lambda torch, gen, dtype, M, N: [_randn(torch, gen, (M, N), dtype),
                                                 _randn(torch, gen, (N,), dtype)],
               _rmsnorm_ref, red_shapes, reduction=lambda N, **_: N),
        Kernel("attention", ("copy", "fill", "gemm", "reduce_max", "reduce_sum"), _attention,
               lambda torch, gen, dtype, S, D: [_randn(torch, gen, (S, D), dtype)
                                                for _ in range(3)],
               _attention_ref, {"full": {"S": 16, "D": 16}, "partial": {"S": 20, "D": 16}},
               reduction=lambda S, D: max(S, D),
               doc="flash attention with online softmax, one head"),
        Kernel("debug", ("copy", "print_tile", "print_value", "device_assert"), _debug,
               lambda torch, gen, dtype, N: [_randn(torch, gen, (N,), dtype)],
               lambda a: [a], {"partial": {"N": 12}},
               doc="T.print of a tile and a value, T.device_assert that holds"),
    ]
    return tuple(kernels)


CATALOGUE: tuple[Kernel, ...] = _catalogue()


def cases(names=None) -> list[Case]:
    """Every catalogue kernel at every dtype and shape variant (``names`` filters kernels)."""
    out = []
    for kernel in CATALOGUE:
        if names is not None and kernel.name not in names:
            continue
        for dtype in kernel.dtypes:
            for variant, dims in kernel.shapes.items():
                out.append(Case(kernel, dtype, variant, dict(dims)))
    return out


def covered_ops() -> set[str]:
    """The tile ops the catalogue exercises."""
    return {op for kernel in CATALOGUE for op in kernel.ops}
