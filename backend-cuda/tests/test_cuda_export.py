"""``kernel.export(path)`` writes a bundle that ``tilewright.runtime.load`` reads without TVM."""

from __future__ import annotations

import json
import subprocess
import sys

import cuda_cases as kernels
import pytest
from tilewright.jit import compile as tw_compile


@pytest.fixture
def bundle(tmp_path):
    kernel = tw_compile(kernels.func("gemm_dynamic"), target="cuda -arch=sm_90a",
                        execution_backend="nvcc")
    path = kernel.export(tmp_path / "bundle")
    return kernel, path


@pytest.mark.nvcc
def test_bundle_contents(bundle):
    _, path = bundle
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "tilewright-bundle" and manifest["binary"] == "cubin"
    assert manifest["arch"] == "sm_90a"
    assert (path / "kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    launch = json.loads((path / "launch.json").read_text())
    assert launch["entry"] in (path / "kernel.cu").read_text()
    signature = json.loads((path / "signature.json").read_text())
    assert [p["name"] for p in signature["params"]] == ["A", "B", "C"]
    assert [p["is_output"] for p in signature["params"]] == [False, False, True]


@pytest.mark.nvcc
def test_loading_imports_no_tvm(bundle):
    _, path = bundle
    code = ("import sys, tilewright.runtime as rt; k = rt.load(sys.argv[1]); "
            "assert 'tvm' not in sys.modules, 'tvm imported'; print(k.name)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "matmul_dynamic"


def test_loading_a_folder_that_is_not_a_bundle_names_the_problem(tmp_path):
    from tilewright.runtime import BundleError, load

    with pytest.raises(BundleError, match="manifest.json is missing"):
        load(tmp_path)


@pytest.mark.gpu
@pytest.mark.nvcc
def test_bundle_runs_on_the_gpu(bundle):
    import torch
    from tilewright.runtime import load

    _, path = bundle
    kernel = load(path)
    a = torch.randn(300, 70, device="cuda")
    b = torch.randn(70, 200, device="cuda")
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
