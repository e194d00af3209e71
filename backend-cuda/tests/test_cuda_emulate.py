"""The CUDA generated for the examples computes what torch computes, run on the host with one
thread per CUDA thread (see hostemu.py): indexing, guards, barriers, shuffles, atomics and the
mma.sync fragment layouts (emulated per warp) are checked without a GPU. Outputs start as
NaN."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError


@pytest.mark.emulator
@pytest.mark.parametrize("name", kernels.EMULATED)
def test_generated_cuda_matches_torch(name, tmp_path):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    case = kernels.case(name)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()


def rows_by_scalar():
    """A grid over an integer scalar argument (TileLang's varlen attention launches
    ``T.ceildiv(max_seqlen, block)`` blocks)."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(T.ceildiv(rows, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                if bx * 32 + i < rows:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0
    return main


@pytest.mark.nvrtc
@pytest.mark.emulator
def test_grid_over_a_scalar_argument(tmp_path):
    func = rows_by_scalar()
    kernel = tilewright.compile(func, target="cuda -arch=sm_90a", execution_backend="nvrtc")
    assert kernel.executor == "nvrtc"
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    launch = lowered.source.payload
    assert launch["symbols"] == {"rows": [2]}, launch
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 100)
    torch.testing.assert_close(y[:100], x[:100] * 2)
    assert y[100:].isnan().all()  # the grid's 4 blocks cover 128 rows; rows 100.. untouched


def _pairs_per_block():
    """A grid of ``n * 2`` blocks over an ``(n, 2)`` tensor: TVM's common-subexpression pass
    names ``n * 2`` (the grid and the flattened tensor's extent) on the host, and the split
    into host and kernel made that name a kernel parameter (TileLang's sparse MLA forward)."""
    n = T.symbolic("n")

    @T.prim_func
    def main(P: T.Tensor((n, 2), "int32"), Y: T.Tensor((n, 2), "int32")):
        with T.Kernel(n * 2, threads=32) as bx:
            for i in T.Parallel(1):
                Y[bx // 2, bx % 2] = P[bx // 2, bx % 2] * 3 + i
    return main


@pytest.mark.emulator
def test_a_value_the_host_and_the_kernel_share_is_not_a_kernel_parameter(tmp_path):
    lowered = tilewright.lower(_pairs_per_block(), "cuda -arch=sm_90a")
    launch = lowered.source.payload
    assert [p["kind"] for p in launch["params"]] == ["tensor", "tensor", "symbol"], launch
    p = torch.arange(14, dtype=torch.int32).reshape(7, 2)
    y = torch.zeros_like(p)
    hostemu.run(lowered.source.text, launch, tmp_path, p, y)
    torch.testing.assert_close(y, p * 3)


def while_rows(condition_in_shared: bool = False):
    """Blocks walk 32-row tiles in a ``while`` loop (TileLang's stream-K GEMM walks its
    iterations so); each tile is staged in shared memory and written out with its rows
    reversed, so threads read what others wrote: barriers inside the loop and on its back
    edge are needed."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((32, 64), "float32")
            at = T.alloc_shared((1,), "int32") if condition_in_shared else \
                T.alloc_fragment((1,), "int32", "local")
            at[0] = bx * 32
            while at[0] < rows:
                T.copy(X[at[0], 0], S)
                for i, j in T.Parallel(32, 64):
                    Y[at[0] + i, j] = S[31 - i, j] * 2.0
                at[0] = at[0] + 64
    return main


@pytest.mark.emulator
def test_while_loop_with_barriers(tmp_path):
    lowered = tilewright.lower(while_rows(), "cuda -arch=sm_90a")
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 192)
    want = (x[:192].reshape(6, 32, 64).flip(1) * 2).reshape(192, 64)
    torch.testing.assert_close(y[:192], want)
    assert y[192:].isnan().all()


def test_while_condition_reading_shared_memory_is_refused():
    with pytest.raises(UnsupportedOpError, match=r"backend 'cuda' runs a 'while' loop whose "
                       r"condition is the same in every thread and reads no shared memory; "
                       r"this condition reads shared memory") as err:
        tilewright.lower(while_rows(condition_in_shared=True), "cuda -arch=sm_90a")
    assert err.value.location is not None and err.value.location.line > 0


def atomic_rows(branch: bool):
    """``T.atomic_add`` of one element per iteration of a ``T.Parallel`` nest (stream-K's
    partial tiles), alone or in the else branch of a uniform ``if``."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32"),
             flag: T.int32):
        with T.Kernel(4, threads=64) as bx:
            acc = T.alloc_fragment((16, 64), "float32")
            T.copy(X[bx * 16, 0], acc)
            if branch and flag == 0:
                T.copy(acc, Y[bx * 16, 0])
            else:
                for i, j in T.Parallel(16, 64):
                    T.atomic_add(Y[bx * 16 + i, j], acc[i, j])
    return main


@pytest.mark.emulator
@pytest.mark.parametrize("branch", [False, True])
def test_atomic_add_per_parallel_element(branch, tmp_path):
    """Each iteration adds its own element (the backend gave the nest to thread 0 alone)."""
    lowered = tilewright.lower(atomic_rows(branch), "cuda -arch=sm_90a")
    x, y = torch.randn(64, 64), torch.ones(64, 64)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 1)
    torch.testing.assert_close(y, x + 1)


def mla_decode(heads=64, dim=512, pe_dim=64, block_N=64, seqlen=128, threads=256):
    """TileLang's MLA decode (``deepseek_mla/example_mla_decode.py``, no split): 64 heads a
    block on 8 warps, a 64 x 512 float32 ``acc_o`` that only gemms, whole fills and
    element-wise rescales touch (too few rows for a warp column each), and ``O_shared`` used
    only after the K/V loop."""
    scale = float((dim + pe_dim) ** -0.5 * 1.44269504)
    dtype, accum = "float16", "float32"

    @T.prim_func
    def main(Q: T.Tensor((heads, dim), dtype), Q_pe: T.Tensor((heads, pe_dim), dtype),
             KV: T.Tensor((seqlen, dim), dtype), K_pe: T.Tensor((seqlen, pe_dim), dtype),
             Output: T.Tensor((heads, dim), dtype)):
        with T.Kernel(heads // 64, threads=threads) as hid:
            Q_shared = T.alloc_shared([64, dim], dtype)
            S_shared = T.alloc_shared([64, block_N], dtype)
            Q_pe_shared = T.alloc_shared([64, pe_dim], dtype)
            KV_shared = T.alloc_shared([block_N, dim], dtype)
            K_pe_shared = T.alloc_shared([block_N, pe_dim], dtype)
            O_shared = T.alloc_shared([64, dim], dtype)
            acc_s = T.alloc_fragment([64, block_N], accum)
            acc_o = T.alloc_fragment([64, dim], accum)
            m = T.alloc_fragment([64], accum)
            m_prev = T.alloc_fragment([64], accum)
            rescale = T.alloc_fragment([64], accum)
            row_sum = T.alloc_fragment([64], accum)
            logsum = T.alloc_fragment([64], accum)
            T.copy(Q[hid * 64:(hid + 1) * 64, :], Q_shared)
            T.copy(Q_pe[hid * 64:(hid + 1) * 64, :], Q_pe_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(accum))
            for k in T.Pipelined(T.ceildiv(seqlen, block_N), num_stages=2):
                T.copy(KV[k * block_N:(k + 1) * block_N, :], KV_shared)
                T.copy(K_pe[k * block_N:(k + 1) * block_N, :], K_pe_shared)
                T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
                T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullCol)
                T.copy(m, m_prev)
                T.fill(m, -T.infinity(accum))
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(64):
                    m[i] = T.max(m[i], m_prev[i])
                for i in T.Parallel(64):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(64, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                T.copy(acc_s, S_shared)
                for i in T.Parallel(64):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                for i, j in T.Parallel(64, dim):
                    acc_o[i, j] *= rescale[i]
                T.gemm(S_shared, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
            for i, j in T.Parallel(64, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[hid * 64:(hid + 1) * 64, :])
    return main


@pytest.mark.emulator
def test_mla_decode_wide_accumulator_in_registers(tmp_path):
    """``acc_o`` (128 KiB) lives in registers (128 a thread), ``O_shared`` reuses the bytes
    of a tile dead after the loop and, inside the loop, ``S_shared`` those of ``K_pe_shared``
    (renewed each iteration, read before the scores are written): 369920 bytes of shared
    memory were refused on sm_90a, 164864 fit sm_80's 166912 (173312 did not)."""
    lowered = tilewright.lower(mla_decode(), "cuda -arch=sm_90a")
    assert "float acc_o_ptr[" in lowered.source.text  # registers
    assert lowered.source.payload["dynamic_smem_bytes"] == 164864
    torch.manual_seed(0)
    q, q_pe = torch.randn(64, 512).half(), torch.randn(64, 64).half()
    kv, k_pe = torch.randn(128, 512).half(), torch.randn(128, 64).half()
    out = torch.full((64, 512), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, q, q_pe, kv, k_pe, out)
    scores = (q.float() @ kv.float().T + q_pe.float() @ k_pe.float().T) * (512 + 64) ** -0.5
    want = torch.softmax(scores, -1) @ kv.float()
    torch.testing.assert_close(out.float(), want, atol=2e-3, rtol=2e-3)


def two_phases(cols: int = 240, both_at_once: bool = False):
    """Two phases, each with a 120 KiB shared tile that threads read in other threads'
    order: together they exceed sm_90a's 232448 bytes, apart each fits."""
    @T.prim_func
    def main(X: T.Tensor((128, cols), "float32"), Z: T.Tensor((128, cols), "float32"),
             Y: T.Tensor((128, cols), "float32"), W: T.Tensor((128, cols), "float32")):
        with T.Kernel(1, threads=128) as _:
            A = T.alloc_shared((128, cols), "float32")
            B = T.alloc_shared((128, cols), "float32")
            T.copy(X, A)
            for i, j in T.Parallel(128, cols):
                Y[i, j] = A[127 - i, j] * 2.0
            T.copy(Z, B)
            for i, j in T.Parallel(128, cols):
                W[i, j] = B[i, cols - 1 - j] + (A[i, j] if both_at_once else 0.0)
    return main


@pytest.mark.emulator
def test_shared_tiles_of_two_phases_share_bytes(tmp_path):
    """``B`` takes ``A``'s bytes (A is dead once phase one is done), behind a barrier: the
    pool is one tile (122880 bytes), not two (245760, refused)."""
    lowered = tilewright.lower(two_phases(), "cuda -arch=sm_90a")
    assert lowered.source.payload["dynamic_smem_bytes"] == 122880
    x, z = torch.randn(128, 240), torch.randn(128, 240)
    y, w = torch.full((128, 240), float("nan")), torch.full((128, 240), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, z, y, w)
    torch.testing.assert_close(y, x.flip(0) * 2)
    torch.testing.assert_close(w, z.flip(1))


def two_tiles_per_iteration(cols: int = 240, steps: int = 2):
    """Each iteration of a serial loop uses a 120 KiB tile, then another: together they
    exceed sm_90a's 232448 bytes; each is written whole before it is read in the iteration
    (threads read other threads' elements)."""
    @T.prim_func
    def main(X: T.Tensor((steps, 128, cols), "float32"), Z: T.Tensor((steps, 128, cols), "float32"),
             Y: T.Tensor((steps, 128, cols), "float32"),
             W: T.Tensor((steps, 128, cols), "float32")):
        with T.Kernel(1, threads=128) as _:
            A = T.alloc_shared((128, cols), "float32")
            B = T.alloc_shared((128, cols), "float32")
            for k in T.serial(steps):
                T.copy(X[k, :, :], A)
                for i, j in T.Parallel(128, cols):
                    Y[k, i, j] = A[127 - i, j] * 2.0
                T.copy(Z[k, :, :], B)
                for i, j in T.Parallel(128, cols):
                    W[k, i, j] = B[i, cols - 1 - j]
    return main


@pytest.mark.emulator
def test_tiles_used_apart_in_one_iteration_share_bytes(tmp_path):
    """``B`` takes ``A``'s bytes inside the loop body: a barrier before ``B``'s copy (every
    thread done reading ``A``) and one before ``A``'s copy in the next iteration (done reading
    ``B``). Whole loops as one lifetime unit refused it (245760 bytes)."""
    lowered = tilewright.lower(two_tiles_per_iteration(), "cuda -arch=sm_90a")
    assert lowered.source.payload["dynamic_smem_bytes"] == 122880
    x, z = torch.randn(2, 128, 240), torch.randn(2, 128, 240)
    y, w = torch.full((2, 128, 240), float("nan")), torch.full((2, 128, 240), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, z, y, w)
    torch.testing.assert_close(y, x.flip(1) * 2)
    torch.testing.assert_close(w, z.flip(2))


def tiles_in_two_loops(cols: int = 240, steps: int = 2):
    """Two serial loops, one after the other, each using a 120 KiB tile ``A`` and then
    another ``B`` per iteration (each written whole before it is read in the iteration,
    threads reading other threads' elements): block-causal attention's dK/dV kernel, whose
    ``qkT_cast`` and ``dsT_cast`` are renewed in each of its two query loops."""
    @T.prim_func
    def main(X: T.Tensor((2 * steps, 128, cols), "float32"),
             Z: T.Tensor((2 * steps, 128, cols), "float32"),
             Y: T.Tensor((2 * steps, 128, cols), "float32"),
             W: T.Tensor((2 * steps, 128, cols), "float32")):
        with T.Kernel(1, threads=128) as _:
            A = T.alloc_shared((128, cols), "float32")
            B = T.alloc_shared((128, cols), "float32")
            for k in T.serial(steps):
                T.copy(X[k, :, :], A)
                for i, j in T.Parallel(128, cols):
                    Y[k, i, j] = A[127 - i, j] * 2.0
                T.copy(Z[k, :, :], B)
                for i, j in T.Parallel(128, cols):
                    W[k, i, j] = B[i, cols - 1 - j]
            for m in T.serial(steps):
                T.copy(X[steps + m, :, :], A)
                for i, j in T.Parallel(128, cols):
                    Y[steps + m, i, j] = A[127 - i, j] * 3.0
                T.copy(Z[steps + m, :, :], B)
                for i, j in T.Parallel(128, cols):
                    W[steps + m, i, j] = B[127 - i, cols - 1 - j]
    return main


@pytest.mark.emulator
def test_tiles_renewed_in_two_loops_share_bytes(tmp_path):
    """``A`` and ``B`` are each renewed in both loops, writing the same elements in each: they
    live over each loop's part apart, so ``B`` takes ``A``'s bytes in both loops (one lifetime
    from the first loop to the second refused it: 245760 bytes)."""
    lowered = tilewright.lower(tiles_in_two_loops(), "cuda -arch=sm_90a")
    assert lowered.source.payload["dynamic_smem_bytes"] == 122880
    x, z = torch.randn(4, 128, 240), torch.randn(4, 128, 240)
    y, w = torch.full((4, 128, 240), float("nan")), torch.full((4, 128, 240), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, z, y, w)
    torch.testing.assert_close(y[:2], x[:2].flip(1) * 2)
    torch.testing.assert_close(y[2:], x[2:].flip(1) * 3)
    torch.testing.assert_close(w[:2], z[:2].flip(2))
    torch.testing.assert_close(w[2:], z[2:].flip(1).flip(2))


def split_store(rows: int = 32, cols: int = 64, split: int = 2):
    """MLA backward's split store of a gemm accumulator: each half of its rows goes through a
    half-height shared tile (``acc[i + s * half, j]`` under ``if i < half``)."""
    half = rows // split

    @T.prim_func
    def main(A: T.Tensor((rows, 32), "float16"), B: T.Tensor((32, cols), "float16"),
             C: T.Tensor((rows, cols), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_shared = T.alloc_shared((rows, 32), "float16")
            B_shared = T.alloc_shared((32, cols), "float16")
            acc = T.alloc_fragment((rows, cols), "float32")
            part = T.alloc_shared((half, cols), "float32")
            T.copy(A, A_shared)
            T.copy(B, B_shared)
            T.gemm(A_shared, B_shared, acc, clear_accum=True)
            for s in range(split):
                for i, j in T.Parallel(rows, cols):
                    if i < half:
                        part[i, j] = acc[i + s * half, j]
                for i, j in T.Parallel(half, cols):
                    C[s * half + i, j] = part[i, j]
    return main


@pytest.mark.emulator
def test_accumulator_read_at_shifted_rows_stays_in_registers(tmp_path):
    """A nest that reads an mma accumulator at ``[i + c, j]`` runs over the registers each
    thread holds (iteration ``(row - c, col)`` where it is in the nest): the accumulator
    stays in registers, as sparse MLA backward's 64 KiB ``acc_dkv`` must to fit sm_90a."""
    lowered = tilewright.lower(split_store(), "cuda -arch=sm_90a")
    assert "float acc_ptr[" in lowered.source.text  # registers
    assert lowered.source.payload["dynamic_smem_bytes"] == 2048 + 4096 + 4096  # A, B, part
    torch.manual_seed(0)
    a, b = torch.randn(32, 32).half(), torch.randn(32, 64).half()
    c = torch.full((32, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)


def _persistent_gemm(M=256, N=512, K=128, bm=128, bn=256, bk=64, stages=3, blocks=1):
    """TileLang's gemm/example_gemm_persistent.py: each block runs tiles of a T.Persistent
    loop, a cp.async pipeline over K then an epilogue through ``C_shared``."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(blocks, threads=256) as block_id:
            A_shared = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bk, bn), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            C_shared = T.alloc_shared((bm, bn), "float16")
            for bx, by in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], blocks, block_id):
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[bx * bm, k * bk], A_shared)
                    T.copy(B[k * bk, by * bn], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C_shared)
                T.copy(C_shared, C[bx * bm, by * bn])
    return main


@pytest.mark.emulator
def test_persistent_gemm_epilogue_takes_the_pipeline_bytes_on_sm80(tmp_path):
    """On sm_80 the A/B stages (144 KiB) and ``C_shared`` (64 KiB) exceed 166912 bytes; each
    tile's A/B pipeline is renewed per tile, so ``C_shared`` takes their bytes after the K loop,
    with a barrier before the next tile's prologue (one block runs all four tiles here)."""
    lowered = tilewright.lower(_persistent_gemm(), "cuda -arch=sm_80")
    assert lowered.source.payload["dynamic_smem_bytes"] == 147456
    torch.manual_seed(0)
    a, b = torch.randn(256, 128).half(), torch.randn(128, 512).half()
    c = torch.full((256, 512), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


def test_pool_without_room_even_with_reuse_is_refused():
    """Both tiles are live at once: the refusal names each buffer's bytes and the pool's size
    with reuse."""
    with pytest.raises(KernelError, match=r"the kernel needs 245760 bytes of shared memory "
                       r"\(A 122880, B 122880; 245760 with buffers whose lifetimes do not "
                       r"overlap sharing bytes\), above the 232448 bytes one block may use on "
                       r"sm_90a") as err:
        tilewright.lower(two_phases(both_at_once=True), "cuda -arch=sm_90a")
    assert err.value.location is not None and err.value.location.line > 0


def _wrapped(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` (int64) reduced modulo 2**bits into ``dtype``, as torch's arithmetic wraps."""
    bits = torch.iinfo(dtype).bits
    low = torch.iinfo(dtype).min
    return ((values - low) % 2 ** bits + low).to(dtype)


def _negative_index_cast_to_uint32():
    """``bx - 3`` is -3 in a one-block grid: cast to uint32, less 2, back to int32 is -5."""
    @T.prim_func
    def main(X: T.Tensor((4,), "int32"), Y: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            for j in T.Parallel(4):
                Y[j] = T.cast(T.cast(bx - 3, "uint32") - T.uint32(2), "int32") + X[j]
    return main


def _uint16_below_zero(blocks: int):
    """``(u16(bx) - 1) // 3``: 0U - 1U wraps to 65535 before the division (21845)."""
    @T.prim_func
    def main(X: T.Tensor((blocks, 4), "uint16"), Y: T.Tensor((blocks, 4), "uint16")):
        with T.Kernel(blocks, threads=128) as bx:
            for j in T.Parallel(4):
                Y[bx, j] = X[bx, j] + (T.cast(bx, "uint16") - T.uint16(1)) // T.uint16(3)
    return main


def _int8_index_casts():
    """Two loops cast ``by * 4 + i - 6`` (-6..5) to int8."""
    @T.prim_func
    def main(X: T.Tensor((9, 1), "int8"), Y: T.Tensor((9, 1), "int8")):
        with T.Kernel(1, 3, threads=128) as (bx, by):
            x = T.alloc_fragment((4, 1), "int8")
            T.copy(X[by * 4, bx], x)
            first = T.alloc_shared((4, 1), "int8")
            for i in T.Parallel(4):
                for j in T.Parallel(1):
                    first[i, j] = T.cast(by * 4 + i - 6, "int8")
            second = T.alloc_shared((4, 1), "int8")
            for i, j in T.Parallel(4, 1):
                second[i, j] = T.cast(by * 4 + i - 6, "int8") + x[i, j]
            for i, j in T.Parallel(4, 1):
                if by * 4 + i < 9:
                    Y[by * 4 + i, bx] = second[i, j]
    return main


def _narrow_products(dtype: str):
    """Products, sums and a left shift that leave ``dtype``'s range, divided after."""
    @T.prim_func
    def main(X: T.Tensor((64,), dtype), W: T.Tensor((64,), dtype), Y: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64) as bx:
            for j in T.Parallel(64):
                Y[j] = (X[j] * W[j] + (X[j] << T.cast(3, dtype)) - W[j]) // T.cast(7, dtype) + \
                    T.cast(bx, dtype)
    return main


@pytest.mark.emulator
def test_unsigned_cast_of_a_negative_index_wraps(tmp_path):
    """TVM's folding stopped the build on Cast(uint32, -3) ('cannot make uint from negative
    value -3', fuzzer seed 500)."""
    lowered = tilewright.lower(_negative_index_cast_to_uint32(), "cuda -arch=sm_90a")
    x, y = torch.arange(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, _wrapped(x.long() + 2 ** 32 - 5, torch.int32))


@pytest.mark.emulator
@pytest.mark.parametrize("blocks", [1, 2])
def test_unsigned_zero_minus_one_wraps(blocks, tmp_path):
    """One block: TVM's folding stopped the build on 0U - 1U ("Minuend's value is 0U");
    two: CUDA C promoted the uint16 operands to int and divided -1 (0, not 21845)."""
    lowered = tilewright.lower(_uint16_below_zero(blocks), "cuda -arch=sm_90a")
    x = torch.randint(0, 2 ** 16, (blocks, 4)).to(torch.uint16)
    y = torch.zeros(blocks, 4, dtype=torch.uint16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    block = torch.arange(blocks).reshape(blocks, 1)
    want = _wrapped(x.long() + (block - 1) % 2 ** 16 // 3, torch.uint16)
    assert torch.equal(y.long(), want.long())


@pytest.mark.emulator
def test_int8_casts_of_an_index_wrap(tmp_path):
    """TVM's folding stopped the build ('Literal value 129 exceeds range of int8', seed 502)."""
    lowered = tilewright.lower(_int8_index_casts(), "cuda -arch=sm_90a")
    x = torch.randint(-20, 21, (9, 1), dtype=torch.int8)
    y = torch.zeros(9, 1, dtype=torch.int8)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, (torch.arange(9).reshape(9, 1) - 6 + x.long()).to(torch.int8))


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32"])
def test_narrow_integer_arithmetic_wraps_as_torch(dtype, tmp_path):
    """Each operation wraps before the division (C promoted 8- and 16-bit operands to int);
    a uint32 product exceeds int64's range of the widened operands."""
    lowered = tilewright.lower(_narrow_products(dtype), "cuda -arch=sm_90a")
    tdtype = getattr(torch, dtype)
    info = torch.iinfo(tdtype)
    x = torch.randint(info.min, info.max, (64,)).to(tdtype)
    w = torch.randint(info.min, info.max, (64,)).to(tdtype)
    y = torch.zeros(64, dtype=tdtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, w, y)
    xl, wl = x.long(), w.long()
    inner = _wrapped(_wrapped(_wrapped(xl * wl, tdtype).long()
                              + _wrapped(xl << 3, tdtype).long(), tdtype).long() - wl, tdtype)
    want = _wrapped(torch.div(inner.long(), 7, rounding_mode="floor"), tdtype)
    assert torch.equal(y.long(), want.long()), (y, want)
