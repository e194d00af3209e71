"""The interpreter's executor: loads the generated Python from the kernel's folder.

The source is written to ``kernel.py`` in the folder the cache keeps, so a debugger shows it
line by line, and reloading a cached kernel needs nothing but that file. The kernel runs with
NumPy's floating-point and overflow warnings off: a float division by zero, an invalid
operation or an integer that wraps gives what the hardware gives (inf, NaN, the wrapped value),
as on every other backend, without a warning per element.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
from pathlib import Path

import numpy as np
from tilewright.plugin import Availability, Executor, GeneratedSource

SOURCE = "kernel.py"
_ids = itertools.count()


def _load(workdir, entry: str):
    path = Path(workdir) / SOURCE
    spec = importlib.util.spec_from_file_location(f"tilewright_interp_kernel_{next(_ids)}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _quiet(getattr(module, entry))


def _quiet(kernel):
    @functools.wraps(kernel)
    def run(*args, **kwargs):
        with np.errstate(all="ignore"):
            return kernel(*args, **kwargs)

    return run


def _build(source: GeneratedSource, ctx, workdir):
    (Path(workdir) / SOURCE).write_text(source.text)
    return _load(workdir, source.entry)


EXECUTORS = (Executor(name="python", available=lambda: Availability(True), build=_build,
                      load=_load, doc="runs the generated Python with NumPy, block by block"),)
