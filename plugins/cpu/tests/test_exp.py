"""The CPU backend's vectorised float32 ``exp`` and ``exp2``: within 2 ulp of the exact value
without fast math (libm, which LLVM would call once per lane, is within 1), and what fast math
gives; its ``tanh``, within 2 ulp down to tiny inputs."""

import numpy as np
import pytest
import tilewright
import tilewright.language as T
import torch

BLOCK = 256


@tilewright.jit(out_idx=[-1], target="cpu")
def exp_of(M, fast):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, BLOCK)) as bx:
            for i in T.Parallel(BLOCK):
                if bx * BLOCK + i < M:
                    B[bx * BLOCK + i] = T.exp(A[bx * BLOCK + i])
    return main


def _kernel(n, fast):
    return tilewright.jit(out_idx=[-1], target="cpu", pass_configs={
        tilewright.PassConfigKey.TL_ENABLE_FAST_MATH: fast})(exp_of.fn)(n, fast)


def _ulps(actual: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    """Each result's distance from the exact ``e**x`` in units of the last place of the float32
    nearest to it (float64 as the exact value)."""
    exact = torch.exp(x.double())
    nearest = exact.float()
    ulp = (torch.nextafter(nearest.abs(), torch.tensor(float("inf"))) - nearest.abs()).double()
    return ((actual.double() - exact).abs() / ulp).numpy()


def test_precise_exp_is_within_two_ulp_over_the_float32_range():
    x = torch.cat([torch.linspace(-103.0, 88.7, 400_000), torch.randn(100_000) * 4,
                   torch.rand(50_000) * 1e-3])
    got = _kernel(x.numel(), False)(x)
    ulps = _ulps(got, x)
    finite = torch.isfinite(torch.exp(x.double()).float()).numpy()
    assert ulps[finite].max() <= 2.0, f"max error {ulps[finite].max():.2f} ulp"
    # no call to libm lane by lane: neither expf nor LLVM's exp intrinsic in its code
    source = _kernel(x.numel(), False).get_kernel_source()
    assert "expf" not in source and "llvm.exp." not in source


def test_precise_exp_keeps_the_special_values():
    x = torch.tensor([float("-inf"), float("inf"), float("nan"), -104.5, 89.0, 0.0, -0.0,
                      -87.5, -100.0], dtype=torch.float32)
    got = _kernel(x.numel(), False)(x)
    want = torch.exp(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=3e-7, atol=0.0)


@pytest.mark.parametrize("fast", [True, False])
def test_softmax_style_inputs(fast):
    x = -torch.rand(10_000) * 30  # x - rowmax, as a softmax feeds exp
    got = _kernel(x.numel(), fast)(x)
    torch.testing.assert_close(got, torch.exp(x), rtol=2e-6 if fast else 3e-7, atol=0.0)


def test_precise_exp2_is_within_two_ulp_over_the_float32_range():
    n = 1 << 16

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(n // BLOCK) as bx:
            for i in T.Parallel(BLOCK):
                B[bx * BLOCK + i] = T.exp2(A[bx * BLOCK + i])

    kernel = tilewright.compile(main, out_idx=[-1], target="cpu")
    assert "exp2" not in kernel.get_kernel_source()
    x = torch.cat([torch.linspace(-152.0, 129.0, n // 2), torch.linspace(-2.0, 2.0, n // 2)])
    exact = torch.exp2(x.double())
    nearest = exact.float()
    ulp = (torch.nextafter(nearest, torch.tensor(float("inf"))).double() - nearest.double())
    got = kernel(x).double()
    finite = torch.isfinite(nearest)
    assert ((got - exact).abs() / ulp.clamp(min=2.0 ** -149))[finite].max() <= 2.0
    assert torch.equal(got[~finite], nearest[~finite].double())  # overflow: inf
    special = torch.zeros(n)
    special[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    out = kernel(special)
    assert out[0].isnan() and out[1:4].tolist() == [float("inf"), 0.0, 1.0]


def test_tanh_is_within_two_ulp_down_to_tiny_inputs():
    # TVM's expansion, (1 - e**-2x) / (1 + e**-2x), was 1.7e7 ulp off at 1.5e-8 (cancellation)
    n = 1 << 14

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(n // BLOCK) as bx:
            for i in T.Parallel(BLOCK):
                B[bx * BLOCK + i] = T.tanh(A[bx * BLOCK + i])

    kernel = tilewright.compile(main, out_idx=[-1], target="cpu")
    magnitudes = torch.logspace(-30, 1.5, n // 2 - 4)
    x = torch.cat([magnitudes, -magnitudes, torch.tensor([0.0, -0.0, float("inf"), float("nan"),
                                                          -float("inf"), 0.625, -0.625, 100.0])])
    got = kernel(x)
    exact = torch.tanh(x.double())
    nearest = exact.float().abs()
    ulp = (torch.nextafter(nearest, torch.tensor(float("inf"))) - nearest).double()
    finite = exact.isfinite()
    assert ((got.double() - exact).abs() / ulp)[finite].max() <= 2.0
    assert got[-7].item() == 0.0 and got[-7].signbit() and got[-5].isnan()
