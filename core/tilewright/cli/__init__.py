"""The ``tilewright`` command: ``backends``, ``doctor``, ``cache`` and plugin subcommands."""

from .main import main

__all__ = ["main"]
