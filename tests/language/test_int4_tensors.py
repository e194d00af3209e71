"""``T.int4`` tensors as TileLang passes them: torch.int8, two values a byte along the last
dimension (the low nibble first), sign-extended; the kernel's tiles hold one value a byte. An
int4 GEMM (TileLang's gemm_int4 example at a small size), outputs packed after the call,
written inputs packed back, a wrong argument refused."""

import json

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import ArgumentError, TilewrightError
from tilewright.runtime.signature import KernelSignature, SignatureError
from tilewright.runtime.torchop import OpError


def pack(values: torch.Tensor) -> torch.Tensor:
    """TileLang's packing (the example's pack_int4), written independently of the runtime's."""
    wide = values.to(torch.int16)
    return ((wide[..., ::2] & 0x0F) | ((wide[..., 1::2] & 0x0F) << 4)).to(torch.int8)


def int4_gemm(M, N, K, block_M, block_N, block_K):
    @T.prim_func
    def main(A: T.Tensor((M, K), T.int4), B: T.Tensor((N, K), T.int4),
             C: T.Tensor((M, N), T.int32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), T.int4)
            B_shared = T.alloc_shared((block_N, block_K), T.int4)
            C_local = T.alloc_fragment((block_M, block_N), T.int32)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[bx * block_N, ko * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_int4_gemm_against_torch(target):
    M, N, K = 48, 32, 64
    kernel = tilewright.compile(int4_gemm(M, N, K, 16, 16, 32), out_idx=-1, target=target)
    a = torch.randint(-8, 8, (M, K), dtype=torch.int8)
    b = torch.randint(-8, 8, (N, K), dtype=torch.int8)
    assert kernel.params[0].dtype == "int8" and kernel.params[0].packed_bits == 4
    saved = json.loads(json.dumps(kernel.signature.to_json()))  # as bundles keep it
    assert KernelSignature.from_json(saved) == kernel.signature
    with pytest.raises(SignatureError, match="packed_bits 3"):
        KernelSignature.from_json({**saved, "params": [{**saved["params"][0], "packed_bits": 3},
                                                        *saved["params"][1:]]})
    c = kernel(pack(a), pack(b))
    assert torch.equal(c, a.int() @ b.int().T)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_int4_outputs_are_packed_and_written_inputs_packed_back(target):
    n = 16

    @T.prim_func
    def step(X: T.Tensor((2, n), T.int4), Y: T.Tensor((2, n), T.int4)):
        with T.Kernel(1):
            for i, j in T.Parallel(2, n):
                Y[i, j] = X[i, j] * 2  # 4-bit results: -8 * 2 wraps to 0, 5 * 2 to -6
                X[i, j] = -X[i, j]

    kernel = tilewright.compile(step, out_idx=-1, target=target)
    x = torch.arange(-8, 24, dtype=torch.int8).reshape(2, n) % 16 - 8
    packed = pack(x)
    y = kernel(packed)
    assert y.dtype == torch.int8 and y.shape == (2, n // 2)
    assert torch.equal(y, pack(x * 2))
    assert torch.equal(packed, pack(-x))  # -(-8) wraps to -8 in 4 bits


def test_int4_arguments_are_checked():
    kernel = tilewright.compile(int4_gemm(16, 16, 32, 16, 16, 32), out_idx=-1, target="cpu")
    unpacked = torch.zeros(16, 32, dtype=torch.int8)
    with pytest.raises(ArgumentError, match=r"int4 of shape \(16, 32\), passed packed 2 "
                                            r"values a byte: an int8 tensor of shape \(16, 16\)"
                                            r"; got int8 of shape \(16, 32\)"):
        kernel(unpacked, unpacked)
    with pytest.raises(ArgumentError, match="got int32 of shape"):
        kernel(torch.zeros(16, 16, dtype=torch.int32), torch.zeros(16, 16, dtype=torch.int8))
    with pytest.raises(OpError, match="takes A, B packed"):
        kernel.as_torch_op("tw_int4_test::gemm")

    @T.prim_func
    def odd(A: T.Tensor((4, 7), T.int4), B: T.Tensor((4, 7), T.int8)):
        with T.Kernel(1):
            for i, j in T.Parallel(4, 7):
                B[i, j] = A[i, j]

    with pytest.raises(TilewrightError, match="int4 tensor 'A' of shape .*multiple of 2"):
        tilewright.compile(odd, out_idx=-1, target="cpu")
