"""The CPU backend's C runtime helpers (atomics), built once per machine and loaded globally.

The library is compiled with the host C compiler into the tilewright cache, named by the hash
of its source and checked like a cache entry, and loaded with ``RTLD_GLOBAL`` so generated
kernels resolve its symbols.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tilewright.errors import TilewrightError
from tilewright.jit.cache import CacheError, DiskCache
from tilewright.runtime.call import warn_once

SOURCE = Path(__file__).parent / "csrc" / "tw_cpu_runtime.c"


def _compiler() -> str | None:
    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return path
    return None


@contextmanager
def private_copy(path: Path):
    """A private copy of the shared library ``path`` to load, removed once loaded: a library
    in the cache stays mapped while the process runs, and truncating the mapped file in place
    (another process, a user) would kill this one with SIGBUS."""
    with tempfile.TemporaryDirectory(prefix="tilewright-load-") as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        yield copy


def _build(target: Path) -> None:
    cc = _compiler()
    if cc is None:
        raise TilewrightError("the CPU backend needs a C compiler (cc, gcc or clang) to "
                              "build its atomic helpers; install gcc")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(target), str(SOURCE)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise TilewrightError(f"building the CPU runtime failed: {' '.join(cmd)}\n"
                              f"{result.stderr}")


@functools.lru_cache(maxsize=1)
def load() -> Path:
    """Build (if needed) and load the runtime library; returns its path. It lives in the disk
    cache (checked against its checksum before every load, rebuilt if it does not match), or
    in a private folder when the cache cannot be used."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    name = f"tw_cpu_runtime-{digest}.so"
    try:
        target = DiskCache().helper_library(name, _build)
    except CacheError as exc:
        warn_once(f"the CPU runtime helpers are built outside the disk cache: {exc}")
        target = Path(tempfile.mkdtemp(prefix="tilewright-runtime-")) / name
        _build(target)
    with private_copy(target) as copy:
        ctypes.CDLL(str(copy), mode=ctypes.RTLD_GLOBAL)
    return target
