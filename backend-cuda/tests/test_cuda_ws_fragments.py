"""Fragments in registers inside warp-specialised roles (FlashMLA's shape,
examples/warp_specialize/example_warp_specialize_flashmla.py): a 256-thread block split by
``if tx < 128: ... else: ...`` into two 128-thread roles. Each role loads a [64, 64] float16
fragment whole from a shared tile (``T.copy(Q_pe_shared, Q_pe_local_0)``) and casts its wgmma
accumulator into another ([64, 64] ``acc_s_0_cast``; in the second role also copied whole into
a shared tile, ``T.copy(acc_s_1_cast, SP1_shared)``), both read as the A operand of register-A
wgmma gemms: they live in the role's registers in the wgmma layout. A float16 fragment computed
from the scores in a nest (``sp0_cast``) follows them into registers; row statistics
(``scores_max_0``, ``logsum_1``) are row vectors over the role's warps, copied to and from
shared row buffers and added into one (``logsum[i] += logsum_1[i]``). No fragment is left in
shared memory; the host emulation matches torch."""

import re

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch

TARGET = "cuda -arch=sm_90a"
REGISTER_A = ("Q_0", "Q_1", "P_0", "P_1", "sp_0")


def two_roles(dtype="float16"):
    """Role 0: S0 = Q K0^T - rowmax, O0 = half(S0) V0, SP = half(S0 / 2), M = rowmax; role 1:
    S1 = Q K1^T, O1 = half(S1) V1, P = half(S1), L = 2 + rowsum(S1). Everything is 64 x 64."""

    @T.prim_func
    def main(Q: T.Tensor((64, 64), dtype), K: T.Tensor((2, 64, 64), dtype),
             V: T.Tensor((2, 64, 64), dtype), O: T.Tensor((2, 64, 64), "float32"),
             P_out: T.Tensor((64, 64), dtype), SP_out: T.Tensor((64, 64), dtype),
             M_out: T.Tensor((64,), "float32"), L_out: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=256) as bx:  # noqa: F841 - one block
            Q_s = T.alloc_shared((64, 64), dtype)
            K0_s = T.alloc_shared((64, 64), dtype)
            K1_s = T.alloc_shared((64, 64), dtype)
            V0_s = T.alloc_shared((64, 64), dtype)
            V1_s = T.alloc_shared((64, 64), dtype)
            P_s = T.alloc_shared((64, 64), dtype)
            SP_s = T.alloc_shared((64, 64), dtype)
            M_s = T.alloc_shared((64,), "float32")
            L_s = T.alloc_shared((64,), "float32")
            Q_0 = T.alloc_fragment((64, 64), dtype)
            Q_1 = T.alloc_fragment((64, 64), dtype)
            S_0 = T.alloc_fragment((64, 64), "float32")
            S_1 = T.alloc_fragment((64, 64), "float32")
            P_0 = T.alloc_fragment((64, 64), dtype)
            P_1 = T.alloc_fragment((64, 64), dtype)
            sp_0 = T.alloc_fragment((64, 64), dtype)
            O_0 = T.alloc_fragment((64, 64), "float32")
            O_1 = T.alloc_fragment((64, 64), "float32")
            m_0 = T.alloc_fragment((64,), "float32")
            l_1 = T.alloc_fragment((64,), "float32")
            T.copy(Q, Q_s)
            T.copy(K[0, :, :], K0_s)
            T.copy(K[1, :, :], K1_s)
            T.copy(V[0, :, :], V0_s)
            T.copy(V[1, :, :], V1_s)
            tx = T.get_thread_binding()
            if tx < 128:
                T.copy(Q_s, Q_0)
                T.wgmma_gemm(Q_0, K0_s, S_0, transpose_B=True, clear_accum=True)
                T.wait_wgmma(0)
                T.fill(m_0, -T.infinity("float32"))
                T.reduce_max(S_0, m_0, dim=1, clear=False)
                T.copy(m_0, M_s)
                for i, j in T.Parallel(64, 64):
                    S_0[i, j] = S_0[i, j] - m_0[i]
                T.copy(S_0, P_0)
                T.wgmma_gemm(P_0, V0_s, O_0, clear_accum=True)
                T.wait_wgmma(0)
                T.copy(O_0, O[0, :, :])
                for i, j in T.Parallel(64, 64):
                    sp_0[i, j] = S_0[i, j] * 0.5
                T.copy(sp_0, SP_s)
                T.copy(SP_s, SP_out)
                T.copy(M_s, M_out)
            else:
                T.copy(Q_s, Q_1)
                T.wgmma_gemm(Q_1, K1_s, S_1, transpose_B=True, clear_accum=True)
                T.wait_wgmma(0)
                T.copy(S_1, P_1)
                T.copy(P_1, P_s)
                T.wgmma_gemm(P_1, V1_s, O_1, clear_accum=True)
                T.wait_wgmma(0)
                T.copy(O_1, O[1, :, :])
                T.copy(P_s, P_out)
                for i in T.Parallel(64):
                    L_s[i] = 1.0
                T.copy(L_s, l_1)
                T.reduce_sum(S_1, l_1, dim=1, clear=False)
                for i in T.Parallel(64):
                    L_s[i] += l_1[i]
                T.copy(L_s, L_out)

    return main


def test_role_fragments_stay_in_registers():
    low = tilewright.lower(two_roles(), TARGET)
    text = low.source.text
    kernel = text[text.index('extern "C" __global__'):]
    halves = {m[1]: int(m[2]) for m in re.finditer(r"half (\w+)_ptr\[(\d+)\];", kernel)}
    floats = {m[1]: int(m[2]) for m in re.finditer(r"float (\w+)_ptr\[(\d+)\];", kernel)}
    # per-thread arrays (32 halves a thread of 4096 on 128 threads, declared as one 64-row)
    assert {f: halves.get(f) for f in REGISTER_A} == dict.fromkeys(REGISTER_A, 64)
    assert (floats.get("m_0"), floats.get("l_1")) == (2, 2)  # 16 rows a warp: two registers
    assert kernel.count("tw_gemm_wgmma_rs<") == 4
    # seven 8 KiB tiles, two row buffers (and the barriers): no fragment in shared memory
    assert low.source.payload["dynamic_smem_bytes"] < 7 * 8192 + 1024


@pytest.mark.emulator
def test_two_roles_match_torch_in_emulation(tmp_path):
    torch.manual_seed(0)
    q = torch.randn(64, 64).half()
    k, v = torch.randn(2, 64, 64).half(), torch.randn(2, 64, 64).half()
    o = torch.full((2, 64, 64), float("nan"))
    p_out, sp_out = torch.zeros(64, 64).half(), torch.zeros(64, 64).half()
    m_out, l_out = torch.full((64,), float("nan")), torch.full((64,), float("nan"))
    low = tilewright.lower(two_roles(), TARGET)
    hostemu.run(low.source.text, low.source.payload, tmp_path, q, k, v, o, p_out, sp_out,
                m_out, l_out)
    s = [q.float() @ k[r].float().t() for r in (0, 1)]
    m = s[0].amax(dim=1)
    s[0] = s[0] - m[:, None]
    p = [x.half() for x in s]
    # P rounded to 16 bits: an element next to a rounding boundary may round the other way
    torch.testing.assert_close(o, torch.stack([p[r].float() @ v[r].float() for r in (0, 1)]),
                               rtol=1e-2, atol=5e-2)
    torch.testing.assert_close(p_out, p[1])
    torch.testing.assert_close(sp_out, (s[0] * 0.5).half())
    torch.testing.assert_close(m_out, m)
    torch.testing.assert_close(l_out, 2 + s[1].sum(dim=1), rtol=1e-4, atol=1e-3)
