"""Pass Diff, the older interface on top of the lower trace."""

import tvm
from tilewright.tools import lower_trace
from tilewright.tools.pass_diff import enable, pass_diff
from tool_kernels import add_one


def test_pass_diff_reports_each_pass(capsys):
    steps = pass_diff(add_one(), [tvm.tirx.transform.StmtSimplify()])
    assert len(steps) == 1 and {"changed", "insertions", "deletions"} <= set(steps[0])
    assert "[lower_trace]" in capsys.readouterr().out
    quiet = pass_diff(add_one(), [tvm.tirx.transform.StmtSimplify()], print_output=False)
    assert quiet[0]["after_script"] == steps[0]["after_script"]
    assert "[lower_trace]" not in capsys.readouterr().out


def test_enable_is_the_terminal_trace(tmp_path):
    enable()
    assert lower_trace._active.config.mode == "terminal"
    lower_trace.enable("html", tmp_path)
    enable()  # with the HTML trace on, both
    assert lower_trace._active.config.mode == "both"
