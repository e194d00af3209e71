"""CPU executors: the LLVM-built module, as a shared library the cache can keep, or in memory
when no system linker is present; or ``llvm-ir``, which compiles the LLVM IR text itself (so an
edited ``codegen.ll`` from the lower trace takes effect)."""

from __future__ import annotations

import shutil
from pathlib import Path

import tvm
from tilewright.errors import TilewrightError
from tilewright.plugin import Availability, Executor, GeneratedSource

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


def load_private_copy(path: Path):
    """The module of the shared library ``path``, loaded from a private copy (see
    :func:`runtime.private_copy`)."""
    with runtime.private_copy(path) as copy:
        return tvm.runtime.load_module(str(copy))


def _build_shared(source: GeneratedSource, ctx, workdir) -> object:
    path = Path(workdir) / LIBRARY
    source.payload.export_library(str(path))
    return load_private_copy(path)[source.entry]


def _load_shared(workdir, entry: str):
    runtime.load()  # kernels may call its atomics
    return load_private_copy(Path(workdir) / LIBRARY)[entry]


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
