"""tilewright-cuda: the ``cuda`` backend (NVIDIA GPUs)."""

__version__ = "0.1.0"
