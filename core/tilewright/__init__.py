"""tilewright: a tile-level kernel language for Python and a plugin-based compiler."""

import os as _os
import sys as _sys
import types as _types

# TVM's runtime thread pool spins for a long time after every parallel region, starving every
# other thread pool in the process (torch's too) and making side-by-side timings lie. TVM reads
# this when its library loads, so it is set before anything imports TVM; users may override it.
_os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
# TVM sizes its pool from the physical cores it detects, which on some virtual machines is one
# of several usable cores; blocks then run on a single core. Use every core we may run on.
_os.environ.setdefault("TVM_NUM_THREADS", str(len(_os.sched_getaffinity(0))))

from . import log as _log  # noqa: E402
from .errors import (  # noqa: E402
    ArgumentError,
    ConfigError,
    KernelError,
    PluginError,
    TargetError,
    TilewrightError,
    UnsupportedOpError,
)
from .version import __version__  # noqa: E402

_log.configure()

# debug tools switched on by the environment subscribe to compile events now (they are off,
# and cost nothing, when none of these is set)
_TOOL_ENVS = ("TILEWRIGHT_LOWER_TRACE", "TILEWRIGHT_PASS_DIFF", "TILEWRIGHT_PASS_TIMING")
if any(_os.environ.get(_name) for _name in _TOOL_ENVS):
    from .tools import _env  # noqa: E402

    _env.apply()

# name -> (module, attribute or None for the module itself); a module name starting with "."
# is ours, any other (tvm) is imported as it is
_LAZY = {
    "compile": (".jit", "compile"),
    "par_compile": (".jit", "par_compile"),
    "lower": (".jit", "lower"),
    "JITKernel": (".jit", "JITKernel"),
    "language": (".language", None),
    "autotune": (".autotuner", "autotune"),
    # torch operators: tilewright.autograd.Function pairs a forward and a backward kernel
    "autograd": (".torch_ops.autograd", None),
    "torch_ops": (".torch_ops", None),
    "PassConfigKey": (".plugin.passconfig", "NAMES"),
    "TensorSupplyType": (".utils.tensor", "TensorSupplyType"),
    "Profiler": (".profiler", "Profiler"),
    "Layout": (".layout", "Layout"),
    "Fragment": (".layout", "Fragment"),
    "cdiv": (".math", "cdiv"),
    "next_power_of_2": (".math", "next_power_of_2"),
    "set_log_level": (".log", "set_log_level"),
    "disable_cache": (".jit", "disable_cache"),
    "enable_cache": (".jit", "enable_cache"),
    "is_cache_enabled": (".jit", "is_cache_enabled"),
    "tvm": ("tvm", None),
    **{sub: (f".{sub}", None) for sub in ("autotuner", "carver", "layout", "math", "profiler",
                                          "testing", "tools", "transform", "utils")},
}


def __getattr__(name):
    # the JIT and the language pull in TVM; keep `import tilewright` itself light
    if name not in _LAZY:
        raise AttributeError(f"module 'tilewright' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name, __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


class _Package(_types.ModuleType):
    """``tilewright.jit`` names both the decorator and its subpackage. Importing the subpackage
    (``import tilewright.jit.cache``, or ``tilewright.compile``) makes Python set the attribute
    to the module, so the attribute is a property that always means the decorator."""

    @property
    def jit(self):
        from .jit import jit

        return jit

    @jit.setter
    def jit(self, value):  # the import system binding the subpackage; the decorator wins
        pass


_sys.modules[__name__].__class__ = _Package

__all__ = ["ArgumentError", "ConfigError", "Fragment", "JITKernel", "KernelError", "Layout",
           "PassConfigKey", "PluginError", "Profiler", "TargetError", "TensorSupplyType",
           "TilewrightError", "UnsupportedOpError", "__version__", "autotune", "cdiv", "compile",
           "disable_cache", "enable_cache", "is_cache_enabled", "jit", "language", "lower",
           "next_power_of_2", "par_compile", "set_log_level"]
