"""tilewright backend 'interp'."""

from importlib.metadata import version

__version__ = version("tilewright-interp")  # one source of truth: pyproject.toml
