"""The tensor-core GEMM path end to end, run by the host emulation: swizzled shared tiles,
cp.async copies with zero fill, T.Pipelined software pipelining, ldmatrix + mma.sync warp
tiles; and the barriers and cp.async groups the pipelined loop gets."""


import re

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def gemm(M, N, K, bm=128, bn=128, bk=32, stages=3, threads=128, dtype="float16",
         trans_a=False, trans_b=False, stage=None, order=None, group=None):
    """The standard GEMM, C = op(A) op(B), with its knobs."""
    a_shape, b_shape = ((K, M) if trans_a else (M, K)), ((N, K) if trans_b else (K, N))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bk, bm) if trans_a else (bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk) if trans_b else (bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages, stage=stage, order=order,
                                 group=group):
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

    return main


def _emulate(func, arch, tmp_path, M, N, K, dtype="float16", trans_a=False, trans_b=False,
             configs=None):
    lowered = tilewright.lower(func, f"cuda -arch={arch}", configs)
    torch_dtype = getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    a = torch.randn((K, M) if trans_a else (M, K), generator=g).to(torch_dtype)
    b = torch.randn((N, K) if trans_b else (K, N), generator=g).to(torch_dtype)
    c = torch.full((M, N), float("nan")).to(torch_dtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    ref = (a.double().T if trans_a else a.double()) @ (b.double().T if trans_b else b.double())
    tol = 1e-2 if dtype == "float16" else 2e-2
    torch.testing.assert_close(c.double(), ref.to(torch_dtype).double(), rtol=tol,
                               atol=tol * 8)
    return lowered.source.text


@pytest.mark.emulator
def test_partial_tiles_zero_filled_by_cp_async(tmp_path):
    # 200 x 136 x 72: partial blocks in M, N and K; K % 8 == 0, so 16-byte cp.async chunks
    text = _emulate(gemm(200, 136, 72), "sm_80", tmp_path, 200, 136, 72)
    assert "tw_cp_async16(" in text and "tw_cp_async_wait<1>();" in text


@pytest.mark.emulator
def test_both_transposes_bfloat16_256_threads(tmp_path):
    # A stored K x M and B stored N x K: ldmatrix.trans for A, plain for B; 2 x 4 warps
    func = gemm(128, 256, 96, threads=256, dtype="bfloat16", trans_a=True, trans_b=True)
    text = _emulate(func, "sm_90a", tmp_path, 128, 256, 96, "bfloat16", True, True)
    assert "tw_gemm_mma_rf<128, 128, 32, true, true, 256, 2, 4, tw::swizzled<32, 128, 3>, " \
           "tw::swizzled<128, 64, 2>>" in text


@pytest.mark.emulator
def test_unaligned_k_copies_element_wise_and_runs_in_order(tmp_path):
    # K = 70 rows are not 16-byte multiples: scalar guarded copies, no pipeline versions
    func = gemm(64, 64, 70, bm=64, bn=64, bk=32, stages=2, trans_b=True)
    text = _emulate(func, "sm_80", tmp_path, 64, 64, 70, trans_b=True)
    assert "tw_cp_async" not in text
    launch = tilewright.lower(func, "cuda -arch=sm_80").source.payload
    assert launch["dynamic_smem_bytes"] == 2 * 64 * 32 * 2  # one version of each tile


@pytest.mark.emulator
def test_flash_attention_pipelined_two_stages(tmp_path):
    func = kernels._module("flash_attention").flashattn.fn(1, 2, 128, 64, False,
                                                            dtype="float16", num_stages=2)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    case = kernels.case("flash_attention_f16")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()
    # K and V are prefetched one stage ahead: 2 versions each
    assert "tw_cp_async_wait<0>();" in lowered.source.text


def _loop_body(text):
    body = text.split("for (int k = 0;", 1)[1]
    return body.rsplit("tw_cp_async_wait<0>();", 1)[0]  # up to the drain


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipelined_gemm_has_one_barrier_per_iteration(stages):
    text = tilewright.lower(gemm(1024, 1024, 1024, stages=stages), "cuda -arch=sm_80").source.text
    body = _loop_body(text)
    assert body.count("__syncthreads()") == 1
    assert f"tw_cp_async_wait<{stages - 2}>();" in body
    prologue = text.split("for (int k = 0;", 1)[0]
    assert prologue.count("tw_cp_async_commit();") == stages - 1
    assert "__syncthreads" not in prologue


def test_shared_memory_counts_the_versions():
    launch = tilewright.lower(gemm(1024, 1024, 1024, stages=4), "cuda -arch=sm_80").source.payload
    assert launch["dynamic_smem_bytes"] == 4 * (8192 + 8192)
    with pytest.raises(KernelError, match=r"A_s 90112 \(11 pipeline versions\).*above the "
                                          r"166912 bytes one block may use on sm_80"):
        tilewright.lower(gemm(1024, 1024, 1024, stages=11), "cuda -arch=sm_80")


def test_stage_and_order_annotations():
    # compute first, then the refill: the issue order follows order=
    text = tilewright.lower(gemm(512, 512, 512, stage=[0, 0, 2], order=[1, 2, 0]),
                            "cuda -arch=sm_80").source.text
    body = _loop_body(text)
    assert body.index("tw_gemm_mma_rf<") < body.index("tw_cp_async16(")
    assert body.count("__syncthreads()") == 1
    # a copy left at the last stage is not prefetched: only B gets versions
    launch = tilewright.lower(gemm(512, 512, 512, stage=[2, 0, 2]), "cuda -arch=sm_80")
    assert launch.source.payload["dynamic_smem_bytes"] == 8192 + 3 * 8192
    with pytest.raises(KernelError, match=r"stage 0 statement #2 is not a copy from global"):
        tilewright.lower(gemm(512, 512, 512, stage=[0, 0, 0]), "cuda -arch=sm_80")


def test_a_compute_schedule_by_groups_is_ignored_with_a_warning():
    # TileLang's form: order= and stage= per group of statements (its warp-specialised compute
    # pipeline); this backend pipelines the copies as without the hints, and says so
    func = gemm(256, 256, 256, stage=[-1, 1], order=[1, 0], group=[[0, 1], [2]])
    with pytest.warns(RuntimeWarning, match=r"test_cuda_pipeline.py:\d+: the CUDA backend does "
                                            r"not schedule groups of compute statements"):
        text = tilewright.lower(func, "cuda -arch=sm_80").source.text
    plain = tilewright.lower(gemm(256, 256, 256), "cuda -arch=sm_80").source.text
    assert _loop_body(text) == _loop_body(plain)


def test_copies_before_sm_80_are_128_bit_and_not_pipelined():
    text = tilewright.lower(gemm(512, 512, 512, bm=64, bn=64), "cuda -arch=sm_75").source.text
    text = text[text.rindex('extern "C" __global__'):]  # the kernel, not the headers
    assert "tw_copy16(" in text and "tw_cp_async" not in text
    # in order: a barrier before the copies (the last gemm read the tiles), one after them
    body = text.split("for (int k = 0;", 1)[1]
    assert len(re.findall(r"__syncthreads\(\)", body.split("gemm_acc", 1)[0])) == 2


def _tiles_allocated_in_the_loop(steps=2, bk=256):
    """TileLang's mhc_pre shape: the loop's shared tiles and fragment are allocated in its
    body."""
    @T.prim_func
    def main(X: T.Tensor((64, steps * bk), "bfloat16"), F: T.Tensor((32, steps * bk), "float32"),
             O: T.Tensor((64, 32), "float32")):
        with T.Kernel(2, threads=128) as px:
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            for pz in T.Pipelined(steps, num_stages=2):
                x_smem = T.alloc_shared((32, bk), "bfloat16")
                f_smem = T.alloc_shared((32, bk), "float32")
                T.copy(X[px * 32, pz * bk], x_smem)
                T.copy(F[0, pz * bk], f_smem)
                x_frag = T.alloc_fragment((32, bk), "float32")
                T.copy(x_smem, x_frag)
                T.gemm(x_frag, f_smem, acc, transpose_B=True)
            T.copy(acc, O[px * 32, 0])
    return main


@pytest.mark.emulator
@pytest.mark.parametrize("steps", [2, 3])
def test_tiles_allocated_inside_a_pipelined_loop(steps, tmp_path):
    """They are allocated in front of the loop and versioned like the others (TVM stopped
    with 'Buffer x_smem is used before its definition': the loop's reads kept the
    unversioned tile)."""
    lowered = tilewright.lower(_tiles_allocated_in_the_loop(steps), "cuda -arch=sm_80")
    assert "cp_async" in lowered.source.text
    x = torch.randn(64, steps * 256).to(torch.bfloat16)
    f = torch.randn(32, steps * 256)
    o = torch.full((64, 32), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, f, o)
    torch.testing.assert_close(o, x.float() @ f.T, rtol=1e-4, atol=1e-3)


def gemm_plus_tile(M, N, K, bm=64, bn=64, bk=32, stages=3):
    """C = A @ B + D, D's one tile copied to shared memory before the pipelined loop and
    read after it."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             D: T.Tensor((bm, bn), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            D_s = T.alloc_shared((bm, bn), "float16")
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            T.copy(D, D_s)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(bm, bn):
                C_f[i, j] += D_s[i, j]
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.emulator
def test_prologue_copies_join_the_first_stage(tmp_path):
    # cuda.prologue_copies: the cp.async of D's tile, right before a loop that runs at least
    # once, is committed with the first stage (no wait_group 0 of its own); the loop's first
    # wait (wait_group 1 of the 2 prologue groups) and barrier cover it. Without the config,
    # or before a loop that may run 0 times (K dynamic), it waits on its own
    M, N, K = 128, 64, 96
    g = torch.Generator().manual_seed(3)
    a, b, d = (torch.randn(*s, generator=g).half() for s in ((M, K), (K, N), (64, 64)))
    for configs, waits in (({"cuda.prologue_copies": True}, 0), (None, 1)):
        lowered = tilewright.lower(gemm_plus_tile(M, N, K), "cuda -arch=sm_80", configs)
        text = lowered.source.text
        kernel = text[text.index("__global__"):]
        before = kernel[:kernel.index("for (int k = 0;")]
        assert before.count("tw_cp_async_wait<0>();") == waits
        assert before.count("tw_cp_async_commit();") == 2 + waits
        assert "tw_cp_async_wait<1>();\n    __syncthreads();" in kernel
        c = torch.full((M, N), float("nan")).half()
        hostemu.run(text, lowered.source.payload, tmp_path / str(waits), a, b, d, c)
        want = a.double() @ b.double() + d.double().repeat(2, 1)
        torch.testing.assert_close(c.double(), want, rtol=1e-2, atol=8e-2)
    dynamic = tilewright.lower(gemm_plus_tile(M, N, T.dynamic("K")), "cuda -arch=sm_80",
                               {"cuda.prologue_copies": True}).source.text
    kernel = dynamic[dynamic.index("__global__"):]
    assert "tw_cp_async_wait<0>();" in kernel[:kernel.index("for (int k = 0;")]
    # a loop fed by TMA (sm_90a) waits on mbarriers, not cp.async groups: the copy keeps its
    # own wait
    tma = tilewright.lower(gemm_plus_tile(M, N, K), "cuda -arch=sm_90a",
                           {"cuda.prologue_copies": True}).source.text
    assert "tw_tma_load" in tma and "tw_cp_async_wait<0>();" in tma
