"""Helpers TileLang users reach through ``tilelang.utils``: tensor supplies and comparison."""

from .tensor import TensorSupplyType, get_tensor_supply, torch_assert_close

__all__ = ["TensorSupplyType", "get_tensor_supply", "torch_assert_close"]
