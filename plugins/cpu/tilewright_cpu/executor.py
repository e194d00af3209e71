"""CPU executors: the LLVM-built module, as a shared library the cache can keep, or in memory
when no system linker is present."""

from __future__ import annotations

import shutil
from pathlib import Path

import tvm

from tilewright.plugin import Availability, Executor, GeneratedSource

from . import runtime

LIBRARY = "kernel.so"


def _linker() -> Availability:
    for cc in ("cc", "gcc", "g++", "clang"):
        if shutil.which(cc):
            return Availability(True)
    return Availability(False, "no C compiler (cc, gcc, clang) on PATH to link shared "
                               "libraries; install gcc")


def _build_shared(source: GeneratedSource, ctx, workdir) -> object:
    path = Path(workdir) / LIBRARY
    source.payload.export_library(str(path))
    return tvm.runtime.load_module(str(path))[source.entry]


def _load_shared(workdir, entry: str):
    runtime.load()  # kernels may call its atomics
    return tvm.runtime.load_module(str(Path(workdir) / LIBRARY))[entry]


def _build_memory(source: GeneratedSource, ctx, workdir) -> object:
    return source.payload[source.entry]


SHARED = Executor(
    name="llvm-shared", available=_linker, build=_build_shared, load=_load_shared,
    doc="links the LLVM object into a shared library (cached on disk) and loads it",
)
IN_MEMORY = Executor(
    name="llvm-jit", available=lambda: Availability(True), build=_build_memory, load=None,
    doc="runs the LLVM module from memory; nothing is cached on disk",
)
EXECUTORS = (SHARED, IN_MEMORY)
