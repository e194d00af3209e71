"""``tilewright-sdk new-backend NAME``: write a new backend distribution.

The result installs with ``pip install -e DIR`` and passes the contract tests at once: it
declares a backend ``NAME`` claiming target ``NAME``, a one-phase pipeline lowering tile ops with
an (empty) rule table, a codegen that prints the lowered IR, and an executor that explains it
is not written yet. Each file's role is described in the generated README.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import tilewright

from ._templates import FILES

NAME = re.compile(r"^[a-z][a-z0-9_-]*[a-z0-9]$|^[a-z]$")


class ScaffoldError(Exception):
    """The scaffolder refused its input."""


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME.match(name) or "__" in name or "--" in name:
        raise ScaffoldError(
            f"{name!r} is not a valid backend name: use lower-case letters, digits, '_' or '-', "
            "starting with a letter and ending with a letter or digit (the distribution "
            "becomes tilewright-NAME, the package tilewright_NAME)")


def tilewright_checkout() -> Path | None:
    """The tilewright source checkout the running core is installed from (editable), if
    any: the folder holding its ``pyproject.toml`` and ``sdk/``."""
    root = Path(tilewright.__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "sdk" / "pyproject.toml").is_file():
        return root
    return None


def _tox_deps() -> dict[str, str]:
    """How the scaffolded tox.ini installs torch, the core and the SDK. torch: the build this
    environment has (``TILEWRIGHT_TORCH`` overrides the requirement), so that pip does not
    choose the newest build from an index (a CUDA build where this one is for the CPU). The
    core and the SDK: from the checkout this backend was scaffolded from (``TILEWRIGHT_SRC``
    overrides it), else from the index."""
    torch = f"    {{env:TILEWRIGHT_TORCH:torch=={metadata.version('torch')}}}"
    root = tilewright_checkout()
    if root is None:
        return {"tilewright_origin": "from the package index",
                "tilewright_deps": f"{torch}\n    tilewright>=0.1,<0.2\n"
                                   "    tilewright-sdk>=0.1,<0.2"}
    src = f"{{env:TILEWRIGHT_SRC:{root}}}"
    return {"tilewright_origin": f"from the checkout {root} (set TILEWRIGHT_SRC to use "
                                 "another)",
            "tilewright_deps": f"{torch}\n    -e {src}\n    -e {src}/sdk"}


def render(name: str) -> dict[str, str]:
    """The files of a new backend ``name``: relative path -> text."""
    check_name(name)
    package = "tilewright_" + name.replace("-", "_")
    values = {"name": name, "package": package, "dist": f"tilewright-{name}", **_tox_deps()}
    out = {}
    for path, text in FILES.items():
        rendered = text
        for key, value in values.items():
            rendered = rendered.replace("{{" + key + "}}", value)
        out[path.replace("PACKAGE", package)] = rendered
    return out


def new_backend(name: str, parent: Path | str = ".") -> Path:
    """Write backend ``name`` into ``parent/name``; refuses to overwrite anything."""
    check_name(name)
    parent = Path(parent)
    if parent.exists() and not parent.is_dir():
        raise ScaffoldError(f"{parent} is not a folder")
    folder = parent / name
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists; choose another name or --dir, or remove "
                            "it first (the scaffolder never overwrites files)")
    files = render(name)
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder
