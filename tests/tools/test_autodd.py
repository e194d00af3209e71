"""AutoDD on a planted bug: a GEMM whose B tile has the wrong K."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tilewright.autodd import DeltaDebugger, minimize

BUGGY = Path(__file__).parent / "data" / "autodd_buggy.py"
MESSAGE = "T.gemm K mismatch"


def test_planted_bug_shrinks_and_keeps_the_message(tmp_path):
    result = minimize(BUGGY, MESSAGE, timeout=60)
    small = result.source
    before = len(BUGGY.read_text().splitlines())
    assert result.lines_after < before * 0.6
    # the bug and what was frozen stay; the noise goes
    assert "T.gemm(A_s, B_s, C_l)" in small and "block_K_b" in small
    assert "print('header kept')" in small
    for noise in ("unused", "helper", "scale", "T.copy"):
        assert noise not in small
    out = tmp_path / "minimized.py"
    out.write_text(small)
    code = ("import builtins, contextlib, runpy; builtins.__freeze__ = "
            f"contextlib.nullcontext(); runpy.run_path({str(out)!r}, run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", code],
                         check=False, capture_output=True, text=True, timeout=120)
    assert MESSAGE in run.stderr


def test_command_line(tmp_path):
    src = tmp_path / "plain.py"
    src.write_text(PLAIN)
    out = tmp_path / "min.py"
    proc = subprocess.run([sys.executable, "-m", "tilewright.autodd", str(src), "--err-msg",
                           "planted failure", "-o", str(out)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert " -> 3 lines" in proc.stdout and "marker = 'kept'" in out.read_text()
    plain = subprocess.run([sys.executable, str(out)], check=False, capture_output=True,
                           text=True, timeout=60)  # the result runs with plain python
    assert "planted failure" in plain.stderr and "'__freeze__' is not defined" not in plain.stderr
    missing = subprocess.run([sys.executable, "-m", "tilewright.autodd", str(tmp_path / "no.py"),
                              "--err-msg", "x"], check=False, capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "no such file" in missing.stderr


PLAIN = """\
import os
values = [1, 2, 3]
with __freeze__:
    marker = 'kept'
def helper(x):
    return x * 2
total = sum(values)
for v in values:
    total += helper(v)
if total > 3:
    raise ValueError('planted failure ' + str(len(values)))
print('unreachable')
"""


def test_runnable_defines_the_marker_after_docstring_and_future_imports():
    from tilewright.autodd.core import FREEZE_DEFINITION, runnable

    assert runnable("x = 1\n") == "x = 1\n"
    source = '"""doc."""\nfrom __future__ import annotations\nwith __freeze__:\n    x = 1\n'
    lines = runnable(source).splitlines()
    assert lines[2] == FREEZE_DEFINITION and lines[3] == "with __freeze__:"
    exec(compile(runnable(source), "<autodd>", "exec"), {})


def test_deterministic_and_same_with_or_without_fork():
    a = DeltaDebugger(PLAIN, "planted failure", timeout=30).run()
    b = DeltaDebugger(PLAIN, "planted failure", timeout=30).run()
    c = DeltaDebugger(PLAIN, "planted failure", timeout=30, fork=False).run()
    assert a.source == b.source == c.source
    assert "marker = 'kept'" in a.source and "helper" not in a.source
    assert a.lines_after < a.lines_before


def test_each_candidate_is_time_bounded():
    # removing 'done = True' makes the program hang after printing the message: such
    # candidates are stopped at the time limit and count as not reproducing (3 s: the
    # program that ends must end within it on a machine busy with the rest of the suite)
    source = ("done = False\nprint('boom here', flush=True)\ndone = True\n"
              "while not done:\n    pass\n")
    result = DeltaDebugger(source, "boom here", timeout=3.0).run()
    assert result.source == "print('boom here', flush=True)\n"
    for fork in (True, False):
        dd = DeltaDebugger("print('x')\n", "boom here", timeout=1.0, fork=fork)
        start = time.monotonic()
        assert not dd.reproduces("print('boom here', flush=True)\nwhile True:\n    pass\n")
        assert time.monotonic() - start < 15


def test_program_without_the_message_is_refused(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text("print('all good')\n")
    with pytest.raises(ValueError, match="does not print 'oops'"):
        minimize(path, "oops", timeout=30)
