"""TileLang's ``tilelang.language.fp8``: the float8 dtypes of the platform.

tilewright's targets use the OCP float8 formats (``float8_e4m3fn``, ``float8_e5m2``); the
AMD "fnuz" variants TileLang picks on ROCm have no backend here.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .dtypes import DType

_FORMATS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def determine_fp8_type(fp8_format: str = "e4m3") -> DType:
    """The float8 dtype of ``fp8_format`` (``"e4m3"`` or ``"e5m2"``)."""
    if fp8_format not in _FORMATS:
        raise ConfigError(f"unsupported FP8 format {fp8_format!r}; use one of "
                          f"{', '.join(_FORMATS)}")
    return DType(_FORMATS[fp8_format])


def determine_torch_fp8_type(fp8_format: str = "e4m3") -> torch.dtype:
    """The torch dtype of :func:`determine_fp8_type`."""
    return determine_fp8_type(fp8_format).as_torch()
