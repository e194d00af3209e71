"""Input tensors for a kernel's parameters (:class:`TensorSupplyType`, ``get_tensor_supply``)
and ``torch_assert_close``, a comparison that tolerates a share of mismatched elements."""

from __future__ import annotations

import enum

__all__ = ["TensorSupplyType", "get_tensor_supply", "torch_assert_close"]


class TensorSupplyType(enum.Enum):
    """How ``get_tensor_supply`` fills a tensor (TileLang's members and meanings)."""

    Integer = 1  # small integers in [-2, 2] ([0, 2] unsigned; 0/1 bool)
    Uniform = 2  # uniform in [-1, 1]
    Normal = 3  # normal, mean -1, std 1
    Randn = 4  # standard normal
    Zero = 5
    One = 6
    Auto = 7  # uniform [-1, 1] for floats, small integers otherwise


def _torch():
    import torch

    return torch


def _static_shape(param) -> list[int]:
    shape = []
    for dim in getattr(param, "host_shape", param.shape):
        if not isinstance(dim, int):
            raise ValueError(f"cannot make a tensor for {param.name!r}: its shape "
                             f"{tuple(param.shape)} has the symbolic dimension {dim!r}; pass "
                             "input tensors yourself")
        shape.append(dim)
    return shape


def random_float4(shape, device="cpu"):
    """A ``torch.float4_e2m1fn_x2`` tensor of ``shape`` (two codes a byte), every code
    equally likely (torch draws no random float4 values itself)."""
    torch = _torch()
    return torch.randint(0, 256, shape, device=device, dtype=torch.uint8).view(
        torch.float4_e2m1fn_x2)


def with_declared_strides(tensor, param):
    """``tensor`` with the strides ``param`` (a ``T.StridedTensor``'s) declares when they are
    all constants (a copy in memory laid out so), else ``tensor``."""
    strides = getattr(param, "host_strides", None)
    if strides is None or tuple(tensor.stride()) == tuple(strides):
        return tensor
    torch = _torch()
    laid = torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype, device=tensor.device)
    return laid.copy_(tensor)


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer, device="cpu"):
    """A function from a kernel parameter (``kernel.params[i]``: name, shape, dtype) to a new
    torch tensor filled as ``supply_type`` says, on ``device`` (with the strides a
    ``T.StridedTensor`` declares as constants)."""
    if not isinstance(supply_type, TensorSupplyType):
        raise TypeError(f"supply_type must be a TensorSupplyType, got {supply_type!r}")
    torch = _torch()

    def supply(param):
        return with_declared_strides(filled(param), param)

    def filled(param):
        dtype = getattr(torch, getattr(param, "host_dtype", param.dtype))
        shape = _static_shape(param)
        if dtype == torch.float4_e2m1fn_x2:  # two codes a byte: bytes as the kinds allow
            if supply_type in (TensorSupplyType.Zero, TensorSupplyType.One):
                code = 0x22 if supply_type is TensorSupplyType.One else 0  # 1.0 is code 2
                return torch.full(shape, code, device=device, dtype=torch.uint8).view(dtype)
            return random_float4(shape, device)
        floating = dtype.is_floating_point
        fp8 = floating and dtype.itemsize == 1
        kind = supply_type
        if kind is TensorSupplyType.Auto:
            kind = TensorSupplyType.Uniform if floating and not fp8 else \
                TensorSupplyType.Integer
        if kind is TensorSupplyType.Integer or (dtype == torch.int8 and kind in (
                TensorSupplyType.Uniform, TensorSupplyType.Normal)):
            if dtype == torch.bool:
                return torch.randint(0, 2, shape, device=device).to(dtype)
            if fp8:
                return torch.randint(-128, 128, shape, device=device, dtype=torch.int8).to(dtype)
            low = 0 if str(dtype).startswith("torch.uint") else -2
            return torch.randint(low, 3, shape, device=device, dtype=dtype) if not floating \
                else torch.randint(low, 3, shape, device=device).to(dtype)
        if kind is TensorSupplyType.Uniform:
            return torch.empty(shape, device=device).uniform_(-1.0, 1.0).to(dtype)
        if kind is TensorSupplyType.Normal:
            return torch.empty(shape, device=device).normal_(-1.0, 1.0).to(dtype)
        if kind is TensorSupplyType.Randn:
            return torch.randn(shape, device=device).to(dtype)
        if kind is TensorSupplyType.Zero:
            return torch.zeros(shape, device=device, dtype=dtype)
        return torch.ones(shape, device=device, dtype=dtype)

    return supply


def torch_assert_close(tensor_a, tensor_b, rtol: float = 1e-2, atol: float = 1e-3,
                       max_mismatched_ratio: float = 0.001, verbose: bool = False,
                       equal_nan: bool = True, check_device: bool = True,
                       check_dtype: bool = True, check_layout: bool = True,
                       check_stride: bool = False, base_name: str = "LHS",
                       ref_name: str = "RHS") -> None:
    """Raise AssertionError unless ``|a - b| <= atol + rtol * |b|`` holds for all but
    ``max_mismatched_ratio`` of the elements; the message gives the count and the worst
    element."""
    torch = _torch()
    if check_dtype and tensor_a.dtype != tensor_b.dtype:
        raise AssertionError(f"dtypes differ: {base_name} {tensor_a.dtype}, {ref_name} "
                             f"{tensor_b.dtype}")
    if check_device and tensor_a.device != tensor_b.device:
        raise AssertionError(f"devices differ: {base_name} {tensor_a.device}, {ref_name} "
                             f"{tensor_b.device}")
    if tensor_a.shape != tensor_b.shape:
        raise AssertionError(f"shapes differ: {base_name} {tuple(tensor_a.shape)}, "
                             f"{ref_name} {tuple(tensor_b.shape)}")
    if check_stride and tensor_a.stride() != tensor_b.stride():
        raise AssertionError(f"strides differ: {base_name} {tensor_a.stride()}, {ref_name} "
                             f"{tensor_b.stride()}")
    a, b = tensor_a.double(), tensor_b.double()
    close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    bad = int((~close).sum())
    total = max(1, close.numel())
    if verbose:
        print(f"{base_name} vs {ref_name}: {bad} of {total} elements differ "
              f"(rtol={rtol}, atol={atol})")
    if bad > max_mismatched_ratio * total:
        diff = (a - b).abs().nan_to_num(float("inf"))
        worst = int(diff.argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape))
        raise AssertionError(
            f"{bad} of {total} elements ({100 * bad / total:.2f}%) of {base_name} and "
            f"{ref_name} differ by more than atol={atol} + rtol={rtol} * |{ref_name}| (allowed: "
            f"{100 * max_mismatched_ratio:.2f}%); worst at {index}: {base_name} "
            f"{a.flatten()[worst].item()}, {ref_name} {b.flatten()[worst].item()}")
