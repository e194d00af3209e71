"""Integer helpers for kernel factories: ``tilewright.cdiv`` and ``next_power_of_2``."""

from __future__ import annotations

__all__ = ["cdiv", "next_power_of_2"]


def _check(name: str, **values) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"tilewright.{name}: {key} must be an int, got {value!r}")


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (``T.ceildiv`` inside kernels)."""
    _check("cdiv", a=a, b=b)
    if b == 0:
        raise ZeroDivisionError("tilewright.cdiv: division by zero")
    return -(-a // b)


def next_power_of_2(x: int) -> int:
    """The smallest power of two that is ``>= x`` (1 for ``x <= 1``)."""
    _check("next_power_of_2", x=x)
    return 1 if x <= 1 else 1 << (x - 1).bit_length()
