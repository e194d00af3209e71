"""Bundles are data, never code: every check of ``tilewright.runtime.bundle`` fails closed,
with a BundleError naming the check, before anything is loaded or executed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tilewright.runtime import BundleError, load
from tilewright.runtime import bundle as bundle_mod
from tilewright.runtime.bundle import write_bundle

SIGNATURE = {"name": "add", "symbols": [["n", 0, 0]], "params": [
    {"name": "A", "shape": ["n"], "dtype": "float32", "is_output": False, "kind": "tensor"},
    {"name": "C", "shape": ["n"], "dtype": "float32", "is_output": True, "kind": "tensor"}]}
LAUNCH = {"entry": "add_kernel", "grid": ["(n + 127) // 128", "1", "1"], "block": [128, 1, 1],
          "dynamic_smem_bytes": 0, "symbols": {"n": [0, 0]},
          "params": [{"kind": "tensor", "param": 0}, {"kind": "tensor", "param": 1},
                     {"kind": "symbol", "name": "n", "dtype": "int32"}]}
PWNED = "pwned"


def make(path, signature=None, launch=None, **files):
    content = {"binary": ("kernel.cubin", b"\x7fELF not a real cubin"),
               "launch": ("launch.json", json.dumps(launch or LAUNCH).encode()),
               "signature": ("signature.json", json.dumps(signature or SIGNATURE).encode()),
               **files}
    return write_bundle(path, "cubin", content, arch="sm_90a", entry="add_kernel")


def manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def rewrite_manifest(path, change) -> None:
    data = manifest(path)
    change(data)
    (path / "manifest.json").write_text(json.dumps(data))


def refused(path, check: str) -> BundleError:
    with pytest.raises(BundleError) as info:
        load(path)
    assert info.value.check == check, str(info.value)
    assert check in str(info.value)
    return info.value


def test_a_good_bundle_loads_without_a_gpu(tmp_path):
    kernel = load(make(tmp_path / "b"))
    assert kernel.name == "add" and [p.name for p in kernel.signature.params] == ["A", "C"]


@pytest.mark.parametrize("field,value", [
    ("signature", "__import__('os').system('touch {marker}')"),
    ("grid", "__import__('os').system('touch {marker}')"),
    ("grid", "(lambda: open('{marker}', 'w'))()"),
    ("signature", "n.__class__.__base__.__subclasses__()"),
])
def test_code_in_a_shape_or_grid_is_never_run(tmp_path, field, value):
    marker = tmp_path / PWNED
    value = value.format(marker=marker)
    if field == "signature":
        signature = json.loads(json.dumps(SIGNATURE))
        signature["params"][1]["shape"] = [value]
        path = make(tmp_path / "b", signature=signature)
    else:
        path = make(tmp_path / "b", launch={**LAUNCH, "grid": [value, "1", "1"]})
    refused(path, "fields")
    assert not marker.exists()


def test_the_manifest_must_be_there(tmp_path):
    (tmp_path / "b").mkdir()
    refused(tmp_path / "b", "manifest")


def test_an_old_or_foreign_format_is_refused(tmp_path):
    path = make(tmp_path / "b")
    rewrite_manifest(path, lambda m: m.update(version=1))
    refused(path, "version")


@pytest.mark.parametrize("name", ["../kernel.cubin", "/etc/passwd", "sub/kernel.cubin", "..",
                                  ".hidden", "a\\b"])
def test_names_stay_inside_the_bundle(tmp_path, name):
    path = make(tmp_path / "b")
    rewrite_manifest(path, lambda m: m["files"]["binary"].update(name=name))
    refused(path, "names")


def test_links_are_refused(tmp_path):
    path = make(tmp_path / "b")
    outside = tmp_path / "outside.cubin"
    outside.write_bytes((path / "kernel.cubin").read_bytes())
    (path / "kernel.cubin").unlink()
    os.symlink(outside, path / "kernel.cubin")
    refused(path, "links")


def test_a_changed_file_fails_its_checksum(tmp_path):
    path = make(tmp_path / "b")
    data = bytearray((path / "kernel.cubin").read_bytes())
    data[-1] ^= 1
    (path / "kernel.cubin").write_bytes(bytes(data))
    refused(path, "checksum")


def test_a_truncated_file_fails_its_size(tmp_path):
    path = make(tmp_path / "b")
    (path / "launch.json").write_bytes((path / "launch.json").read_bytes()[:10])
    refused(path, "size")


def test_sizes_are_bounded(tmp_path, monkeypatch):
    path = make(tmp_path / "b")
    monkeypatch.setitem(bundle_mod.LIMITS, "binary", 8)
    refused(path, "size")


def test_files_the_manifest_does_not_list_are_refused(tmp_path):
    path = make(tmp_path / "b")
    (path / "libextra.so").write_bytes(b"\x7fELF")
    refused(path, "unlisted files")


@pytest.mark.parametrize("change", [
    lambda s: s["params"][0].update(dtype="float1024"),
    lambda s: s["params"][0].update(align=3),
    lambda s: s.update(symbols=[["n", 5, 0]]),
    lambda s: s["params"][1].update(shape=["m + 1"]),  # a name no input provides
    lambda s: s.update(name="os.system('x')"),
])
def test_signature_fields_are_checked(tmp_path, change):
    signature = json.loads(json.dumps(SIGNATURE))
    change(signature)
    refused(make(tmp_path / "b", signature=signature), "fields")


@pytest.mark.parametrize("change", [
    lambda launch: launch.update(block=[2048, 1, 1]),
    lambda launch: launch.update(entry="a b"),
    lambda launch: launch.update(params=[{"kind": "tensor", "param": 7}]),
    lambda launch: launch.update(symbols={"n": [5, 0]}),
    lambda launch: launch.update(dynamic_smem_bytes=-1),
])
def test_launch_fields_are_checked(tmp_path, change):
    launch = json.loads(json.dumps(LAUNCH))
    change(launch)
    refused(make(tmp_path / "b", launch=launch), "fields")


def test_export_never_replaces_a_folder_that_is_not_a_bundle(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(BundleError, match="not a bundle"):
        make(folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    again = make(tmp_path / "b")
    assert make(again) == again  # an existing bundle is replaced


def test_loading_imports_no_compiler(tmp_path):
    path = make(tmp_path / "b")
    code = ("import sys, tilewright.runtime as rt; k = rt.load(sys.argv[1]); "
            "assert 'tvm' not in sys.modules, 'tvm imported'; print(k.name)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "add"
