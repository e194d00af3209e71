"""The lower trace's edit-and-recompile workflow on the emulator, which compiles source text."""

import sys
from pathlib import Path

import pytest
import tilewright
import torch
from tilewright.tools import lower_trace as lt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import ascend_kernels as K  # noqa: E402


@pytest.fixture(autouse=True)
def _trace_off():
    yield
    lt.disable()


def test_edited_ascend_c_is_what_the_emulator_runs(tmp_path, capsys):
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    lt.enable("html", tmp_path)
    kernel = tilewright.compile(K.vec_add(64, 64, 32, 64), out_idx=[-1], target="ascend",
                                execution_backend="emulator")
    torch.testing.assert_close(kernel(a, b), a + b)
    working = tmp_path / lt.script_name() / "codegen.cpp"
    text = working.read_text()
    assert "Add(c_ub, a_ub, b_ub" in text
    working.write_text(text.replace("Add(c_ub, a_ub, b_ub", "Sub(c_ub, a_ub, b_ub"))
    lt.enable("html", tmp_path)  # a new run of the script
    kernel = tilewright.compile(K.vec_add(64, 64, 32, 64), out_idx=[-1], target="ascend",
                                execution_backend="emulator")
    err = capsys.readouterr().err
    assert "PATCHED" in err and "NOTE" not in err
    torch.testing.assert_close(kernel(a, b), a - b)
