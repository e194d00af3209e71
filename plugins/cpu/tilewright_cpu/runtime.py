"""The CPU backend's C runtime helpers (atomics), built once per machine and loaded globally.

The library is compiled with the host C compiler into the tilewright cache, keyed by the hash
of its source, and loaded with ``RTLD_GLOBAL`` so generated kernels resolve its symbols.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tilewright.errors import TilewrightError
from tilewright.jit.cache import cache_root

SOURCE = Path(__file__).parent / "csrc" / "tw_cpu_runtime.c"


def _compiler() -> str | None:
    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return path
    return None


@functools.lru_cache(maxsize=1)
def load() -> Path:
    """Build (if needed) and load the runtime library; returns its path."""
    text = SOURCE.read_bytes()
    digest = hashlib.sha256(text).hexdigest()[:16]
    target = cache_root() / "runtime" / f"tw_cpu_runtime-{digest}.so"
    if not target.exists():
        cc = _compiler()
        if cc is None:
            raise TilewrightError("the CPU backend needs a C compiler (cc, gcc or clang) to "
                                  "build its atomic helpers; install gcc")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        cmd = [cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(tmp)
            raise TilewrightError(f"building the CPU runtime failed: {' '.join(cmd)}\n"
                                  f"{result.stderr}")
        os.replace(tmp, target)
    ctypes.CDLL(str(target), mode=ctypes.RTLD_GLOBAL)
    return target
