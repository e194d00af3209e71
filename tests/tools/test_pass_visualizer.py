"""Pass Visualizer: per-pass structure trees, for every installed backend."""

import subprocess
import sys
from pathlib import Path

from tilewright.tools.pass_visualizer import record, render, structure
from tool_kernels import gemm

EXAMPLE = Path(__file__).parents[2] / "examples" / "gemm.py"


def test_tile_ops_expand_into_fields():
    (kernel,) = structure(gemm().body)
    assert kernel["cls"] == "kernel" and kernel["details"]["@tw.threads"]
    flat = []

    def walk(nodes):
        for n in nodes:
            flat.append(n)
            walk(n["children"])

    walk([kernel])
    ops = {n["label"]: n for n in flat if n["cls"] == "tileop"}
    assert {"T.fill", "T.copy", "T.gemm"} <= set(ops)
    fields = ops["T.gemm"]["details"]
    assert fields["M"] == "64" and fields["N"] == "64" and fields["K"] == "32"
    assert fields["A"] == "A_s[0:64, 0:32]"
    allocs = {n["label"]: n["details"] for n in flat if n["cls"] == "alloc"}
    assert allocs["alloc C_l"]["scope"] == "local.fragment"


def test_record_and_render_cpu(tmp_path):
    steps = record(gemm(), "cpu")
    assert steps[0]["phase"] == "input"
    assert [s["name"] for s in steps[1:4]] == ["CPUFuseGemmK", "LowerTileOps", "CPULowerIntrinsics"]
    page = render({"cpu": steps, "broken": "UnsupportedOpError: nope"}, "t")
    assert page.count("<h3") == len(steps) and "class='err'" in page
    assert 'class="k tileop">T.gemm' in page  # tile op before lowering
    assert 'class="k intrin"' in page  # lowered intrinsics after


def test_cli_covers_every_installed_backend(tmp_path):
    out = tmp_path / "passes.html"
    proc = subprocess.run([sys.executable, "-m", "tilewright.tools.pass_visualizer",
                           str(EXAMPLE), "--set", "M=128", "--set", "N=128", "--set", "K=64",
                           "--out", str(out)], check=False, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "pass_visualizer: cpu:" in proc.stdout and "steps" in proc.stdout
    assert "<h2>target cpu</h2>" in out.read_text()
