"""The disk cache of compiled kernels.

Layout under the root (``TILEWRIGHT_CACHE_DIR``, default ``~/.cache/tilewright``)::

    CACHEDIR.TAG                 the marker: this folder is a tilewright cache
    kernels/<key[:2]>/<key>/     meta.json (key, signature, backend, executor, checksums)
                                 and the executor's artifacts
    runtime/                     helper libraries of backends, each with a .sha256 beside it
    autotuner/<key>.json         tuning records
    locks/<key>.lock             per-key inter-process locks
    tmp/                         entries being built, entries being removed

What the cache promises:

- It only ever deletes what it created. A root is used only if tilewright created it (an
  absent or empty folder gets the marker ``CACHEDIR.TAG``, the cache-directory tag that backup
  tools know) or it is a cache an older tilewright left without the marker; ``clear`` refuses
  any other folder, and even in its own removes only the entries, locks, records and
  temporary folders it recognises.
- It never serves what it should not. An entry is built in a private folder and renamed into
  place, so readers never see half an entry; it is served only if its ``meta.json`` has the
  expected shape, names the requested key, and every file matches its checksum (and no other
  file is present). Anything else is moved aside with a warning and rebuilt. Nothing is
  pickled, and nothing is a link.
- It is refused, with the reason, when others could plant entries in it: a root or
  ``kernels`` folder owned by another user or writable by others.
- When it cannot be used (refused, read-only, disk full, a file where a folder should be,
  its entry removed by a concurrent ``clear``), callers compile without it: :class:`CacheError`
  says why, and the JIT turns it into one warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import filelock

from ..runtime.cpu import CACHE_MARKER

ENV_DIR = "TILEWRIGHT_CACHE_DIR"
META = "meta.json"
MARKER = CACHE_MARKER
FORMAT = 2
_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
        "# This file is a cache directory tag created by tilewright.\n"
        "# 'tilewright cache clear' removes what tilewright put here; nothing else.\n")
_KEY = re.compile(r"^[0-9a-f]{64}$")
_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
_PARTS = ("kernels", "runtime", "autotuner", "locks", "tmp")
_STALE_SECONDS = 3600  # a build folder of a dead process older than this is swept away


class CacheError(OSError):
    """The cache cannot be used for this compile; the message says why."""


def cache_root() -> Path:
    root = os.environ.get(ENV_DIR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "tilewright"


def make_key(parts: dict) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def digest(path: Path) -> str:
    """The sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_file_name(name) -> bool:
    """A plain file name: no folder, no ``..``, no leading dot."""
    return isinstance(name, str) and bool(_FILE.match(name)) and name not in (".", "..")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _safe_folder(path: Path, what: str) -> None:
    """Refuse a folder that is a link, is not a folder, is owned by another user, or that
    others may write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"{what} {path} is a link to {target}, which is not a folder")
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"{what} {path} is not a folder")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheError(f"{what} {path} belongs to another user (uid {st.st_uid}); "
                         f"set {ENV_DIR} to a folder of yours")
    if st.st_mode & stat.S_IWOTH:
        raise CacheError(f"{what} {path} is writable by every user (mode "
                         f"{stat.S_IMODE(st.st_mode):o}), so anyone could plant kernels in it; "
                         f"run 'chmod o-w {path}' or set {ENV_DIR} to a private folder")


class DiskCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_root()

    # -- the root -----------------------------------------------------------------------
    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    def entry(self, key: str) -> Path:
        return self.kernels / key[:2] / key

    def owned(self) -> bool:
        """Whether the root carries tilewright's marker."""
        try:
            text = (self.root / MARKER).read_text()
        except (OSError, UnicodeDecodeError):
            return False
        return text.startswith(_TAG.splitlines()[0]) and "tilewright" in text

    def _legacy(self) -> bool:
        """A cache an older tilewright wrote before the marker existed: nothing but its own
        folders, holding nothing but what it puts there."""
        patterns = {"kernels": re.compile(r"^[0-9a-f]{2}$"), "locks": re.compile(r".*\.lock$"),
                    "autotuner": re.compile(r".*\.json$|^\..*\.tmp$"),
                    "tmp": re.compile(r"^(build|trash)-.*"),
                    "runtime": re.compile(r"^tw_\w+-[0-9a-f]+\.so$")}
        try:
            children = list(self.root.iterdir())
            if not children or any(c.name not in patterns for c in children):
                return False
            for child in children:
                for item in child.iterdir():
                    if not patterns[child.name].match(item.name):
                        return False
                    if child.name == "kernels" and any(
                            not _KEY.match(e.name) for e in item.iterdir()):
                        return False
        except OSError:
            return False
        return True

    def check(self, create: bool = False) -> bool:
        """Raise :class:`CacheError` if the root may not be used; returns whether it exists.
        With ``create``, an absent (or empty, or legacy) root is made a tilewright cache."""
        _safe_folder(self.root, "the cache folder")
        exists = self.root.is_dir()
        if exists and not self.owned():
            if any(self.root.iterdir()) and not self._legacy():
                raise CacheError(
                    f"{self.root} is not a tilewright cache (it has no {MARKER} and holds other "
                    f"files); tilewright will not write or delete there. Set {ENV_DIR} to a new "
                    "or empty folder")
            if not create:
                return exists
            self._mark()
        elif not exists and create:
            try:
                self.root.mkdir(parents=True, mode=0o755, exist_ok=True)
            except OSError as exc:
                raise CacheError(f"cannot create the cache folder {self.root}: "
                                 f"{exc.strerror or exc}") from None
            self._mark()
            exists = True
        _safe_folder(self.kernels, "the cache's kernels folder")
        return exists

    def _mark(self) -> None:
        try:
            tmp = self.root / f".{MARKER}.{os.getpid()}"
            tmp.write_text(_TAG)
            os.replace(tmp, self.root / MARKER)
        except OSError as exc:
            raise CacheError(f"cannot write to the cache folder {self.root}: "
                             f"{exc.strerror or exc}") from None

    # -- entries --------------------------------------------------------------------------
    def lookup(self, key: str) -> dict | None:
        """The metadata of a valid entry for ``key``, or None. An invalid entry is moved aside
        with a warning (and rebuilt by the caller)."""
        if not self.check():
            return None
        path = self.entry(key)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheError(f"cannot read the cache entry {path}: {exc.strerror}") from None
        try:
            if not stat.S_ISDIR(st.st_mode):
                raise ValueError("it is not a folder")
            meta = self._validate(path, key)
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            warnings.warn(f"tilewright cache entry {path} is invalid ({exc}); rebuilding it",
                          RuntimeWarning, stacklevel=3)
            self._remove(path)
            return None
        meta["path"] = str(path)
        return meta

    @staticmethod
    def _validate(path: Path, key: str) -> dict:
        meta_path = path / META
        if not meta_path.is_file() or meta_path.is_symlink():
            raise ValueError(f"{META} is missing")
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise ValueError(f"{META} is not an object")
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT}")
        if meta.get("key") != key:
            raise ValueError("it was stored under another key")
        files = meta.get("files")
        if not isinstance(files, dict) or not all(
                is_file_name(n) and isinstance(d, str) for n, d in files.items()):
            raise ValueError("its file list is malformed")
        for field in ("entry", "source", "executor", "backend"):
            if not isinstance(meta.get(field), str):
                raise ValueError(f"field {field!r} is missing or not a string")
        if meta["source"] not in files:
            raise ValueError(f"its source {meta['source']!r} is not among its files")
        present = {p.name for p in path.iterdir()} - {META}
        if present != set(files):
            extra, missing = sorted(present - set(files)), sorted(set(files) - present)
            raise ValueError(f"files {extra or missing} "
                             f"{'are not listed' if extra else 'are missing'}")
        for name, want in files.items():
            file = path / name
            if file.is_symlink() or not file.is_file():
                raise ValueError(f"{name} is not a regular file")
            if digest(file) != want:
                raise ValueError(f"{name} does not match its checksum")
        return meta

    @contextmanager
    def lock(self, key: str):
        """An exclusive inter-process lock on ``key`` (released if the process dies)."""
        self.check(create=True)
        try:
            locks = self.root / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(locks / f"{key}.lock")
            lock.acquire()
        except OSError as exc:
            raise CacheError(f"cannot lock in {self.root}: {exc.strerror or exc}") from None
        try:
            yield
        finally:
            lock.release()

    def staging(self) -> Path:
        """A private folder to build an entry in (on the cache's filesystem)."""
        self.check(create=True)
        tmp = self.root / "tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            self._sweep(tmp)
            return Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=tmp))
        except OSError as exc:
            raise CacheError(f"cannot write to {tmp}: {exc.strerror or exc}") from None

    @staticmethod
    def _sweep(tmp: Path) -> None:
        """Remove build folders that processes which have since died left behind."""
        now = time.time()
        for item in tmp.iterdir():
            m = re.match(r"^(?:build|trash)-(\d+)-", item.name)
            try:
                if m and not _pid_alive(int(m.group(1))) and \
                        now - item.lstat().st_mtime > _STALE_SECONDS:
                    shutil.rmtree(item, ignore_errors=True)
            except OSError:
                continue

    def commit(self, key: str, staging: Path, meta: dict) -> dict:
        """Checksum the staged files, write ``meta.json`` last, and rename into place."""
        try:
            files = {p.name: digest(p) for p in sorted(staging.iterdir())
                     if p.is_file() and not p.is_symlink()}
            bad = [p.name for p in staging.iterdir() if p.name not in files]
            if bad or not all(is_file_name(n) for n in files):
                raise CacheError(f"the executor wrote {bad or sorted(files)} into a cache entry; "
                                 "entries hold plain files with plain names")
            meta = {**meta, "format": FORMAT, "key": key, "files": files}
            (staging / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
            final = self.entry(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            for _ in range(3):
                try:
                    os.rename(staging, final)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                        raise
                    if self.lookup(key) is not None:  # another process committed it first
                        shutil.rmtree(staging, ignore_errors=True)
                        break
                    # lookup moved an invalid entry aside: try again
        except CacheError:
            raise
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise CacheError(f"cannot store the kernel in {self.root}: "
                             f"{exc.strerror or exc}") from None
        meta["path"] = str(final)
        return meta

    def discard(self, path: Path) -> None:
        """Move an entry aside and delete it (an entry that failed to load)."""
        self._remove(path)

    def _remove(self, path: Path) -> None:
        trash = self.root / "tmp" / f"trash-{os.getpid()}-{path.name}-{time.time_ns()}"
        try:
            trash.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, trash)
            path = trash
        except OSError:
            pass
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    # -- helper libraries -------------------------------------------------------------------
    def helper_library(self, name: str, build: Callable[[Path], None]) -> Path:
        """The file ``runtime/<name>``, built by ``build(path)`` if it is absent or does not
        match the checksum recorded beside it when it was built."""
        if not is_file_name(name):
            raise ValueError(f"helper library name {name!r} is not a plain file name")
        self.check(create=True)
        folder = self.root / "runtime"
        target, record = folder / name, folder / f"{name}.sha256"
        try:
            folder.mkdir(exist_ok=True)
            with self.lock(f"runtime-{name}"):
                try:
                    if not target.is_symlink() and record.read_text().strip() == digest(target):
                        return target
                except (OSError, UnicodeDecodeError):
                    pass
                if record.exists():
                    warnings.warn(f"tilewright helper library {target} does not match its "
                                  "checksum; rebuilding it", RuntimeWarning, stacklevel=3)
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
                os.close(fd)
                try:
                    build(Path(tmp))
                    record_tmp = Path(tmp + ".sha256")
                    record_tmp.write_text(digest(Path(tmp)) + "\n")
                    os.replace(tmp, target)
                    os.replace(record_tmp, record)
                finally:
                    for leftover in (Path(tmp), Path(tmp + ".sha256")):
                        leftover.unlink(missing_ok=True)
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(f"cannot store {name} in {folder}: {exc.strerror or exc}") \
                from None
        return target

    # -- listing and clearing -------------------------------------------------------------
    def entries(self) -> list[dict]:
        out = []
        if not self.kernels.is_dir():
            return out
        for prefix in sorted(self.kernels.iterdir()):
            if not prefix.is_dir() or prefix.is_symlink():
                continue
            for path in sorted(prefix.iterdir()):
                if not _KEY.match(path.name) or not path.is_dir() or path.is_symlink():
                    continue
                try:
                    meta = json.loads((path / META).read_text())
                    if not isinstance(meta, dict):
                        raise ValueError
                except (OSError, ValueError):
                    meta = {"key": path.name, "corrupt": True}
                size = sum(p.lstat().st_size for p in path.iterdir())
                out.append({**meta, "bytes": size, "path": str(path)})
        return out

    def info(self) -> dict:
        try:
            self.check()
            problem = None
        except CacheError as exc:
            problem = str(exc)
        entries = self.entries() if problem is None else []
        out = {"path": str(self.root), "entries": len(entries),
               "bytes": sum(e["bytes"] for e in entries)}
        if problem:
            out["problem"] = problem
        return out

    def clear(self) -> int:
        """Remove the kernel entries, tuning records, helper libraries, idle locks and
        leftover folders of dead builds -- nothing else, and nothing a running compile holds.
        Refuses (:class:`CacheError`) a folder that is not a tilewright cache. Returns the
        kernel entries removed."""
        if not self.root.exists():
            return 0
        _safe_folder(self.root, "the cache folder")
        if not self.owned():
            if not self._legacy():
                raise CacheError(f"{self.root} is not a tilewright cache (no {MARKER}); "
                                 "nothing was removed")
            self._mark()
        removed = 0
        for entry in self.entries():
            path = Path(entry["path"])
            if self._idle(path.name):
                self._remove(path)
                removed += 1
        tmp = self.root / "tmp"
        if tmp.is_dir():
            for item in tmp.iterdir():
                m = re.match(r"^(build|trash)-(\d+)-", item.name)
                if m and (m.group(1) == "trash" or not _pid_alive(int(m.group(2)))):
                    self._remove(item)
        self._clear_files("autotuner", re.compile(r"^[0-9a-f]{64}\.json$|^\..*\.tmp$"))
        self._clear_files("runtime", re.compile(r"^[\w.+-]+\.so(\.sha256)?$"))
        locks = self.root / "locks"
        if locks.is_dir():
            for item in locks.iterdir():
                if item.name.endswith(".lock") and self._idle(item.name[:-5]):
                    item.unlink(missing_ok=True)
        for part in ("kernels", *_PARTS):
            folder = self.root / part
            if folder.is_dir() and not folder.is_symlink():
                if part == "kernels":
                    for prefix in folder.iterdir():
                        _rmdir_if_empty(prefix)
                _rmdir_if_empty(folder)
        return removed

    def _idle(self, key: str) -> bool:
        """Whether no process holds the lock of ``key`` now."""
        path = self.root / "locks" / f"{key}.lock"
        if not path.exists():
            return True
        lock = filelock.FileLock(path, timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            return False
        except OSError:
            return True
        lock.release()
        return True

    def _clear_files(self, part: str, pattern: re.Pattern) -> None:
        folder = self.root / part
        if folder.is_dir() and not folder.is_symlink():
            for item in folder.iterdir():
                if pattern.match(item.name) and not item.is_dir():
                    item.unlink(missing_ok=True)


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
