"""tilewright-cuda: the ``cuda`` backend (NVIDIA GPUs)."""

from importlib.metadata import version

__version__ = version("tilewright-cuda")  # one source of truth: pyproject.toml
