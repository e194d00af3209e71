"""Export bundles on disk: data, never code.

A bundle is a folder holding ``manifest.json`` and the files it lists by role (``binary``,
``launch``, ``signature``, ``source`` ...). The manifest records the format and its version,
the kind of binary, and for every file its name, size and sha256. Opening a bundle reads and
checks everything before any of it is used:

- the manifest is a regular file of bounded size holding a JSON object of this format and
  version, with a known binary kind;
- every listed name is a plain file name inside the bundle (no folder part, no ``..``, not
  absolute), the file is a regular file (not a link) whose size is the recorded one and within
  the limit for its role, and whose sha256 is the recorded one;
- the folder holds no file the manifest does not list.

A failed check raises :class:`BundleError` naming the check. The files' bytes are kept from
that one read, so what was checked is what is used. Writing goes through a private folder
renamed into place, and never replaces a folder that is not a bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = "tilewright-bundle"
VERSION = 2
BINARIES = ("cubin", "cpu-so")
MIB = 1 << 20
# the largest file of each role a bundle may hold (bytes)
LIMITS = {"manifest": MIB, "launch": 16 * MIB, "signature": 16 * MIB, "source": 256 * MIB,
          "binary": 2048 * MIB}
_ROLE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
_MAX_FILES = 32


class BundleError(Exception):
    """A bundle that is missing, malformed, tampered with or for a runtime this loader does not
    know; ``check`` names the check that failed."""

    def __init__(self, path, check: str, detail: str):
        self.path, self.check = Path(path), check
        super().__init__(f"bundle {path}: {check} check failed: {detail}")


@dataclass(frozen=True)
class Bundle:
    """An opened, checked bundle: its manifest and the bytes of each file by role."""

    path: Path
    manifest: dict
    files: dict  # role -> bytes

    def json(self, role: str):
        """The JSON value of the file of ``role``."""
        try:
            return json.loads(self.files[role])
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(self.path, "json", f"{role} is not JSON ({exc})") from None

    def text(self, role: str, default: str = "") -> str:
        data = self.files.get(role)
        return default if data is None else data.decode("utf-8", errors="replace")


def _read_regular(path: Path, bundle: Path, role: str) -> bytes:
    """The bytes of ``path``, which must be a regular file within the limit of ``role``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise BundleError(bundle, "files", f"{path.name} ({role}) is missing") from None
    if stat.S_ISLNK(st.st_mode):
        raise BundleError(bundle, "links", f"{path.name} is a link")
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(bundle, "files", f"{path.name} is not a regular file")
    limit = LIMITS.get(role, LIMITS["source"])
    if st.st_size > limit:
        raise BundleError(bundle, "size", f"{path.name} has {st.st_size} bytes, more than the "
                                          f"{limit} a {role} may have")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BundleError(bundle, "size", f"{path.name} grew past {limit} bytes while reading")
    return data


def open_bundle(path, required: tuple[str, ...] = ()) -> Bundle:
    """Read and check the bundle in folder ``path``; ``required`` are roles it must have."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(path, "folder", "it is not a folder")
    if not (path / MANIFEST).exists() and not (path / MANIFEST).is_symlink():
        raise BundleError(path, "manifest", f"{MANIFEST} is missing; it is not a tilewright "
                                            "bundle")
    raw = _read_regular(path / MANIFEST, path, "manifest")
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(path, "manifest", f"{MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise BundleError(path, "manifest", f"{MANIFEST} is not an object")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise BundleError(path, "version", f"expected format {FORMAT!r} version {VERSION}, got "
                                           f"{manifest.get('format')!r} version "
                                           f"{manifest.get('version')!r}; export it again with "
                                           "this tilewright")
    if manifest.get("binary") not in BINARIES:
        raise BundleError(path, "binary", f"it holds a {manifest.get('binary')!r} binary; this "
                                          f"runtime loads: {', '.join(BINARIES)}")
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not 0 < len(listed) <= _MAX_FILES:
        raise BundleError(path, "manifest", "its file list is missing or malformed")
    files, names = {}, {MANIFEST}
    for role, entry in listed.items():
        if not isinstance(role, str) or not _ROLE.match(role):
            raise BundleError(path, "manifest", f"file role {role!r}")
        if not isinstance(entry, dict):
            raise BundleError(path, "manifest", f"the entry of {role!r} is not an object")
        name, size, sha = entry.get("name"), entry.get("size"), entry.get("sha256")
        if not isinstance(name, str) or not _FILE.match(name) or name in names:
            raise BundleError(path, "names", f"{role} is named {name!r}: a bundle's files have "
                                             "plain, distinct names inside the bundle")
        if not isinstance(size, int) or isinstance(size, bool) or not isinstance(sha, str):
            raise BundleError(path, "manifest", f"{role}: size or sha256 missing")
        names.add(name)
        data = _read_regular(path / name, path, role)
        if len(data) != size:
            raise BundleError(path, "size", f"{name} has {len(data)} bytes, the manifest says "
                                            f"{size}")
        if hashlib.sha256(data).hexdigest() != sha:
            raise BundleError(path, "checksum", f"{name} does not match its sha256 in the "
                                                "manifest")
        files[role] = data
    extra = sorted(p.name for p in path.iterdir() if p.name not in names)
    if extra:
        raise BundleError(path, "unlisted files", f"{', '.join(extra)} not in the manifest")
    missing = [r for r in required if r not in files]
    if missing:
        raise BundleError(path, "files", f"it has no {', '.join(missing)}")
    return Bundle(path, manifest, files)


def write_bundle(path, binary: str, files: dict[str, tuple[str, bytes]], **fields) -> Path:
    """Write a bundle: ``files`` maps each role to (file name, bytes); ``fields`` go into the
    manifest. An existing bundle at ``path`` is replaced; any other non-empty folder is
    refused."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir() or path.is_symlink():
            raise BundleError(path, "folder", "it exists and is not a folder")
        if any(path.iterdir()) and not (path / MANIFEST).is_file():
            raise BundleError(path, "folder", "it holds files and is not a bundle; export to a "
                                              "new or empty folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        listed = {}
        for role, (name, data) in files.items():
            if not _ROLE.match(role) or not _FILE.match(name):
                raise BundleError(path, "names", f"{role} named {name!r}")
            (stage / name).write_bytes(data)
            listed[role] = {"name": name, "size": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()}
        manifest = {"format": FORMAT, "version": VERSION, "binary": binary, **fields,
                    "files": listed}
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.chmod(stage, 0o755)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.rename(path, old / "bundle")
            os.rename(stage, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(stage, path)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return path


__all__ = ["BINARIES", "FORMAT", "LIMITS", "MANIFEST", "VERSION", "Bundle", "BundleError",
           "open_bundle", "write_bundle"]
