"""Autotuning: ``@tilewright.autotune`` over ``@tilewright.jit`` kernel factories."""

from .tuner import AutotuneResult, AutoTuner, autotune

__all__ = ["AutoTuner", "AutotuneResult", "autotune"]
