"""Row vectors in registers (layout.RowVector): 1-D fragments that only go with register
accumulators whose warps own whole rows stay in each thread's registers, so row statistics need
no shared memory and no block barrier; a vector used any other way stays in shared memory. Run
in host emulation on the mma.sync (sm_80) and wgmma (sm_90a) paths."""

import re
import sys
from pathlib import Path

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import kernels  # noqa: E402 - after the sys.path setup


def centred(M=128, N=128, K=64, threads=256, export_max=False):
    """C = A B^T minus each row's maximum; with ``export_max`` the maxima are also copied to
    global memory (so that vector cannot stay in registers)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             Mx: T.Tensor((M,), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            mx = T.alloc_fragment((M,), "float32")
            half = T.alloc_fragment((M,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True,
                   policy=T.GemmWarpPolicy.FullRow)
            T.fill(mx, -T.infinity("float32"))
            T.reduce_max(acc, mx, dim=1, clear=False)
            for i in T.Parallel(M):
                half[i] = mx[i] * 0.5
            for i, j in T.Parallel(M, N):
                acc[i, j] = acc[i, j] - half[i] - half[i]
            if export_max:
                T.copy(mx, Mx)
            T.copy(acc, C)

    return main


def _run(func, target, tmp_path, export_max):
    torch.manual_seed(0)
    a, b = torch.randn(128, 64).half(), torch.randn(128, 64).half()
    mx = torch.full((128,), float("nan"))
    c = torch.full((128, 128), float("nan"))
    lowered = tilewright.lower(func, target)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, mx, c)
    ref = a.float() @ b.float().T
    torch.testing.assert_close(c, ref - ref.max(dim=1, keepdim=True).values,
                               rtol=1e-3, atol=1e-3)
    if export_max:
        torch.testing.assert_close(mx, ref.max(dim=1).values, rtol=1e-3, atol=1e-3)
    return lowered.source.text


@pytest.mark.emulator
@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_row_statistics_stay_in_registers(target, tmp_path):
    text = _run(centred(), target, tmp_path, export_max=False)
    # 128 rows over 8 warps: two rows per thread, in registers
    assert re.search(r"float mx_ptr\[2\];", text) and re.search(r"float half_ptr\[2\];", text)
    assert "__shfl_xor_sync" in text
    assert ("tw_gemm_wgmma<" in text) == target.endswith("sm_90a")
    assert text.count("__syncthreads") <= 2  # the operand copies and the gemm's


@pytest.mark.emulator
def test_a_vector_copied_out_stays_shared(tmp_path):
    text = _run(centred(export_max=True), "cuda -arch=sm_90a", tmp_path, export_max=True)
    assert not re.search(r"float (mx|half)_ptr\[", text)  # both in the shared pool


@pytest.mark.parametrize("configs, barriers", [
    ({}, 0),  # a producer warpgroup loads K and V: the compute threads never wait for each other
    ({"cuda.disable_warp_specialized": True}, 1),  # the refill's (TMA: mbarriers make it visible)
    ({"cuda.disable_tma_lower": True}, 2),  # the refill's and one before Q @ K^T (cp.async)
])
def test_bundled_attention_loop_has_only_pipeline_barriers(configs, barriers):
    func = kernels.attention.fn(1, 2, 256, 128, "float16", **kernels.ATTENTION)
    text = tilewright.lower(func, "cuda -arch=sm_90a", configs).source.text
    kernel = text[text.index('extern "C" __global__'):]
    loop = kernel[kernel.index("for (int k = 0;"):]
    # none for the row statistics, none for P (registers)
    assert loop.count("__syncthreads") + loop.count("tw_named_barrier_sync") == barriers
    for vec in ("m", "m_prev", "rescale", "row_sum", "logsum"):
        assert f"float {vec}_ptr[2];" in text
