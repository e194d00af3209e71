"""``tilewright analyze`` and ``tilewright bench`` on a small script."""

import json
import textwrap

import pytest
from tilewright.cli.main import main

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import tilewright
    import tilewright.language as T


    @tilewright.jit(out_idx=[-1], target="cpu")
    def axpy(N, block=64):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"),
                 Z: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                for i in T.Parallel(block):
                    Z[bx * block + i] = 2.0 * X[bx * block + i] + Y[bx * block + i]
        return main


    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    kernel = axpy(n)
    if "--no-call" not in sys.argv:
        kernel(torch.randn(n), torch.randn(n))
    print("the script's own output")
''')


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "axpy_script.py"
    path.write_text(SCRIPT)
    return path


def test_analyze_prints_the_roofline(script, capsys, tmp_path):
    chart = tmp_path / "roof.svg"
    args = ["analyze", str(script), "--json", "--", "2048"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    (kernel,) = report["kernels"]
    assert kernel["total_flops"] == 2 * 2048
    assert kernel["total_global_bytes"] == 12 * 2048
    assert kernel["arch"] == "cpu" and kernel["bound"] in ("compute", "memory")
    assert kernel["grid"] == [32]
    pytest.importorskip("matplotlib", reason="the chart needs the viz extra")
    assert main(["analyze", str(script), "--plot", str(chart)]) == 0
    out = capsys.readouterr()
    assert "total FLOPs         2048" in out.out and "-bound" in out.out
    assert chart.read_text().lstrip().startswith("<?xml")


def test_analyze_unknown_arch(script, capsys):
    assert main(["analyze", str(script), "--arch", "nosuchchip"]) == 1
    out = capsys.readouterr().out
    assert "not analysed: unknown architecture 'nosuchchip'; registered models: " in out
    assert "cpu" in out


def test_bench_prints_the_table(script, capsys):
    assert main(["bench", str(script), "--warmup", "1", "--rep", "5", "--json", "--",
                 "4096"]) == 0
    (kernel,) = json.loads(capsys.readouterr().out)["kernels"]
    assert kernel["calls"] == 1  # the script's own calls; timing ones are not counted
    assert kernel["time_ms"] > 0 and kernel["roofline_ms"] > 0
    assert kernel["GBps"] == pytest.approx(12 * 4096 / (kernel["time_ms"] * 1e-3) / 1e9)
    assert main(["bench", str(script), "--warmup", "1", "--rep", "5", "--", "512",
                 "--no-call"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "the script's own output"
    assert out.splitlines()[1].split()[:3] == ["kernel", "calls", "time"]
    assert "#0 axpy" in out  # a factory's kernel is named after the factory


def test_bench_errors(script, tmp_path, capsys):
    assert main(["bench", str(tmp_path / "missing.py")]) == 1
    assert "no such script" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert main(["bench", str(empty)]) == 1
    assert "compiled no kernel" in capsys.readouterr().err
    assert main(["bench", str(script), "--timer", "nosuch", "--", "64"]) == 1
    assert "not timed: unknown timer 'nosuch'; available: wall" in capsys.readouterr().out
    assert main(["bench", str(script), "--bogus"]) == 1
    assert "pass the script's own arguments after '--'" in capsys.readouterr().err


def test_json_output_is_json_only(script, capfd):
    """The script's prints (and any native output) go to stderr; stdout is one JSON text."""
    for command in ("analyze", "bench"):
        assert main([command, str(script), "--json", "--warmup", "1", "--rep", "5"][
            :3 if command == "analyze" else None]) == 0
        out, err = capfd.readouterr()
        assert json.loads(out)["kernels"][0]["kernel"] == "#0 axpy"
        assert "the script's own output" in err


def test_a_time_beating_the_roofline_is_flagged(script, capsys, monkeypatch):
    from types import SimpleNamespace

    from tilewright.cli import profile as cli

    arch = SimpleNamespace(name="cpu", details={"overrides": ("PEAK_VAR", "BW_VAR")})
    monkeypatch.setattr(cli, "_analyse", lambda record, name: SimpleNamespace(
        total_flops=1, total_global_bytes=1, estimated_time=10.0, bound="memory", arch=arch))
    assert main(["bench", str(script), "--warmup", "1", "--rep", "5", "--json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert "#0 axpy: measured faster than the roofline of 'cpu' allows" in note
    assert "set PEAK_VAR / BW_VAR" in note
    # values the environment gives already: those are what is too low
    arch.details["overridden"] = ("float32",)
    assert main(["bench", str(script), "--warmup", "1", "--rep", "5", "--json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert "the float32 value(s) from PEAK_VAR / BW_VAR may be too low" in note
