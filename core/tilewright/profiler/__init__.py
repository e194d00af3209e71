"""Profiling: ``do_bench`` over timers that the core and plugins register."""

from .bench import do_bench
from .timers import WALL, get_timer, timers

__all__ = ["WALL", "do_bench", "get_timer", "timers"]
