"""The interpreter's executor: loads the generated Python from the kernel's folder.

The source is written to ``kernel.py`` in the folder the cache keeps, so a debugger shows it
line by line, and reloading a cached kernel needs nothing but that file.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from tilewright.plugin import Availability, Executor, GeneratedSource

SOURCE = "kernel.py"
_ids = itertools.count()


def _load(workdir, entry: str):
    path = Path(workdir) / SOURCE
    spec = importlib.util.spec_from_file_location(f"tilewright_interp_kernel_{next(_ids)}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, entry)


def _build(source: GeneratedSource, ctx, workdir):
    (Path(workdir) / SOURCE).write_text(source.text)
    return _load(workdir, source.entry)


EXECUTORS = (Executor(name="python", available=lambda: Availability(True), build=_build,
                      load=_load, doc="runs the generated Python with NumPy, block by block"),)
