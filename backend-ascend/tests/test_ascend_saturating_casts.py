"""Float -> integer conversions on Ascend follow the language's rule (toward zero, saturated at
the integer's bounds, NaN gives 0) on the vector unit and on the scalar unit, a narrowing
integer conversion wraps, and the emulator's Cast follows the vendor's documented
saturation."""

import pytest
import tilewright
import tilewright.language as T
import tilewright_ascend.language as TA
import torch
from tilewright_ascend.executor import EmulatorError

N = 16
TARGETS = ("int8", "uint8", "int16", "int32")
VALUES = (float("nan"), float("inf"), -float("inf"), -0.75, 127.5, 128.0, -129.0, 255.5,
          256.0, -1.5, 40000.0, -40000.0, 3e9, -3e9, 2.75, -200.0)


def _kernel(dtype: str, reversed_index: bool):
    """Each target's Y[i] = T.cast(X[i]) (the vector unit) or T.cast(X[N - 1 - i]) (an index
    the tile copies cannot stage: the scalar unit)."""

    @T.prim_func
    def casts(X: T.Tensor((N,), dtype), Y0: T.Tensor((N,), TARGETS[0]),
              Y1: T.Tensor((N,), TARGETS[1]), Y2: T.Tensor((N,), TARGETS[2]),
              Y3: T.Tensor((N,), TARGETS[3])):
        with T.Kernel(1, threads=128):
            for k, y in enumerate((Y0, Y1, Y2, Y3)):
                for i in T.Parallel(N):
                    y[i] = T.cast(X[N - 1 - i] if reversed_index else X[i], TARGETS[k])

    return casts


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("unit", ["vector", "scalar"])
def test_a_float_to_int_cast_saturates(dtype, unit):
    kernel = tilewright.compile(_kernel(dtype, unit == "scalar"), target="ascend")
    text = kernel.get_kernel_source()
    # the vector unit clamps with Maxs/Mins; the scalar unit selects on NaN and the bounds
    assert (text.count("TW_ISNAN(") > 1) == (unit == "scalar")  # one is the prelude's
    assert ("Maxs(" in text) == (unit == "vector")
    x = torch.tensor(VALUES, dtype=getattr(torch, dtype))
    outs = [torch.zeros(N, dtype=getattr(torch, t)) for t in TARGETS]
    kernel(x, *outs)
    source = x.flip(0) if unit == "scalar" else x
    for t, out in zip(TARGETS, outs):
        info = torch.iinfo(getattr(torch, t))
        want = source.double().trunc().nan_to_num(0.0, info.max, info.min)
        want = want.clamp(info.min, info.max).to(getattr(torch, t))
        assert torch.equal(out, want), (t, source.tolist(), out.tolist(), want.tolist())


def test_a_converting_copy_saturates():
    """T.copy of a float tile to an integer tensor (staged in UB) and to an integer tile."""

    @T.prim_func
    def copies(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "uint8"),
               Z: T.Tensor((N,), "int8")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((N,), "float32")
            z = T.alloc_fragment((N,), "int8")
            T.copy(X[0], x)
            T.copy(x, Y[0])
            T.copy(x, z)
            T.copy(z, Z[0])

    x = torch.tensor(VALUES)
    y, z = torch.zeros(N, dtype=torch.uint8), torch.zeros(N, dtype=torch.int8)
    tilewright.compile(copies, target="ascend")(x, y, z)
    assert y.tolist() == [0, 255, 0, 0, 127, 128, 0, 255, 255, 0, 255, 0, 255, 0, 2, 0]
    assert z.tolist() == [0, 127, -128, 0, 127, 127, -128, 127, 127, -1, 127, -128, 127, -128,
                          2, -128]


def test_a_narrowing_integer_copy_wraps():
    """An integer conversion wraps modulo the destination's size (as torch's), where A2's Cast
    saturates: the scalar unit converts it."""

    @T.prim_func
    def copies(X: T.Tensor((N,), "int32"), Y: T.Tensor((N,), "int16"),
               Z: T.Tensor((N,), "int8"), U: T.Tensor((N,), "uint8")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((N,), "int32")
            z = T.alloc_fragment((N,), "int8")
            T.copy(X[0], x)
            T.copy(x, Y[0])
            T.copy(x, z)
            T.copy(z, Z[0])
            T.copy(z, U[0])

    x = torch.tensor([40000, -40000, 70000, 5, 2 ** 31 - 1, -2 ** 31, 32768, -32769, 200,
                      -200, 255, 256, -1, 128, -129, 0], dtype=torch.int32)
    y, z, u = (torch.zeros(N, dtype=t) for t in (torch.int16, torch.int8, torch.uint8))
    kernel = tilewright.compile(copies, target="ascend")
    kernel(x, y, z, u)
    assert "an integer conversion wraps" in kernel.get_kernel_source()
    assert y.tolist() == x.to(torch.int16).tolist()
    assert z.tolist() == x.to(torch.int8).tolist()
    assert u.tolist() == x.to(torch.int8).to(torch.uint8).tolist()


def test_a_negative_half_to_uint8_cast_is_an_exception():
    """precision_conversion.md: a negative source of half -> uint8_t is an exception (the
    vector path clamps before it, see float_to_int_steps)."""

    @TA.prim_func
    def main(A: TA.Tensor((16,), "float16"), B: TA.Tensor((64,), "uint8")):
        with TA.Kernel(1, is_npu=True) as (cid, vid):
            a = TA.alloc_ub((16,), "float16")
            b = TA.alloc_ub((32,), "uint8")
            with TA.Scope("V"):
                TA.copy(A[0], a)
                TA.barrier_all()
                TA.tile.cast(b[0:16], a)
                TA.barrier_all()
                TA.copy(b, B[vid * 32])

    kernel = tilewright.compile(main, target="ascend")
    out = torch.zeros(64, dtype=torch.uint8)
    kernel(torch.full((16,), 3.75, dtype=torch.float16), out)
    assert out[:16].tolist() == out[32:48].tolist() == [3] * 16
    with pytest.raises(EmulatorError, match="negative -2 to uint8_t: an exception"):
        kernel(torch.full((16,), -2.0, dtype=torch.float16), out)
