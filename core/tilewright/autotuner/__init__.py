"""Autotuning: ``@tilewright.autotune`` over ``@tilewright.jit`` kernel factories;
``set_autotune_inputs`` gives a search its input tensors."""

from .tuner import AutoTuner, AutotuneResult, autotune, set_autotune_inputs

__all__ = ["AutoTuner", "AutotuneResult", "autotune", "set_autotune_inputs"]
