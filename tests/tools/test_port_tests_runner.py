"""tools/port_tilelang_tests.py on a small TileLang-style test tree: a file is ported (imports,
devices), run with pytest on the CPU backend with TileLang's requires_cuda satisfied, and its
passes and failures (with the first line of the error) are counted; a GPU-only file is not
run."""

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "port_tilelang_tests.py"

PORTABLE = '''
import tilelang
import tilelang.language as T
import tilelang.testing
import torch


@tilelang.testing.requires_cuda
def test_scaled_copy():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i] * 2

    a = torch.randn(64, device="cuda")
    b = torch.zeros(64, device="cuda")
    tilelang.compile(main)(a, b)
    torch.testing.assert_close(b, a * 2)


def test_missing_name():
    T.no_such_thing()
'''

GPU_ONLY = '''
import tilelang.language as T


def test_tma():
    T.tma_copy()
'''


def test_the_runner_counts_passes_and_failures(tmp_path):
    tests = tmp_path / "testing" / "python" / "language"
    tests.mkdir(parents=True)
    (tests / "test_tilelang_language_demo.py").write_text(PORTABLE)
    (tests / "test_tilelang_language_tma.py").write_text(GPU_ONLY)
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, str(TOOL), "--checkout", str(tmp_path), "--json",
                          str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {r["test_file"]: r for r in json.loads(out.read_text())}
    demo = rows["test_tilelang_language_demo.py"]
    assert (demo["passed"], demo["failed"]) == (1, 1)
    assert "has no T.no_such_thing" in demo["failures"]["test_missing_name"]
    assert rows["test_tilelang_language_tma.py"]["not_portable"] == "TMA"
    assert "files: 2, portable: 1, all passing: 0; tests passed: 1, failed: 1" in run.stdout
