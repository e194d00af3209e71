"""tilewright-cpu: the reference backend. Runs every portable tile kernel on the host CPU."""

from importlib.metadata import version

__version__ = version("tilewright-cpu")  # one source of truth: pyproject.toml
