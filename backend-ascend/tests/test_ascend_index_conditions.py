"""Index conditions on the vector unit: a select or guard on loop indices (a causal mask
``i >= j``, ``j < n``, ``j % 2 == 0``, an offset tile index ``k * bn + j < S``) is Compare and
Select on float32 index tiles from CreateVecIndex, no longer a GetValue/SetValue loop; checked
in the generated source, against torch on the emulator, against the vendor headers, and by the
emulator's race detector with a flag of the synchronisation pass removed. What float32 does
not hold exactly stays on the scalar unit."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source


def causal(M=16, N=16):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                x[i, j] = T.if_then_else(i >= j, x[i, j], -1e30)
            T.copy(x, B[0, 0])
    return main


def masks(M=8, N=40, n=13):
    """``j < n`` and a parity mask, each in its own nest (two CreateVecIndex in a row)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                B[i, j] = T.if_then_else(j < n, x[i, j], 0.0)
            for i, j in T.Parallel(M, N):
                C[i, j] = T.if_then_else(j % 2 == 0, x[i, j], 1.0)
    return main


def offset(S=50, BN=16, M=4, N=64):
    """The tile index of a serial loop: ``k * BN + j < S`` (one CreateVecIndex an iteration)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, BN), "float32")
            for k in T.serial(N // BN):
                T.copy(A[0, k * BN], x)
                for i, j in T.Parallel(M, BN):
                    x[i, j] = T.if_then_else(k * BN + j < S, x[i, j], -5.0)
                T.copy(x, B[0, k * BN])
    return main


def guarded(M=12, N=20):
    """A guard on indices and a block index: ``if bx * M + i > j: x = 0`` (a strict upper
    triangle of the whole matrix cleared, block by block)."""

    @T.prim_func
    def main(A: T.Tensor((2 * M, N), "float32"), B: T.Tensor((2 * M, N), "float32")):
        with T.Kernel(2, threads=32) as bx:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(A[bx * M, 0], x)
            for i, j in T.Parallel(M, N):
                if bx * M + i < j:
                    x[i, j] = 0.0
            T.copy(x, B[bx * M, 0])
    return main


def long_row(N=200):
    """A 1-D nest longer than a repeat (CreateVecIndex's further repeats and their tail)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((N,), "float32")
            T.copy(A[0], x)
            for j in T.Parallel(N):
                x[j] = T.if_then_else(j % 4 == 1 or j // 64 == 2, x[j], -2.0)
            T.copy(x, B[0])
    return main


def _rows_cols(m, n):
    return torch.arange(m)[:, None], torch.arange(n)[None, :]


def _run(name):
    """(kernel source, [outputs], [expected])."""
    gen = torch.Generator().manual_seed(3)
    if name == "causal":
        kernel = tilewright.compile(causal(), out_idx=[-1], target="ascend")
        a = torch.randn(16, 16, generator=gen)
        i, j = _rows_cols(16, 16)
        return kernel.get_kernel_source(), [kernel(a)], [torch.where(i >= j, a, -1e30)]
    if name == "masks":
        kernel = tilewright.compile(masks(), target="ascend")
        a, b, c = torch.randn(8, 40, generator=gen), torch.empty(8, 40), torch.empty(8, 40)
        kernel(a, b, c)
        j = torch.arange(40)
        return kernel.get_kernel_source(), [b, c], [torch.where(j < 13, a, 0.0),
                                                    torch.where(j % 2 == 0, a, 1.0)]
    if name == "offset":
        kernel = tilewright.compile(offset(), target="ascend")
        a, b = torch.randn(4, 64, generator=gen), torch.empty(4, 64)
        kernel(a, b)
        return kernel.get_kernel_source(), [b], [torch.where(torch.arange(64) < 50, a, -5.0)]
    if name == "long_row":
        kernel = tilewright.compile(long_row(), target="ascend")
        a, b = torch.randn(200, generator=gen), torch.empty(200)
        kernel(a, b)
        j = torch.arange(200)
        return kernel.get_kernel_source(), [b], [torch.where((j % 4 == 1) | (j // 64 == 2), a,
                                                             -2.0)]
    kernel = tilewright.compile(guarded(), target="ascend")
    a, b = torch.randn(24, 20, generator=gen), torch.empty(24, 20)
    kernel(a, b)
    i, j = _rows_cols(24, 20)
    return kernel.get_kernel_source(), [b], [torch.where(i < j, 0.0, a)]


@pytest.mark.parametrize("name", ["causal", "masks", "offset", "guarded", "long_row"])
def test_index_conditions_run_on_the_vector_unit_and_match_torch(name):
    text, outputs, expected = _run(name)
    assert "scalar fallback" not in text and "SetValue" not in text and \
        "GetValue(c" not in text, text
    assert "CreateVecIndex(" in text and "Select(" in text
    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref)


def test_the_offset_of_a_serial_loop_is_a_scalar_of_adds():
    text = tilewright.lower(offset(), target="ascend").source.text
    assert "Adds(" in text and "(k * 16)" in text and "CMPMODE::LT" in text


def _inexact(kind):
    @T.prim_func
    def main(A: T.Tensor((4, 16), "float32"), B: T.Tensor((4, 16), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((4, 16), "float32")
            T.copy(A[0, 0], x)
            for k in T.serial(4):
                for i, j in T.Parallel(4, 16):
                    if kind == "large":
                        x[i, j] = T.if_then_else(k * 8388608 + j > 8388610, x[i, j], 0.0)
                    else:
                        x[i, j] = T.if_then_else(j % 3 == 1, x[i, j], 0.0)
            T.copy(x, B[0, 0])
    return main


@pytest.mark.parametrize("kind,reason", [
    ("large", "may reach 2\\*\\*24, past which float32"),
    ("mod3", "divides by 3: float32 division is exact by powers of two only")])
def test_what_float32_does_not_hold_exactly_stays_on_the_scalar_unit(kind, reason):
    kernel = tilewright.compile(_inexact(kind), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(reason, text) and "CreateVecIndex(" not in text
    a = torch.randn(4, 16)
    j = torch.arange(16)
    expect = a.clone()
    for k in range(4):
        keep = (k * 8388608 + j > 8388610) if kind == "large" else (j % 3 == 1)
        expect = torch.where(keep, expect, 0.0)
    torch.testing.assert_close(kernel(a), expect)


def test_the_index_kernels_compile_against_the_vendor_headers(asc_check):
    kernels = {"causal": causal(), "masks": masks(), "offset": offset(), "guarded": guarded(),
               "long_row": long_row()}
    sources = {name: tilewright.lower(f, target="ascend").source.text
               for name, f in kernels.items()}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)


def _without_flag(text, event, nth=0):
    """``text`` less the ``nth`` ``SetFlag<event>`` and the first wait of its id after it."""
    lines = text.splitlines()
    s = [i for i, line in enumerate(lines) if f"SetFlag<HardEvent::{event}>" in line][nth]
    eid = re.search(r"\((\d+)\);", lines[s])[1]
    w = next(k for k in range(s + 1, len(lines))
             if f"WaitFlag<HardEvent::{event}>({eid});" in lines[k])
    return "\n".join(line for i, line in enumerate(lines) if i not in (s, w))


@pytest.mark.parametrize("name,expect", [
    # the V side of the first CreateVecIndex (its Adds) before the row operand's GetValue, and
    # its wait of its own S_V flag before the second one sets it again
    ("causal", r"(?s)SetFlag<S_V>\(0\) .* is not ordered after the WaitFlag.*race .*'tw_t1'"),
    # loop-carried: the previous iteration's vector reads of the index tile before this
    # iteration's SetValue of it
    ("offset", r"race \(.*UB buffer 'tw_t1'"),
])
def test_removing_a_flag_around_create_vec_index_is_reported(name, expect, tmp_path):
    f = {"causal": causal, "offset": offset}[name]()
    low = tilewright.lower(f, target="ascend")
    shape = (16, 16) if name == "causal" else (4, 64)
    args = (torch.randn(*shape), torch.empty(*shape))
    for part in ("kept", "removed"):
        (tmp_path / part).mkdir()
    compile_and_run_source(low.source.text, low.source.payload, args, tmp_path / "kept")
    with pytest.raises(EmulatorError, match=expect):
        compile_and_run_source(_without_flag(low.source.text, "V_S"), low.source.payload,
                               args, tmp_path / "removed")
