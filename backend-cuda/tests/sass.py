"""The machine code of a cubin as text, through ``cuobjdump -sass`` (from the CUDA toolkit or
the ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels: ``pip install
-e 'backend-cuda[sass]'``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def _tool_dirs() -> list[str]:
    dirs = []
    try:
        import nvidia

        for root in nvidia.__path__:
            dirs += [str(p) for p in Path(root).glob("cu*/bin")]
    except ImportError:
        pass
    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    return [*dirs, str(Path(home) / "bin")]


def _env() -> dict:
    return {**os.environ, "PATH": os.pathsep.join([*_tool_dirs(), os.environ.get("PATH", "")])}


def available() -> str | None:
    """None when cuobjdump and nvdisasm are here, else the reason."""
    path = _env()["PATH"]
    missing = [t for t in ("cuobjdump", "nvdisasm") if shutil.which(t, path=path) is None]
    return f"{' and '.join(missing)} not found (pip install -e 'backend-cuda[sass]')" \
        if missing else None


def dump(cubin: bytes, what: str = "-sass") -> str:
    """``cuobjdump WHAT`` of ``cubin`` (``-sass`` or ``-elf``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        result = subprocess.run(["cuobjdump", what, str(path)], capture_output=True, text=True,
                                env=_env(), check=True)
    return result.stdout
