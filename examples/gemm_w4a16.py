"""W4A16: C = A @ W^T with float16 activations A [M, K] and 4-bit weights W [N, K], the
weight-only quantisation LLM decoding runs on (M is the batch of tokens, 1 to 16).

W is stored as unsigned 4-bit codes packed two to a byte, Q [N, K / 2] (element k in the low
nibble of byte k // 2 when k is even, the high nibble when odd), with one float16 scale and
zero point per ``group`` consecutive elements of a row: ``W[n, k] = (code - zero) * scale``.
The kernel copies each k-tile of codes to shared memory, dequantises it there (``T.unpack``)
into a float16 tile, and multiplies that on the tensor cores with float32 accumulation.

At decode sizes (M of 1 to 16) the output has only N / block_N tiles, too few blocks to keep
every SM's loads in flight, so ``splits`` > 1 cuts K into that many slices (split-K): the
blocks of slice ``s`` write their float32 partial sums to a workspace (``T.alloc_global``),
and a second kernel adds the slices and rounds the sum to C's dtype.

Run: python examples/gemm_w4a16.py [--m 16 --n 1024 --k 1024] [--group 128] [--splits 1]
"""

import argparse

import tilewright
import tilewright.language as T
import torch
from tilewright.profiler import do_bench

try:  # option ticket_combine's fence between blocks and overlap_dequant's wgmma groups are
    # the CUDA dialect's (__threadfence; wgmma issued without a wait, retired by hand)
    from tilewright_cuda.language import fence_gpu, wait_wgmma, wgmma_gemm
except ImportError:  # another backend: the options are refused
    fence_gpu = wait_wgmma = wgmma_gemm = None


@tilewright.jit(out_idx=[-1])
def w4a16_gemm(M, N, K, group=128, dtype="float16", block_M=16, block_N=128, block_K=128,
               threads=128, num_stages=3, splits=1, combine_N=256, overlap=False,
               stage_scales=False, swap=False, register_w=False, overlap_dequant=False,
               ticket_combine=False, copy_scales=False):
    """The kernel: K a multiple of ``block_K * splits``, ``block_K`` a multiple of 2; with
    ``splits`` > 1, two kernels (the slices' partial sums, then their sum in blocks of
    ``combine_N`` columns of a row).

    ``overlap`` (a diagnostic; off by default) keeps two float16 tiles and takes k-tiles two
    a step (an even number of them a slice): while one k-tile is dequantised into one tile,
    the gemm of the previous k-tile reads the other, so one barrier a k-tile separates
    them instead of two, and a warp's dequantisation and gemm instructions can interleave.
    The same dequantisation and the same k order: the result is bit-identical.

    ``stage_scales`` (off by default) copies the scales and zero points of a block's whole
    slice of K to shared memory once, before its k-tiles (all of a thread's loads in flight
    together, one wait), so each k-tile's dequantisation reads them there instead of waiting
    on global loads after its barrier (per thread a k-tile: 32 two-byte loads from global
    memory at the bench's tiles); the slice's length a multiple of ``group`` or ``group`` of
    it. The same values in the same arithmetic: bit-identical. It costs 4 * block_N bytes of
    shared memory a group of the slice (4 KB at the bench's tiles).

    ``swap`` (off by default) multiplies the transpose, C^T = W A^T: the dequantised tile is
    the gemm's M side and the activations its narrow N side, so on sm_90a each warpgroup's
    wgmma (m64n16k16, or m64n8k16 with ``block_M`` = 8; 64 rows of ``block_N`` a warpgroup)
    reads both tiles from shared memory itself, instead of each warp loading its fragments
    with ldmatrix; C^T's tile is stored transposed. The same products (on the GPU the
    tensor cores sum them in their own order).

    ``register_w`` (with ``swap`` and ``stage_scales``; off by default) dequantises each
    k-tile into a fragment instead of a shared tile: each thread computes the weights its
    registers hold as wgmma's register A operand (64 weight rows a warpgroup, ``block_N`` =
    64 per 128 threads), so the weights are never stored to shared memory and no barrier
    separates their dequantisation from the gemm. Its codes are in wgmma order
    (:func:`wgmma_order`: each 16-byte run of a row holds the 32 codes of a k32 step, 4
    bytes a thread of a quad), so a thread reads the eight codes of a row's k32 step as one
    32-bit word; ``block_K`` and ``group`` multiples of 32. The same values in the same
    arithmetic: bit-identical to ``swap``'s dequantisation.

    ``overlap_dequant`` (with ``register_w``, CUDA on sm_90a only; off by default) keeps two
    register fragments, one for the even k-tiles and one for the odd ones (an even number of
    k-tiles a slice, two a pipeline step), and issues each k-tile's wgmma without waiting for
    it (``wgmma_gemm``): a fragment is rewritten only after the wgmma that read it, two
    k-tiles back, has retired (``wait_wgmma(1)``: all but the newest group), so the
    dequantisation of k-tile i + 1 runs while the wgmma of k-tile i is in flight. The newest
    group stays in flight into the next step; the pipeline then refills a stage one step
    later (``num_stages`` >= 3), after the barrier that follows its groups' retirement. The
    same values in the same k order: bit-identical to ``register_w``.

    ``copy_scales`` (with ``stage_scales``; off by default) stages the slice's scales and
    zero points with ``T.copy`` (cp.async, 16 bytes a row at 8 groups a slice) instead of
    loads and stores a thread; with the CUDA pass config ``cuda.prologue_copies`` they are
    issued with the pipeline's first stage and waited for by its first wait, so the first
    codes are requested at once rather than one memory latency after the block starts. The
    same values: bit-identical.

    ``ticket_combine`` (with ``splits`` > 1, CUDA only; off by default) adds the slices in the
    one kernel instead of a second: each block stores its partial sums, fences them
    (``fence_gpu``) and takes a ticket of its output tile's counter; the block that takes the
    last ticket (``splits`` - 1) adds the tile's ``splits`` partial sums in slice order 0, 1,
    ... (the second kernel's order: the same bits, whichever block comes last), stores C's
    tile and puts the counter back to 0. The counters are an argument before C, ``Tickets``
    (int32, one per output tile, :func:`ticket_count`), zero before the first call and zero
    again after each."""
    if splits < 1 or K % (block_K * splits):
        raise ValueError(f"K={K} must be a multiple of block_K * splits = {block_K} * "
                         f"{splits}")
    k_tiles = K // block_K // splits  # per slice
    slice_K = k_tiles * block_K
    if stage_scales and slice_K % group and group % slice_K:
        raise ValueError(f"stage_scales takes whole groups or whole slices: a slice of "
                         f"{slice_K} (K={K} in {splits}) and group={group}, one a multiple of "
                         f"the other")
    if (stage_scales or swap) and overlap:
        raise ValueError("stage_scales and swap are options of the one-tile loop, not of "
                         "overlap")
    if register_w and not (swap and stage_scales and block_K % 32 == 0 and group % 32 == 0 and
                           threads % 128 == 0 and block_N == 64 * (threads // 128)):
        raise ValueError(f"register_w takes swap and stage_scales, block_K={block_K} and "
                         f"group={group} multiples of 32, and block_N={block_N} = 64 rows per "
                         f"warpgroup of threads={threads}")
    if overlap_dequant and not (register_w and k_tiles % 2 == 0 and num_stages >= 3 and
                                wgmma_gemm is not None):
        raise ValueError(f"overlap_dequant takes register_w, an even number of k-tiles a slice "
                         f"(K={K}, block_K={block_K}, splits={splits}), num_stages >= 3 "
                         f"(got {num_stages}) and a backend with hand-issued wgmma groups "
                         f"(tilewright_cuda)")
    if copy_scales and not stage_scales:
        raise ValueError("copy_scales is how stage_scales stages the scales: it takes "
                         "stage_scales")
    if ticket_combine and (splits < 2 or fence_gpu is None):
        raise ValueError("ticket_combine adds the slices of a split K (splits > 1) on a "
                         "backend with a GPU-wide fence (tilewright_cuda)")
    tiles = ticket_count(M, N, block_M, block_N)
    slice_groups = max(slice_K // group, 1)  # scale columns a slice
    c_shape = (block_N, block_M) if swap else (block_M, block_N)
    if overlap and k_tiles % 2:
        raise ValueError(f"overlap takes k-tiles two at a time: an even number of them a "
                         f"slice (K={K}, block_K={block_K}, splits={splits})")

    @T.macro
    def dequantise(Q_s, W_s, Scales, Zeros, bx, k0):
        """W_s = the codes Q_s of the k-tile at k0, dequantised."""
        for i, j in T.Parallel(block_N, block_K):
            # a partial column tile's rows past N dequantise row N - 1 (not stored)
            n, g = T.min(bx * block_N + i, N - 1), (k0 + j) // group
            code = T.cast(T.unpack(Q_s[i, j // 2], j % 2, 4), dtype)
            W_s[i, j] = (code - Zeros[n, g]) * Scales[n, g]

    @T.macro
    def dequantise_staged(Q_s, W_s, S_s, Z_s, ko):
        """W_s = the codes Q_s of the slice's ``ko``-th k-tile dequantised with the slice's
        scales S_s and zero points Z_s (column 0 throughout when a group spans the slice)."""
        for i, j in T.Parallel(block_N, block_K):
            if register_w:  # wgmma order (wgmma_order): nibble j % 32 // 8 + 4 (j % 2)
                # of the word j % 8 // 2 of the k32 step j // 32
                byte = j // 32 * 16 + j % 8 // 2 * 4 + j % 2 * 2 + j % 32 // 16
                nibble = j % 16 // 8
            else:
                byte, nibble = j // 2, j % 2
            code = T.cast(T.unpack(Q_s[i, byte], nibble, 4), dtype)
            g = (ko * block_K + j) // group
            W_s[i, j] = (code - Z_s[i, g]) * S_s[i, g]

    @T.macro
    def product(A_s, W_s, C_l):
        """C_l += A_s @ W_s^T, or its transpose W_s @ A_s^T with ``swap``."""
        if swap:
            T.gemm(W_s, A_s, C_l, transpose_B=True)
        else:
            T.gemm(A_s, W_s, C_l, transpose_B=True)

    @T.macro
    def slice_product(A, Q, Scales, Zeros, C_l, bx, by, bz):
        """C_l = the (by, bx) tile of A @ W^T over the ``bz``-th slice of K."""
        A_s = T.alloc_shared((block_M, block_K), dtype)
        Q_s = T.alloc_shared((block_N, block_K // 2), "uint8")
        if register_w:
            W_s = T.alloc_fragment((block_N, block_K), dtype)
        else:
            W_s = T.alloc_shared((block_N, block_K), dtype)
        T.clear(C_l)
        if overlap:
            # step kp: k-tiles e = 2 kp (A_s, Q_s into W_s) and o = e + 1 (Q_t into W_t);
            # the gemm of o runs in step kp + 1 (its activations A_p loaded then) beside the
            # dequantisation of e + 2, the last one after the loop. Each gemm comes before
            # the dequantisation beside it: ptxas then interleaves e's HMMAs with o's
            # dequantisation (the branch keeps the first pair apart)
            A_p = T.alloc_shared((block_M, block_K), dtype)
            Q_t = T.alloc_shared((block_N, block_K // 2), "uint8")
            W_t = T.alloc_shared((block_N, block_K), dtype)
            A_l = T.alloc_shared((block_M, block_K), dtype)  # A_s outside the loop unpipelines it
            base = bz * k_tiles * block_K
            for kp in T.Pipelined(k_tiles // 2, num_stages=num_stages):
                k0 = base + 2 * kp * block_K
                T.copy(A[by * block_M, k0], A_s)
                T.copy(Q[bx * block_N, k0 // 2], Q_s)
                T.copy(A[by * block_M, T.max(k0 - block_K, base)], A_p)
                T.copy(Q[bx * block_N, (k0 + block_K) // 2], Q_t)
                if kp > 0:
                    T.gemm(A_p, W_t, C_l, transpose_B=True)
                dequantise(Q_s, W_s, Scales, Zeros, bx, k0)
                T.gemm(A_s, W_s, C_l, transpose_B=True)
                dequantise(Q_t, W_t, Scales, Zeros, bx, k0 + block_K)
            T.copy(A[by * block_M, base + (k_tiles - 1) * block_K], A_l)
            T.gemm(A_l, W_t, C_l, transpose_B=True)
        elif stage_scales:
            # a partial column tile's rows past N stage row N - 1 (not stored; copy_scales:
            # zeros, whose weights are zeros)
            S_s = T.alloc_shared((block_N, slice_groups), dtype)
            Z_s = T.alloc_shared((block_N, slice_groups), dtype)
            if copy_scales:
                T.copy(Scales[bx * block_N, bz * slice_K // group], S_s)
                T.copy(Zeros[bx * block_N, bz * slice_K // group], Z_s)
            else:
                for i, g in T.Parallel(block_N, slice_groups):
                    n = T.min(bx * block_N + i, N - 1)
                    S_s[i, g] = Scales[n, bz * slice_K // group + g]
                    Z_s[i, g] = Zeros[n, bz * slice_K // group + g]
            if overlap_dequant:
                # step kp: k-tiles e = 2 kp (A_s, Q_s into W_s) and e + 1 (A_t, Q_t into W_t);
                # before each dequantisation, all but the newest group retired: the one
                # that read the fragment (two k-tiles back) is not the newest
                A_t = T.alloc_shared((block_M, block_K), dtype)
                Q_t = T.alloc_shared((block_N, block_K // 2), "uint8")
                W_t = T.alloc_fragment((block_N, block_K), dtype)
                for kp in T.Pipelined(k_tiles // 2, num_stages=num_stages):
                    k0 = (bz * k_tiles + 2 * kp) * block_K
                    T.copy(A[by * block_M, k0], A_s)
                    T.copy(Q[bx * block_N, k0 // 2], Q_s)
                    T.copy(A[by * block_M, k0 + block_K], A_t)
                    T.copy(Q[bx * block_N, (k0 + block_K) // 2], Q_t)
                    wait_wgmma(1)
                    dequantise_staged(Q_s, W_s, S_s, Z_s, 2 * kp)
                    wgmma_gemm(W_s, A_s, C_l, transpose_B=True)
                    wait_wgmma(1)
                    dequantise_staged(Q_t, W_t, S_s, Z_s, 2 * kp + 1)
                    wgmma_gemm(W_t, A_t, C_l, transpose_B=True)
                wait_wgmma(0)
            else:
                for ko in T.Pipelined(k_tiles, num_stages=num_stages):
                    k0 = (bz * k_tiles + ko) * block_K
                    T.copy(A[by * block_M, k0], A_s)
                    T.copy(Q[bx * block_N, k0 // 2], Q_s)
                    dequantise_staged(Q_s, W_s, S_s, Z_s, ko)
                    product(A_s, W_s, C_l)
        else:
            for ko in T.Pipelined(k_tiles, num_stages=num_stages):
                k0 = (bz * k_tiles + ko) * block_K
                T.copy(A[by * block_M, k0], A_s)
                T.copy(Q[bx * block_N, k0 // 2], Q_s)
                dequantise(Q_s, W_s, Scales, Zeros, bx, k0)
                product(A_s, W_s, C_l)

    @T.macro
    def store(C_l, out, lead, bx, by):
        """out[*lead, by * block_M :, bx * block_N :] = the tile C_l (C_l^T with ``swap``)."""
        if swap:
            for i, j in T.Parallel(block_N, block_M):
                if by * block_M + j < M and bx * block_N + i < N:
                    out[(*lead, by * block_M + j, bx * block_N + i)] = C_l[i, j]
        else:
            T.copy(C_l, out[(*lead, by * block_M, bx * block_N)])

    @T.macro
    def add_slices(partial, C, bx, by):
        """C's (by, bx) tile = the sum of its ``splits`` partial sums, in slice order."""
        total = T.alloc_fragment((block_M, block_N), "float32")
        for j, i in T.Parallel(block_M, block_N):
            m, n = by * block_M + j, bx * block_N + i
            total[j, i] = 0.0
            for s in T.serial(splits):
                total[j, i] += partial[s, T.min(m, M - 1), T.min(n, N - 1)]
            if m < M and n < N:
                C[m, n] = total[j, i]

    if ticket_combine:
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), Q: T.Tensor((N, K // 2), "uint8"),
                 Scales: T.Tensor((N, K // group), dtype),
                 Zeros: T.Tensor((N, K // group), dtype), Tickets: T.Tensor((tiles,), "int32"),
                 C: T.Tensor((M, N), dtype)):
            partial = T.alloc_global((splits, M, N), "float32")
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits,
                          threads=threads) as (bx, by, bz):
                C_l = T.alloc_fragment(c_shape, "float32")
                ticket = T.alloc_var("int32")
                tile = by * T.ceildiv(N, block_N) + bx
                slice_product(A, Q, Scales, Zeros, C_l, bx, by, bz)
                store(C_l, partial, (bz,), bx, by)
                # release: every thread's partial sums visible GPU-wide, then the block's
                # barrier, before the block's ticket (taken by one thread)
                fence_gpu()
                ticket = T.atomic_add(Tickets[tile], 1, return_prev=True)
                if ticket == splits - 1:  # the tile's other slices have all stored theirs
                    fence_gpu()  # acquire: their sums, not what L1 may hold
                    add_slices(partial, C, bx, by)
                    Tickets[tile] = 0  # for the next call: no other block counts on it now
    else:
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), Q: T.Tensor((N, K // 2), "uint8"),
                 Scales: T.Tensor((N, K // group), dtype), Zeros: T.Tensor((N, K // group), dtype),
                 C: T.Tensor((M, N), dtype)):
            if splits == 1:
                with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M),
                              threads=threads) as (bx, by):
                    C_l = T.alloc_fragment(c_shape, "float32")
                    slice_product(A, Q, Scales, Zeros, C_l, bx, by, 0)
                    store(C_l, C, (), bx, by)
            else:
                partial = T.alloc_global((splits, M, N), "float32")
                with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits,
                              threads=threads) as (bx, by, bz):
                    C_l = T.alloc_fragment(c_shape, "float32")
                    slice_product(A, Q, Scales, Zeros, C_l, bx, by, bz)
                    store(C_l, partial, (bz,), bx, by)
                with T.Kernel(T.ceildiv(N, combine_N), M, threads=128) as (bx, m):
                    total = T.alloc_fragment((combine_N,), "float32")
                    for j in T.Parallel(combine_N):
                        total[j] = 0.0
                        for s in T.serial(splits):
                            total[j] += partial[s, m, T.min(bx * combine_N + j, N - 1)]
                        if bx * combine_N + j < N:
                            C[m, bx * combine_N + j] = total[j]

    return main


def ticket_count(M, N, block_M=16, block_N=128):
    """The counters option ``ticket_combine`` takes: one per output tile."""
    return -(-N // block_N) * -(-M // block_M)


def quantize(w, group=128):
    """4-bit asymmetric quantisation of ``w`` [N, K] per ``group`` of a row: the packed codes
    [N, K / 2] (uint8), the scales and the zero points [N, K / group] in ``w``'s dtype."""
    n, k = w.shape
    if k % group or group % 2:
        raise ValueError(f"K={k} must be a multiple of an even group size (got {group})")
    groups = w.float().reshape(n, k // group, group)
    low, high = groups.amin(2), groups.amax(2)
    scales = ((high - low) / 15).clamp(min=1e-6)
    zeros = (-low / scales).round().clamp(0, 15)
    codes = (groups / scales[..., None] + zeros[..., None]).round().clamp(0, 15)
    codes = codes.reshape(n, k).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scales.to(w.dtype), zeros.to(w.dtype)


def wgmma_order(q):
    """The packed codes [N, K / 2] in the order ``register_w`` reads them: each 16-byte run of
    a row holds the 32 codes of a k32 step as four 32-bit words, word ``t`` the eight codes
    of thread ``t`` of a quad (lane % 4), whose registers hold columns ``8 s + 2 t`` and
    ``8 s + 2 t + 1`` of the four k8 column groups ``s`` (wgmma's A layout): column
    ``8 s + 2 t + h`` is nibble ``s + 4 h`` of word ``t`` (nibble ``n`` in byte ``n // 2``, the
    low half when ``n`` is even). ``tw_dequant_u4x8_f16_a`` (include/tw_dequant.h) takes
    each pair of a thread's registers from the word with one LOP3. :func:`plain_order` undoes
    it."""
    n, half = q.shape
    if half % 16:
        raise ValueError(f"K={2 * half} must be a multiple of 32 for the wgmma order")
    codes = torch.stack([q & 15, q >> 4], dim=-1).reshape(n, half // 16, 4, 4, 2)  # s, t, h
    codes = codes.permute(0, 1, 3, 4, 2).reshape(n, 2 * half)  # t, h, s
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def plain_order(q):
    """Codes in :func:`wgmma_order` back in the plain order."""
    n, half = q.shape
    codes = torch.stack([q & 15, q >> 4], dim=-1).reshape(n, half // 16, 4, 2, 4)  # t, h, s
    codes = codes.permute(0, 1, 4, 2, 3).reshape(n, 2 * half)  # s, t, h
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def dequantize(q, scales, zeros):
    """W [N, K] in the scales' dtype, as the kernel computes it."""
    codes = torch.stack([q & 15, q >> 4], dim=-1).flatten(1).to(scales.dtype)
    group = codes.shape[1] // scales.shape[1]
    return (codes - zeros.repeat_interleave(group, 1)) * scales.repeat_interleave(group, 1)


def w4a16_mm(a, q, scales, zeros, **tile):
    """C = a @ dequantize(q, scales, zeros)^T, ``q`` in the plain order :func:`quantize` gives
    (reordered for ``register_w``), with ``ticket_combine``'s counters made here; the group
    size is read from the shapes, which are checked before launch."""
    (m, k), (n, half) = a.shape, q.shape
    if half * 2 != k or q.dtype != torch.uint8:
        raise ValueError(f"Q must be uint8 [N, K / 2] = [{n}, {k // 2}] for A [{m}, {k}] "
                         f"(got {q.dtype} {list(q.shape)})")
    if scales.shape != zeros.shape or scales.dim() != 2 or scales.shape[0] != n or \
            not scales.shape[1] or k % scales.shape[1]:
        raise ValueError(f"scales {list(scales.shape)} and zeros {list(zeros.shape)} must both "
                         f"be [N, K / group] = [{n}, {k} / group]")
    group = k // scales.shape[1]
    kernel = w4a16_gemm(m, n, k, group, str(a.dtype).removeprefix("torch."), **tile)
    if tile.get("register_w"):  # a pass over Q: pre-order the codes and call the kernel
        q = wgmma_order(q)      # to save it
    if tile.get("ticket_combine"):  # fresh counters: this call alone takes their tickets
        tiles = ticket_count(m, n, tile.get("block_M", 16), tile.get("block_N", 128))
        return kernel(a, q, scales, zeros, torch.zeros(tiles, dtype=torch.int32,
                                                       device=a.device))
    return kernel(a, q, scales, zeros)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--splits", type=int, default=1, help="slices of K (split-K)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.m, args.k).to(dtype)
    q, scales, zeros = quantize(torch.randn(args.n, args.k).to(dtype), args.group)
    c = w4a16_mm(a, q, scales, zeros, splits=args.splits)
    ref = a.double() @ dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().mean())
    ms = do_bench(lambda: w4a16_mm(a, q, scales, zeros, splits=args.splits),
                  return_mode="median")
    gbps = (q.numel() + 2 * (a.numel() + c.numel() + 2 * scales.numel())) / ms * 1e-6
    print(f"w4a16 gemm {args.m}x{args.n}x{args.k} group {args.group} {args.dtype} in "
          f"{args.splits} slices of K: matches "
          f"torch, {ms:.3f} ms, {gbps:.3f} GB/s")


if __name__ == "__main__":
    main()
