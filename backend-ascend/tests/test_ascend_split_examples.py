"""examples/gemm.py, examples/gemm_splitk.py and examples/flash_attention.py, unchanged, on
the Ascend emulator (in float16: a float32 GEMM with B not transposed needs B's fractals
transposed, which the cube's LoadData2D does for 2-byte types only)."""

import importlib.util
from pathlib import Path

import tilewright
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name):
    spec = importlib.util.spec_from_file_location(f"tw_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_examples_gemm_and_flash_attention_run_on_the_emulator():
    gemm = _example("gemm")
    matmul = tilewright.jit(target="ascend")(gemm.matmul.fn)
    a, b = torch.randn(96, 64).half(), torch.randn(64, 80).half()
    c = matmul(a, b, block_M=32, block_N=32, block_K=32)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-2)
    fa = _example("flash_attention")
    for causal in (False, True):
        func = fa.flashattn.fn(1, 2, 40, 16, causal, block_M=16, block_N=16, dtype="float16")
        kernel = tilewright.compile(func, out_idx=[3], target="ascend")
        q, k, v = (torch.randn(1, 40, 2, 16).half() for _ in range(3))
        out = kernel(q, k, v)
        ref = fa.reference(q.float(), k.float(), v.float(), causal)
        torch.testing.assert_close(out.double(), ref, rtol=3e-3, atol=3e-3)


def test_example_split_k_gemm_runs_on_the_emulator():
    """Three K slices per output tile: the cube accumulates a slice, the vector cores add it
    to C atomically; slices past the end of K are empty tiles that add zero."""
    splitk = _example("gemm_splitk")
    M, N, K = 64, 48, 200
    func = splitk.matmul_splitk.fn(M, N, K, 3, block_M=32, block_N=32, block_K=32,
                                   dtype="float16")
    kernel = tilewright.compile(func, target="ascend")
    assert "SetAtomicAdd<float>();" in kernel.get_kernel_source()
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.zeros(M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-2)
