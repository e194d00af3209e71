"""The examples' kernels at small sizes, as tile-level PrimFuncs, with torch references."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tilewright.testing import assert_close
from tilewright.utils.sparse import compress, randn_semi_sparse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _module(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def _eager(jitted, consts, **static):
    """An eager example's program for ``consts`` (its T.const values) and ``static`` (its
    compile-time arguments), as the JIT traces it."""
    return jitted.get_tir(**static, **consts)


def func(name: str):
    """The PrimFunc of example kernel ``name`` at test size."""
    if name == "gemm":
        return _eager(_module("gemm").matmul, {"M": 256, "N": 256, "K": 128})
    if name == "gemm_bf16":
        return _eager(_module("gemm").matmul, {"M": 256, "N": 256, "K": 128}, dtype="bfloat16")
    if name == "gemm_dynamic":
        return _eager(_module("gemm_dynamic").matmul_dynamic, {})
    if name == "elementwise_add":
        return _eager(_module("elementwise_add").add, {"M": 70, "N": 130})
    if name == "flash_attention":
        return _module("flash_attention").flashattn.fn(1, 2, 96, 64, True)
    if name == "flash_attention_f16":
        return _module("flash_attention").flashattn.fn(1, 2, 128, 64, False, dtype="float16")
    if name == "softmax":
        return _module("softmax").softmax.fn(10, 256)
    if name == "rmsnorm":
        return _module("rmsnorm").rmsnorm.fn(10, 256)
    if name == "row_reduce":
        return _module("row_reduce").row_sum.fn(20, 300)
    if name == "gemm_persistent":
        return _module("gemm_persistent").matmul_persistent.fn(100, 130, 64, 2)
    if name == "gemm_splitk":
        return _module("gemm_splitk").matmul_splitk.fn(64, 96, 300, 3)
    if name == "quickstart_vector_add":
        return _eager(_module("quickstart").vector_add, {"M": 3000})
    if name == "quickstart_matmul":
        return _module("quickstart").matmul.fn(128, 128, 64)
    if name == "quickstart_softmax":
        return _module("quickstart").softmax.fn(16, 128)
    if name == "gemm_sp":
        return _module("gemm_sp").gemm_sp_kernel.fn(128, 192, 128, block_M=64, block_N=64,
                                                    block_K=64)
    if name == "block_sparse_gemm":
        return _module("block_sparse_gemm").block_sparse_matmul.fn(128, 192, 256)
    raise KeyError(name)


NAMES = ("gemm", "gemm_bf16", "gemm_dynamic", "elementwise_add", "flash_attention",
         "flash_attention_f16", "softmax",
         "rmsnorm", "row_reduce", "gemm_persistent", "gemm_splitk", "quickstart_vector_add",
         "quickstart_matmul", "quickstart_softmax", "gemm_sp", "block_sparse_gemm")


def _nan(*shape):
    return torch.full(shape, float("nan"))


@dataclass
class Case:
    """An example kernel's arguments (inputs random, outputs poisoned with NaN or, for
    accumulating kernels, zero), the positions of its outputs among them, torch's results for
    those, the tolerance of the emulation tests (``torch.testing.assert_close``) and the
    longest reduction behind an output (the tolerance model's K, for the GPU checks)."""

    args: tuple
    outputs: tuple
    expected: list
    tol: dict = field(default_factory=dict)
    reduction: int = 1

    def check(self) -> None:
        """The outputs (after a run) match torch's: within ``tol`` when given, else within
        the tolerance model of ``tilewright.testing`` (the GPU checks' too)."""
        for i, want in zip(self.outputs, self.expected, strict=True):
            if self.tol:
                torch.testing.assert_close(self.args[i], want.to(self.args[i].dtype),
                                           **self.tol)
            else:
                assert_close(self.args[i], want, reduction_length=self.reduction,
                             name=f"output {i}")


def case(name: str) -> Case:
    """The example's :class:`Case` at the size of :func:`func`."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    exact = {"rtol": 1e-4, "atol": 1e-4}
    if name in ("elementwise_add", "quickstart_vector_add"):
        shape = (70, 130) if name == "elementwise_add" else (3000,)
        a, b = rand(*shape), rand(*shape)
        return Case((a, b, _nan(*shape)), (2,), [a + b])
    if name in ("softmax", "quickstart_softmax"):
        shape = (10, 256) if name == "softmax" else (16, 128)
        x = rand(*shape)
        return Case((x, _nan(*shape)), (1,), [torch.softmax(x, 1)], reduction=shape[1])
    if name == "rmsnorm":
        x, w = rand(10, 256), rand(256)
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return Case((x, w, _nan(10, 256)), (2,), [ref], reduction=256)
    if name == "row_reduce":
        x = rand(20, 300)
        return Case((x, _nan(20)), (1,), [x.sum(1)], exact, 300)
    if name in ("gemm_persistent", "gemm_splitk", "gemm_dynamic", "quickstart_matmul"):
        m, n, k = {"gemm_persistent": (100, 130, 64), "gemm_splitk": (64, 96, 300),
                   "gemm_dynamic": (77, 130, 65), "quickstart_matmul": (128, 128, 64)}[name]
        a, b = rand(m, k), rand(k, n)
        c = torch.zeros(m, n) if name == "gemm_splitk" else _nan(m, n)  # split-K adds into C
        return Case((a, b, c), (2,), [a @ b], exact, k)
    if name == "flash_attention":
        q, k, v = (rand(1, 96, 2, 64) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2)
        return Case((q, k, v, _nan(1, 96, 2, 64)), (3,), [ref], exact, 96)
    if name in ("gemm", "gemm_bf16"):
        dtype = torch.float16 if name == "gemm" else torch.bfloat16
        a, b = rand(256, 128).to(dtype), rand(128, 256).to(dtype)
        ref = (a.double() @ b.double()).to(dtype)
        tol = 1e-2 if dtype == torch.float16 else 2e-2
        return Case((a, b, _nan(256, 256).to(dtype)), (2,), [ref],
                    {"rtol": tol, "atol": tol * 12}, 128)
    if name == "flash_attention_f16":
        q, k, v = (rand(1, 128, 2, 64).half() for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(t.transpose(1, 2).double() for t in (q, k, v))).transpose(1, 2).half()
        return Case((q, k, v, _nan(1, 128, 2, 64).half()), (3,), [ref],
                    {"rtol": 1e-2, "atol": 1e-2}, 128)
    if name == "gemm_sp":  # 2:4 sparse A as values and metadata; exact products, float32 sums
        a = randn_semi_sparse(128, 128, torch.float16, generator=g)
        b = rand(128, 192).half()
        return Case((*compress(a), b, _nan(128, 192)), (3,), [a.double() @ b.double()],
                    exact, 128)
    if name == "block_sparse_gemm":  # half of the K blocks, never the first of a row of them
        example = _module("block_sparse_gemm")
        a, b = rand(128, 256).half(), rand(256, 192).half()
        mask = example.random_mask(128, 192, 256, 0.5)
        return Case((a, b, mask, _nan(128, 192)), (3,), [example.reference(a, b, mask)],
                    exact, 256)
    raise KeyError(name)


# run by the host emulation; the float16/bfloat16 ones take the mma.sync path
EMULATED = ("elementwise_add", "softmax", "rmsnorm", "row_reduce", "gemm_persistent",
            "gemm_splitk", "gemm_dynamic", "flash_attention", "gemm", "gemm_bf16",
            "flash_attention_f16", "quickstart_vector_add", "quickstart_matmul",
            "quickstart_softmax", "gemm_sp", "block_sparse_gemm")

FLOAT32 = ("elementwise_add", "softmax", "rmsnorm", "row_reduce", "gemm_persistent",
           "gemm_splitk", "gemm_dynamic", "flash_attention")
