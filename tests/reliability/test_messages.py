"""Raw errors that used to escape from deep inside TVM or Python now name the problem and the
user's line."""

import os
import subprocess
import sys

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.cli import main as cli_main


def _compile(func, target="cpu"):
    return tilewright.compile(func, out_idx=[-1], target=target)


def assert_at_line(error, marker: str, *words):
    text = str(error)
    assert "test_messages.py" in text and marker in text, text
    for word in words:
        assert word in text, text


def test_floor_division_of_floats():
    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), C: T.Tensor((8,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(8):
                    C[i] = A[i] // 2.0  # float-floordiv
    assert_at_line(info.value, "float-floordiv", "'//' needs integer operands", "T.floor")


def test_not_on_a_symbolic_value_builds_an_ir_not():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), C: T.Tensor((8,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                if not (i < 4):
                    C[i] = A[i]
                else:
                    C[i] = 0.0

    a = torch.arange(8.0)
    torch.testing.assert_close(_compile(main)(a), torch.where(a < 4, 0.0, a))


HALF = 8 / 2


def test_a_float_in_a_shape():
    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((HALF,), "float32"), C: T.Tensor((4,), "float32")):  # float-shape
            with T.Kernel(1) as bx:
                for i in T.Parallel(4):
                    C[i] = A[i]
    assert_at_line(info.value, "float-shape", "is the float 4.0", "use //")


@T.macro
def forever(x):
    forever(x)  # recursion


def test_a_recursive_macro():
    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), C: T.Tensor((8,), "float32")):
            with T.Kernel(1) as bx:
                forever(A)
    assert_at_line(info.value, "recursion", "T.macro forever calls itself")


def test_a_factory_may_return_a_prim_func_made_elsewhere():
    @T.prim_func
    def elsewhere(A: T.Tensor((8,), "float32"), C: T.Tensor((8,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                C[i] = A[i] + 1.0

    @tilewright.jit(out_idx=[-1], target="cpu")
    def factory():
        return elsewhere

    a = torch.randn(8)
    torch.testing.assert_close(factory()(a), a + 1.0)


def test_a_scalar_where_a_tensor_is_expected():
    @tilewright.jit(target="cpu")
    def add(A, B):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B: T.Tensor((N,), T.float32)  # tensor-B
        C = T.empty((N,), T.float32)
        with T.Kernel(1) as bx:
            for i in T.Parallel(N):
                C[i] = A[i] + B[i]
        return C

    with pytest.raises(tilewright.KernelError) as info:
        add(torch.ones(4), 3)
    assert_at_line(info.value, "tensor-B", "'B' is annotated as a tensor", "int 3")


def test_an_unbalanced_quote_in_a_target():
    with pytest.raises(tilewright.TargetError, match="cannot be read: No closing quotation"):
        tilewright.compile(None, target='cuda -arch="sm_90')


SCRIPT = '''
import sys, tilewright, tilewright.language as T
print("script args", sys.argv[1:])

@T.prim_func
def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
    with T.Kernel(1) as bx:
        for i in T.Parallel(64):
            C[i] = A[i] * 2.0

tilewright.compile(main, out_idx=[-1], target="cpu")
'''


def test_analyze_passes_the_scripts_own_arguments(tmp_path, monkeypatch, capsys):
    """`tilewright analyze kern.py --arch cpu -- --m 4096`, the command line's main(argv) in
    this process."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "kern.py"
    script.write_text(SCRIPT)
    code = cli_main(["analyze", str(script), "--arch", "cpu", "--", "--m", "4096"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "script args ['--m', '4096']" in out


def test_a_script_named_dots_keeps_the_lower_trace_inside_its_folder(tmp_path):
    script = tmp_path / "...py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TILEWRIGHT_LOWER_TRACE": "1"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    trace = tmp_path / "tmp" / "lower_trace_dir"
    assert [p.name for p in trace.iterdir()] == ["kernel"]
    assert not (tmp_path / "tmp" / ".run_records").exists()
