"""Registering the operators of a kernel package (what ``tilewright package`` builds).

A package folder holds ``ops.json`` and one bundle per compiled kernel. ``ops.json`` names,
per operator, its arguments, its outputs and its variants: the bundle, the device type it
runs on and the shape ranges it was built for. :func:`register_package` checks the file,
loads every bundle of a device type torch can use here and registers the operators; the
package's generated ``__init__.py`` calls it on import. Needs only the standard library and
torch (cuda-python for CUDA bundles, imported only where a GPU is present).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from . import load
from .torchop import Argument, OpError, TorchOp

OPS_FILE = "ops.json"
FORMAT = "tilewright-kernel-package"
VERSION = 1
_BUNDLE = re.compile(r"^bundles/[A-Za-z0-9_]+/[0-9]+$")
_TYPES = ("Tensor", "int", "float", "bool", "str")


def _expect(ok, folder, what: str) -> None:
    if not ok:
        raise OpError(f"kernel package {folder}: {OPS_FILE} is malformed: {what}; build the "
                      "package again")


def _device_ready(device: str) -> str:
    """'' when torch can use ``device`` here, else why not."""
    if device == "cpu":
        return ""
    if device == "cuda":
        return "" if torch.cuda.is_available() else "torch sees no CUDA device here"
    return f"this package runtime does not load {device!r} kernels"


def read_spec(folder) -> dict:
    """The checked contents of a package's ``ops.json``."""
    folder = Path(folder)
    try:
        spec = json.loads((folder / OPS_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise OpError(f"kernel package {folder}: cannot read {OPS_FILE} ({exc})") from None
    _expect(isinstance(spec, dict) and spec.get("format") == FORMAT and
            spec.get("version") == VERSION, folder, f"not {FORMAT} version {VERSION}")
    ops = spec.get("ops")
    _expect(isinstance(ops, dict), folder, "no operators")
    for name, op in ops.items():
        _expect(isinstance(op, dict) and isinstance(op.get("arguments"), list) and
                isinstance(op.get("outputs"), list) and isinstance(op.get("variants"), list),
                folder, f"operator {name!r}")
        for a in op["arguments"]:
            _expect(isinstance(a, dict) and isinstance(a.get("name"), str) and
                    a.get("type") in _TYPES and isinstance(a.get("mutable"), bool), folder,
                    f"an argument of {name!r}")
        for v in op["variants"]:
            _expect(isinstance(v, dict) and isinstance(v.get("bundle"), str) and
                    _BUNDLE.match(v["bundle"]) and isinstance(v.get("device"), str) and
                    isinstance(v.get("ranges"), dict) and
                    all(isinstance(r, list) and len(r) == 2 and
                        all(isinstance(x, int) for x in r) for r in v["ranges"].values()),
                    folder, f"a variant of {name!r}")
    return spec


def register_package(folder) -> dict[str, TorchOp]:
    """Register every operator of the package in ``folder``; the operators by name."""
    folder = Path(folder)
    spec = read_spec(folder)
    registered = {}
    try:
        for name, op in spec["ops"].items():
            devices = sorted({v["device"] for v in op["variants"]})
            unavailable = {d: f"the package holds {d} kernels, but {why}"
                           for d in devices if (why := _device_ready(d))}
            ready = [d for d in devices if d not in unavailable]
            torch_op = TorchOp(name, [Argument(a["name"], a["type"], a["mutable"])
                                      for a in op["arguments"]], op["outputs"], ready,
                               origin=f"kernel package {spec.get('package', folder.name)}",
                               unavailable=unavailable)
            registered[name] = torch_op
            for v in op["variants"]:
                if v["device"] in ready:
                    kernel = load(folder / v["bundle"])
                    torch_op.add(v["device"], kernel, kernel.signature,
                                 {s: tuple(r) for s, r in v["ranges"].items()})
    except BaseException:
        for torch_op in registered.values():
            torch_op.remove()
        raise
    return registered


__all__ = ["FORMAT", "OPS_FILE", "VERSION", "read_spec", "register_package"]
