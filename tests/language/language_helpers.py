"""Helpers shared by the language conformance tests (CPU reference backend)."""

import torch
from tilewright.testing import assert_close

DTYPES = ("float32", "float16", "bfloat16")
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
         "int32": torch.int32, "int64": torch.int64}


def check(actual, expected, *, dtype=None, k=None, **kw):
    """Compare with a torch reference computed in float64, tolerance from the dtype and the
    reduction length ``k``."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return assert_close(actual, expected.double() if expected.is_floating_point() else expected,
                        dtype=dtype or actual.dtype, reduction_length=k, **kw)


def rand(*shape, dtype="float32", seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(TORCH[dtype])
