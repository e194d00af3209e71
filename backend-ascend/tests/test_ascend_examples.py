"""Every kernel of examples/*.py compiled for the targets "ascend" (A2) and "ascend-950" and run
on the emulator at small sizes (partial tiles kept), checked against torch the way each script
checks itself."""

import importlib.util
from pathlib import Path

import pytest
import tilewright
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_MODULES = {}


def _example(name):
    if name not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"tw_ascend_example_{name}",
                                                      EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[name] = module
    return _MODULES[name]


TARGETS = ("ascend", "ascend-950")


def _ascend(jitted, target):
    """The example's @tilewright.jit function, retargeted to ``target`` on the Ascend
    emulator."""
    return tilewright.jit(out_idx=jitted.out_idx, target=target)(jitted.fn)


def quickstart_vector_add(target):
    q = _example("quickstart")
    a, b = torch.randn(1003), torch.randn(1003)
    torch.testing.assert_close(_ascend(q.vector_add, target)(a, b, block_M=256), a + b)


def quickstart_matmul(target):
    q = _example("quickstart")
    kernel = _ascend(q.matmul, target)(70, 40, 48, block_M=32, block_N=32, block_K=16)
    a, b = torch.randn(70, 48), torch.randn(48, 40)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-3)


def quickstart_softmax(target):
    q = _example("quickstart")
    x = torch.randn(20, 64)
    torch.testing.assert_close(_ascend(q.softmax, target)(20, 64)(x), torch.softmax(x, 1),
                               rtol=1e-5, atol=1e-6)


def gemm_float32(target):
    g = _example("gemm")
    a, b = torch.randn(70, 64), torch.randn(64, 40)
    c = _ascend(g.matmul, target)(a, b, block_M=32, block_N=32, block_K=32, dtype="float32")
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)


def gemm_splitk(target):
    g = _example("gemm_splitk")
    kernel = _ascend(g.matmul_splitk, target)(40, 48, 100, 3, block_M=32, block_N=32, block_K=16)
    a, b = torch.randn(40, 100), torch.randn(100, 48)
    c = torch.zeros(40, 48)
    kernel(a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)


def flash_attention_causal(target):
    fa = _example("flash_attention")
    kernel = _ascend(fa.flashattn, target)(1, 2, 40, 16, True, block_M=16, block_N=16)
    q, k, v = (torch.randn(1, 40, 2, 16) for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v).double(), fa.reference(q, k, v, True),
                               rtol=1e-4, atol=1e-4)


def rmsnorm(target):
    r = _example("rmsnorm")
    x, w = torch.randn(10, 96), torch.randn(96)
    torch.testing.assert_close(_ascend(r.rmsnorm, target)(10, 96)(x, w), r.reference(x, w, 1e-6),
                               rtol=1e-5, atol=1e-5)


def softmax_bfloat16(target):
    s = _example("softmax")
    x = torch.randn(10, 80).bfloat16()
    ref = torch.softmax(x.float(), 1).bfloat16()
    torch.testing.assert_close(_ascend(s.softmax, target)(10, 80, dtype="bfloat16")(x), ref,
                               rtol=1e-2, atol=1e-2)


def row_reduce(target):
    r = _example("row_reduce")
    x = torch.randn(20, 300)  # the last column tile is partial: its missing columns read 0
    torch.testing.assert_close(_ascend(r.row_sum, target)(20, 300)(x), x.sum(1), rtol=1e-4,
                               atol=1e-3)


def elementwise_add(target):
    e = _example("elementwise_add")
    a, b = torch.randn(70, 100), torch.randn(70, 100)
    torch.testing.assert_close(_ascend(e.add, target)(a, b), a + b)


def gemm_dynamic(target):
    g = _example("gemm_dynamic")
    matmul = _ascend(g.matmul_dynamic, target)
    for m, n, k in [(64, 32, 32), (37, 50, 40)]:  # one kernel, sizes read at each launch
        a, b = torch.randn(m, k), torch.randn(k, n)
        c = matmul(a, b, block_M=32, block_N=32, block_K=16)
        torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    assert len(matmul._kernels) == 1


def gemm_persistent(target):
    g = _example("gemm_persistent")
    kernel = _ascend(g.matmul_persistent, target)(70, 40, 48, 3, block_M=32, block_N=32, block_K=16)
    a, b = torch.randn(70, 48), torch.randn(48, 40)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def gemm_w4a16(target):
    w = _example("gemm_w4a16")
    kernel = _ascend(w.w4a16_gemm, target)(5, 64, 256, 64, block_M=16, block_N=32, block_K=64)
    a = torch.randn(5, 256).half()
    q, scales, zeros = w.quantize(torch.randn(64, 256).half(), 64)
    want = a.double() @ w.dequantize(q, scales, zeros).double().T
    torch.testing.assert_close(kernel(a, q, scales, zeros).double(), want, rtol=1e-2,
                               atol=1e-2 * want.abs().mean())


def gemm_w4a16_splits_refused(target):
    # split-K's kernel sequence: its first block splits the work between cube and vector
    # cores through GM workspaces, which the backend's kernel sequences do not take yet
    w = _example("gemm_w4a16")
    with pytest.raises(tilewright.errors.KernelError, match=r"backend 'ascend' launches the "
                       r"'with T.Kernel' blocks .* a kernel sequence does not support yet"):
        _ascend(w.w4a16_gemm, target)(5, 64, 256, 64, block_M=16, block_N=32, block_K=64,
                                      splits=2)


def gemm_fp8_scaled_refused(target):
    # the cube has no float8: refused at the gemm's line, naming what it takes
    f = _example("gemm_fp8_scaled")
    with pytest.raises(tilewright.errors.UnsupportedOpError, match=r"T.gemm on float8_e4m3fn "
                       r"operands \(A_s\) is not supported by backend 'ascend' \(it takes "
                       r"bfloat16, float16, float32, int8\)"):
        _ascend(f.fp8_gemm_scaled, target)(40, 64, 256, "block", block_M=32, block_N=32,
                                           threads=128)


def gemm_sp_refused(target):
    # the cube has no structured sparsity: T.gemm_sp is an op the backend does not declare
    g = _example("gemm_sp")
    with pytest.raises(tilewright.errors.UnsupportedOpError, match=r"gemm_sp.py:\d+: T.gemm_sp "
                       r"is not supported by backend 'ascend'"):
        _ascend(g.gemm_sp_kernel, target)(64, 64, 128, block_M=32, block_N=32, block_K=64)


def block_sparse_gemm_refused(target):
    # T.clear becomes the first iteration's GEMM (A2's cube has no fill of L0C), which the
    # mask may skip: refused at the branch instead of leaving the accumulator unset
    g = _example("block_sparse_gemm")
    with pytest.raises(tilewright.KernelError, match=r"block_sparse_gemm.py:\d+: T.clear"
                       r"\(C_local\) is made the first iteration's T.gemm"):
        _ascend(g.block_sparse_matmul, target)(128, 128, 128)


CASES = [quickstart_vector_add, quickstart_matmul, quickstart_softmax, gemm_float32,
         gemm_splitk, flash_attention_causal, rmsnorm, softmax_bfloat16, row_reduce,
         elementwise_add, gemm_dynamic, gemm_persistent, gemm_w4a16, gemm_w4a16_splits_refused,
         gemm_fp8_scaled_refused, gemm_sp_refused, block_sparse_gemm_refused]


def test_every_example_has_a_case():
    covered = {c.__name__ for c in CASES}
    # torch_package.py defines no kernel: it lists other examples' kernels for a wheel
    names = {p.stem for p in EXAMPLES.glob("*.py")} - {"torch_package"}
    missing = {n for n in names if not any(c.startswith(n) for c in covered)}
    assert not missing, f"examples without an Ascend case: {sorted(missing)}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_example_on_the_ascend_emulator(case, target):
    torch.manual_seed(0)
    case(target)
