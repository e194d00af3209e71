"""fp8 GEMM with scales, as LLM inference runs it: C = (A * a_scale) @ (B * b_scale)^T with A
[M, K] and B [N, K] in float8_e4m3fn (or e5m2), float32 accumulation, C in bfloat16.

Three scale layouts, told apart by the scales' shapes as torch._scaled_mm does:

- ``tensor``: one float32 scale per tensor, a_scale [1] and b_scale [1], applied in the
  epilogue;
- ``token``: one scale per row of A and per row of B (per token, per output channel),
  a_scale [M] and b_scale [N], applied in the epilogue;
- ``block`` (DeepSeek-V3): A scaled per token and 128-wide group of K, a_scale
  [M, ceil(K / 128)], B per 128 x 128 block, b_scale [ceil(N / 128), ceil(K / 128)]; applied
  per k-block: each 128-deep k-tile's product is scaled before it joins the accumulator.

:func:`scaled_mm` checks the scales against the layouts before anything is launched.

Run: python examples/gemm_fp8_scaled.py [--m 256 --n 256 --k 512] [--layout block]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench

try:  # option tma_store's TMA store and its wait are the CUDA dialect's
    from tilewright_cuda.language import tma_copy, tma_store_wait
except ImportError:  # another backend: the option is refused
    tma_copy = tma_store_wait = None

GROUP = 128  # the block layout's scale granularity along K (and along N for B)
LAYOUTS = ("tensor", "token", "block")


def scale_shapes(layout: str, m: int, n: int, k: int) -> tuple[tuple, tuple]:
    """The shapes of a_scale and b_scale in ``layout`` for A [m, k] and B [n, k]."""
    kg, ng = -(-k // GROUP), -(-n // GROUP)
    return {"tensor": ((1,), (1,)), "token": ((m,), (n,)),
            "block": ((m, kg), (ng, kg))}[layout]


@tilewright.jit(out_idx=[4])
def fp8_gemm_scaled(M, N, K, layout="block", dtype="float8_e4m3fn", out_dtype="bfloat16",
                    block_M=128, block_N=128, block_K=GROUP, threads=256, num_stages=3,
                    overlap=False, fused_scale=False, panel=0, c_shared=False, workers=0,
                    tma_store=False):
    """The kernel of one layout; in the block layout a k-tile is one scale group
    (``block_K`` = 128) and a column tile lies in one 128-row block of B, or with
    ``block_N`` = 256 spans two of them: each k-tile then runs one gemm a 128-column half
    (B's two 128-row tiles, wgmma m64n128k32), each half's product promoted with its own
    block's scale into that half's accumulator, so that the column tile's scales are known
    at compile time and the product fragment stays 128 columns wide (a 256-wide one beside
    a 256-wide accumulator: 256 registers a thread). With ``block_N`` = 192 the column
    tile starts on a block boundary at even ``bx`` and 64 columns past one at odd ``bx``: one
    gemm (wgmma m64n192k32) into one product fragment, each column promoted with its own
    block's scale (three of B's scales a k-tile, see ``b_scale``).

    Block layout options (diagnostics; the defaults are the measured kernel): ``overlap``
    keeps two product fragments, so that k-tile ``ko``'s wgmma is in flight while k-tile
    ``ko - 1``'s product is scaled into the accumulator (its wait lands after that
    promotion: transforms/wgmma_wait), the last k-tile promoted after the loop; without it
    each k-tile's promotion waits for its own wgmma. ``fused_scale`` multiplies the two
    scales first, one FFMA an element instead of an FMUL and an FFMA (float32 rounding of
    ``a_scale * b_scale`` instead of ``C_k * a_scale``: the same model error).

    ``panel`` (any layout; 0: off) runs the blocks in panels of ``panel`` block rows
    (``T.use_swizzle``), so the blocks in flight together share their A and B tiles in L2:
    in launch order a wave of 132 blocks otherwise spans every column block of B.
    ``c_shared`` (any layout) stores C through a shared tile: the accumulators' 4-byte pair
    stores go to shared memory, then whole rows leave in 16-byte stores, where straight from
    the registers each warp's store fills half of each 32-byte sector it touches.

    ``workers`` (any layout; 0: one block a tile) makes the kernel persistent: that many
    blocks (one an SM) walk the tiles (``T.Persistent``, in panels of ``panel`` block rows),
    so the loads of a block's next tile need not wait for its last tile's epilogue, its exit
    and a new block's start. ``tma_store`` (with ``c_shared``; the CUDA dialect) sends each
    shared C tile to global memory in one TMA store, waited for only before the shared tile
    is written again (the next half or the next tile), so the store runs under the gemms."""
    sa_shape, sb_shape = scale_shapes(layout, M, N, K)
    if tma_store and (not c_shared or tma_copy is None):
        raise ValueError("tma_store stores C from its shared tile by TMA: it needs c_shared "
                         "and the CUDA backend (tilewright_cuda)")

    # the block layout's column tile in gemms of at most one scale block's width
    halves = block_N // GROUP if layout == "block" and block_N == 2 * GROUP else 1
    tile_N = block_N // halves

    def b_scale(SB, bx, sb_row, j, ko):
        """B's scale of the tile's column ``j`` in k-tile ``ko``: block row ``sb_row``'s, or
        with ``block_N`` = 192 (tiles start on 128-column boundaries at even ``bx``, 64
        columns past one at odd ``bx``) the next block row's from column 128, and from
        column 64 at odd ``bx``. ``j`` is known for each register (the first and last 64
        columns fold to one row each), the parity of ``bx`` only at run time: the middle 64
        columns read row ``sb_row + bx % 2``, three loads a k-tile and no select."""
        if block_N != GROUP + GROUP // 2:
            return SB[sb_row, ko]
        last = sb_shape[0] - 1
        row = T.if_then_else(j < GROUP // 2, sb_row,
                             T.min(sb_row + T.if_then_else(j < GROUP, bx % 2, 1), last))
        return SB[row, ko]

    @T.macro
    def promote(C_l, C_k, SA, SB, bx, by, sb_row, ko):
        """C_l += k-tile ko's product C_k, scaled (rows past M read row M - 1's scale)."""
        for i, j in T.Parallel(block_M, tile_N):
            if fused_scale:
                C_l[i, j] += C_k[i, j] * (SA[T.min(by * block_M + i, M - 1), ko] *
                                          b_scale(SB, bx, sb_row, j, ko))
            else:
                C_l[i, j] += C_k[i, j] * SA[T.min(by * block_M + i, M - 1), ko] * \
                    b_scale(SB, bx, sb_row, j, ko)
    if layout == "block" and (block_K != GROUP or (
            GROUP % block_N and block_N not in (GROUP + GROUP // 2, 2 * GROUP))):
        raise ValueError(f"the block layout scales {GROUP}-deep k-tiles and {GROUP}-row blocks "
                         f"of B: block_K must be {GROUP} and block_N divide it or be "
                         f"{GROUP + GROUP // 2} or {2 * GROUP} (got block_K={block_K}, "
                         f"block_N={block_N})")
    if overlap and workers:
        raise ValueError("overlap (a diagnostic) runs one tile a block: it takes no workers")
    if overlap and (layout != "block" or -(-K // block_K) % 2 or block_N > GROUP):
        raise ValueError(f"overlap takes the block layout's k-tiles two at a time: an even "
                         f"number of them, in column tiles of one scale block (K={K}, "
                         f"block_K={block_K}, block_N={block_N}, layout {layout!r})")

    @T.macro
    def output_tile(A, B, SA, SB, C, A_s, B_s, B_h, C_l, C_h, C_k, C_s, zero, bx, by):
        """C's tile (by, bx): its k-loop and its store (one of the grid's blocks, or one
        round of a persistent block's walk over the tiles)."""
        if halves > 1:
            T.clear(C_h)
        if panel and not workers:
            T.use_swizzle(panel_size=panel)
        T.clear(C_l)
        if layout == "block":
            if C_k is None:  # (a grid's block allocates it here, in the order it always did)
                C_k = T.alloc_fragment((block_M, tile_N), "float32")
            sb_row = T.min(bx * block_N // GROUP, sb_shape[0] - 1)
            sb_half = T.min(bx * block_N // GROUP + 1, sb_shape[0] - 1)
            k_tiles = T.ceildiv(K, block_K)
            if overlap:  # two k-tiles a step: even ones' products in C_k, odd in C_n
                C_n = T.alloc_fragment((block_M, block_N), "float32")
                A_t = T.alloc_shared((block_M, block_K), dtype)
                B_t = T.alloc_shared((block_N, block_K), dtype)
                T.clear(C_n)
                for kp in T.Pipelined(k_tiles // 2, num_stages=num_stages):
                    T.copy(A[by * block_M, 2 * kp * block_K], A_s)
                    T.copy(B[bx * block_N, 2 * kp * block_K], B_s)
                    T.copy(A[by * block_M, (2 * kp + 1) * block_K], A_t)
                    T.copy(B[bx * block_N, (2 * kp + 1) * block_K], B_t)
                    T.gemm(A_s, B_s, C_k, transpose_B=True, clear_accum=True)
                    # the previous step's odd product (zero at kp = 0) meanwhile
                    promote(C_l, C_n, SA, SB, bx, by, sb_row, T.max(2 * kp - 1, 0))
                    T.gemm(A_t, B_t, C_n, transpose_B=True, clear_accum=True)
                    promote(C_l, C_k, SA, SB, bx, by, sb_row, 2 * kp)
                promote(C_l, C_n, SA, SB, bx, by, sb_row, k_tiles - 1)
            else:
                for ko in T.Pipelined(k_tiles, num_stages=num_stages):
                    T.copy(A[by * block_M, ko * block_K], A_s)
                    T.copy(B[bx * block_N, ko * block_K], B_s)
                    if halves > 1:
                        T.copy(B[bx * block_N + tile_N, ko * block_K], B_h)
                    T.gemm(A_s, B_s, C_k, transpose_B=True, clear_accum=True)
                    promote(C_l, C_k, SA, SB, bx, by, sb_row, ko)
                    if halves > 1:  # the same product fragment for the second half,
                        # zeroed from the promoted sums: a zero that waits for them, so
                        # that ptxas issues the second gemm after the promotion (from
                        # constant zeros it issued it first, into 64 more registers
                        # a thread than the 240 there are, and spilled 32 of them).
                        # min(|x|, 0) is 0 for every x, NaN too (min returns the other
                        # operand), in one FMNMX; ``zero`` a variable, which the
                        # compiler cannot fold
                        for i, j in T.Parallel(block_M, tile_N):
                            C_k[i, j] = T.min(T.abs(C_l[i, j]), zero)
                        T.gemm(A_s, B_h, C_k, transpose_B=True)
                        promote(C_h, C_k, SA, SB, bx, by, sb_half, ko)
        else:
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_s)
                T.copy(B[bx * block_N, ko * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            for i, j in T.Parallel(block_M, block_N):
                if layout == "tensor":
                    C_l[i, j] *= SA[0] * SB[0]
                else:
                    C_l[i, j] *= SA[T.min(by * block_M + i, M - 1)] * \
                        SB[T.min(bx * block_N + j, N - 1)]
        for h, C_a in enumerate((C_l, C_h)[:halves]):  # a half at a time
            col = bx * block_N + tile_N if h else bx * block_N
            if tma_store:  # the previous store has read C_s before it is overwritten
                tma_store_wait()
                T.copy(C_a, C_s)
                tma_copy(C_s, C[by * block_M:(by + 1) * block_M, col:col + tile_N])
            elif c_shared:  # through the same shared tile: four stages still fit
                T.copy(C_a, C_s)
                T.copy(C_s, C[by * block_M, col])
            else:
                T.copy(C_a, C[by * block_M, col])

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
             SA: T.Tensor(sa_shape, "float32"), SB: T.Tensor(sb_shape, "float32"),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(*((workers,) if workers else (T.ceildiv(N, block_N),
                                                     T.ceildiv(M, block_M))),
                      threads=threads) as grid:
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((tile_N, block_K), dtype)
            C_l = T.alloc_fragment((block_M, tile_N), "float32")
            C_s = T.alloc_shared((block_M, tile_N), out_dtype) if c_shared else None
            B_h = C_h = zero = C_k = None
            if halves > 1:  # the second half's B tile and accumulator
                B_h = T.alloc_shared((tile_N, block_K), dtype)
                C_h = T.alloc_fragment((block_M, tile_N), "float32")
                zero = T.alloc_var("float32", init=0, name="zero")
            if layout == "block" and workers:  # the product fragment, once for all tiles
                C_k = T.alloc_fragment((block_M, tile_N), "float32")
            if workers:  # each block walks the tiles, in panels of ``panel`` block rows
                for by, bx in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)],
                                           workers, grid, group_size=panel or 1):
                    output_tile(A, B, SA, SB, C, A_s, B_s, B_h, C_l, C_h, C_k, C_s, zero,
                                bx, by)
                if tma_store:
                    tma_store_wait()  # the last tile's store has read C_s
            else:
                bx, by = grid
                output_tile(A, B, SA, SB, C, A_s, B_s, B_h, C_l, C_h, C_k, C_s, zero, bx, by)

    return main


def scale_layout(a, b, a_scale, b_scale) -> str:
    """The layout whose scale shapes ``a_scale`` and ``b_scale`` have, for A ``a`` [M, K] and
    B ``b`` [N, K]; a ValueError naming every layout's shapes when none matches."""
    (m, k), (n, k_b) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"A is [{m}, {k}] and B [{n}, {k_b}]: B must be [N, K] with A's K")
    given = (tuple(a_scale.shape), tuple(b_scale.shape))
    for layout in LAYOUTS:
        if given == scale_shapes(layout, m, n, k):
            return layout
    expected = "; ".join(f"{lay}: a_scale {list(sa)}, b_scale {list(sb)}"
                         for lay in LAYOUTS for sa, sb in [scale_shapes(lay, m, n, k)])
    raise ValueError(f"scales a_scale {list(given[0])} and b_scale {list(given[1])} match no "
                     f"scale layout of A [{m}, {k}] x B [{n}, {k}]^T (expected {expected})")


def scaled_mm(a, b, a_scale, b_scale, out_dtype="bfloat16", **tile):
    """C = (a * a_scale) @ (b * b_scale)^T in ``out_dtype``, the layout read from the scales'
    shapes (see the module's docstring); scales of no layout are refused before launch."""
    layout = scale_layout(a, b, a_scale, b_scale)
    for name, scale in (("a_scale", a_scale), ("b_scale", b_scale)):
        if scale.dtype != torch.float32:
            raise ValueError(f"{name} is {scale.dtype}: scales are float32")
    (m, k), n = a.shape, b.shape[0]
    kernel = fp8_gemm_scaled(m, n, k, layout, str(a.dtype).removeprefix("torch."), out_dtype,
                             **tile)
    return kernel(a, b, a_scale, b_scale)


def reference(a, b, a_scale, b_scale, layout):
    """The float64 product of the dequantised operands."""
    a, b = a.double(), b.double()
    sa, sb = a_scale.double(), b_scale.double()
    if layout == "tensor":
        return (a @ b.T) * sa * sb
    if layout == "token":
        return (a @ b.T) * sa[:, None] * sb[None, :]
    m, k = a.shape
    n = b.shape[0]
    sa = sa.repeat_interleave(GROUP, 1)[:, :k]
    sb = sb.repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)[:n, :k]
    return (a * sa) @ (b * sb).T


def quantize(x, layout, dtype=torch.float8_e4m3fn):
    """``x`` [rows, K] in ``dtype`` with the scales of ``layout`` (amax to the format's
    largest value); rows are tokens for A, output channels for B (128 x 128 blocks of B in
    the block layout are :func:`quantize_blocks`)."""
    top = torch.finfo(dtype).max
    if layout == "tensor":
        scale = x.abs().amax().clamp(min=1e-12).reshape(1) / top
        return (x / scale).to(dtype), scale.float()
    if layout == "token":
        scale = x.abs().amax(1).clamp(min=1e-12) / top
        return (x / scale[:, None]).to(dtype), scale.float()
    rows, k = x.shape
    groups = x.reshape(rows, -1, GROUP) if k % GROUP == 0 else None
    if groups is None:
        raise ValueError(f"the example quantizes whole {GROUP}-wide groups: K={k}")
    scale = groups.abs().amax(2).clamp(min=1e-12) / top
    return (groups / scale[..., None]).reshape(rows, k).to(dtype), scale.float()


def quantize_blocks(w, dtype=torch.float8_e4m3fn):
    """``w`` [N, K] in ``dtype`` with one scale per 128 x 128 block."""
    n, k = w.shape
    blocks = w.reshape(n // GROUP, GROUP, k // GROUP, GROUP)
    scale = blocks.abs().amax((1, 3)).clamp(min=1e-12) / torch.finfo(dtype).max
    return (blocks / scale[:, None, :, None]).reshape(n, k).to(dtype), scale.float()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--layout", default="block", choices=LAYOUTS)
    parser.add_argument("--dtype", default="float8_e4m3fn",
                        choices=["float8_e4m3fn", "float8_e5m2"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    x, w = torch.randn(args.m, args.k), torch.randn(args.n, args.k)
    a, a_scale = quantize(x, args.layout, dtype)
    b, b_scale = quantize_blocks(w, dtype) if args.layout == "block" else \
        quantize(w, args.layout, dtype)
    c = scaled_mm(a, b, a_scale, b_scale)
    ref = reference(a, b, a_scale, b_scale, args.layout)
    torch.testing.assert_close(c.double(), ref, rtol=1.6e-2, atol=1e-2 * ref.abs().mean())
    ms = do_bench(lambda: scaled_mm(a, b, a_scale, b_scale), return_mode="median")
    tflops = 2 * args.m * args.n * args.k / ms * 1e-9
    print(f"fp8 gemm {args.m}x{args.n}x{args.k} {args.dtype}, {args.layout} scales: matches "
          f"torch, {ms:.3f} ms, {tflops:.3f} TFLOP/s")


if __name__ == "__main__":
    main()
