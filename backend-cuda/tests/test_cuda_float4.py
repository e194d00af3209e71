"""float4_e2m1fn on CUDA: float4 buffers hold one code a byte, conversions call CUDA's
cuda_fp4.h (include/tw_fp4.h). The conformance suite's float4_casts case (every code decoded,
probes of float32, float16 and bfloat16 rounded: ties to even, saturation, NaN) runs in the
host emulation against the suite's reference and compiles with NVRTC for sm_90a."""

import hostemu
import pytest
import tilewright
import torch
from tilewright.testing import assert_close
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import cases

CASE, = cases(["float4_casts"])


def lowered(target):
    return tilewright.lower(CASE.kernel.make(CASE.dtype, **CASE.dims), target)


@pytest.mark.emulator
def test_float4_casts_in_host_emulation(tmp_path):
    source = lowered("cuda -arch=sm_90a").source
    assert "tw_fp4_encode" in source.text and "tw_fp4_decode" in source.text
    inputs = CASE.kernel.inputs(torch, torch.Generator().manual_seed(0), CASE.dtype,
                                **CASE.dims)
    expected = CASE.reference(inputs)
    packed = inputs[0].view(torch.uint8)  # the kernel takes one code a byte, low nibble first
    codes = torch.stack((packed & 15, packed >> 4), dim=-1).reshape(-1)
    outputs = [torch.full(tuple(w.shape), float("nan")) for w in expected]
    hostemu.run(source.text, source.payload, tmp_path, codes, *inputs[1:], *outputs)
    for got, want in zip(outputs, expected, strict=True):
        assert_close(got, want, rtol=0.0, atol=0.0, max_mismatch_ratio=0.0, name=CASE.id)


@pytest.mark.nvrtc
def test_float4_kernel_compiles_for_sm_90a(tmp_path):
    executor.nvrtc_compile(lowered("cuda -arch=sm_90a").source.text, arch.get("sm_90a"),
                           tmp_path)


def block_quant(M, N, blk_m=32, group=32):
    """Block-wise quantisation to float4 (the shape of TileLang's act_quant fp4 kernel): float4
    fragments and shared tiles copied to a float4 output."""
    import tilewright.language as T

    @T.prim_func
    def main(x: T.Tensor((M, N), T.bfloat16), q: T.Tensor((M, N), T.float4_e2m1fn),
             s: T.Tensor((M, N // group), T.float32)):
        with T.Kernel(T.ceildiv(M, blk_m), T.ceildiv(N, group), threads=128) as (bx, by):
            xs = T.alloc_shared((blk_m, group), T.bfloat16)
            xl = T.alloc_fragment((blk_m, group), T.bfloat16)
            amax = T.alloc_fragment((blk_m,), T.float32)
            yl = T.alloc_fragment((blk_m, group), T.float4_e2m1fn)
            ys = T.alloc_shared((blk_m, group), T.float4_e2m1fn)
            for _ in T.Pipelined(1, num_stages=2):
                T.copy(x[bx * blk_m, by * group], xs)
                T.copy(xs, xl)
                T.reduce_absmax(xl, amax, dim=1)
                for i, j in T.Parallel(blk_m, group):
                    yl[i, j] = T.clamp(xl[i, j] / T.max(amax[i], 1e-4) * 6.0, -6.0, 6.0)
                for i in T.Parallel(blk_m):
                    s[bx * blk_m + i, by] = amax[i]
                T.copy(yl, ys)
                T.copy(ys, q[bx * blk_m, by * group])

    return main


@pytest.mark.emulator
def test_block_quantisation_matches_the_cpu_backend(tmp_path):
    M, N = 64, 64
    func = block_quant(M, N)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(0)).bfloat16()
    q, s = torch.full((M, N), 0xFF, dtype=torch.uint8), torch.zeros(M, N // 32)
    hostemu.run(source.text, source.payload, tmp_path, x, q, s)
    want_q, want_s = tilewright.compile(func, out_idx=[1, 2], target="cpu")(x)
    packed = want_q.view(torch.uint8)
    assert torch.equal(q, torch.stack((packed & 15, packed >> 4), dim=-1).reshape(M, N))
    assert torch.equal(s, want_s)



def test_a_float4_value_passed_as_such_is_refused():
    """A float4 value the kernel uses other than converted or stored (here passed to the
    user's function) is refused as a KernelError naming the value and its use (before: an
    AttributeError formatting the refusal, which was given a TVM span for a location)."""
    import tilewright_cuda.language as T
    from tilewright.errors import KernelError

    @T.prim_func
    def main(q: T.Tensor((128,), T.float4_e2m1fn)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            T.call_extern("handle", "tw_take_code", q[tx])

    with pytest.raises(KernelError, match=r"(?s)float4_e2m1fn values as codes.*cannot pass "
                       r"q\[thread_x_0\] to "):
        tilewright.lower(main, "cuda -arch=sm_90a")
