"""CPU executors: the LLVM-built module, as a shared library the cache can keep, or in memory
when no system linker is present; or ``llvm-ir``, which compiles the LLVM IR text itself (so an
edited ``codegen.ll`` from the lower trace takes effect).

A shared library's parallel loop (the block grid) runs on the worker pool of the kernel shim
(:mod:`tilewright.runtime.cpu`), not on TVM's: any awake thread, the caller first, claims the
launch's tasks, so a launch never waits for a worker the OS has not yet scheduled (TVM's pool
gives task ``i`` to worker ``i`` and waits for it: on a loaded machine every launch paid a
scheduler delay of milliseconds). The in-memory executors keep TVM's pool.

Kernels of the shared-library executor export ``cpu-so`` bundles (``kernel.export(path)``),
which :mod:`tilewright.runtime.cpu` runs without TVM."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

import tvm
from tilewright.errors import TilewrightError
from tilewright.plugin import Availability, Executor, GeneratedSource
from tilewright.runtime.cpu import PARALLEL_LAUNCH, bind_context, export_library

from . import runtime
from .hostcpu import host_fingerprint

LIBRARY = "kernel.so"
IR_FILE = "kernel.ll"


def _linker() -> Availability:
    for cc in ("cc", "gcc", "g++", "clang"):
        if shutil.which(cc):
            return Availability(True)
    return Availability(False, "no C compiler (cc, gcc, clang) on PATH to link shared "
                               "libraries; install gcc")


def load_private_copy(path: Path, entry: str):
    """The function ``entry`` of the shared library ``path``, loaded from a private copy (see
    :func:`runtime.private_copy`), its parallel launches going to the kernel shim's pool, and
    the address of its C entry point (``__tvm_ffi_<entry>``)."""
    with runtime.private_copy(path) as copy:
        module = tvm.runtime.load_module(str(copy))
        # the handle of the library TVM just loaded (RTLD_NOLOAD: the same one, not a copy)
        library = ctypes.CDLL(str(copy), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        bind_context(library, (PARALLEL_LAUNCH,))
        address = ctypes.cast(getattr(library, f"__tvm_ffi_{entry}"), ctypes.c_void_p).value
    return module[entry], address


class LibraryKernel:
    """A kernel of the shared-library executor: calls the library's entry; ``address`` is the
    entry's C function (the tvm-ffi calling convention; it lives as long as ``function``);
    ``export`` writes the library as a ``cpu-so`` bundle."""

    __slots__ = ("function", "address", "library", "entry")

    def __init__(self, function, address: int, library: Path, entry: str):
        self.function, self.address, self.library, self.entry = function, address, library, entry

    def __call__(self, *args):
        return self.function(*args)

    def export(self, path, signature: dict, extra: dict | None = None) -> Path:
        """A ``cpu-so`` bundle at ``path``: the library, the LLVM IR beside it when there is
        one, and the runtime helpers its atomics call."""
        if not self.library.is_file():
            raise TilewrightError(f"the kernel library {self.library} is gone (the cache was "
                                  "cleared?); compile the kernel again to export it")
        ir = self.library.with_name(IR_FILE)
        return export_library(path, self.library, self.entry, signature,
                              ir.read_text() if ir.is_file() else "", runtime.load(), extra)


def _build_shared(source: GeneratedSource, ctx, workdir) -> object:
    path = Path(workdir) / LIBRARY
    source.payload.export_library(str(path))
    return LibraryKernel(*load_private_copy(path, source.entry), path, source.entry)


def _load_shared(workdir, entry: str):
    runtime.load()  # kernels may call its atomics
    path = Path(workdir) / LIBRARY
    return LibraryKernel(*load_private_copy(path, entry), path, entry)


def _build_memory(source: GeneratedSource, ctx, workdir) -> object:
    return source.payload[source.entry]


def _build_ir(source: GeneratedSource, ctx, workdir) -> object:
    path = Path(workdir) / IR_FILE
    path.write_text(source.text)
    return _load_ir(workdir, source.entry)


def _load_ir(workdir, entry: str):
    runtime.load()
    path = Path(workdir) / IR_FILE
    try:
        module = tvm.runtime.load_module(str(path))
    except Exception as exc:  # LLVM's parser reports file:line:col of the bad line
        message = str(exc).strip().replace(str(path), IR_FILE)
        raise TilewrightError(f"executor 'llvm-ir' could not compile the LLVM IR (line numbers "
                              f"are those of the source it was given, for example an edited "
                              f"codegen.ll):\n{message}") from None
    return module[entry]


SHARED = Executor(
    name="llvm-shared", available=_linker, build=_build_shared, load=_load_shared,
    doc="links the LLVM object into a shared library (cached on disk) and loads it",
    fingerprint=host_fingerprint,
)
IN_MEMORY = Executor(
    name="llvm-jit", available=lambda: Availability(True), build=_build_memory, load=None,
    doc="runs the LLVM module from memory; nothing is cached on disk",
)
FROM_IR = Executor(
    name="llvm-ir", available=lambda: Availability(True), build=_build_ir, load=_load_ir,
    doc="compiles the LLVM IR text with LLVM's JIT (used for edited sources)", from_source=True,
    fingerprint=host_fingerprint,
)
EXECUTORS = (SHARED, IN_MEMORY, FROM_IR)
