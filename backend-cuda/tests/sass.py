"""The machine code of a cubin as text, through ``cuobjdump -sass`` (from the CUDA toolkit or
the ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels: ``pip install
-e 'backend-cuda[sass]'``)."""

from __future__ import annotations

import os
import re
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


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)([^;]*);")
_TENSOR_CORE = ("HGMMA", "QGMMA", "IGMMA", "HMMA", "QMMA", "IMMA")


def instructions(text: str) -> list[tuple[int, str, str]]:
    """The instructions of ``cuobjdump -sass`` text: (address, opcode, operands)."""
    return [(int(m[1], 16), m[2], m[3]) for m in _INSTRUCTION.finditer(text)]


def hot_loop(text: str) -> list[str]:
    """The opcodes (``HGMMA.64x128x16.F32``, ``MUFU.EX2`` ...) of the compute loop in the
    ``cuobjdump -sass`` text of one kernel: of the loops (a backward branch to an address, the
    body the instructions from there to the branch), the one with the most tensor-core
    instructions, the shortest of those; an empty list when no loop has any. A body with an
    ``EXIT`` is not a loop: ptxas puts an mbarrier wait's retry after the kernel's end, its
    branch back into the loop spanning the epilogue."""
    code = instructions(text)
    best: list[str] = []
    best_key = (0, 0)
    for end, opcode, operands in code:
        target = re.search(r"0x([0-9a-f]+)", operands) if opcode.startswith("BRA") else None
        if target is None or int(target[1], 16) > end:
            continue
        body = [op for at, op, _ in code if int(target[1], 16) <= at <= end]
        if "EXIT" in body:
            continue
        key = (sum(op.startswith(_TENSOR_CORE) for op in body), -len(body))
        if key[0] and key > best_key:
            best, best_key = body, key
    return best
