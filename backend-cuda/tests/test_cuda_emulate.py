"""The CUDA generated for the examples computes what torch computes, run on the host with one
thread per CUDA thread (see hostemu.py): indexing, guards, barriers, shuffles, atomics and the
mma.sync fragment layouts (emulated per warp) are checked without a GPU. Outputs start as
NaN."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import UnsupportedOpError


@pytest.mark.emulator
@pytest.mark.parametrize("name", kernels.EMULATED)
def test_generated_cuda_matches_torch(name, tmp_path):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    case = kernels.case(name)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *case.args)
    case.check()


def _rows_by_scalar():
    """A grid over an integer scalar argument (TileLang's varlen attention launches
    ``T.ceildiv(max_seqlen, block)`` blocks)."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(T.ceildiv(rows, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                if bx * 32 + i < rows:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0
    return main


@pytest.mark.nvrtc
@pytest.mark.emulator
def test_grid_over_a_scalar_argument(tmp_path):
    func = _rows_by_scalar()
    kernel = tilewright.compile(func, target="cuda -arch=sm_90a", execution_backend="nvrtc")
    assert kernel.executor == "nvrtc"
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    launch = lowered.source.payload
    assert launch["symbols"] == {"rows": [2]}, launch
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 100)
    torch.testing.assert_close(y[:100], x[:100] * 2)
    assert y[100:].isnan().all()  # the grid's 4 blocks cover 128 rows; rows 100.. untouched


def _while_rows(condition_in_shared: bool = False):
    """Blocks walk 32-row tiles in a ``while`` loop (TileLang's stream-K GEMM walks its
    iterations so); each tile is staged in shared memory and written out with its rows
    reversed, so threads read what others wrote: barriers inside the loop and on its back
    edge are needed."""
    @T.prim_func
    def main(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256, 64), "float32"),
             rows: T.int32):
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((32, 64), "float32")
            at = T.alloc_shared((1,), "int32") if condition_in_shared else \
                T.alloc_fragment((1,), "int32", "local")
            at[0] = bx * 32
            while at[0] < rows:
                T.copy(X[at[0], 0], S)
                for i, j in T.Parallel(32, 64):
                    Y[at[0] + i, j] = S[31 - i, j] * 2.0
                at[0] = at[0] + 64
    return main


@pytest.mark.emulator
def test_while_loop_with_barriers(tmp_path):
    lowered = tilewright.lower(_while_rows(), "cuda -arch=sm_90a")
    x, y = torch.randn(256, 64), torch.full((256, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 192)
    want = (x[:192].reshape(6, 32, 64).flip(1) * 2).reshape(192, 64)
    torch.testing.assert_close(y[:192], want)
    assert y[192:].isnan().all()


def test_while_condition_reading_shared_memory_is_refused():
    with pytest.raises(UnsupportedOpError, match=r"backend 'cuda' runs a 'while' loop whose "
                       r"condition is the same in every thread and reads no shared memory; "
                       r"this condition reads shared memory") as err:
        tilewright.lower(_while_rows(condition_in_shared=True), "cuda -arch=sm_90a")
    assert err.value.location is not None and err.value.location.line > 0


def _atomic_rows(branch: bool):
    """``T.atomic_add`` of one element per iteration of a ``T.Parallel`` nest (stream-K's
    partial tiles), alone or in the else branch of a uniform ``if``."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32"),
             flag: T.int32):
        with T.Kernel(4, threads=64) as bx:
            acc = T.alloc_fragment((16, 64), "float32")
            T.copy(X[bx * 16, 0], acc)
            if branch and flag == 0:
                T.copy(acc, Y[bx * 16, 0])
            else:
                for i, j in T.Parallel(16, 64):
                    T.atomic_add(Y[bx * 16 + i, j], acc[i, j])
    return main


@pytest.mark.emulator
@pytest.mark.parametrize("branch", [False, True])
def test_atomic_add_per_parallel_element(branch, tmp_path):
    """Each iteration adds its own element (the backend gave the nest to thread 0 alone)."""
    lowered = tilewright.lower(_atomic_rows(branch), "cuda -arch=sm_90a")
    x, y = torch.randn(64, 64), torch.ones(64, 64)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 1)
    torch.testing.assert_close(y, x + 1)


def _wrapped(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` (int64) reduced modulo 2**bits into ``dtype``, as torch's arithmetic wraps."""
    bits = torch.iinfo(dtype).bits
    low = torch.iinfo(dtype).min
    return ((values - low) % 2 ** bits + low).to(dtype)


def _negative_index_cast_to_uint32():
    """``bx - 3`` is -3 in a one-block grid: cast to uint32, less 2, back to int32 is -5."""
    @T.prim_func
    def main(X: T.Tensor((4,), "int32"), Y: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            for j in T.Parallel(4):
                Y[j] = T.cast(T.cast(bx - 3, "uint32") - T.uint32(2), "int32") + X[j]
    return main


def _uint16_below_zero(blocks: int):
    """``(u16(bx) - 1) // 3``: 0U - 1U wraps to 65535 before the division (21845)."""
    @T.prim_func
    def main(X: T.Tensor((blocks, 4), "uint16"), Y: T.Tensor((blocks, 4), "uint16")):
        with T.Kernel(blocks, threads=128) as bx:
            for j in T.Parallel(4):
                Y[bx, j] = X[bx, j] + (T.cast(bx, "uint16") - T.uint16(1)) // T.uint16(3)
    return main


def _int8_index_casts():
    """Two loops cast ``by * 4 + i - 6`` (-6..5) to int8."""
    @T.prim_func
    def main(X: T.Tensor((9, 1), "int8"), Y: T.Tensor((9, 1), "int8")):
        with T.Kernel(1, 3, threads=128) as (bx, by):
            x = T.alloc_fragment((4, 1), "int8")
            T.copy(X[by * 4, bx], x)
            first = T.alloc_shared((4, 1), "int8")
            for i in T.Parallel(4):
                for j in T.Parallel(1):
                    first[i, j] = T.cast(by * 4 + i - 6, "int8")
            second = T.alloc_shared((4, 1), "int8")
            for i, j in T.Parallel(4, 1):
                second[i, j] = T.cast(by * 4 + i - 6, "int8") + x[i, j]
            for i, j in T.Parallel(4, 1):
                if by * 4 + i < 9:
                    Y[by * 4 + i, bx] = second[i, j]
    return main


def _narrow_products(dtype: str):
    """Products, sums and a left shift that leave ``dtype``'s range, divided after."""
    @T.prim_func
    def main(X: T.Tensor((64,), dtype), W: T.Tensor((64,), dtype), Y: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64) as bx:
            for j in T.Parallel(64):
                Y[j] = (X[j] * W[j] + (X[j] << T.cast(3, dtype)) - W[j]) // T.cast(7, dtype) + \
                    T.cast(bx, dtype)
    return main


@pytest.mark.emulator
def test_unsigned_cast_of_a_negative_index_wraps(tmp_path):
    """TVM's folding stopped the build on Cast(uint32, -3) ('cannot make uint from negative
    value -3', fuzzer seed 500)."""
    lowered = tilewright.lower(_negative_index_cast_to_uint32(), "cuda -arch=sm_90a")
    x, y = torch.arange(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, _wrapped(x.long() + 2 ** 32 - 5, torch.int32))


@pytest.mark.emulator
@pytest.mark.parametrize("blocks", [1, 2])
def test_unsigned_zero_minus_one_wraps(blocks, tmp_path):
    """One block: TVM's folding stopped the build on 0U - 1U ("Minuend's value is 0U");
    two: CUDA C promoted the uint16 operands to int and divided -1 (0, not 21845)."""
    lowered = tilewright.lower(_uint16_below_zero(blocks), "cuda -arch=sm_90a")
    x = torch.randint(0, 2 ** 16, (blocks, 4)).to(torch.uint16)
    y = torch.zeros(blocks, 4, dtype=torch.uint16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    block = torch.arange(blocks).reshape(blocks, 1)
    want = _wrapped(x.long() + (block - 1) % 2 ** 16 // 3, torch.uint16)
    assert torch.equal(y.long(), want.long())


@pytest.mark.emulator
def test_int8_casts_of_an_index_wrap(tmp_path):
    """TVM's folding stopped the build ('Literal value 129 exceeds range of int8', seed 502)."""
    lowered = tilewright.lower(_int8_index_casts(), "cuda -arch=sm_90a")
    x = torch.randint(-20, 21, (9, 1), dtype=torch.int8)
    y = torch.zeros(9, 1, dtype=torch.int8)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    torch.testing.assert_close(y, (torch.arange(9).reshape(9, 1) - 6 + x.long()).to(torch.int8))


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32"])
def test_narrow_integer_arithmetic_wraps_as_torch(dtype, tmp_path):
    """Each operation wraps before the division (C promoted 8- and 16-bit operands to int);
    a uint32 product exceeds int64's range of the widened operands."""
    lowered = tilewright.lower(_narrow_products(dtype), "cuda -arch=sm_90a")
    tdtype = getattr(torch, dtype)
    info = torch.iinfo(tdtype)
    x = torch.randint(info.min, info.max, (64,)).to(tdtype)
    w = torch.randint(info.min, info.max, (64,)).to(tdtype)
    y = torch.zeros(64, dtype=tdtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, w, y)
    xl, wl = x.long(), w.long()
    inner = _wrapped(_wrapped(_wrapped(xl * wl, tdtype).long()
                              + _wrapped(xl << 3, tdtype).long(), tdtype).long() - wl, tdtype)
    want = _wrapped(torch.div(inner.long(), 7, rounding_mode="floor"), tdtype)
    assert torch.equal(y.long(), want.long()), (y, want)
