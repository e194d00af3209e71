"""Compile-only: source without building, from Python and from the command line."""

import subprocess
import sys
from pathlib import Path

import pytest
from tilewright.errors import TargetError
from tilewright.plugin import get_manager
from tilewright.tools import compile_kernel_source, compile_only
from tool_kernels import add_one

EXAMPLE = Path(__file__).parents[2] / "examples" / "elementwise_add.py"


def test_compile_kernel_source_default_target():
    text = compile_kernel_source(add_one())
    assert "define" in text and "fadd" in text  # LLVM IR of the CPU backend


def test_auto_is_refused_with_the_reason():
    with pytest.raises(TargetError, match="refuses target 'auto'.*probing"):
        compile_kernel_source(add_one(), "auto")


def test_cli_writes_the_first_kernel_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """The command line's main(argv), in this process: its exit codes and output."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.ll"
    code = compile_only.main(["--output_file", str(out), str(EXAMPLE)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "-> " + str(out) in captured.out and out.read_text().startswith("; ModuleID")
    code = compile_only.main(["--target", "auto", "--output_file", str(out), str(EXAMPLE)])
    assert code == 2 and "refuses target 'auto'" in capsys.readouterr().err


def test_the_intercept_holds_for_a_compile_imported_earlier_and_ends_with_the_script(
        tmp_path, monkeypatch, capsys):
    """``tilewright.jit.decorator`` binds ``compile`` when first imported: imported before
    main (as in any process that compiled already), the script's kernel is still the one
    recorded (it used to be "compiled no kernel"), and compiling works again after."""
    import tilewright
    import tilewright.jit.decorator  # noqa: F401  (its binding of compile exists now)

    monkeypatch.chdir(tmp_path)
    for n in range(2):
        out = tmp_path / f"out{n}.ll"
        assert compile_only.main(["--output_file", str(out), str(EXAMPLE)]) == 0
        assert out.read_text().startswith("; ModuleID")
    capsys.readouterr()
    kernel = tilewright.compile(add_one(), target="cpu")
    assert callable(kernel) and "define" in kernel.get_kernel_source()


def test_accelerator_targets_need_no_device():
    backends = {kind for b in get_manager().backends().values() for kind in b.target_kinds}
    if "cuda" not in backends:
        pytest.skip("the cuda backend is not installed")
    text = compile_kernel_source(add_one(), "cuda")
    assert "__global__" in text


ALL_SCRIPT = '''
import torch
import tilewright
import tilewright.language as T


@tilewright.jit(out_idx=[-1], target="cpu")
def scale_by(n, s):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.Parallel(n):
                B[i] = A[i] * s
    return main


@tilewright.jit(target="cpu")
def add_one(A):
    n = T.const("n")
    A: T.Tensor((n,), T.float32)
    B = T.empty((n,), T.float32)
    with T.Kernel(1, threads=1):
        for i in T.Parallel(n):
            B[i] = A[i] + 1.0
    return B


assert scale_by(16, 2.0)(torch.randn(16)).shape == (16,)
assert scale_by(32, 3.0)(torch.randn(32)).shape == (32,)
assert add_one(torch.randn(8)).shape == (8,)
assert (add_one(torch.zeros(8)) == 1).all(), "nothing ran"
'''


def test_all_writes_every_factory_call_and_eager_kernel(tmp_path):
    script = tmp_path / "several.py"
    script.write_text(ALL_SCRIPT)
    out = tmp_path / "out.ll"
    proc = subprocess.run([sys.executable, "-m", "tilewright.tools.compile_only", "--all",
                           "--output_file", str(out), str(script)],
                          check=False, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[2] for line in proc.stdout.splitlines() if "->" in line]
    assert names == ["scale_by", "scale_by", "add_one"]
    assert all(p.read_text().startswith("; ModuleID")
               for p in (out, tmp_path / "out.ll.1", tmp_path / "out.ll.2"))
    assert "stopped after 3 kernel(s) (AssertionError: nothing ran)" in proc.stderr
