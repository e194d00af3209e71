"""Fragments spread over the threads in registers (layout.Spread): a fragment whose every
access is by the thread that owns the element (T.Parallel nests over its shape, T.clear, whole
T.copy, reductions along its last dimension) lives in registers, thread t holding elements
t, t + threads, ...; one read at an element another thread's iteration wrote stays in shared
memory, and so do those beyond the register budget. TileLang's layernorm backward
(examples/norm/layernorm.py) then fits sm_80's shared memory; run in host emulation on sm_80
and sm_90a."""

import re

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda import layout
from tilewright_cuda.analysis import layouts

FRAGMENTS = ("x_hat", "dx_hat", "dx_hat_x_hat", "dgamma_acc", "dbeta_acc")


def layernorm_bwd(N, D, blk_m, threads, in_dtype="bfloat16"):
    """TileLang's examples/norm/layernorm.py backward, as the port writes it."""
    accum_dtype = "float"

    @T.prim_func
    def main(DY: T.Tensor((N, D), in_dtype), X: T.Tensor((N, D), in_dtype),
             gamma: T.Tensor((D,), in_dtype), Mean: T.Tensor((N,), accum_dtype),
             Rstd: T.Tensor((N,), accum_dtype), DX: T.Tensor((N, D), in_dtype),
             DGamma: T.Tensor((D,), accum_dtype), DBeta: T.Tensor((D,), accum_dtype)):
        with T.Kernel(T.ceildiv(N, blk_m), threads=threads) as bx:
            DY_smem = T.alloc_shared((1, D), in_dtype)
            X_smem = T.alloc_shared((1, D), in_dtype)
            G_smem = T.alloc_shared((D,), in_dtype)
            DX_smem = T.alloc_shared((1, D), in_dtype)
            x_hat = T.alloc_fragment((1, D), accum_dtype)
            dx_hat = T.alloc_fragment((1, D), accum_dtype)
            dx_hat_x_hat = T.alloc_fragment((1, D), accum_dtype)
            sum_dx_hat = T.alloc_fragment((1,), accum_dtype)
            sum_dx_hat_x_hat = T.alloc_fragment((1,), accum_dtype)
            dgamma_acc = T.alloc_fragment((D,), accum_dtype)
            dbeta_acc = T.alloc_fragment((D,), accum_dtype)
            T.copy(gamma, G_smem)
            T.clear(dgamma_acc)
            T.clear(dbeta_acc)
            inv_D = T.float32(1.0) / T.Cast(accum_dtype, D)
            for k in T.serial(blk_m):
                row = bx * blk_m + k
                T.copy(DY[row, 0], DY_smem)
                T.copy(X[row, 0], X_smem)
                m_v = Mean[row]
                r_v = Rstd[row]
                for i, j in T.Parallel(1, D):
                    xv = T.Cast(accum_dtype, X_smem[i, j])
                    dy_v = T.Cast(accum_dtype, DY_smem[i, j])
                    g_v = T.Cast(accum_dtype, G_smem[j])
                    x_hat[i, j] = (xv - m_v) * r_v
                    dx_hat[i, j] = dy_v * g_v
                    dx_hat_x_hat[i, j] = dx_hat[i, j] * x_hat[i, j]
                T.reduce_sum(dx_hat, sum_dx_hat, dim=1)
                T.reduce_sum(dx_hat_x_hat, sum_dx_hat_x_hat, dim=1)
                for i, j in T.Parallel(1, D):
                    c1 = sum_dx_hat_x_hat[0] * inv_D
                    c2 = sum_dx_hat[0] * inv_D
                    dx_v = r_v * (dx_hat[i, j] - c2 - x_hat[i, j] * c1)
                    DX_smem[i, j] = T.Cast(in_dtype, dx_v)
                    dy_v = T.Cast(accum_dtype, DY_smem[i, j])
                    dgamma_acc[j] += dy_v * x_hat[i, j]
                    dbeta_acc[j] += dy_v
                T.copy(DX_smem, DX[row, 0])
            for j in T.Parallel(D):
                T.atomic_add(DGamma[j], dgamma_acc[j], memory_order="relaxed")
                T.atomic_add(DBeta[j], dbeta_acc[j], memory_order="relaxed")

    return main


def _in_registers(text) -> dict:
    """Register arrays of the kernel: name -> elements per thread."""
    return {m[1]: int(m[2]) for m in re.finditer(r"float (\w+)_ptr\[(\d+)\];", text)}


def test_layernorm_backward_fragments_are_spread_over_the_threads():
    low = tilewright.lower(layernorm_bwd(8, 512, 4, 128), "cuda -arch=sm_80")
    regs = _in_registers(low.source.text)
    assert {f: regs.get(f) for f in FRAGMENTS} == dict.fromkeys(FRAGMENTS, 4)  # 512 / 128
    # the four bfloat16 tiles (1 KiB each), two sums and the reductions' per-warp slots
    assert low.source.payload["dynamic_smem_bytes"] < 8 * 1024


def test_layernorm_backward_at_tilelang_size_fits_sm80():
    """D = 8192 on 256 threads: 32 registers a thread per fragment, 160 in all (the register
    budget, layouts.REGISTER_BUDGET, is 192); 64 KiB of bfloat16 tiles stay in shared memory
    (229632 bytes with the fragments there, above sm_80's 166912)."""
    low = tilewright.lower(layernorm_bwd(4096, 8192, 32, 256), "cuda -arch=sm_80")
    regs = _in_registers(low.source.text)
    assert {f: regs.get(f) for f in FRAGMENTS} == dict.fromkeys(FRAGMENTS, 32)
    assert 65536 <= low.source.payload["dynamic_smem_bytes"] < 66 * 1024


def test_fragments_beyond_the_register_budget_stay_shared():
    """D = 8192 on 128 threads: 64 registers a thread per fragment; the first three fill the
    budget of 192, the accumulators stay in shared memory (and the kernel still fits)."""
    low = tilewright.lower(layernorm_bwd(256, 8192, 2, 128), "cuda -arch=sm_80")
    regs = _in_registers(low.source.text)
    assert layouts.REGISTER_BUDGET == 192
    assert {f: regs.get(f) for f in FRAGMENTS} == {
        "x_hat": 64, "dx_hat": 64, "dx_hat_x_hat": 64, "dgamma_acc": None, "dbeta_acc": None}


def test_spread_reduction_rows():
    assert layout.spread_rows((1, 512), 1, 128) == (1, 4)
    assert layout.spread_rows((4, 256), -1, 128) == (4, 2)  # register k holds row k // 2
    assert layout.spread_rows((256, 4), 0, 128) is None  # not the last dimension
    assert layout.spread_rows((1, 64), 1, 128) is None  # a row shorter than the threads
    # a warp and a half: its second warp's 16 lanes combine through masked shuffles
    assert layout.spread_rows((1, 96), 1, 48) == (1, 2)


def mixed_spread(D=256, threads=64):
    """``own`` is only touched at each iteration's element; ``rev`` is read at an element
    another thread's iteration wrote; ``ser`` is read in a serial loop: those two stay in
    shared memory."""

    @T.prim_func
    def main(X: T.Tensor((D,), "float32"), Y: T.Tensor((D,), "float32"),
             S: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            own = T.alloc_fragment((D,), "float32")
            rev = T.alloc_fragment((D,), "float32")
            ser = T.alloc_fragment((D,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.copy(X, own)
            for j in T.Parallel(D):
                rev[j] = own[j] * 2.0
                ser[j] = own[j] + 1.0
            for j in T.Parallel(D):
                Y[j] = rev[D - 1 - j] + own[j]
            T.reduce_max(own, total, dim=0)
            acc = T.alloc_var("float32")
            acc = total[0]
            for t in T.serial(4):
                acc += ser[t]
            S[0] = acc

    return main


def test_a_fragment_read_at_another_threads_element_stays_shared(tmp_path):
    low = tilewright.lower(mixed_spread(), "cuda -arch=sm_80")
    assert _in_registers(low.source.text) == {"own": 4, "red_part": 1, "acc": 1}
    x = torch.randn(256)
    y, s = torch.full((256,), float("nan")), torch.full((1,), float("nan"))
    hostemu.run(low.source.text, low.source.payload, tmp_path, x, y, s)
    torch.testing.assert_close(y, x.flip(0) * 2 + x)
    torch.testing.assert_close(s, (x.max() + (x[:4] + 1).sum()).reshape(1))


def spread_row_reductions(M=4, N=256, threads=128):
    """Reductions of a spread ``(M, N)`` fragment along its rows: two registers of each row a
    thread, into a shared vector, with ``clear=False`` into another."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            mx = T.alloc_fragment((M,), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.reduce_max(x, mx, dim=1)
            T.fill(s, 1.0)
            T.reduce_sum(x, s, dim=1, clear=False)
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] - mx[i] + s[i]
            T.copy(x, Y)

    return main


def test_row_reductions_of_a_spread_fragment(tmp_path):
    low = tilewright.lower(spread_row_reductions(), "cuda -arch=sm_80")
    assert _in_registers(low.source.text)["x"] == 8
    x = torch.randn(4, 256)
    y = torch.full((4, 256), float("nan"))
    hostemu.run(low.source.text, low.source.payload, tmp_path, x, y)
    ref = x - x.max(dim=1, keepdim=True).values + 1 + x.sum(dim=1, keepdim=True)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-4)


def gemm_with_bias_vector(M=128, N=128, K=128, bk=64, threads=128):
    """A TMA-pipelined gemm on sm_90a, warp-specialised (the block gains a producer
    warpgroup), beside a spread ``(N,)`` fragment its compute threads hold."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             Bias: T.Tensor((N,), "float32"), C: T.Tensor((M, N), "float32"),
             Aux: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, bk), "float16")
            B_s = T.alloc_shared((bk, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            aux = T.alloc_fragment((N,), "float32")
            T.copy(Bias, aux)
            T.clear(acc)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[0, k * bk], A_s)
                T.copy(B[k * bk, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C)
            for j in T.Parallel(N):
                Aux[j] = aux[j] * 2.0 + 1.0

    return main


@pytest.mark.emulator
def test_a_spread_fragment_of_a_warp_specialised_kernel(tmp_path):
    """The spread fragment keeps the compute threads' layout (one register a thread for 128
    elements on 128 threads) in a block of 256."""
    low = tilewright.lower(gemm_with_bias_vector(), "cuda -arch=sm_90a")
    assert "__launch_bounds__(256" in low.source.text
    assert _in_registers(low.source.text)["aux"] == 1
    torch.manual_seed(0)
    a, b = torch.randn(128, 128).half(), torch.randn(128, 128).half()
    bias = torch.randn(128)
    c, aux = torch.full((128, 128), float("nan")), torch.full((128,), float("nan"))
    hostemu.run(low.source.text, low.source.payload, tmp_path, a, b, bias, c, aux)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(aux, bias * 2 + 1)


def layernorm_bwd_reference(dy, x, gamma, mean, rstd):
    dyf, xf, g = dy.float(), x.float(), gamma.float()
    x_hat = (xf - mean[:, None]) * rstd[:, None]
    dx_hat = dyf * g
    c1 = (dx_hat * x_hat).mean(dim=1, keepdim=True)
    c2 = dx_hat.mean(dim=1, keepdim=True)
    dx = rstd[:, None] * (dx_hat - c2 - x_hat * c1)
    return dx, (dyf * x_hat).sum(0), dyf.sum(0)


@pytest.mark.emulator
@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_layernorm_backward_matches_torch(target, tmp_path):
    N, D = 8, 512
    torch.manual_seed(0)
    x = torch.randn(N, D).bfloat16()
    dy = torch.randn(N, D).bfloat16()
    gamma = torch.randn(D).bfloat16()
    mean = x.float().mean(dim=1)
    rstd = 1 / (x.float().var(dim=1, unbiased=False) + 1e-5).sqrt()
    dx = torch.full((N, D), float("nan")).bfloat16()
    dgamma, dbeta = torch.zeros(D), torch.zeros(D)
    low = tilewright.lower(layernorm_bwd(N, D, 4, 128), target)
    assert _in_registers(low.source.text)["dbeta_acc"] == 4
    hostemu.run(low.source.text, low.source.payload, tmp_path, dy, x, gamma, mean, rstd, dx,
                dgamma, dbeta)
    ref_dx, ref_dgamma, ref_dbeta = layernorm_bwd_reference(dy, x, gamma, mean, rstd)
    torch.testing.assert_close(dx.float(), ref_dx, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dgamma, ref_dgamma, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dbeta, ref_dbeta, rtol=1e-4, atol=1e-4)
