"""The compile engine: targets, pass configs, compile sessions and their events."""

from ..plugin.passconfig import known_keys, validate
from . import events
from .session import (
    CompileContext,
    Lowered,
    build,
    check_support,
    finish,
    lower,
    pick_executor,
)
from .target import Target, parse_target, resolve_target

__all__ = ["CompileContext", "Lowered", "Target", "build", "check_support", "events",
           "finish", "known_keys", "lower", "parse_target", "pick_executor", "resolve_target",
           "validate"]
