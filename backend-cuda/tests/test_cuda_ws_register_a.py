"""Register-A wgmma operands inside warp-specialised roles (FlashMLA's shape): a 256-thread
block split by ``if tx < 128: ... else: ...`` into two 128-thread roles, each loading a
[64, 64] float16 fragment whole from a shared tile (``T.copy(Q_pe_shared, Q_pe_local_0)``) and
casting its wgmma accumulator into another ([64, 64] ``acc_s_0_cast``; in the second role also
copied whole into a shared tile, ``T.copy(acc_s_1_cast, SP1_shared)``), both read as the A
operand of register-A wgmma gemms. They live in the role's registers in the wgmma layout (32
halves a thread), not in shared memory; the host emulation matches torch."""

import re

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch

TARGET = "cuda -arch=sm_90a"
REGISTER_A = ("Q_0", "Q_1", "P_0", "P_1")


def two_roles(dtype="float16"):
    """Role 0: O0 = cast(Q K0^T) V0; role 1: O1 = cast(Q K1^T) V1, P1 also stored through a
    shared tile; Q, K and V are 64 x 64."""

    @T.prim_func
    def main(Q: T.Tensor((64, 64), dtype), K: T.Tensor((2, 64, 64), dtype),
             V: T.Tensor((2, 64, 64), dtype), O: T.Tensor((2, 64, 64), "float32"),
             P_out: T.Tensor((64, 64), dtype)):
        with T.Kernel(1, threads=256) as bx:  # noqa: F841 - one block
            Q_s = T.alloc_shared((64, 64), dtype)
            K0_s = T.alloc_shared((64, 64), dtype)
            K1_s = T.alloc_shared((64, 64), dtype)
            V0_s = T.alloc_shared((64, 64), dtype)
            V1_s = T.alloc_shared((64, 64), dtype)
            P_s = T.alloc_shared((64, 64), dtype)
            Q_0 = T.alloc_fragment((64, 64), dtype)
            Q_1 = T.alloc_fragment((64, 64), dtype)
            S_0 = T.alloc_fragment((64, 64), "float32")
            S_1 = T.alloc_fragment((64, 64), "float32")
            P_0 = T.alloc_fragment((64, 64), dtype)
            P_1 = T.alloc_fragment((64, 64), dtype)
            O_0 = T.alloc_fragment((64, 64), "float32")
            O_1 = T.alloc_fragment((64, 64), "float32")
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
                T.copy(S_0, P_0)
                T.wgmma_gemm(P_0, V0_s, O_0, clear_accum=True)
                T.wait_wgmma(0)
                T.copy(O_0, O[0, :, :])
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

    return main


def test_role_fragments_take_the_wgmma_register_a_layout():
    low = tilewright.lower(two_roles(), TARGET)
    text = low.source.text
    kernel = text[text.index('extern "C" __global__'):]
    halves = {m[1]: int(m[2]) for m in re.finditer(r"half (\w+)_ptr\[(\d+)\];", kernel)}
    # per-thread arrays (32 halves a thread of 4096 on 128 threads, declared as one 64-row)
    assert {f: halves.get(f) for f in REGISTER_A} == dict.fromkeys(REGISTER_A, 64)
    assert kernel.count("tw_gemm_wgmma_rs<") == 4
    # six 8 KiB tiles (and the TMA barriers): no fragment in shared memory
    assert low.source.payload["dynamic_smem_bytes"] < 7 * 8192


@pytest.mark.emulator
def test_two_roles_match_torch_in_emulation(tmp_path):
    torch.manual_seed(0)
    q = torch.randn(64, 64).half()
    k, v = torch.randn(2, 64, 64).half(), torch.randn(2, 64, 64).half()
    o = torch.full((2, 64, 64), float("nan"))
    p_out = torch.zeros(64, 64).half()
    low = tilewright.lower(two_roles(), TARGET)
    hostemu.run(low.source.text, low.source.payload, tmp_path, q, k, v, o, p_out)
    p = torch.stack([(q.float() @ k[r].float().t()).half() for r in (0, 1)])
    # P rounded to 16 bits: an element next to a rounding boundary may round the other way
    torch.testing.assert_close(o, p.float() @ v.float(), rtol=1e-2, atol=5e-2)
    torch.testing.assert_close(p_out, p[1])
