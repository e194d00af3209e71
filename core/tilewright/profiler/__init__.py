"""Profiling: ``do_bench`` over timers that the core and plugins register, and the
architecture models (by name) that the roofline analyser and the carver use."""

from .arch import arch_models, get_arch
from .bench import do_bench
from .kernel_profiler import Profiler
from .timers import WALL, get_timer, timers

__all__ = ["WALL", "Profiler", "arch_models", "do_bench", "get_arch", "get_timer", "timers"]
