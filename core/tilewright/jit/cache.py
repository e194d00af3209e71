"""The disk cache of compiled kernels.

Layout: ``<root>/kernels/<key[:2]>/<key>/`` holding ``meta.json`` (signature, backend,
executor, checksums of every file) and the executor's artifacts. An entry is built in a
private temporary folder and renamed into place, so readers never see half an entry and a
killed compile leaves only a temporary folder that the next ``clear`` removes. A per-key lock
keeps two processes from building the same kernel twice. An entry whose files do not match
their checksums is removed and rebuilt with a warning. Nothing is pickled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

ENV_DIR = "TILEWRIGHT_CACHE_DIR"
META = "meta.json"
FORMAT = 1


def cache_root() -> Path:
    root = os.environ.get(ENV_DIR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "tilewright"


def make_key(parts: dict) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class DiskCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_root()

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    def entry(self, key: str) -> Path:
        return self.kernels / key[:2] / key

    def lookup(self, key: str) -> dict | None:
        """The metadata of a valid entry, or None; a corrupt entry is removed with a warning."""
        path = self.entry(key)
        meta_path = path / META
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')} != {FORMAT}")
            for name, digest in meta["files"].items():
                if _digest(path / name) != digest:
                    raise ValueError(f"{name} does not match its checksum")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"tilewright cache entry {path} is corrupt ({exc}); rebuilding it",
                          RuntimeWarning, stacklevel=3)
            self._remove(path)
            return None
        meta["path"] = str(path)
        return meta

    @contextlib.contextmanager
    def lock(self, key: str):
        """An exclusive inter-process lock on ``key`` (released if the process dies)."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def staging(self) -> Path:
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=tmp))

    def commit(self, key: str, staging: Path, meta: dict) -> dict:
        """Checksum the staged files, write ``meta.json`` last, and rename into place."""
        files = {p.name: _digest(p) for p in sorted(staging.iterdir()) if p.is_file()}
        meta = {**meta, "format": FORMAT, "key": key, "files": files}
        (staging / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        final = self.entry(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, final)
        except OSError:
            # another process committed the same key first; its entry is equivalent
            shutil.rmtree(staging, ignore_errors=True)
        meta["path"] = str(final)
        return meta

    def _remove(self, path: Path) -> None:
        trash = self.root / "tmp" / f"trash-{os.getpid()}-{path.name}"
        try:
            trash.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, trash)
            shutil.rmtree(trash, ignore_errors=True)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)

    def entries(self) -> list[dict]:
        out = []
        if not self.kernels.exists():
            return out
        for meta_path in sorted(self.kernels.glob(f"*/*/{META}")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                meta = {"key": meta_path.parent.name, "corrupt": True}
            size = sum(p.stat().st_size for p in meta_path.parent.iterdir() if p.is_file())
            out.append({**meta, "bytes": size, "path": str(meta_path.parent)})
        return out

    def info(self) -> dict:
        entries = self.entries()
        return {"path": str(self.root), "entries": len(entries),
                "bytes": sum(e["bytes"] for e in entries)}

    def clear(self) -> int:
        """Remove every entry, leftover temporary folder and autotuning record; returns the
        kernel entries removed."""
        count = len(self.entries())
        for sub in ("kernels", "tmp", "locks", "autotuner"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        return count
