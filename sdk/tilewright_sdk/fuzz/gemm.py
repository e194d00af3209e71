"""GEMM kernels as real kernels are written, as Hypothesis strategies: the paths every
production kernel takes (tensor-core tiles, pipelined copies, epilogues), which the tile
programs of :mod:`.program` reach only with small tiles.

A :class:`GemmProgram` is one of two kernels over tiles of the shapes tensor cores take (M
and N multiples of 16, K of 16 or 32, 128 or 256 threads):

* a tiled GEMM: ``A`` (``(M, K)``, or ``(K, M)`` read with ``transpose_A``) times ``B``
  (``(K, N)``, or ``(N, K)`` with ``transpose_B``) of float16, bfloat16, int8 or float8,
  accumulated in float32 (int32 for int8) over a ``T.Pipelined`` k-loop of 1 to 3 stages that
  copies both operands into shared tiles (the blocks perhaps rasterised in panels,
  ``T.use_swizzle``; perhaps a second B into a second accumulator, subtracted), then an
  epilogue: a scale, a bias row loaded by ``T.copy``, a sum or maximum of the accumulator
  over its rows or columns written out, a cast to float16/bfloat16 (or int32 kept), the
  result copied out directly, through a shared tile or element by element;
* FlashAttention: per block of query rows, a pipelined loop over blocks of keys computing
  ``S = Q K^T`` (masked past the keys' end), the online softmax (``T.reduce_max``, ``T.exp2``,
  ``T.reduce_sum``, the rescale of the output accumulator) and ``P V`` with ``P`` cast to the
  inputs' dtype, in a fragment or a shared tile.

Sizes may leave a partial last block in M, N and K (read as zero, stored clipped). References
are the interpreter's; each output's error bound follows from the formats, K and the values'
magnitudes (products of the inputs are exact in float32; the float32 sums, the exponentials
and the casts each add theirs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import strategies as st
from tilewright.testing import unit_roundoff

from .program import grid_extent, programs

# the (A, B) dtypes of a GEMM and its accumulator; what the K of one tensor-core step is
OPERANDS = {"float16": "float32", "bfloat16": "float32", "int8": "int32",
            "float8_e4m3fn": "float32", "float8_e5m2": "float32"}
K_STEP = {"float16": 16, "bfloat16": 16, "int8": 32, "float8_e4m3fn": 32, "float8_e5m2": 32}
# float32 sums on tensor cores may truncate rather than round: one more bit of error
U_ACC = 2.0 ** -23
WARP = 32


@dataclass
class GemmProgram:
    """A generated GEMM or attention kernel: its source and tensors, as :class:`.Program`."""

    body: list
    tensors: list  # (name, shape, dtype, low, high) of the inputs, in parameter order
    outputs: list  # (name, shape, dtype, atol)
    grid: tuple  # the block grid's extents, as source text
    threads: int
    features: set = field(default_factory=set)

    def input_specs(self) -> list:
        return list(self.tensors)

    def kernel_source(self) -> str:
        params = [f"{n}: T.Tensor({shape!r}, {dtype!r})" for n, shape, dtype, _, _ in
                  self.tensors]
        params += [f"{n}: T.Tensor({shape!r}, {dtype!r})" for n, shape, dtype, _ in
                   self.outputs]
        lines = ["@T.prim_func", f"def fuzz({', '.join(params)}):",
                 f"    with T.Kernel({', '.join(self.grid)}, threads={self.threads}) as "
                 "(bx, by):"]
        lines += ["        " + line for line in self.body]
        return "\n".join(lines) + "\n"


def _tile_shapes(draw, k_step: int, attention: bool = False) -> tuple[int, int, int]:
    """Threads and a (rows, columns) block of C whose 16x8 tiles split evenly over the
    warps, the shapes tensor cores take; 64 rows per warpgroup two times in three (wgmma's)."""
    threads = draw(st.sampled_from((128, 128, 256)))
    warps = threads // WARP
    bm = draw(st.sampled_from((64 * threads // 128,) * 4 + (16, 32)))
    cols = [n for n in (16, 32, 64) if (bm // 16) * (n // 8) % warps == 0]
    if attention:  # the block of keys is gemm 1's N and gemm 2's K
        cols = [n for n in cols if n % k_step == 0]
    if not cols:
        bm, cols = 64 * threads // 128, [32, 64]
    return threads, bm, draw(st.sampled_from(cols))


def _size(draw, block: int, name: str, feats: set) -> int:
    """A problem size of 1 to 3 blocks, the last one partial a third of the time."""
    blocks = draw(st.integers(1, 3))
    size = blocks * block
    if draw(st.integers(0, 2)) == 0:
        size -= draw(st.integers(1, block - 1))
        feats.add(f"partial_{name}")
    return size


def _windows(draw, feats: set):
    """How a kernel names the block of a tensor it copies: by its first element
    (``A[by * 64, k * 32]``, the extents the destination's) or by slices
    (``A[by * 64:(by + 1) * 64, k * 32:(k + 1) * 32]``, or ``:`` for a whole dimension)."""
    slices = draw(st.booleans())
    if slices:
        feats.add("copy_slices")

    def window(name: str, *dims) -> str:
        if slices:
            parts = [":" if var is None else f"{var} * {n}:({var} + 1) * {n}"
                     for var, n in dims]
        else:
            parts = ["0" if var is None else f"{var} * {n}" for var, n in dims]
        return f"{name}[{', '.join(parts)}]"

    return window


def _policy(draw, feats: set) -> str:
    policy = draw(st.sampled_from(("", "", "FullRow", "FullCol", "Square")))
    if not policy:
        return ""
    feats.add(f"gemm_policy_{policy}")
    return f", policy=T.GemmWarpPolicy.{policy}"


def tiled_gemm(draw, dtype: str, declared: set) -> GemmProgram:
    """A tiled GEMM of ``dtype`` operands with its epilogue (see the module docstring)."""
    acc = OPERANDS[dtype]
    k_step = K_STEP[dtype]
    feats = {"gemm_kernel", f"gemm_kernel_{dtype}", "gemm", f"gemm_{acc}", "pipelined",
             "pipelined_gemm"}
    threads, bm, bn = _tile_shapes(draw, k_step)
    bk = draw(st.sampled_from([k for k in (16, 32, 64) if k % k_step == 0]))
    M, N, K = _size(draw, bm, "M", feats), _size(draw, bn, "N", feats), \
        _size(draw, bk, "K", feats)
    stages = draw(st.integers(1, 3))
    feats |= {f"pipelined_stages{stages}", f"gemm_threads{threads}"}
    # wgmma reads A K-major and 8-bit B K-major only: drawn more often
    ta = draw(st.sampled_from((False, False, False, True)))
    tb = draw(st.sampled_from((True, True, False) if K_STEP[dtype] == 32 else (False, True)))
    feats |= ({"gemm_transpose_A"} if ta else set()) | ({"gemm_transpose_B"} if tb else set())
    # the whole int8 range; floats in [-4, 4], rounded to the format when the tensors are
    # made (float8 holds them), whose products float32 holds exactly
    lo, hi = (-128, 127) if dtype == "int8" else (-4.0, 4.0)
    mag = K * max(abs(lo), abs(hi)) ** 2  # of C
    tensors = [("A", (K, M) if ta else (M, K), dtype, lo, hi),
               ("B", (N, K) if tb else (K, N), dtype, lo, hi)]
    body = []
    if draw(st.integers(0, 3)) == 3:  # blocks rasterised in panels (bx, by remapped)
        panel, order = draw(st.integers(1, 3)), draw(st.sampled_from(("row", "col")))
        body.append(f"T.use_swizzle({panel}, order={order!r})")
        feats.add("block_swizzle")
    window = _windows(draw, feats)
    dual = draw(st.integers(0, 3)) == 3  # a second B (gate and up projections), subtracted
    policy = _policy(draw, feats)
    accs = ("c", "c2") if dual else ("c",)
    body += [f"a_s = T.alloc_shared({(bk, bm) if ta else (bm, bk)}, {dtype!r})"]
    for b, c in zip(("b", "b2"), accs):
        body += [f"{b}_s = T.alloc_shared({(bn, bk) if tb else (bk, bn)}, {dtype!r})",
                 f"{c} = T.alloc_fragment(({bm}, {bn}), {acc!r})", f"T.clear({c})"]
    body += [f"for k in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={stages}):",
             f"    T.copy({window('A', ('k', bk), ('by', bm))}, a_s)" if ta else
             f"    T.copy({window('A', ('by', bm), ('k', bk))}, a_s)"]
    for b, c in zip(("b", "b2"), accs):
        body += [f"    T.copy({window(b.upper(), ('bx', bn), ('k', bk))}, {b}_s)" if tb else
                 f"    T.copy({window(b.upper(), ('k', bk), ('bx', bn))}, {b}_s)",
                 f"    T.gemm(a_s, {b}_s, {c}, transpose_A={ta}, transpose_B={tb}{policy})"]
    # products are exact in the accumulator; its sums round (an integer sum is exact)
    err = K * U_ACC * mag if acc == "float32" else 0.0
    if dual:
        tensors.append(("B2", (N, K) if tb else (K, N), dtype, lo, hi))
        body += [f"for i, j in T.Parallel({bm}, {bn}):", "    c[i, j] = c[i, j] - c2[i, j]"]
        err, mag = (2 * err + U_ACC * 2 * mag if acc == "float32" else 0.0), 2 * mag
        feats.add("gemm_dual")
    out = acc
    terms = []
    if acc == "int32":
        kinds = ("keep", "bias", "dequant") if "float16" in declared else ("keep", "bias")
    else:
        kinds = ("keep", "scale", "bias", "scale_bias")
    epilogue = draw(st.sampled_from(kinds))
    if epilogue in ("bias", "scale_bias"):
        bias_dtype = "int32" if acc == "int32" else dtype
        blo, bhi = (-1000, 1000) if acc == "int32" else (lo, hi)
        bias_mag = max(abs(blo), abs(bhi))
        tensors.append(("Bias", (N,), bias_dtype, blo, bhi))
        body += [f"bias = T.alloc_fragment(({bn},), {bias_dtype!r})",
                 f"T.copy(Bias[bx * {bn}], bias)"]
        feats.add("epilogue_bias")
    if epilogue == "dequant":  # int32 to float32, scaled to float16's range
        scale = 2.0 ** -math.ceil(math.log2(mag / 1e4))
        c_f = f"T.alloc_fragment(({bm}, {bn}), 'float32')"
        body += [f"cf = {c_f}", f"for i, j in T.Parallel({bm}, {bn}):",
                 f"    cf[i, j] = T.cast(c[i, j], 'float32') * T.float32({scale!r})"]
        mag, acc, err, result = mag * scale, "float32", 0.0, "cf"
        feats.add("epilogue_dequant")
    else:
        result = "c"
    if epilogue in ("scale", "scale_bias"):
        s = draw(st.sampled_from((0.5, 0.125, 0.3, 1.7)))
        terms.append(f"{result}[i, j] * T.float32({s!r})")
        err, mag = err * s + U_ACC * mag * s, mag * s
        feats.add("epilogue_scale")
    if epilogue in ("bias", "scale_bias"):
        b = f"T.cast(bias[j], {acc!r})" if acc == "float32" else "bias[j]"
        terms.append(f"{terms.pop() if terms else f'{result}[i, j]'} + {b}")
        mag += bias_mag
        err += U_ACC * mag if acc == "float32" else 0.0
    if terms:
        body += [f"for i, j in T.Parallel({bm}, {bn}):", f"    {result}[i, j] = {terms[0]}"]
    outputs = []
    if draw(st.integers(0, 2)) == 2:  # a reduction of the accumulator across its rows or
        kind, dim = draw(st.sampled_from(("sum", "max"))), draw(st.integers(0, 1))  # columns
        n, length = (bn, bm) if dim == 1 else (bm, bn)  # summed, left
        rmag, rerr = (n * mag, n * err + n * U_ACC * n * mag) if kind == "sum" else (mag, err)
        if acc == "int32" and rmag >= 2 ** 31:
            kind, rmag, rerr = "max", mag, err
        gm, gn = math.ceil(M / bm), math.ceil(N / bn)
        body += [f"red = T.alloc_fragment(({length},), {acc!r})",
                 f"T.reduce_{kind}({result}, red, dim={dim})"]
        if dim == 1:  # each block its column of R
            body += [f"for i in T.Parallel({bm}):", f"    if by * {bm} + i < {M}:",
                     f"        R[by * {bm} + i, bx] = red[i]"]
            outputs.append(("R", (M, gn), acc, rerr))
        else:
            body += [f"for j in T.Parallel({bn}):", f"    if bx * {bn} + j < {N}:",
                     f"        R[by, bx * {bn} + j] = red[j]"]
            outputs.append(("R", (gm, N), acc, rerr))
        feats |= {"epilogue_reduce", f"epilogue_reduce_{kind}_dim{dim}"}
    if acc == "float32":
        lows = [d for d in ("float16", "bfloat16") if d in declared and mag < 6e4]
        out = draw(st.sampled_from(["float32", *lows]))
        if out != "float32":
            err += unit_roundoff(out) * mag
            feats.add(f"epilogue_cast_{out}")
    how = draw(st.sampled_from(("direct", "shared", "parallel")))
    if how == "direct" and out != acc:
        how = "shared"
    if how == "direct":
        body.append(f"T.copy({result}, Y[by * {bm}, bx * {bn}])")
    elif how == "shared":  # T.copy converts the fragment into a shared tile of Y's dtype
        body += [f"y_s = T.alloc_shared(({bm}, {bn}), {out!r})", f"T.copy({result}, y_s)",
                 f"T.copy(y_s, Y[by * {bm}, bx * {bn}])"]
        feats.add("epilogue_shared")
    else:  # element by element under the bounds guard
        body += [f"for i, j in T.Parallel({bm}, {bn}):",
                 f"    if by * {bm} + i < {M} and bx * {bn} + j < {N}:",
                 f"        Y[by * {bm} + i, bx * {bn} + j] = "
                 f"T.cast({result}[i, j], {out!r})"]
        feats.add("epilogue_store")
    grid = (grid_extent("N", N, bn, False), grid_extent("M", M, bm, False))
    return GemmProgram(body, tensors, [("Y", (M, N), out, err), *outputs], grid, threads,
                       feats)


def attention(draw, dtype: str) -> GemmProgram:
    """FlashAttention's forward pass over one head (see the module docstring)."""
    k_step = K_STEP[dtype]
    feats = {"gemm_kernel", "attention", f"gemm_kernel_{dtype}", "gemm", "gemm_float32",
             "pipelined", "pipelined_gemm", "reduce_max", "reduce_sum", "exp2",
             "gemm_transpose_B"}
    threads, bm, bn = _tile_shapes(draw, k_step, attention=True)
    # the head dimension: gemm 1's K and gemm 2's N, whose 16x8 tiles split over the warps
    d = draw(st.sampled_from([d for d in (16, 32, 64) if d % k_step == 0 and
                              (bm // 16) * (d // 8) % (threads // WARP) == 0] or [64]))
    sq, skv = _size(draw, bm, "M", feats), _size(draw, bn, "K", feats)
    stages = draw(st.integers(1, 2))
    feats |= {f"pipelined_stages{stages}", f"gemm_threads{threads}"}
    lo, hi = -2.0, 2.0
    scale = (1.0 / d) ** 0.5 * 1.44269504  # 1/sqrt(d) * log2(e)
    masked = draw(st.booleans()) or skv % bn
    shared_p = draw(st.booleans())
    policy = _policy(draw, feats)
    window = _windows(draw, feats)
    body = [f"q_s = T.alloc_shared(({bm}, {d}), {dtype!r})",
            f"k_s = T.alloc_shared(({bn}, {d}), {dtype!r})",
            f"v_s = T.alloc_shared(({bn}, {d}), {dtype!r})",
            f"s = T.alloc_fragment(({bm}, {bn}), 'float32')",
            f"p = T.alloc_{'shared' if shared_p else 'fragment'}(({bm}, {bn}), {dtype!r})",
            f"o = T.alloc_fragment(({bm}, {d}), 'float32')",
            f"m = T.alloc_fragment(({bm},), 'float32')",
            f"m_prev = T.alloc_fragment(({bm},), 'float32')",
            f"r = T.alloc_fragment(({bm},), 'float32')",
            f"l_sum = T.alloc_fragment(({bm},), 'float32')",
            f"l = T.alloc_fragment(({bm},), 'float32')",
            f"T.copy({window('Q', ('by', bm), (None, d))}, q_s)",
            "T.fill(o, 0)", "T.fill(l, 0)", "T.fill(m, -T.infinity('float32'))",
            f"for k in T.Pipelined(T.ceildiv({skv}, {bn}), num_stages={stages}):",
            f"    T.copy({window('K', ('k', bn), (None, d))}, k_s)"]
    if masked:  # keys past the end must not count
        body += [f"    for i, j in T.Parallel({bm}, {bn}):",
                 f"        s[i, j] = T.if_then_else(k * {bn} + j < {skv}, T.float32(0), "
                 "-T.infinity('float32'))"]
        feats.add("attention_mask")
    else:
        body.append("    T.clear(s)")
    body += [f"    T.gemm(q_s, k_s, s, transpose_B=True{policy})",
             "    T.copy(m, m_prev)",
             "    T.reduce_max(s, m, dim=1, clear=False)",
             f"    for i in T.Parallel({bm}):",
             f"        r[i] = T.exp2(m_prev[i] * T.float32({scale!r}) - m[i] * "
             f"T.float32({scale!r}))",
             f"    for i, j in T.Parallel({bm}, {bn}):",
             f"        s[i, j] = T.exp2(s[i, j] * T.float32({scale!r}) - m[i] * "
             f"T.float32({scale!r}))",
             "    T.reduce_sum(s, l_sum, dim=1)",
             f"    for i in T.Parallel({bm}):",
             "        l[i] = l[i] * r[i] + l_sum[i]",
             "    T.copy(s, p)",
             f"    for i, j in T.Parallel({bm}, {d}):",
             "        o[i, j] = o[i, j] * r[i]",
             f"    T.copy({window('V', ('k', bn), (None, d))}, v_s)",
             f"    T.gemm(p, v_s, o{policy})",
             f"for i, j in T.Parallel({bm}, {d}):",
             "    o[i, j] = o[i, j] / l[i]"]
    feats.add("attention_p_shared" if shared_p else "attention_p_fragment")
    # S's error, then the exponent's (S and the max both carry it), then each weight's
    # relative error, of which the output is an average of V's rows
    mv = max(abs(lo), abs(hi))
    e_s = d * U_ACC * d * mv * mv
    e_x = scale * 2 * e_s + U_ACC * scale * 2 * d * mv * mv
    rel = math.log(2) * e_x + 2.0 ** -21
    steps = math.ceil(skv / bn)
    err = mv * (4 * rel + unit_roundoff(dtype) + (skv + 2 * steps + 2) * U_ACC)
    out = draw(st.sampled_from(["float32", dtype]))
    if out != "float32":
        err += unit_roundoff(out) * mv
        body += [f"y_s = T.alloc_shared(({bm}, {d}), {out!r})", "T.copy(o, y_s)",
                 f"T.copy(y_s, Y[by * {bm}, 0])"]
        feats.add("epilogue_shared")
    else:
        body.append(f"T.copy(o, Y[by * {bm}, 0])")
    tensors = [("Q", (sq, d), dtype, lo, hi), ("K", (skv, d), dtype, lo, hi),
               ("V", (skv, d), dtype, lo, hi)]
    grid = ("1", grid_extent("M", sq, bm, False))
    return GemmProgram(body, tensors, [("Y", (sq, d), out, err)], grid, threads, feats)


def _declared(dtypes) -> set:
    return set(OPERANDS) | {"float32", "int32"} if dtypes is None else set(dtypes)


def kernel_kinds(avoid=(), dtypes=None) -> list[tuple[str, str]]:
    """The kernels a backend can be given, as (``"gemm"`` or ``"attention"``, operand dtype),
    each equally likely: every operand dtype the backend declares with its accumulator equally
    often, float16 and bfloat16 ones half the time as FlashAttention; none where
    ``gemm_kernel`` is avoided."""
    if not {"gemm_kernel", "gemm", "pipelined_gemm"}.isdisjoint(avoid):
        return []
    declared = _declared(dtypes)
    kinds = []
    for dtype in OPERANDS:
        if dtype in declared and OPERANDS[dtype] in declared and \
                f"gemm_kernel_{dtype}" not in avoid:
            flash = dtype in ("float16", "bfloat16") and "attention" not in avoid
            kinds += [("gemm", dtype), ("attention" if flash else "gemm", dtype)]
    return kinds


@st.composite
def gemm_programs(draw, avoid=(), dtypes=None) -> GemmProgram | None:
    """A strategy of GEMM and attention kernels over the dtypes a backend declares (default:
    all); None where none can be written (no operand dtype declared, or ``gemm_kernel``
    avoided)."""
    kinds = sorted({dtype for _, dtype in kernel_kinds(avoid, dtypes)}, key=list(OPERANDS).index)
    if not kinds:
        return None
    dtype = draw(st.sampled_from(kinds))
    if dtype in ("float16", "bfloat16") and "attention" not in avoid and \
            draw(st.booleans()):  # shrinking goes towards the plain GEMM
        return attention(draw, dtype)
    return tiled_gemm(draw, dtype, _declared(dtypes))


@st.composite
def _kernels(draw, kind: str, operands: list, declared: set) -> GemmProgram:
    dtype = draw(st.sampled_from(operands))
    return attention(draw, dtype) if kind == "attention" else tiled_gemm(draw, dtype, declared)


# the share of the fuzzer's programs that are GEMM and attention kernels (each costs a
# compiling backend two or three tile programs' time)
KERNEL_SHARE = 0.25


def fuzz_plan(examples: int, avoid=(), dtypes=None, features=None, tile_ops=None,
              op_dtypes=None) -> list[tuple]:
    """What the fuzzer runs, as ``(name, strategy, examples)`` parts run one after another:
    GEMM and attention kernels a quarter of ``examples``, attention among them as often as
    :func:`kernel_kinds` has it, each kernel's operand dtype drawn at the odds it has there;
    the rest tile programs (:func:`.program.programs`, with the same arguments). Avoiding
    ``gemm_kernel``, only tile programs, those of before.

    Counts, not the odds of a first draw: Hypothesis does not draw a program's choices
    afresh for each test case. Most of its test cases (seven in ten) are mutations of an
    earlier one that keep its first choices, and its first ones extend a random first choice
    with the simplest values, so the kinds of one run come in clumps (seed 0's 30 programs
    drew 12 kernels, seed 2009's 106 drew 48 kernels, 5 of them attention)."""
    kinds = kernel_kinds(avoid, dtypes)
    kernels = round(examples * KERNEL_SHARE) if kinds else 0
    flash = [dtype for kind, dtype in kinds if kind == "attention"]
    gemms = [dtype for kind, dtype in kinds if kind == "gemm"]
    flashes = round(kernels * len(flash) / len(kinds)) if kinds else 0
    declared = _declared(dtypes)
    parts = [("tile programs", programs(avoid, dtypes, features, tile_ops, op_dtypes),
              examples - kernels),
             ("GEMM kernels", _kernels("gemm", gemms, declared), kernels - flashes),
             ("attention kernels", _kernels("attention", flash, declared), flashes)]
    return [part for part in parts if part[2] > 0]
