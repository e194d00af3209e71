"""The lower trace's edit-and-recompile workflow: NVRTC and nvcc compile the edited file."""

from __future__ import annotations

import cuda_cases as kernels
import pytest
from tilewright.jit import compile as tw_compile
from tilewright.tools import lower_trace as lt


@pytest.fixture(autouse=True)
def _trace_off():
    yield
    lt.disable()


@pytest.mark.nvcc
def test_nvcc_compiles_the_edited_source(tmp_path, capsys):
    name = kernels.NAMES[0]
    lt.enable("html", tmp_path)
    tw_compile(kernels.func(name), target="cuda -arch=sm_80", execution_backend="nvcc")
    working = tmp_path / lt.script_name() / "codegen.cu"
    text = working.read_text()
    working.write_text("#error tilewright-hand-edit\n" + text)
    lt.enable("html", tmp_path)  # a new run of the script
    with pytest.raises(Exception, match="tilewright-hand-edit"):
        tw_compile(kernels.func(name), target="cuda -arch=sm_80", execution_backend="nvcc")
    assert "PATCHED" in capsys.readouterr().err
