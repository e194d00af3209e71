"""tilewright backend 'interp'."""

__version__ = "0.1.0"
