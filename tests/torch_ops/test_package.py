"""Kernel packages: a wheel of the examples for the CPU, its operators in this process, and the
same wheel installed in a fresh virtual environment that has torch but no tilewright, TVM or
tvm-ffi, where the operators run and compile through torch.compile.

The fresh environment is a plain ``python -m venv`` (no system site-packages) into which pip
installs torch -- the version this process runs, from pip's configured sources (the on-disk
wheel here) -- and then the package's wheel. Creating it takes a minute or two, so it is kept
in the user's cache folder and reused (the package is reinstalled every run);
``TILEWRIGHT_TEST_VENV`` chooses another folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from tilewright.runtime import BundleError
from tilewright.runtime.bundle import write_bundle
from tilewright.runtime.package import register_package
from tilewright.runtime.torchop import OpError
from tilewright.torch_ops.package import RUNTIME_FILES, PackageError, build_package

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "torch_package.py"
NAME = "tw_examples"
TORCH = torch.__version__.split("+")[0]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("package-cache")
    os.environ["TILEWRIGHT_CACHE_DIR"] = str(cache)
    try:
        return build_package(EXAMPLES, NAME, out=tmp_path_factory.mktemp("dist"))
    finally:
        del os.environ["TILEWRIGHT_CACHE_DIR"]


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    return folder / NAME


def test_the_wheel_holds_bundles_and_a_copy_of_the_runtime(wheel, unpacked):
    assert wheel.name == f"{NAME}-0.1.0-py3-none-linux_x86_64.whl"
    for rel in RUNTIME_FILES:  # generated copies, unchanged
        assert (unpacked / "_tilewright" / rel).read_bytes() == \
            (REPO / "core" / "tilewright" / rel).read_bytes()
    assert (unpacked / "_tilewright" / "runtime" / "libtw_kernel_shim.so").is_file()
    spec = json.loads((unpacked / "ops.json").read_text())
    assert sorted(spec["ops"]) == ["tw_examples::matmul", "tw_examples::rmsnorm",
                                   "tw_examples::softmax"]
    assert len(spec["ops"]["tw_examples::softmax"]["variants"]) == 2
    assert spec["ops"]["tw_examples::matmul"]["variants"][0]["ranges"]["m"] == [1, 4096]


def test_registered_operators_dispatch_and_check_ranges(unpacked):
    ops = register_package(unpacked)
    try:
        for n in (128, 512):
            x = torch.randn(256, n)
            torch.testing.assert_close(torch.ops.tw_examples.softmax(x), torch.softmax(x, 1))
        with pytest.raises(Exception, match=r"torch op tw_examples::softmax has no cpu kernel "
                                            r"for X: float32\(3, 7\); it has kernels for: "
                                            r"X: float32\(256, 128\); X: float32\(256, 512\)"):
            torch.ops.tw_examples.softmax(torch.randn(3, 7))
        with pytest.raises(OpError, match=r"torch op tw_examples::matmul: k = 5000 is "
                                               r"outside the range \[1, 4096\] its kernel was "
                                               "packaged for"):
            torch.ops.tw_examples.matmul(torch.randn(2, 5000), torch.randn(5000, 3))
        fn = torch.compile(lambda a, b: torch.ops.tw_examples.matmul(a, b) + 1, fullgraph=True,
                           dynamic=True)
        a, b = torch.randn(33, 20), torch.randn(20, 17)
        torch.testing.assert_close(fn(a, b), a @ b + 1, rtol=1e-4, atol=1e-4)
    finally:
        for op in ops.values():
            op.remove()


def test_bad_tables_are_refused(tmp_path):
    with pytest.raises(PackageError, match="ranges name \\['q'\\], which are not shape symbols"):
        build_package(EXAMPLES, "bad", ops={"tw_bad::mm": {
            "kernel": "matmul_dynamic", "configs": [{}], "ranges": {"q": [1, 2]}}},
            out=tmp_path)
    with pytest.raises(PackageError, match="tw_bad::sm.*would accept some of the same inputs"):
        build_package(EXAMPLES, "bad", ops={"tw_bad::sm": {
            "kernel": "softmax", "configs": [{"M": 8, "N": 16}, {"M": 8, "N": 16,
                                                                 "block_M": 8}]}},
            out=tmp_path)


def test_a_library_needing_other_symbols_is_refused(tmp_path):
    source = tmp_path / "k.c"
    source.write_text("extern int some_runtime_call(void);\n"
                      "int __tvm_ffi_main(void) { return some_runtime_call(); }\n")
    library = tmp_path / "k.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    signature = {"name": "main", "symbols": [], "params": []}
    path = write_bundle(tmp_path / "b", "cpu-so", {
        "binary": ("kernel.so", library.read_bytes()),
        "launch": ("launch.json", b'{"symbol": "__tvm_ffi_main"}'),
        "signature": ("signature.json", json.dumps(signature).encode())})
    from tilewright.runtime import load

    with pytest.raises(BundleError, match="binary check failed: the kernel library needs "
                                          "some_runtime_call"):
        load(path)


# -- a fresh environment -------------------------------------------------------------------
@pytest.fixture(scope="session")
def fresh_venv() -> Path:
    """A plain virtual environment with torch only (created once, reused)."""
    root = Path(os.environ.get("TILEWRIGHT_TEST_VENV") or
                Path.home() / ".cache" / "tilewright" / "test-venvs" / f"torch-{TORCH}")
    python = root / "bin" / "python"
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        ready = root / ".torch-installed"
        if not ready.is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
            done = subprocess.run([str(python), "-m", "pip", "install", "-q",
                                   f"torch=={TORCH}"], capture_output=True, text=True)
            assert done.returncode == 0, f"pip could not install torch: {done.stderr[-2000:]}"
            ready.write_text(TORCH)
    return python


CHECK = r'''
import importlib.util
for name in ("tvm", "tvm_ffi", "tilewright"):
    assert importlib.util.find_spec(name) is None, f"{name} is importable"
import torch
import tw_examples

x, w = torch.randn(256, 128), torch.randn(128)
torch.testing.assert_close(torch.ops.tw_examples.softmax(x), torch.softmax(x, 1))
ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
torch.testing.assert_close(torch.ops.tw_examples.rmsnorm(x, w), ref, rtol=1e-5, atol=1e-5)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(128, 64) / 8, requires_grad=False)

    def forward(self, x):
        h = torch.ops.tw_examples.matmul(x, self.proj)
        return torch.ops.tw_examples.softmax(torch.cat([h, h], dim=1)) * 2


model = Model()
compiled = torch.compile(model, fullgraph=True)
with torch.no_grad():
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
try:
    torch.ops.tw_examples.softmax(torch.randn(3, 7))
except Exception as exc:
    print("ERROR", exc)
print("PASSED")
'''


def test_the_wheel_runs_with_torch_alone(wheel, fresh_venv, tmp_path):
    install = subprocess.run([str(fresh_venv), "-m", "pip", "install", "-q", "--no-deps",
                              "--force-reinstall", str(wheel)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TILEWRIGHT"))}
    env["HOME"] = str(tmp_path)  # the package's shim is prebuilt: nothing is built or cached
    run = subprocess.run([str(fresh_venv), str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "PASSED" in run.stdout
    assert "ERROR torch op tw_examples::softmax has no cpu kernel for X: float32(3, 7)" \
        in run.stdout
    assert not (tmp_path / ".cache").exists()
