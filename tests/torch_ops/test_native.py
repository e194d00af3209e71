"""The operators' C++ kernel on the CPU: calls run the compiled kernel without entering Python
when every check passes, take the Python implementation otherwise (which runs them or raises
the operator's error), and operators keep the Python registration when the extension cannot
be built."""

import itertools
import logging
import sys

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.jit import native_op as native
from tilewright.torch_ops import OpError
from torch_kernels import rmsnorm, rope, vector_add

pytestmark = pytest.mark.skipif(native.extension() is None,
                                reason="the C++ extension cannot be built here (no C++ "
                                       "compiler or no torch headers)")
_names = itertools.count()


def unique(base: str) -> str:
    return f"tw_native::{base}_{next(_names)}"


@tilewright.jit(out_idx=[-1], target="cpu")
def pair_sum(block=64):
    """A dynamic length and an output sized by an expression of it."""
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m,), "float32"), C: T.Tensor((m // 2,), "float32")):
        with T.Kernel(T.ceildiv(m // 2, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < m // 2:
                    C[bx * block + i] = A[2 * (bx * block + i)] + A[2 * (bx * block + i) + 1]

    return main


SCALE = 2.0


@tilewright.jit(target="cpu", torch_op="tw_native::scaled")
def scaled(A):
    """Reads a module global: which kernel a call needs is not a function of its arguments."""
    M = T.const("M")
    A: T.Tensor((M,), T.float32)
    C = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, 64), threads=64) as (bx,):
        for i in T.Parallel(64):
            if bx * 64 + i < M:
                C[bx * 64 + i] = A[bx * 64 + i] * SCALE
    return C


def python_calls(monkeypatch, op) -> list:
    """The device and arguments of each call that takes the operator's Python path."""
    calls, run = [], op.run
    monkeypatch.setattr(op, "run", lambda device, args: calls.append(args) or run(device, args))
    return calls


def test_compiled_kernels_run_in_cpp(monkeypatch):
    norm = rmsnorm(8, 32).as_torch_op(unique("norm"))
    pairs = pair_sum().as_torch_op(unique("pairs"))
    rot = rope(8, 32).as_torch_op(unique("rope"))
    seen = [python_calls(monkeypatch, op) for op in (norm, pairs, rot)]
    assert all(op._native for op in (norm, pairs, rot))
    x, w = torch.randn(8, 32), torch.randn(32)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(norm(x, w, 1e-6), want, rtol=1e-5, atol=1e-5)
    for m in (2, 9, 300):
        a = torch.randn(m)
        torch.testing.assert_close(pairs(a), a[: m // 2 * 2].view(-1, 2).sum(1))
    q, cos, sin = torch.randn(8, 32), torch.randn(8, 16), torch.randn(8, 16)
    a, b = q.chunk(2, dim=-1)
    want = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    assert rot(q, cos, sin) is None
    torch.testing.assert_close(q, want)
    assert seen == [[], [], []]
    for op in (norm, pairs, rot):
        op.remove()


def test_what_cpp_does_not_handle_takes_the_python_path(monkeypatch):
    norm = rmsnorm(8, 32).as_torch_op(unique("norm"))
    seen = python_calls(monkeypatch, norm)
    x, w = torch.randn(32, 8).t(), torch.randn(32)  # not contiguous: passed as a copy
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(norm(x, w, 1e-6), want, rtol=1e-5, atol=1e-5)
    assert len(seen) == 1
    with pytest.raises(OpError, match="has no cpu kernel for X: float32\\(4, 32\\)"):
        norm(torch.randn(4, 32), w, 1e-6)
    with pytest.warns(RuntimeWarning, match="requires grad"):
        norm(torch.randn(8, 32, requires_grad=True), w, 1e-6)
    assert len(seen) == 3
    norm.remove()


def test_eager_specialisations_join_the_cpp_kernel(monkeypatch):
    vector_add.cache_clear()  # other test files of this process call the operator too
    op = vector_add.torch_op
    seen = python_calls(monkeypatch, op)
    a, b = torch.randn(500), torch.randn(500)
    for block in (256, 256, 128, 128, 256):
        torch.testing.assert_close(torch.ops.tw_test.vadd(a, b, block), a + b)
    assert len(seen) == 2  # the first call of each specialisation
    torch.testing.assert_close(torch.ops.tw_test.vadd(a[:77], b[:77]), a[:77] + b[:77])
    assert len(seen) == 3


def test_without_the_extension_operators_register_in_python(monkeypatch):
    monkeypatch.setattr(native, "extension", lambda: None)
    norm = rmsnorm(8, 32).as_torch_op(unique("norm"))
    assert not norm._native and torch._C._dispatch_has_kernel_for_dispatch_key(
        norm.qualname, "CPU")
    x, w = torch.randn(8, 32), torch.randn(32)
    torch.testing.assert_close(norm(x, w, 1e-6), norm.variants["cpu"][0].call(x, w, 1e-6))
    norm.remove()


def test_no_compiler_is_said_in_one_log_line(monkeypatch, caplog):
    monkeypatch.setattr(native.shutil, "which", lambda _name: None)
    with caplog.at_level(logging.WARNING, logger="tilewright"):
        assert native.extension.__wrapped__() is None
    assert [r.getMessage() for r in caplog.records] == [
        "tilewright operators use their Python implementation (torch's boundary into Python "
        "costs microseconds per call): the C++ kernel is not available: no C++ compiler "
        "(c++, g++ or clang++) on PATH"]
    monkeypatch.setenv(native.ENV, "0")
    assert native.extension.__wrapped__() is None


def test_eager_kernels_reading_globals_stay_in_python(monkeypatch):
    seen = python_calls(monkeypatch, scaled.torch_op)
    a = torch.randn(100)
    torch.testing.assert_close(torch.ops.tw_native.scaled(a), a * 2)
    torch.testing.assert_close(torch.ops.tw_native.scaled(a), a * 2)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    torch.testing.assert_close(torch.ops.tw_native.scaled(a), a * 3)
    assert len(seen) == 3 and not scaled.torch_op._learned


def test_a_kernel_without_an_entry_point_runs_through_python(monkeypatch):
    kernel = tilewright.compile(pair_sum.get_tir(), out_idx=[-1], target="cpu",
                                execution_backend="llvm-jit")  # in memory: no C function
    assert kernel.entry_address is None
    op = kernel.as_torch_op(unique("pairs"))
    seen = python_calls(monkeypatch, op)
    a = torch.randn(10)
    torch.testing.assert_close(op(a), a.view(-1, 2).sum(1))
    assert len(seen) == 1
    op.remove()
