"""tools/port_tilelang_examples.py: the mechanical port and the host shim it installs."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "port_tilelang_examples.py"


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location("port_tilelang_examples", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EXAMPLE = '''\
import torch
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def double(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            for i in T.Parallel(n):
                Y[i] = X[i] * 2.0
    return main


if __name__ == "__main__":
    x = torch.randn(64, device="cuda")
    side = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    with torch.cuda.stream(side):
        y = double(64)(x)
    torch.cuda.default_stream().wait_stream(side)
    end.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) >= 0
    torch.testing.assert_close(y, x * 2)
    print("All checks passed")
'''


def test_port_renames_imports_and_devices(runner):
    ported = runner.port_source(EXAMPLE)
    assert "import tilewright as tilelang" in ported
    assert "import tilewright.language as T" in ported
    assert 'device="cpu"' in ported and '"cuda"' not in ported


def test_an_example_using_streams_and_events_runs_on_the_host(runner, tmp_path):
    examples = tmp_path / "tilelang" / "examples" / "demo"
    examples.mkdir(parents=True)
    (examples / "example_streams.py").write_text(EXAMPLE)
    out = tmp_path / "out.json"
    rc = runner.main(["--checkout", str(tmp_path / "tilelang"), "--target", "cpu",
                      "--timeout", "300", "--json", str(out)])
    rows = json.loads(out.read_text())
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert [(r["example"], r["result"]) for r in rows] == \
        [("demo/example_streams.py", "verified")], rows
    assert rc == 0
