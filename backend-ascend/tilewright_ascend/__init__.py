"""tilewright backend for Huawei Ascend A2/A3 NPUs (Ascend C route), with a CPU emulator."""

from importlib.metadata import version

__version__ = version("tilewright-ascend")  # one source of truth: pyproject.toml
