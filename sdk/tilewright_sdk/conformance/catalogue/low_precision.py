"""Rows for the low-precision family: 8-bit GEMMs (int8 into int32, float8_e4m3fn/e5m2 into
float32, B stored [N, K] as 8-bit GEMMs take it), the float8 conversions to and from float32,
float16 and bfloat16 compared exactly with torch's (every float8 value, the ties between
neighbours and the values just beside them, subnormals, saturation, infinities, NaN; NaN
payloads are not compared), and group-wise dequantisation of packed 4-bit weights
(``T.unpack``)."""

# No `from __future__ import annotations`: T.prim_func evaluates the parameter annotations.
import tilewright.language as T
from tilewright import sparse as sp

from .model import FLOAT8, Kernel, eager, rand

BASE = ("prim_func", "Tensor", "Kernel", "ceildiv")
# the accumulator of each 8-bit operand dtype
ACCUM = {"int8": "int32", "float8_e4m3fn": "float32", "float8_e5m2": "float32"}
WIDE = ("float32", "float16", "bfloat16")  # the dtypes float8 converts to and from
PROBES = 2048  # values encoded per source dtype: the designed ones, then random ones


def _gemm_8bit(dtype, M, N, K, bm=32, bn=32, bk=32):
    accum = ACCUM[dtype]

    @T.prim_func
    def gemm_8bit(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
                  C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk), dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm_8bit


def _gemm_8bit_inputs(torch, gen, dtype, M, N, K):
    if dtype == "int8":  # the whole range: products up to 2^14, sums past int16
        return [rand(torch, gen, s, dtype, -128, 127) for s in ((M, K), (N, K))]
    return [rand(torch, gen, s, dtype) for s in ((M, K), (N, K))]


def _gemm_8bit_ref(a, b):
    if a.is_floating_point():  # float64 copies of the float8 operands: exact products
        return [a @ b.T]
    return [(a.long() @ b.long().T).int()]


def _float8_casts(dtype, P, bn=128):
    """Every float8 code decoded to each of WIDE; each WIDE dtype's probes encoded."""

    @T.prim_func
    def float8_casts(codes: T.Tensor((256,), dtype), x32: T.Tensor((P,), "float32"),
                     x16: T.Tensor((P,), "float16"), xbf: T.Tensor((P,), "bfloat16"),
                     d32: T.Tensor((256,), "float32"), d16: T.Tensor((256,), "float16"),
                     dbf: T.Tensor((256,), "bfloat16"), e32: T.Tensor((P,), dtype),
                     e16: T.Tensor((P,), dtype), ebf: T.Tensor((P,), dtype)):
        with T.Kernel(T.ceildiv(P, bn), threads=128) as bx:
            if bx == 0:
                for i in T.Parallel(256):
                    d32[i] = T.cast(codes[i], "float32")
                    d16[i] = T.cast(codes[i], "float16")
                    dbf[i] = T.Cast("bfloat16", codes[i])
            for i in T.Parallel(bn):
                e32[bx * bn + i] = T.cast(x32[bx * bn + i], dtype)
                e16[bx * bn + i] = T.cast(x16[bx * bn + i], dtype)
                ebf[bx * bn + i] = T.Cast(dtype, xbf[bx * bn + i])

    return float8_casts


def _float8_probes(torch, gen, wide):
    """``PROBES`` values of dtype ``wide``: every finite value of both float8 formats, the
    midpoints between neighbours (ties: nearest even) and the ``wide`` values just beside them,
    the overflow and underflow regions and the special values, both signs; random values of
    every magnitude fill the rest."""
    t = getattr(torch, wide)
    bits = torch.int32 if wide == "float32" else torch.int16
    grid = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = []
    for kind in (torch.float8_e4m3fn, torch.float8_e5m2):
        v = grid.view(kind).float()
        v = v[v.isfinite() & (v > 0)].unique()
        mids = torch.cat([v[:1] / 2, (v[1:] + v[:-1]) / 2]).to(t)  # ties stay exact in t
        values += [v.to(t), mids, (mids.view(bits) + 1).view(t), (mids.view(bits) - 1).view(t)]
    special = torch.tensor([0.0, 1e-30, 1e-7, 448.0, 460.0, 464.0, 500.0, 1e5, 57344.0,
                            61439.0, 61440.0, 1e9, float("inf"), float("nan")]).to(t)
    designed = torch.cat(values + [special])
    designed = torch.cat([designed, -designed])[:PROBES]
    scale = torch.exp2(torch.randint(-20, 20, (PROBES - designed.numel(),), generator=gen))
    filler = torch.randn(PROBES - designed.numel(), generator=gen) * scale
    return torch.cat([designed, filler.to(t)])


def _float8_cast_inputs(torch, gen, dtype, P):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, dtype))
    return [codes, *(_float8_probes(torch, gen, wide) for wide in WIDE)]


def _float8_cast_ref(codes, x32, x16, xbf, dtype):
    import torch

    # the reference receives float64 copies of float inputs: back to the kernel's dtypes,
    # exactly (every value is one of them)
    fp8 = getattr(torch, dtype)
    codes = codes.to(fp8)
    probes = [x.to(getattr(torch, wide)) for x, wide in zip((x32, x16, xbf), WIDE)]
    return [codes.to(getattr(torch, wide)) for wide in WIDE] + [x.to(fp8) for x in probes]


def _float4_casts(dtype, P, bn=128):
    """Every float4 code decoded to float32; each WIDE dtype's probes rounded to float4 in a
    fragment and read back as float32 (float4 tensors are float4_e2m1fn_x2, two codes a
    byte)."""

    @T.prim_func
    def float4_casts(codes: T.Tensor((16,), dtype), x32: T.Tensor((P,), "float32"),
                     x16: T.Tensor((P,), "float16"), xbf: T.Tensor((P,), "bfloat16"),
                     d32: T.Tensor((16,), "float32"), r32: T.Tensor((P,), "float32"),
                     r16: T.Tensor((P,), "float32"), rbf: T.Tensor((P,), "float32")):
        with T.Kernel(T.ceildiv(P, bn), threads=128) as bx:
            tile = T.alloc_fragment((3, bn), dtype)
            if bx == 0:
                for i in T.Parallel(16):
                    d32[i] = T.cast(codes[i], "float32")
            for i in T.Parallel(bn):
                tile[0, i] = T.cast(x32[bx * bn + i], dtype)
                tile[1, i] = T.cast(x16[bx * bn + i], dtype)
                tile[2, i] = T.Cast(dtype, xbf[bx * bn + i])
            for i in T.Parallel(bn):
                r32[bx * bn + i] = T.cast(tile[0, i], "float32")
                r16[bx * bn + i] = T.cast(tile[1, i], "float32")
                rbf[bx * bn + i] = T.cast(tile[2, i], "float32")

    return float4_casts


def _e8m0_cast_inputs(torch, gen, dtype, P):
    """The 256 codes; probes of each WIDE dtype: the powers of two it holds, the ties of the
    conversion (1.5 times each: up for a normal source, down for a subnormal one) and the
    values just beside them, zero and the subnormals, infinities and NaN, both signs (the
    sign is dropped); random bit patterns of the dtype (every exponent) fill the rest."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, dtype))
    probes = []
    for wide in WIDE:
        t, bits = getattr(torch, wide), torch.int32 if wide == "float32" else torch.int16
        info = torch.finfo(t)
        low = int(torch.log2(torch.tensor(info.smallest_normal)).item()) - info.bits + 4
        powers = torch.exp2(torch.arange(low, 128, dtype=torch.float64)).to(t)
        powers = powers[powers.isfinite() & (powers > 0)].unique()
        ties = (powers.double() * 1.5).to(t)
        ties = ties[ties.isfinite()]
        special = torch.tensor([0.0, float("inf"), float("nan")]).to(t)
        designed = torch.cat([powers, ties, (ties.view(bits) + 1).view(t),
                              (ties.view(bits) - 1).view(t), special])
        designed = torch.cat([designed, -designed])[:P]
        width = 32 if wide == "float32" else 16
        raw = torch.randint(-2 ** (width - 1), 2 ** (width - 1) - 1, (P - designed.numel(),),
                            generator=gen, dtype=torch.int64).to(bits).view(t)
        probes.append(torch.cat([designed, raw]))
    return [codes, *probes]


# float4_e2m1fn from its definition: the magnitudes of codes 0-7 (bias 1, one mantissa bit)
FLOAT4_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _float4_cast_inputs(torch, gen, dtype, P):
    """The 16 codes (packed two a byte); probes of each WIDE dtype: every value, the midpoints
    between neighbours (ties: nearest even) and the values just beside them, past the largest
    value, infinities and NaN, both signs; random values of every magnitude fill the rest."""
    codes = torch.tensor([c | d << 4 for c, d in zip(range(0, 16, 2), range(1, 16, 2))],
                         dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    v = torch.tensor(FLOAT4_MAGNITUDES)
    mids = (v[1:] + v[:-1]) / 2
    probes = []
    for wide in WIDE:
        t, bits = getattr(torch, wide), torch.int32 if wide == "float32" else torch.int16
        m = mids.to(t)
        special = torch.tensor([6.5, 7.0, 1e4, 1e-30, float("inf"), float("nan")]).to(t)
        designed = torch.cat([v.to(t), m, (m.view(bits) + 1).view(t), (m.view(bits) - 1).view(t),
                              special])
        designed = torch.cat([designed, -designed])
        scale = torch.exp2(torch.randint(-4, 4, (P - designed.numel(),), generator=gen))
        filler = torch.randn(P - designed.numel(), generator=gen) * scale
        probes.append(torch.cat([designed, filler.to(t)]))
    return [codes, *probes]


def _round_float4(x):
    """``x`` (float64) rounded to float4_e2m1fn: the nearest magnitude, ties to the even code,
    saturating at 6, NaN giving +6; the sign kept."""
    import torch

    v = torch.tensor(FLOAT4_MAGNITUDES, dtype=torch.float64)
    mag = x.abs().clamp(max=6.0).nan_to_num(6.0)
    dist = (mag[:, None] - v).abs()
    nearest = dist == dist.min(dim=1, keepdim=True).values
    even = nearest & (torch.arange(8) % 2 == 0)  # of two nearest, the even code
    code = torch.where(even.any(dim=1), even.int().argmax(dim=1), nearest.int().argmax(dim=1))
    return torch.where(x.isnan(), 6.0, v[code].copysign(x))


def _float4_cast_ref(codes, x32, x16, xbf):
    import torch

    b = codes.view(torch.uint8).long()
    code = torch.stack((b & 15, b >> 4), dim=-1).reshape(-1)
    mag = torch.tensor(FLOAT4_MAGNITUDES, dtype=torch.float64)[code & 7]
    return [torch.where(code >= 8, -mag, mag)] + [_round_float4(x) for x in (x32, x16, xbf)]


def _w4a16(dtype, M, N, K, group, bm=32, bn=32, bk=32):
    """C = A @ W^T, W [N, K] dequantised from 4-bit codes packed two to a byte (element k in
    the low nibble of byte k // 2 for even k), one scale and zero point per ``group`` of K:
    ``W[n, k] = (q[n, k] - zeros[n, k // group]) * scales[n, k // group]``. K is a multiple
    of ``bk`` and of ``group``."""

    @T.prim_func
    def w4a16(A: T.Tensor((M, K), dtype), Q: T.Tensor((N, K // 2), "uint8"),
              scales: T.Tensor((N, K // group), dtype), zeros: T.Tensor((N, K // group), dtype),
              C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            Q_s = T.alloc_shared((bn, bk // 2), "uint8")
            W_s = T.alloc_shared((bn, bk), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(Q[bx * bn, k * bk // 2], Q_s)
                for i, j in T.Parallel(bn, bk):
                    # rows past N (a partial tile) dequantise row N - 1: their C is not stored
                    n, g = T.min(bx * bn + i, N - 1), (k * bk + j) // group
                    W_s[i, j] = (T.cast(T.unpack(Q_s[i, j // 2], j % 2, 4), dtype) -
                                 zeros[n, g]) * scales[n, g]
                T.gemm(A_s, W_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return w4a16


def _w4a16_inputs(torch, gen, dtype, M, N, K, group):
    t = getattr(torch, dtype)
    q = torch.randint(0, 256, (N, K // 2), generator=gen, dtype=torch.int32).to(torch.uint8)
    scales = (torch.rand(N, K // group, generator=gen) * 0.05 + 0.01).to(t)
    zeros = torch.randint(0, 16, (N, K // group), generator=gen).to(t)
    return [rand(torch, gen, (M, K), dtype), q, scales, zeros]


def _w4a16_ref(a, q, scales, zeros, group, dtype):
    import torch

    # the weights as the kernel dequantises them: exact codes minus zero points, one rounding
    # into ``dtype`` after the scale
    codes = torch.stack([q & 15, q >> 4], dim=-1).flatten(1).to(scales.dtype)
    w = (codes - zeros.repeat_interleave(group, 1)) * scales.repeat_interleave(group, 1)
    return [a @ w.to(getattr(torch, dtype)).to(a.dtype).T]


def _gemm_sp(dtype, M, N, K, bm=32, bn=32, bk=64):
    """C = decompress(A, E) @ B with A 2:4 sparse along K (1:2 for float32), stored as its
    kept values and the metadata dtype TileLang picks for ``dtype``."""
    accum, meta = ACCUM.get(dtype, "float32"), sp.default_meta_dtype(dtype)
    ef = sp.e_factor(dtype, meta)

    @T.prim_func
    def gemm_sp(A: T.Tensor((M, K // 2), dtype), E: T.Tensor((M, K // ef), meta),
                B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk // 2), dtype)
            E_s = T.alloc_shared((bm, bk // ef), meta)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk // 2], A_s)
                T.copy(E[by * bm, k * bk // ef], E_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm_sp


def _gemm_sp_inputs(torch, gen, dtype, M, N, K):
    from tilewright.utils.sparse import compress

    g = sp.SPARSE_GROUPS[dtype]
    dense = rand(torch, gen, (M, K // g.group, g.group), dtype)
    # the zeros at random positions of each group; the kept values may be zero too
    drop = torch.rand(dense.shape, generator=gen).topk(g.group - g.kept, dim=-1).indices
    dense = dense.scatter(-1, drop, torch.zeros(drop.shape, dtype=dense.dtype))
    return [*compress(dense.reshape(M, K)), rand(torch, gen, (K, N), dtype)]


def _gemm_sp_ref(values, meta, b, dtype):
    import torch
    from tilewright.utils.sparse import decompress

    # the kept values back in their dtype (exactly), expanded, then a float64 or int64 product
    a = decompress(values.to(getattr(torch, dtype)), meta)
    if a.is_floating_point():
        return [a.double() @ b]
    return [(a.long() @ b.long()).int()]


NARROW = ("float16", "bfloat16", *FLOAT8)  # the targets of casts_in_expressions


def _casts_in_expressions(dtype, targets, bn=64):
    """Eager style: X converted to each narrow dtype of ``targets`` inside an expression (read
    back as float32 and compared with X's own conversion), not stored as that dtype: the
    conversion must round there as a store rounds."""

    def casts_in_expressions(X):
        n = T.const("n")
        X: T.Tensor((n,), dtype)
        outs = [T.empty((n,), "float32") for _ in targets]
        same = [T.empty((n,), "int32") for _ in targets]
        with T.Kernel(T.ceildiv(n, bn), threads=128) as bx:
            for k, t in enumerate(targets):
                for i in T.Parallel(bn):
                    g = bx * bn + i
                    if g < n:
                        narrow = T.cast(X[g], t) if k % 2 else T.Cast(t, X[g])
                        outs[k][g] = T.cast(narrow, "float32") * 1.0
                        same[k][g] = T.Select(T.cast(X[g], t) == narrow, 1, 0)
        return (*outs, *same)

    return casts_in_expressions


def _casts_in_expressions_inputs(torch, gen, dtype, N, targets):
    """Values of every magnitude up to 300 (no float8 saturation) and exact ties between
    neighbours of bfloat16 and of float16 (ties to even) for a float ``dtype``; integers up
    to 300 (bfloat16 rounds those above 256) otherwise."""
    if not dtype.startswith("float"):
        return [rand(torch, gen, (N,), dtype, -300, 300)]
    scale = torch.pow(10.0, torch.rand(N, generator=gen) * 4 - 3)
    x = (torch.randn(N, generator=gen) * scale).clamp(-300, 300).float()
    bits = x.view(torch.int32)
    quarter = N // 4
    ties = bits.clone()
    ties[:quarter] = (bits[:quarter] & ~0xFFFF) | 0x8000  # between two bfloat16 values
    ties[quarter:2 * quarter] = (bits[quarter:2 * quarter] & ~0x1FFF) | 0x1000  # float16's
    x = ties.view(torch.float32)
    return [x.to(getattr(torch, dtype))]


def _casts_in_expressions_ref(x, targets):
    import torch

    outs = [x.to(getattr(torch, t)).float() for t in targets]
    return [*outs, *(torch.ones_like(x, dtype=torch.int32) for _ in targets)]


GEMM = (*BASE, "alloc_shared", "alloc_fragment", "copy", "gemm", "clear", "Pipelined")
CAST_NAMES = (*BASE, "Parallel", "cast", "Cast", *FLOAT8, *WIDE)

ROWS = (
    Kernel("gemm_8bit", (*GEMM, "int8", "int32", *FLOAT8), ("gemm", "copy", "fill"),
           _gemm_8bit, _gemm_8bit_inputs, _gemm_8bit_ref,
           {"full": {"M": 32, "N": 32, "K": 64}, "partial": {"M": 24, "N": 40, "K": 80}},
           reduction=lambda K, **_: K, dtypes=tuple(ACCUM),
           doc="C = A @ B^T with B stored [N, K]: int8 into int32 accumulators (exact), "
               "float8_e4m3fn / float8_e5m2 into float32"),
    Kernel("float8_casts", CAST_NAMES, (), _float8_casts, _float8_cast_inputs,
           _float8_cast_ref, {"full": {"P": PROBES}}, out_idx=tuple(range(4, 10)),
           dtypes=FLOAT8, ref_args=("dtype",), exact=True,
           doc="every float8 code decoded to float32, float16 and bfloat16, and probes of each "
               "encoded (ties, subnormals, saturation, infinities, NaN): exactly torch's values "
               "(any NaN for a NaN)"),
    Kernel("float8_e8m0_casts", (*BASE, "Parallel", "cast", "Cast", "float8_e8m0fnu", *WIDE), (),
           _float8_casts, _e8m0_cast_inputs, _float8_cast_ref, {"full": {"P": PROBES}},
           out_idx=tuple(range(4, 10)), dtypes=("float8_e8m0fnu",), ref_args=("dtype",),
           exact=True,
           doc="the MX scale format float8_e8m0fnu (unsigned powers of two): every code decoded "
               "to float32, float16 and bfloat16, and probes of each encoded (powers of two, "
               "the ties of 1.5 times each and their neighbours, subnormals, signs, infinities, "
               "NaN, random bit patterns): exactly torch's codes"),
    Kernel("casts_in_expressions", (*BASE, "const", "empty", "Parallel", "cast", "Cast",
                                    "Select", *NARROW), (),
           lambda dtype, N, targets: eager(_casts_in_expressions(dtype, targets), n=N),
           _casts_in_expressions_inputs, _casts_in_expressions_ref,
           {"partial": {"N": 200, "targets": NARROW}}, out_idx=(),
           dtypes=("float32", "float64", "int32"), dtype_dims=("targets",),
           ref_args=("targets",), exact=True,
           doc="a conversion to float16, bfloat16 or float8 inside an expression rounds as a "
               "stored one does (read back as float32, compared with itself); ties of "
               "bfloat16 and float16 neighbours among the values"),
    Kernel("float4_casts", (*BASE, "Parallel", "alloc_fragment", "cast", "Cast",
                            "float4_e2m1fn", *WIDE), (), _float4_casts, _float4_cast_inputs,
           _float4_cast_ref, {"full": {"P": 256}}, out_idx=tuple(range(4, 8)),
           dtypes=("float4_e2m1fn",), exact=True,
           doc="every float4_e2m1fn code decoded to float32, and probes of float32, float16 and "
               "bfloat16 rounded to float4 (ties to even, saturation at +-6, NaN to +6) and "
               "read back: exactly the values of the format's definition"),
    Kernel("gemm_w4a16", (*GEMM, "Parallel", "min", "unpack"), ("gemm", "copy", "fill"),
           _w4a16, _w4a16_inputs, _w4a16_ref, {"full": {"M": 16, "N": 32, "K": 128, "group": 32},
                        "partial": {"M": 12, "N": 24, "K": 96, "group": 32}},
           reduction=lambda K, **_: K, dtypes=("float16", "bfloat16"), ref_args=("group", "dtype"),
           doc="packed 4-bit weights (two per byte, T.unpack) dequantised in shared memory with "
               "group-wise scales and zero points, then a tensor-core GEMM"),
    Kernel("gemm_sp", (*BASE, "alloc_shared", "alloc_fragment", "copy", "gemm_sp", "clear",
                       "Pipelined", "int16", "int32"), ("gemm_sp", "copy", "fill"),
           _gemm_sp, _gemm_sp_inputs, _gemm_sp_ref,
           {"full": {"M": 32, "N": 32, "K": 128}, "partial": {"M": 24, "N": 40, "K": 96}},
           reduction=lambda K, **_: K // 2, dtypes=("float16", "bfloat16", "float32", "int8"),
           ref_args=("dtype",),
           doc="2:4 structured-sparse GEMM (1:2 for float32): the kept values and TileLang's "
               "ordered metadata (tilewright.utils.sparse.compress) against the product of "
               "the decompressed operand"),
)
