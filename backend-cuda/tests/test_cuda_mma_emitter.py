"""TileLang's warp-level tensor-core emitter (``tilewright_cuda.language.mma_emitter``) and the
per-thread primitives it writes (``T.ptx_ldmatrix``, ``T.ptx_mma``): a GEMM written as
upstream's ``examples/gemm/example_gemm_intrinsics.py`` writes it, run in the host emulation
against torch for sm_80 and sm_90a (fp16 -> fp32 and fp16, int8 -> int32, the transposed
and element-load paths of the fragments, n8 tiles, a store straight to global), built by NVRTC
(SASS: LDSM, HMMA.F32 / .F16, IMMA, no local memory), ldmatrix's per-lane layout, the barriers
around the fragments' loads, and the refusals at the user's line."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor
from tilewright_cuda.language.mma_emitter import (
    INT4TensorCoreIntrinEmitter,
    TensorCoreIntrinEmitter,
    get_swizzle_layout,
    make_mma_swizzle_layout,
)


def emitter_gemm(M, N, K, in_dtype, out_dtype, accum_dtype, a_transposed=False,
                 b_transposed=True, block_row_warps=2, block_col_warps=2, warp_row_tiles=32,
                 warp_col_tiles=32, chunk=32, pad=0, global_store=False,
                 emitter=TensorCoreIntrinEmitter):
    """C = op(A) op(B) as the upstream example writes it (its tiling, shared tiles, swizzle
    annotation, 2-stage loop, C through a 4-D shared tile). ``pad``: elements added to each
    shared row (a row not a multiple of 16 bytes: fragments by element loads);
    ``global_store``: the accumulators stored straight into C (``stmatrix``'s pid_m, pid_n)."""
    micro_k = 32 if accum_dtype == "int32" else 16
    block_M = block_row_warps * warp_row_tiles
    block_N = block_col_warps * warp_col_tiles
    block_K = chunk
    mma_emitter = emitter(
        a_dtype=in_dtype, b_dtype=in_dtype, accum_dtype=accum_dtype,
        a_transposed=a_transposed, b_transposed=b_transposed,
        block_row_warps=block_row_warps, block_col_warps=block_col_warps,
        warp_row_tiles=warp_row_tiles, warp_col_tiles=warp_col_tiles, chunk=chunk)
    n = mma_emitter.n_dim
    threads = 32 * block_row_warps * block_col_warps
    warp_rows, warp_cols = warp_row_tiles // 16, warp_col_tiles // n
    A_shape = (K, M) if a_transposed else (M, K)
    B_shape = (N, K) if b_transposed else (K, N)
    A_tile = (block_K, block_M + pad) if a_transposed else (block_M, block_K + pad)
    B_tile = (block_N, block_K + pad) if b_transposed else (block_K, block_N + pad)

    @T.prim_func
    def main(A: T.Tensor(A_shape, in_dtype), B: T.Tensor(B_shape, in_dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(A_tile, in_dtype, scope="shared.dyn")
            B_shared = T.alloc_shared(B_tile, in_dtype, scope="shared.dyn")
            C_shared = T.alloc_shared((block_M // 16, block_N // n, 16, n), out_dtype,
                                      scope="shared.dyn")
            A_local = T.alloc_local((warp_rows * 16 * micro_k // 32), in_dtype)
            B_local = T.alloc_local((warp_cols * n * micro_k // 32), in_dtype)
            C_local = T.alloc_local((warp_rows * warp_cols * 16 * n // 32), accum_dtype)
            T.annotate_layout({A_shared: make_mma_swizzle_layout(A_shared),
                               B_shared: make_mma_swizzle_layout(B_shared)})
            T.use_swizzle(panel_size=10)
            T.clear(C_local)
            for ko in T.Pipelined(K // block_K, num_stages=2):
                if a_transposed:
                    for k, i in T.Parallel(block_K, block_M):
                        A_shared[k, i] = A[ko * block_K + k, by * block_M + i]
                else:
                    for i, k in T.Parallel(block_M, block_K):
                        A_shared[i, k] = A[by * block_M + i, ko * block_K + k]
                if b_transposed:
                    for j, k in T.Parallel(block_N, block_K):
                        B_shared[j, k] = B[bx * block_N + j, ko * block_K + k]
                else:
                    for k, j in T.Parallel(block_K, block_N):
                        B_shared[k, j] = B[ko * block_K + k, bx * block_N + j]
                for ki in T.serial(0, block_K // micro_k):
                    mma_emitter.ldmatrix_a(A_local, A_shared, ki)
                    mma_emitter.ldmatrix_b(B_local, B_shared, ki)
                    mma_emitter.mma(A_local, B_local, C_local)
            if global_store:
                mma_emitter.stmatrix(C_local, C, pid_m=by, pid_n=bx)
            else:
                mma_emitter.stmatrix(C_local, C_shared)
                for i, j in T.Parallel(block_M, block_N):
                    C[by * block_M + i, bx * block_N + j] = \
                        C_shared[i // 16, j // n, i % 16, j % n]

    return main


def _operands(M, N, K, in_dtype, a_transposed, b_transposed):
    torch.manual_seed(0)
    if in_dtype == "int8":
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8)
        b = torch.randint(-128, 128, (K, N), dtype=torch.int8)
        ref = a.int() @ b.int()
    else:
        a = torch.randn(M, K).to(getattr(torch, in_dtype))
        b = torch.randn(K, N).to(getattr(torch, in_dtype))
        ref = a.float() @ b.float()
    A = a.T.contiguous() if a_transposed else a
    B = b.T.contiguous() if b_transposed else b
    return A, B, ref


# (in, out, accumulator, a_transposed, b_transposed, warp_col_tiles, target, pad, global)
CASES = [
    ("float16", "float32", "float32", False, True, 32, "sm_80", 0, False),  # the example's
    ("int8", "int32", "int32", False, True, 32, "sm_90a", 0, False),
    # .trans ldmatrix, n8 tiles, float16 accumulators
    ("float16", "float16", "float16", True, False, 24, "sm_90a", 0, False),
    ("int8", "int32", "int32", False, False, 32, "sm_80", 0, False),  # B by element loads
    # 72-byte rows: A and B by element loads; the accumulators stored straight to global
    ("float16", "float32", "float32", True, True, 32, "sm_80", 4, True),
]


@pytest.mark.emulator
@pytest.mark.parametrize("in_dtype, out_dtype, accum, a_t, b_t, wct, target, pad, to_global",
                         CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_emitter_gemm_matches_torch(in_dtype, out_dtype, accum, a_t, b_t, wct, target, pad,
                                    to_global, tmp_path):
    M, N, K = 128, 2 * wct * 2, 96 if accum == "int32" else 64
    func = emitter_gemm(M, N, K, in_dtype, out_dtype, accum, a_transposed=a_t,
                        b_transposed=b_t, warp_col_tiles=wct, pad=pad, global_store=to_global)
    lowered = tilewright.lower(func, f"cuda -arch={target}")
    text = lowered.source.text
    assert ("tw_ldmatrix<" in text) == (pad == 0) and "tw_mma_sync(" in text
    A, B, ref = _operands(M, N, K, in_dtype, a_t, b_t)
    C = torch.full((M, N), -7, dtype=getattr(torch, out_dtype))
    hostemu.run(text, lowered.source.payload, tmp_path, A, B, C)
    if accum == "int32":
        assert torch.equal(C, ref)
    else:
        tolerance = 5e-2 if accum == "float16" else 2e-2  # float16 sums of 64 products
        torch.testing.assert_close(C.float(), ref, atol=tolerance, rtol=tolerance)


def _nibbles(x):
    """int8 rows -> their signed 4-bit halves, low first (twice as many columns)."""
    u = x.to(torch.int32) & 0xFF
    halves = torch.stack([u & 0xF, u >> 4], -1).reshape(x.shape[0], -1)
    return halves - 16 * (halves >= 8).to(torch.int32)


@pytest.mark.emulator
def test_int4_emitter_multiplies_the_halves_of_each_byte(tmp_path):
    """INT4TensorCoreIntrinEmitter (the bitnet example's): int8 arrays of int4 pairs, four
    m16n8k32.s4 instructions per 16x16 tile."""
    M, N, K = 128, 128, 64
    func = emitter_gemm(M, N, K, "int8", "int32", "int32", emitter=INT4TensorCoreIntrinEmitter)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert "tw_mma_sync_s4(" in lowered.source.text
    torch.manual_seed(1)
    A = torch.randint(-128, 128, (M, K), dtype=torch.int8)
    B = torch.randint(-128, 128, (N, K), dtype=torch.int8)
    C = torch.full((M, N), -7, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, A, B, C)
    assert torch.equal(C, _nibbles(A) @ _nibbles(B).T)


def test_stores_of_the_accumulators_need_no_barrier_between_them():
    text = tilewright.lower(emitter_gemm(128, 128, 64, "float16", "float32", "float32"),
                            "cuda -arch=sm_80").source.text
    tail = text[text.rindex("tw_mma_sync("):]
    # the fragment stores, then one barrier before the block reads C_shared
    assert tail.count("__syncthreads()") == 1


@pytest.mark.nvrtc
@pytest.mark.sass
@pytest.mark.parametrize("target, in_dtype, accum, instruction",
                         [("sm_80", "float16", "float32", "HMMA.16816.F32"),
                          ("sm_80", "float16", "float16", "HMMA.16816.F16"),
                          ("sm_90a", "int8", "int32", "IMMA.16832.S8.S8"),
                          ("sm_80", "int4", "int32", "IMMA.16832.S4.S4")])
def test_emitter_gemm_builds_to_tensor_core_instructions(target, in_dtype, accum, instruction):
    out = "int32" if accum == "int32" else "float16"
    emitter = INT4TensorCoreIntrinEmitter if in_dtype == "int4" else TensorCoreIntrinEmitter
    in_dtype = "int8" if in_dtype == "int4" else in_dtype
    text = tilewright.lower(emitter_gemm(256, 256, 128, in_dtype, out, accum, emitter=emitter),
                            f"cuda -arch={target}").source.text
    cubin, log = executor.nvrtc_compile(text, arch.get(target), ".")
    code = sass.dump(cubin)
    assert instruction in code and "LDSM.16.M88.4" in code
    # the fragments stay in registers: no local memory
    assert not re.search(r"\s(STL|LDL)[\s.]", code) and "0 bytes spill stores" in log


def _kernel_with(make, threads=128):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((64, 64), "float16")
            a = T.alloc_local((8,), "float16")
            c = T.alloc_local((4,), "float32")
            T.copy(A, S)
            make(S, a, c)

    return main


def test_unsupported_dtype_pair_is_refused_at_the_users_line():
    with pytest.raises(KernelError) as info:
        TensorCoreIntrinEmitter(a_dtype="float16", b_dtype="float16", accum_dtype="int32",
                                block_row_warps=2, block_col_warps=2, warp_row_tiles=32,
                                warp_col_tiles=32, chunk=32)  # the line
    assert "float16 x float16 -> int32 has no mma.sync form" in str(info.value)
    assert "test_cuda_mma_emitter.py" in str(info.value)


@pytest.mark.parametrize("field, value, message", [
    ("warp_row_tiles", 24, "warp_row_tiles=24 is not a positive multiple of 16"),
    ("warp_col_tiles", 12, "warp_col_tiles=12 is not a positive multiple of 8"),
    ("chunk", 16, "chunk=16 is not a positive multiple of 32"),
])
def test_a_tile_not_a_multiple_of_the_instruction_is_refused(field, value, message):
    config = dict(a_dtype="int8", b_dtype="int8", accum_dtype="int32", warp_row_tiles=32,
                  warp_col_tiles=32, chunk=32)
    config[field] = value
    with pytest.raises(KernelError, match=re.escape(message)) as info:
        TensorCoreIntrinEmitter(**config)
    assert "test_cuda_mma_emitter.py" in str(info.value)


def test_a_block_of_other_threads_than_the_emitters_warps_is_refused():
    emitter = TensorCoreIntrinEmitter(a_dtype="float16", b_dtype="float16",
                                      accum_dtype="float32", block_row_warps=2,
                                      block_col_warps=2, warp_row_tiles=16, warp_col_tiles=16)
    with pytest.raises(KernelError, match=r"the kernel has threads=256; its 2 x 2 warps need "
                                          r"threads=128") as info:
        _kernel_with(lambda S, a, c: emitter.ldmatrix_a(a, S, 0), threads=256)
    assert "test_cuda_mma_emitter.py" in str(info.value)


@pytest.mark.parametrize("make, message", [
    (lambda S, a, c: T.ptx_mma("float32", "m16n8k16", "row", "col", "fp16", "fp16", "int32",
                               a.data, 0, a.data, 0, c.data, 0, False),
     "m16n8k16 fp16 x fp16 -> int32 is not an mma.sync form"),
    (lambda S, a, c: T.ptx_mma("float32", "m16n8k16", "row", "col", "fp16", "fp16", "fp32",
                               a.data, 4, a.data, 0, c.data, 0, False),
     "8 elements from a[4] pass the end of 'a' (8 elements)"),
    (lambda S, a, c: T.ptx_ldmatrix(False, 3, T.access_ptr(S[0, 0], "r"),
                                    T.access_ptr(a[0], "w")),
     "T.ptx_ldmatrix loads 1, 2, 4 matrices"),
    (lambda S, a, c: T.ptx_ldmatrix(False, 4, T.access_ptr(a[0], "r"),
                                    T.access_ptr(a[0], "w")),
     "T.ptx_ldmatrix source must be in shared memory"),
])
def test_bad_primitive_use_is_refused_at_the_users_line(make, message):
    with pytest.raises(KernelError, match=re.escape(message)) as info:
        _kernel_with(make)
    assert "test_cuda_mma_emitter.py" in str(info.value)


def test_primitives_need_sm_80():
    func = emitter_gemm(64, 64, 32, "float16", "float32", "float32", block_row_warps=1,
                        block_col_warps=1, warp_row_tiles=64, warp_col_tiles=64)
    with pytest.raises(KernelError, match=r"T.ptx_ldmatrix needs sm_80 or newer"):
        tilewright.lower(func, "cuda -arch=sm_75")


def test_get_swizzle_layout_permutes_16_byte_chunks_within_a_row_block():
    # 64 float16 (128 bytes) a row: chunk c of row r goes to c ^ (r % 8)
    assert get_swizzle_layout(3, 9, 64, "float16") == (0, 3, (1 ^ 3) * 8 + 1)
    # 32 int8 (32 bytes): two chunks, flipped every 4 rows
    assert get_swizzle_layout(5, 17, 32, "int8") == (0, 5, 1)
    cells = {get_swizzle_layout(r, c, 64, "float16") for r in range(8) for c in range(64)}
    assert len(cells) == 8 * 64


def _ldmatrix_kernel(num, trans):
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), O: T.Tensor((32, 2 * num), "float16")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((16, 16), "float16")
            frag = T.alloc_local((2 * num,), "float16")
            T.copy(A, S)
            tx = T.get_thread_binding()
            # lane l: row l % 8 of matrix l // 8 (matrices: the four 8x8 quarters, down first)
            T.ptx_ldmatrix(trans, num, T.access_ptr(S[tx % 16, tx // 16 * 8], "r"),
                           T.access_ptr(frag[0], "w"))
            for v in T.serial(2 * num):
                O[tx, v] = frag[v]

    return main


@pytest.mark.emulator
@pytest.mark.parametrize("num, trans", [(1, True), (2, False), (4, True)])
def test_ldmatrix_gives_each_lane_its_pairs_of_each_matrix(num, trans, tmp_path):
    lowered = tilewright.lower(_ldmatrix_kernel(num, trans), "cuda -arch=sm_80")
    A = torch.arange(256, dtype=torch.float32).reshape(16, 16).to(torch.float16)
    O = torch.zeros(32, 2 * num, dtype=torch.float16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, A, O)
    want = torch.zeros_like(O)
    for lane in range(32):
        for j in range(num):
            r0, c0 = j % 2 * 8, j // 2 * 8
            for e in range(2):
                want[lane, 2 * j + e] = A[r0 + 2 * (lane % 4) + e, c0 + lane // 4] if trans \
                    else A[r0 + lane // 4, c0 + 2 * (lane % 4) + e]
    assert torch.equal(O, want)


def test_barriers_order_ldmatrix_after_the_tiles_writers_and_before_their_refill():
    text = tilewright.lower(emitter_gemm(128, 128, 64, "float16", "float32", "float32"),
                            "cuda -arch=sm_80").source.text
    loop = text[text.index("for (int ko"):text.rindex("tw_mma_sync(")]
    first_read = loop.index("tw_ldmatrix<")
    # the refill of the tiles waits for the last iteration's ldmatrix; the ldmatrix for the
    # refill's writes (16-byte vector stores: *(uint4*)(((half*)tw_smem_ptr) + ...) = ...)
    writes = [m.start() for m in re.finditer(r"tw_smem_ptr\)(\[[^\]]*\]| \+ [^=;]*\)) =",
                                             loop)]
    assert writes and loop.index("__syncthreads()") < writes[0]
    assert "__syncthreads()" in loop[writes[-1]:first_read]
