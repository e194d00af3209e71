"""tilewright: a tile-level kernel language for Python and a plugin-based compiler."""

import os as _os

__version__ = "0.1.0"

# TVM's runtime thread pool spins for a long time after every parallel region, starving every
# other thread pool in the process (torch's too) and making side-by-side timings lie. TVM reads
# this when its library loads, so it is set before anything imports TVM; users may override it.
_os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")

from .errors import (  # noqa: E402
    ArgumentError,
    ConfigError,
    KernelError,
    PluginError,
    TargetError,
    TilewrightError,
    UnsupportedOpError,
)

_LAZY = {
    "jit": ("jit", "jit"),
    "compile": ("jit", "compile"),
    "lower": ("jit", "lower"),
    "JITKernel": ("jit", "JITKernel"),
    "language": ("language", None),
}


def __getattr__(name):
    # the JIT and the language pull in TVM; keep `import tilewright` itself light
    if name not in _LAZY:
        raise AttributeError(f"module 'tilewright' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(f".{module_name}", __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


__all__ = ["ArgumentError", "ConfigError", "JITKernel", "KernelError", "PluginError",
           "TargetError", "TilewrightError", "UnsupportedOpError", "__version__", "compile",
           "jit", "language", "lower"]
