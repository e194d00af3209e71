"""Every script in examples/ runs its command-line main path on the CPU backend with small
sizes, checks itself against torch and prints its time."""

import pathlib
import re
import runpy
import sys

import pytest
import tilewright.profiler

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
# torch_package.py is no script: `tilewright package` reads its kernel list (tests/torch_ops)
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "torch_package.py")

# Small sizes that keep partial tiles; scripts without options run their defaults.
ARGS = {
    "gemm.py": [["--m", "130", "--n", "136", "--k", "64"],
                ["--m", "64", "--n", "40", "--k", "96", "--dtype", "bfloat16"]],
    "gemm_persistent.py": [["--m", "130", "--n", "70", "--k", "64", "--workers", "3"]],
    "gemm_splitk.py": [["--m", "70", "--n", "48", "--k", "200", "--splits", "3"]],
    "flash_attention.py": [["--batch", "1", "--heads", "2", "--seq", "100", "--dim", "32"],
                           ["--batch", "2", "--heads", "1", "--seq", "128", "--dim", "16",
                            "--causal"]],
    "gemm_fp8_scaled.py": [["--m", "130", "--n", "256", "--k", "256", "--layout", "block"],
                           ["--m", "70", "--n", "136", "--k", "200", "--layout", "token",
                            "--dtype", "float8_e5m2"],
                           ["--m", "64", "--n", "40", "--k", "96", "--layout", "tensor"]],
    "gemm_sp.py": [["--m", "130", "--n", "200", "--k", "256", "--dtype", "bfloat16",
                    "--e_dtype", "int32"], ["--m", "64", "--n", "40", "--k", "128"]],
    "gemm_w4a16.py": [["--m", "5", "--n", "200", "--k", "256", "--group", "64"],
                      ["--m", "3", "--n", "96", "--k", "512", "--splits", "2"],
                      ["--m", "16", "--n", "128", "--k", "256", "--dtype", "bfloat16"]],
    "rmsnorm.py": [["--m", "10", "--n", "96"], ["--m", "9", "--n", "64", "--dtype", "float16"]],
    "softmax.py": [["--m", "10", "--n", "80"], ["--m", "6", "--n", "64", "--dtype", "bfloat16"]],
}
CASES = [(name, args) for name in SCRIPTS for args in ARGS.get(name, [[]])]


def quick_bench(fn, *args, **kwargs):
    """Stands in for do_bench: runs the kernel twice, reports a made-up time."""
    fn()
    fn()
    return 0.125


def test_every_example_has_a_case():
    assert {"gemm.py", "gemm_dynamic.py", "gemm_persistent.py", "gemm_splitk.py",
            "flash_attention.py", "rmsnorm.py", "softmax.py", "row_reduce.py",
            "elementwise_add.py"} <= set(SCRIPTS)
    assert set(ARGS) <= set(SCRIPTS), "ARGS names a script that no longer exists"


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{'-' + '-'.join(a) if a else ''}"
                                                  for n, a in CASES])
def test_example_main_checks_itself(name, args, monkeypatch, capsys):
    monkeypatch.setattr(tilewright.profiler, "do_bench", quick_bench)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")  # asserts against torch inside
    out = capsys.readouterr().out
    assert "match" in out, out
    assert re.search(r"\d+\.\d+\s*ms|ms\b", out), out


def test_example_runs_from_the_command_line(monkeypatch, capsys):
    """A script's main path with tilewright.profiler.do_bench itself (the cases above stand a
    quick timer in), run as ``python softmax.py --m 5 --n 40`` runs it."""
    script = EXAMPLES / "softmax.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--m", "5", "--n", "40"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "matches torch" in out and " ms" in out, out
