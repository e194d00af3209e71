"""Generated CUDA that the differential fuzzer (through ``fuzz_emulated``) found the host
emulation unable to build, although NVRTC builds it: half and bfloat16 math that
cuda_fp16.hpp and cuda_bf16.hpp declare for the device only (``hexp`` of a float16
sigmoid), and ``max`` of a ``signed char`` and an ``int`` (an int8 abs-max reduction, whose
negation C++ promotes to int), which CUDA's overloads take."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch


def _emulate(func, tmp_path, *args):
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_math_in_emulation(dtype, tmp_path):
    @T.prim_func
    def math(X: T.Tensor((4, 8), dtype), Y: T.Tensor((4, 8), dtype)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((4, 8), dtype)
            T.copy(X[bx * 4, 0], x)
            for i, j in T.Parallel(4, 8):
                x[i, j] = T.sigmoid(x[i, j]) + T.sqrt(T.abs(x[i, j])) + T.floor(x[i, j]) + \
                    T.tanh(x[i, j])
            T.copy(x, Y[bx * 4, 0])

    t = getattr(torch, dtype)
    x = (torch.rand(4, 8, dtype=torch.float64) * 8 - 4).to(t)
    y = torch.full((4, 8), float("nan"), dtype=t)
    _emulate(math, tmp_path, x, y)
    v = x.double()
    want = torch.sigmoid(v) + v.abs().sqrt() + v.floor() + torch.tanh(v)
    torch.testing.assert_close(y.double(), want, atol=0.08, rtol=0.02)


@pytest.mark.emulator
def test_an_int8_abs_max_reduction_of_int64_in_emulation(tmp_path):
    @T.prim_func
    def absmax(X: T.Tensor((4, 8), "int64"), R: T.Tensor((4,), "int8")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((4, 8), "int64")
            r = T.alloc_fragment((4,), "int8")
            T.copy(X[bx * 4, 0], x)
            T.reduce_absmax(x, r, dim=1)
            T.copy(r, R[bx * 4])

    x = torch.randint(-100, 101, (4, 8), dtype=torch.int64)
    r = torch.full((4,), 127, dtype=torch.int8)
    _emulate(absmax, tmp_path, x, r)
    assert torch.equal(r, x.abs().amax(dim=1).to(torch.int8))


@pytest.mark.emulator
@pytest.mark.parametrize("wide", ["int64", "uint64"])
def test_fields_of_a_narrow_value_cast_to_64_bits_in_emulation(wide, tmp_path):
    """T.unpack of an int4/int8 value cast to 64 bits: TVM's NarrowDataType made the cast
    inside the unpack's reinterpret 32-bit and the CUDA printer stopped ('reinterpret expects
    source and target to have the same number of bits', fuzzer seed 1001)."""

    @T.prim_func
    def fields(X: T.Tensor((4, 8), "int8"), Y: T.Tensor((4, 8), wide)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((4, 8), "int8")
            T.copy(X[bx * 4, 0], x)
            for i, j in T.Parallel(4, 8):
                Y[i, j] = T.cast(T.unpack(T.cast(x[i, j], wide), j * 2, 4), wide)

    x = torch.randint(-128, 128, (4, 8), dtype=torch.int8)
    y = torch.full((4, 8), 99, dtype=getattr(torch, wide))
    _emulate(fields, tmp_path, x, y)
    shifts = torch.arange(8, dtype=torch.int64) * 8
    want = (x.long() >> shifts) & 15  # arithmetic shift: the sign bits of a negative value
    assert torch.equal(y.long(), want)
