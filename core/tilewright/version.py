"""The distribution's version, for the cache keys and packages that record what built them."""

from importlib.metadata import version

__version__ = version("tilewright")  # one source of truth: pyproject.toml
