"""``@tilewright.jit``, ``tilewright.compile`` and ``tilewright.lower``.

The names load on first use: the disk cache (``tilewright.jit.cache``) is importable without
TVM, which keeps commands such as ``tilewright cache info`` fast.
"""

import importlib

_NAMES = {
    "jit": "decorator", "JITFunction": "decorator", "lower": "decorator",
    "compile": "decorator", "par_compile": "decorator", "JITKernel": "kernel",
    "disable_cache": "decorator", "enable_cache": "decorator", "is_cache_enabled": "decorator",
}

__all__ = ["JITFunction", "JITKernel", "compile", "disable_cache", "enable_cache",
           "is_cache_enabled", "jit", "lower", "par_compile"]


def __getattr__(name):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'tilewright.jit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
