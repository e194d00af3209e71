"""Autotuning: ``@tilewright.autotune`` over ``@tilewright.jit`` kernel factories."""

from .tuner import AutoTuner, AutotuneResult, autotune

__all__ = ["AutoTuner", "AutotuneResult", "autotune"]
