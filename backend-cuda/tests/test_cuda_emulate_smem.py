"""Shared-memory placement of TileLang kernels that TileLang builds: an accumulator a bias is
copied into stays in registers, a shared tile the kernel never touches takes no bytes. Each
kernel whose placement changed runs in the host emulation (hostemu.py) against torch."""

from __future__ import annotations

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright_cuda import keys


def gemm_bias(bias: str, M=128, N=64, K=64, bm=64, bn=64, bk=32, threads=128):
    """C = A B^T + Bias (TileLang's dequantize GEMMs with ``with_bias``): the accumulator
    starts as the bias, copied into it from a shared tile (``bias="shared"``) or from global
    memory (``"global"``); with ``"none"`` it is cleared and the bias tile is never touched."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             Bias: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            Bias_s = T.alloc_shared((bm, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            C_s = T.alloc_shared((bm, bn), "float16")
            if bias == "shared":
                T.copy(Bias[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], Bias_s)
                T.copy(Bias_s, C_l)
            elif bias == "global":
                T.copy(Bias[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], C_l)
            else:
                T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn])
    return main


TILES = 2 * (64 * 32 * 2) * 2  # A_s and B_s, two pipeline versions each
EPILOGUE = 64 * 64 * 2  # C_s (and Bias_s)


@pytest.mark.emulator
@pytest.mark.parametrize("bias", ["shared", "global", "none"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_accumulator_a_bias_is_copied_into_stays_in_registers(bias, arch, tmp_path):
    """Before: a copy into the accumulator kept it in shared memory (TileLang's mxfp4 Hopper
    GEMM: its 256 x 128 float32 ``C_local``, 128 KiB, took the kernel over sm_90a's limit);
    an untouched bias tile took its bytes too."""
    lowered = tilewright.lower(gemm_bias(bias), f"cuda -arch={arch}")
    text, launch = lowered.source.text, lowered.source.payload
    assert "float C_l_ptr[" in text  # registers
    used = TILES + EPILOGUE + (EPILOGUE if bias == "shared" else 0)
    barriers = 128 if arch == "sm_90a" else 0  # the TMA pipeline's mbarriers, aligned
    assert launch["dynamic_smem_bytes"] == used + barriers  # before: + C_l's 16 KiB
    torch.manual_seed(0)
    a, b = torch.randn(128, 64).half(), torch.randn(64, 64).half()
    bias_t = torch.randn(128, 64).half()
    c = torch.full((128, 64), float("nan")).half()
    hostemu.run(text, launch, tmp_path, a, b, bias_t, c)
    ref = a.float() @ b.float().T + (bias_t.float() if bias != "none" else 0)
    torch.testing.assert_close(c.float(), ref, atol=2e-2, rtol=2e-2)


def test_a_bias_copied_in_part_keeps_the_accumulator_shared():
    """Only a whole copy into the accumulator fits its register layout: half a bias copied
    into the top rows keeps it a shared fragment (and the kernel correct)."""
    M = N = 64

    @T.prim_func
    def main(A: T.Tensor((M, 32), "float16"), B: T.Tensor((N, 32), "float16"),
             Bias: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((M, 32), "float16")
            B_s = T.alloc_shared((N, 32), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.clear(C_l)
            T.copy(Bias[0:32, 0:N], C_l[0:32, 0:N])
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C)
    try:
        lowered = tilewright.lower(main, "cuda -arch=sm_80")
    except KernelError as e:  # pragma: no cover - would be a regression of its own
        raise AssertionError(e) from e
    assert "float C_l_ptr[" not in lowered.source.text
    assert lowered.source.payload["dynamic_smem_bytes"] == 2 * 64 * 32 * 2 + 64 * 64 * 4


def branch_loads(mixed: bool, M=64, N=64, K=128, bk=32, stages=3):
    """C = A' B^T, A' taking its k-th column block from A1 on even steps and from A2 on odd
    ones: the copy into ``A_s`` sits under a branch of the pipelined loop's body, as the K/V
    copies of block-causal varlen attention's dQ kernel (``if is_noisy_diag != 0``); with
    ``mixed`` the B copy is outside it, else under it too."""

    @T.prim_func
    def main(A1: T.Tensor((M, K), "float16"), A2: T.Tensor((M, K), "float16"),
             B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((M, bk), "float16")
            B_s = T.alloc_shared((N, bk), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=stages):
                if k % 2 == 0:
                    T.copy(A1[0, k * bk], A_s)
                    if not mixed:
                        T.copy(B[0, k * bk], B_s)
                else:
                    T.copy(A2[0, k * bk], A_s)
                    if not mixed:
                        T.copy(B[0, k * bk], B_s)
                if mixed:
                    T.copy(B[0, k * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C)
    return main


@pytest.mark.emulator
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_copies_under_a_branch_keep_one_version(mixed, arch, tmp_path):
    """Copies under a branch of a pipelined loop's body are not prefetched (TileLang plans
    them so): their tile keeps one version, loaded in order; the B copy outside the branch
    (``mixed``) is still pipelined, in 3 versions. Before, both tiles took 3 versions (the
    dQ kernel: 192 KiB of K/V, over sm_90a's limit)."""
    lowered = tilewright.lower(branch_loads(mixed), f"cuda -arch={arch}")
    text, launch = lowered.source.text, lowered.source.payload
    tile = 64 * 32 * 2
    func = next(f for _, f in lowered.module.functions.items() if f.attrs is not None)
    versions = func.attrs[keys.VERSIONS] if keys.VERSIONS in func.attrs else {}
    assert {str(k): int(v) for k, v in versions.items()} == ({"B_s": 3} if mixed else {})
    barriers = 128 if mixed and arch == "sm_90a" else 0  # the TMA stages' mbarriers
    assert launch["dynamic_smem_bytes"] == tile * (4 if mixed else 2) + barriers
    torch.manual_seed(0)
    a1, a2, b = (torch.randn(64, 128).half() for _ in range(3))
    c = torch.full((64, 64), float("nan"))
    hostemu.run(text, launch, tmp_path, a1, a2, b, c)
    steps = torch.arange(128) // 32
    a = torch.where((steps % 2 == 0)[None, :], a1, a2)
    torch.testing.assert_close(c, a.float() @ b.float().T, atol=1e-2, rtol=1e-2)
