"""Barrier insertion (transforms/sync.py): a ``T.Parallel`` nest over register accumulators,
run as a loop over each thread's registers, is one statement: one barrier before it, none
between its iterations (block-causal varlen attention's dkv kernel had one per element); a
loop whose iterations read what another thread wrote in an earlier iteration keeps its
barriers. Checked on the lowered source and in host emulation against torch."""

import re

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda.analysis import lifetimes

M = N = K = 64


def scaled_difference():
    """``C = ((A B^T - delta) * 0.5) V``: the difference of a register accumulator and a shared
    row vector, written to a shared tile elementwise, then the tile times V (the dkv kernel's
    ``dsT_cast[i, j] = qkT[i, j] * (dsT[i, j] - delta[j]) * sm_scale``)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             V: T.Tensor((N, K), "float16"), Delta: T.Tensor((N,), "float32"),
             C: T.Tensor((M, K), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            V_s = T.alloc_shared((N, K), "float16")
            delta = T.alloc_shared((N,), "float32")
            S = T.alloc_shared((M, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            out = T.alloc_fragment((M, K), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(V, V_s)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
            T.copy(Delta, delta)
            for i, j in T.Parallel(M, N):
                S[i, j] = acc[i, j] * (acc[i, j] - delta[j]) * 0.5
            T.gemm(S, V_s, out, clear_accum=True)
            T.copy(out, C)

    return main


def _element_stores(text: str) -> list:
    """The lines of ``text`` from the first store of S's products to the last (``* 5.0e-01``
    is the 0.5 of the nest)."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if "5.000000e-01" in line and "=" in line]
    return lines[at[0]:at[-1] + 1]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_nest_over_registers_has_no_barrier_between_its_elements(arch):
    text = tilewright.lower(scaled_difference(), f"cuda -arch={arch}").source.text
    span = _element_stores(text)
    assert sum("5.000000e-01" in line for line in span) == M * N // 128  # unrolled registers
    assert not any("__syncthreads" in line for line in span)
    kernel = text[text.index('extern "C" __global__'):]
    # the operand copies', delta's (before the nest), S's (before the second gemm)
    assert kernel.count("__syncthreads") <= 4, kernel.count("__syncthreads")


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_nest_over_registers_matches_torch(arch, tmp_path):
    torch.manual_seed(0)
    a, b, v = (torch.randn(n, K).half() for n in (M, N, N))
    delta = torch.randn(N)
    c = torch.full((M, K), float("nan"))
    lowered = tilewright.lower(scaled_difference(), f"cuda -arch={arch}")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, v, delta, c)
    qk = a.float() @ b.float().T
    s = (qk * (qk - delta[None, :]) * 0.5).half()
    torch.testing.assert_close(c, s.float() @ v.float(), rtol=2e-2, atol=2e-2)


def reversed_rows(steps=4, n=128):
    """Each step writes a shared row and reads it back reversed (another thread's element),
    then the next step overwrites it: barriers inside the loop, after the write and before the
    next step's write."""

    @T.prim_func
    def main(X: T.Tensor((steps, n), "float32"), Y: T.Tensor((steps, n), "float32")):
        with T.Kernel(1, threads=n):
            row = T.alloc_shared((n,), "float32")
            for k in T.serial(steps):
                for i in T.Parallel(n):
                    row[i] = X[k, i] * 2.0
                for i in T.Parallel(n):
                    Y[k, i] = row[n - 1 - i] + 1.0

    return main


def test_a_loop_reading_another_threads_write_keeps_its_barriers():
    text = tilewright.lower(reversed_rows(), "cuda -arch=sm_90a").source.text
    kernel = text[text.index('extern "C" __global__'):]
    loop = kernel[kernel.index("for (int k = 0;"):]
    assert len(re.findall(r"__syncthreads\(\)", loop)) == 2


@pytest.mark.emulator
def test_a_loop_reading_another_threads_write_matches_torch(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 128)
    y = torch.full((4, 128), float("nan"))
    lowered = tilewright.lower(reversed_rows(), "cuda -arch=sm_90a")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, x.flip(1) * 2.0 + 1.0)


def row_vector_per_step(steps=2):
    """``C = sum_k (A_k B^T - delta_k) V``: each step loads its ``delta`` row into shared memory
    and reads it only in a nest over the register accumulator (block-causal varlen's ``lse`` and
    ``delta``)."""

    @T.prim_func
    def main(A: T.Tensor((steps * M, K), "float16"), B: T.Tensor((N, K), "float16"),
             V: T.Tensor((N, K), "float16"), Delta: T.Tensor((steps, N), "float32"),
             C: T.Tensor((M, K), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            V_s = T.alloc_shared((N, K), "float16")
            delta = T.alloc_shared((N,), "float32")
            S = T.alloc_shared((M, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            out = T.alloc_fragment((M, K), "float32")
            T.copy(V, V_s)
            T.clear(out)
            for k in T.serial(steps):
                T.copy(A[k * M:(k + 1) * M, :], A_s)
                T.copy(B, B_s)
                T.copy(Delta[k, :], delta)
                T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(M, N):
                    S[i, j] = acc[i, j] - delta[j]
                T.gemm(S, V_s, out)
            T.copy(out, C)

    return main


# five blocks per SM leave a block 32563 bytes on sm_80, below the 33024 the tiles take apart
FIVE_BLOCKS = {"cuda.blocks_per_sm": 5}


def test_a_vector_read_only_in_a_nest_over_registers_is_renewed_each_step(monkeypatch):
    """``delta``'s reads sit in the nest, one statement: it lives from its copy to the nest in
    each step, not over the whole loop as ``V_s`` (read in every step) does."""
    seen = {}
    original = lifetimes.live_segments

    def recorded(thread_body, buffers, *args, **kwargs):
        out = original(thread_body, buffers, *args, **kwargs)
        seen.update({str(b.name): s for b, s in out.items()})
        return out

    monkeypatch.setattr(lifetimes, "live_segments", recorded)
    tilewright.lower(row_vector_per_step(), "cuda -arch=sm_80", FIVE_BLOCKS)
    assert len(seen["delta"]) == 1 and len(seen["V_s"]) == 1
    assert seen["delta"][0][1] < seen["V_s"][0][1], seen


@pytest.mark.emulator
def test_a_vector_renewed_each_step_matches_torch(tmp_path):
    torch.manual_seed(0)
    a, b, v = torch.randn(2 * M, K).half(), torch.randn(N, K).half(), torch.randn(N, K).half()
    delta = torch.randn(2, N)
    c = torch.full((M, K), float("nan"))
    lowered = tilewright.lower(row_vector_per_step(), "cuda -arch=sm_80", FIVE_BLOCKS)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, v, delta, c)
    ref = sum(((a[k * M:(k + 1) * M].float() @ b.float().T - delta[k][None, :]).half().float()
               @ v.float()) for k in range(2))
    torch.testing.assert_close(c, ref, rtol=2e-2, atol=5e-2)
