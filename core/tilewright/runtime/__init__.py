"""Run exported kernels without the compiler: ``tilewright.runtime.load(path)``.

A bundle is a folder written by ``kernel.export(path)``: ``manifest.json`` names its format
and files. Loading imports only the standard library, torch and the bundle's device runtime
(cuda-python for ``cubin`` bundles) — never TVM — so bundles run on machines that have no
compiler.
"""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = "tilewright-bundle"
VERSION = 1


class BundleError(Exception):
    """A bundle that is missing, malformed or for a runtime this loader does not know."""


def read_manifest(path) -> dict:
    file = Path(path) / MANIFEST
    if not file.is_file():
        raise BundleError(f"{path} is not a tilewright bundle: {MANIFEST} is missing")
    manifest = json.loads(file.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise BundleError(f"{file}: expected format {FORMAT!r} version {VERSION}, got "
                          f"{manifest.get('format')!r} version {manifest.get('version')!r}")
    return manifest


def load(path):
    """The kernel stored in bundle ``path``: call it like the compiled kernel (inputs in,
    outputs allocated and returned)."""
    manifest = read_manifest(path)
    kind = manifest.get("binary")
    if kind == "cubin":
        from .cuda import BundleKernel

        return BundleKernel.from_bundle(Path(path), manifest)
    raise BundleError(f"bundle {path} holds a {kind!r} binary; this runtime loads: cubin")


__all__ = ["BundleError", "load", "read_manifest"]
