"""The interpreter's executor: loads the generated Python from the kernel's folder.

The source is written to ``kernel.py`` in the folder the cache keeps, so a debugger shows it
line by line, and reloading a cached kernel needs nothing but that file. The kernel runs with
NumPy's floating-point and overflow warnings off: a float division by zero, an invalid
operation or an integer that wraps gives what the hardware gives (inf, NaN, the wrapped value),
as on every other backend, without a warning per element. When it returns, what it wrote into
bfloat16 and float8 tensors it made at an address (held as float32 copies) is stored back.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import linecache
import re
import traceback
from pathlib import Path

import numpy as np
from tilewright.errors import KernelError, KernelIndexError, SourceLocation
from tilewright.plugin import Availability, Executor, GeneratedSource

from .runtime import write_addressed

SOURCE = "kernel.py"
_ids = itertools.count()


def _load(workdir, entry: str):
    path = Path(workdir) / SOURCE
    spec = importlib.util.spec_from_file_location(f"tilewright_interp_kernel_{next(_ids)}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _quiet(getattr(module, entry), path)


def _quiet(kernel, path: Path):
    @functools.wraps(kernel)
    def run(*args, **kwargs):
        with np.errstate(all="ignore"):
            try:
                return kernel(*args, **kwargs)
            except KernelError as exc:  # a refusal of the runtime's (rt.at_address)
                if exc.location is not None:
                    raise
                raise type(exc)(exc.message, _statement(exc, path)[0]) from exc
            except IndexError as exc:
                raise out_of_bounds(exc, path) from exc
            finally:  # bfloat16 / float8 tensors the kernel made at an address
                write_addressed()

    return run


_WHERE = re.compile(r"#\s*(\S+):(\d+)\s*$")


def _statement(exc: BaseException, path: Path) -> tuple[SourceLocation | None, int | None, str]:
    """Where ``exc`` was raised in the generated kernel at ``path``: the user's line its
    statement came from (the comment the code generator leaves on it), the generated line's
    number and text."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if Path(f.filename).resolve() == path.resolve()]
    line = lines[-1] if lines else None
    generated = linecache.getline(str(path), line) if line else ""
    match = _WHERE.search(generated)
    location = SourceLocation(match.group(1), int(match.group(2))) if match else None
    return location, line, generated


def out_of_bounds(exc: IndexError, path: Path) -> KernelIndexError:
    """A :class:`KernelIndexError` for NumPy's ``exc`` in the generated kernel at ``path``, at
    the user's line of its statement, with the generated line and NumPy's message (the index
    and the size)."""
    location, line, generated = _statement(exc, path)
    return KernelIndexError(f"index out of bounds while the kernel ran: {exc} (generated "
                            f"{path}:{line or '?'}: {generated.split('#')[0].strip()[:300]})",
                            location)


def _build(source: GeneratedSource, ctx, workdir):
    (Path(workdir) / SOURCE).write_text(source.text)
    return _load(workdir, source.entry)


EXECUTORS = (Executor(name="python", available=lambda: Availability(True), build=_build,
                      load=_load, doc="runs the generated Python with NumPy, block by block"),)
