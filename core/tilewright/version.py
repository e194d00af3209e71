"""The distribution's version, for the cache keys and packages that record what built them."""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _source_version() -> str:
    """The version pyproject.toml names, for a source tree used without installing it (the GPU
    machine runs the bundle harness from ``PYTHONPATH=core``)."""
    project = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        return tomllib.loads(project.read_text())["project"]["version"] + "+source"
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


try:
    __version__ = version("tilewright")  # one source of truth: pyproject.toml
except PackageNotFoundError:
    __version__ = _source_version()
