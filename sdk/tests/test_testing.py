"""tilewright.testing: tolerances from unit roundoff and reduction length."""

import math

import numpy as np
import pytest
import torch
from tilewright.testing import (
    ToleranceError,
    assert_close,
    compare,
    float64_reference,
    tolerance,
    unit_roundoff,
)


def test_unit_roundoff_of_each_dtype():
    assert unit_roundoff("float32") == 2.0 ** -24
    assert unit_roundoff(torch.float16) == 2.0 ** -11
    assert unit_roundoff("bfloat16") == 2.0 ** -8
    with pytest.raises(ValueError, match="no unit roundoff for dtype 'int32'"):
        unit_roundoff("int32")


def test_tolerance_grows_with_sqrt_of_reduction_length():
    short = tolerance("float32", reduction_length=16)
    long = tolerance("float32", reduction_length=1024)
    u = 2.0 ** -24
    assert short.rtol == pytest.approx(4 * (u + u * 4))
    assert long.rtol == pytest.approx(4 * (u + u * 32))
    # 16-bit outputs accumulate in float32: the output rounding dominates
    half = tolerance("float16", reduction_length=1024)
    assert half.rtol == pytest.approx(4 * (2.0 ** -11 + u * 32))
    assert "K=1024 accumulated in float32" in half.why
    assert tolerance("int32").rtol == 0


def test_low_precision_gemm_passes_and_a_wrong_one_fails():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 256, generator=gen).half()
    b = torch.randn(256, 48, generator=gen).half()
    good = (a.float() @ b.float()).half()
    expected = float64_reference(lambda x, y: x @ y, a, b)
    assert expected.dtype == torch.float64
    result = assert_close(good, expected, reduction_length=256)
    assert result.mismatched <= result.tolerance.max_mismatch_ratio * result.total
    bad = good.clone()
    bad[3, 7] += 1.0
    bad[10, 2] -= 2.0
    bad[60, 40] *= 1.1
    bad[61, 41] *= 1.1
    with pytest.raises(ToleranceError) as info:
        assert_close(bad, expected, reduction_length=256, name="C")
    text = str(info.value)
    assert "C: " in text and "of 3072 elements" in text
    assert "at (10, 2)" in text and "rtol=" in text and "K=256" in text


def test_mismatch_ratio_is_bounded():
    expected = torch.ones(2000, dtype=torch.float64)
    actual = torch.ones(2000, dtype=torch.float16)
    actual[0] = 2.0  # one flipped element of 2000 is within 1e-3 for 16-bit outputs
    assert compare(actual, expected).ok
    actual[1] = 2.0
    actual[2] = 2.0
    result = compare(actual, expected)
    assert not result.ok and result.mismatched == 3
    assert not compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-4])).ok


def test_absolute_floor_near_zero_scales_with_the_data():
    expected = np.array([1000.0, -1000.0, 1e-9])
    actual = np.array([1000.0, -1000.0, 1e-4], dtype=np.float32)  # tiny against the data
    assert compare(actual, expected, dtype="float32").ok
    assert not compare(np.array([1.0, 1.0, 1e-3]), np.array([1.0, 1.0, 1e-9]),
                       dtype="float32").ok


def test_the_scale_of_int8_data_is_taken_in_float64():
    # the squares of these int8 values wrap in int8: the scale came out NaN, and so did atol
    expected = torch.tensor([100, -120, 90, 127], dtype=torch.int8)
    result = compare(expected.clone(), expected, rtol=0.0)
    assert result.ok and math.isfinite(result.tolerance.atol)
    assert not compare(expected + 1, expected, rtol=0.0, atol=0.5).ok


def test_nan_and_inf_must_match():
    assert compare(torch.tensor([math.nan, math.inf]), torch.tensor([math.nan, math.inf])).ok
    assert not compare(torch.tensor([math.nan, 1.0]), torch.tensor([0.0, 1.0])).ok
    assert not compare(torch.tensor([-math.inf]), torch.tensor([math.inf])).ok


def test_shape_mismatch_is_reported():
    with pytest.raises(ToleranceError, match=r"shape mismatch: actual \(2,\), expected \(3,\)"):
        assert_close(torch.zeros(2), torch.zeros(3))
