"""IR Lower Trace: file layout, report, edit-and-recompile, failures, bad input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tilewright
import torch
import tvm
from tilewright.engine import events
from tilewright.errors import ConfigError
from tilewright.tools import lower_trace as lt
from tool_kernels import add_one


def _run_dir(root: Path) -> Path:
    runs = sorted((root / ".run_records").iterdir())
    assert runs and re.fullmatch(r"run_\d{8}_\d{6}_\d{6}_\d+_[0-9a-f]{8}", runs[-1].name)
    return runs[-1]


def _records(report: Path) -> tuple[list, dict | None]:
    text = report.read_text()
    recs = [json.loads(m) for m in
            re.findall(r'<script type="application/json" class="tw-rec">(.*?)</script>', text)]
    end = re.search(r'class="tw-end">(.*?)</script>', text)
    return [r["rec"] for r in recs], json.loads(end.group(1)) if end else None


@pytest.mark.parametrize("value,mode", [("1", "html"), ("on", "html"), ("html", "html"),
                                        ("terminal", "terminal"), ("BOTH", "both"),
                                        ("0", None), ("off", None), ("", None)])
def test_mode_parsing(value, mode):
    assert lt.parse_mode(value) == mode


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ConfigError, match="valid modes: html.*terminal, both"):
        lt.parse_mode("fancy")
    with pytest.raises(ConfigError, match="fancy"):
        lt.enable("fancy")


def test_off_by_default_installs_nothing():
    assert not lt.is_enabled()
    assert not events.active()


def test_trace_layout_and_report(tmp_path, capsys):
    lt.enable("html", tmp_path)
    kernel = tilewright.compile(add_one(), out_idx=[-1], target="cpu")
    a = torch.arange(256, dtype=torch.float32)
    torch.testing.assert_close(kernel(a), a + 1)
    root = tmp_path / lt.script_name()
    run = _run_dir(root)
    for name in ("codegen.ll", "codegen.ll.original", "codegen.ll.latest"):
        assert (root / name).read_text() == kernel.get_kernel_source()
    assert (root / "report.html").resolve() == (run / "report.html").resolve()
    phases = {p.name for p in run.iterdir() if p.is_dir()}
    assert {"bind_solved_symbols", "split_grid_syncs", "serialize_threads", "lower_tile_ops",
            "lower_loops", "lower_memory", "lower_blocks", "codegen", "unscoped"} <= phases
    before = sorted(p.name for p in (run / "lower_tile_ops").iterdir())
    assert before[:2] == ["03_CPUFloatMinMax_after.tir", "03_CPUFloatMinMax_before.tir"]
    assert "06_LowerTileOps_before.tir" in before  # files named by pass
    codegen = sorted(p.name for p in (run / "codegen").iterdir())
    assert len(codegen) == 2 and codegen[0].endswith("_codegen_after.ll")
    assert codegen[1].endswith("_codegen_before.tir")
    recs, end = _records(run / "report.html")
    assert end["ok"] is True and end["records"] == len(recs)
    assert [r["index"] for r in recs] == list(range(len(recs)))
    statuses = {r["status"] for r in recs}
    assert {"changed", "noop", "codegen"} <= statuses
    assert [(r["name"], r["status"]) for r in recs[:3]] == [
        ("CPUBindSolvedSymbols", "noop"), ("CPUSplitGridSyncs", "noop"),
        ("CPUSerializeThreads", "noop")]
    assert recs[3]["name"] == "CPUFloatMinMax" and recs[3]["phase"] == "lower_tile_ops"
    changed = [r for r in recs if r["status"] == "changed"]
    assert all(r["changed"] and r["add_lines"] + r["del_lines"] > 0 for r in changed)
    assert "report:" in capsys.readouterr().err


def test_every_compilation_is_its_own_session(tmp_path):
    lt.enable("html", tmp_path)
    tilewright.compile(add_one(256), out_idx=[-1], target="cpu")
    tilewright.compile(add_one(512), out_idx=[-1], target="cpu")
    root = tmp_path / lt.script_name()
    assert len(list((root / ".run_records").iterdir())) == 2
    assert (root / "codegen.ll").exists() and (root / "codegen_2.ll").exists()
    first, second = lt.last_sessions()[-2:]
    assert first.records[0].index == second.records[0].index == 0
    # one index page links every compilation's report
    index = (root / "index.html").read_text()
    reports = re.findall(r'<a href="([^"]+)">main</a>', index)
    assert len(reports) == 2 and all((root / r).is_file() for r in reports)
    # the codegen file of each (linked), then what tracing did with it
    assert re.findall(r'<td><a href="([^"]+)">\1</a></td><td>([A-Z-]+)</td></tr>', index) == [
        ("codegen.ll", "INIT"), ("codegen_2.ll", "INIT")]
    assert {str(s.run_dir / "report.html") for s in (first, second)} <= \
        {str(root / r) for r in reports}


def test_interleaved_sessions_do_not_mix(tmp_path):
    tracer = lt._Tracer(lt.Config("html", str(tmp_path)))
    mod = tvm.IRModule({"main": add_one()})
    emit = lambda kind, sid, **d: tracer(events.Event(kind, sid, d))
    emit("session_start", 901, name="a", backend="cpu", target="cpu")
    emit("session_start", 902, name="b", backend="cpu", target="cpu")
    emit("pass_start", 901, phase="p", name="A1", mod=mod)
    emit("pass_start", 902, phase="p", name="B1", mod=mod)
    emit("pass_end", 902, phase="p", name="B1", mod=mod)
    emit("pass_end", 901, phase="p", name="A1", mod=mod)
    emit("session_end", 901, ok=True)
    emit("session_end", 902, ok=True)
    a, b = tracer.finished
    assert [r.name for r in a.records] == ["A1"] and [r.name for r in b.records] == ["B1"]
    assert a.run_dir != b.run_dir


def test_failed_pass_is_recorded_with_its_input(tmp_path):
    tracer = lt._Tracer(lt.Config("both", str(tmp_path)))
    mod = tvm.IRModule({"main": add_one()})
    tracer(events.Event("session_start", 7, {"name": "main", "backend": "cpu",
                                             "target": "cpu"}))
    tracer(events.Event("pass_start", 7, {"phase": "lower_loops", "name": "Boom", "mod": mod}))
    tracer(events.Event("session_end", 7, {"ok": False, "error": ValueError("exploded"),
                                           "phase": "lower_loops"}))
    session = tracer.finished[-1]
    rec = session.records[-1]
    assert rec.status == "failed" and "ValueError: exploded" in rec.error_msg
    assert "def main" in rec.before_text
    files = sorted(p.name for p in (session.run_dir / "lower_loops").iterdir())
    assert files == ["00_Boom_before.tir", "00_Boom_error.txt"]
    recs, end = _records(session.run_dir / "report.html")
    assert end["ok"] is False and recs[-1]["status"] == "failed"


def test_one_shot_api(tmp_path, capsys):
    func = add_one()
    html = tmp_path / "api.html"
    steps = lt.lower_trace(func, [("Simplify", tvm.tirx.transform.StmtSimplify()),
                                  tvm.tirx.transform.RemoveNoOp()], mode="both",
                           html_path=html)
    assert steps[0]["name"] == "Simplify"
    for step in steps:
        assert set(step) >= {"name", "before_script", "after_script", "diff_lines",
                             "insertions", "deletions", "changed"}
        assert step["changed"] == (step["before_script"] != step["after_script"])
    recs, end = _records(html)
    assert len(recs) == 2 and end["ok"] is True
    assert "[lower_trace]" in capsys.readouterr().out


def test_one_shot_failure_is_shown_then_reraised(tmp_path, capsys):
    def boom(mod):
        raise RuntimeError("pass exploded")

    html = tmp_path / "fail.html"
    with pytest.raises(RuntimeError, match="pass exploded"):
        lt.lower_trace(add_one(), [("Boom", boom)], mode="both", html_path=html)
    out = capsys.readouterr().out
    assert "[FAILED] Boom: RuntimeError: pass exploded" in out and "def main" in out
    recs, end = _records(html)
    assert recs[0]["status"] == "failed" and end["ok"] is False


def test_edit_and_recompile_with_a_source_executor(tmp_path, capsys):
    lt.enable("html", tmp_path)
    a = torch.arange(256, dtype=torch.float32)
    tilewright.compile(add_one(), out_idx=[-1], target="cpu", execution_backend="llvm-ir")
    working = tmp_path / lt.script_name() / "codegen.ll"
    text = working.read_text()
    assert "1.000000e+00" in text
    working.write_text(text.replace("1.000000e+00", "2.000000e+00"))
    lt.enable("html", tmp_path)  # a new run of the script
    kernel = tilewright.compile(add_one(), out_idx=[-1], target="cpu", execution_backend="llvm-ir")
    assert "PATCHED from" in capsys.readouterr().err
    torch.testing.assert_close(kernel(a), a + 2)
    # the default executor builds from the module: a NOTE names the one that would compile it
    lt.enable("html", tmp_path)
    kernel = tilewright.compile(add_one(), out_idx=[-1], target="cpu")
    err = capsys.readouterr().err
    assert "PATCHED" in err and "NOTE" in err and "'llvm-ir'" in err
    torch.testing.assert_close(kernel(a), a + 1)


def test_broken_edit_shows_the_compiler_message_at_the_line(tmp_path):
    lt.enable("html", tmp_path)
    tilewright.compile(add_one(), out_idx=[-1], target="cpu", execution_backend="llvm-ir")
    working = tmp_path / lt.script_name() / "codegen.ll"
    lines = working.read_text().splitlines()
    lines[9] = "this line is not LLVM IR"
    working.write_text("\n".join(lines) + "\n")
    lt.enable("html", tmp_path)
    with pytest.raises(tilewright.TilewrightError, match=r"kernel\.ll:10:1: error"):
        tilewright.compile(add_one(), out_idx=[-1], target="cpu", execution_backend="llvm-ir")


@pytest.mark.parametrize("edit,base,new,status,use", [
    (None, None, "gen", lt.INIT, None),
    ("gen", "gen", "gen", lt.UNCHANGED, None),
    ("old", "old", "gen", lt.UPDATED, None),
    ("mine", "gen", "gen", lt.PATCHED, "mine"),
    ("gen2", "gen1", "gen2", lt.SYNCED, None),
    ("mine", "gen1", "gen2", lt.CONFLICT, None),
    ("stray", None, "gen", lt.INIT_BACKUP, None),
])
def test_codegen_file_decisions(tmp_path, edit, base, new, status, use):
    working, original = tmp_path / "codegen.cu", tmp_path / "codegen.cu.original"
    if edit is not None:
        working.write_text(edit)
    if base is not None:
        original.write_text(base)
    assert lt.TraceSession._decide(working, original, new) == (status, use)
    if status == lt.CONFLICT:
        assert (tmp_path / "codegen.cu.bak").read_text() == "mine"
        assert (tmp_path / "codegen.cu.original.bak").read_text() == "gen1"
    if status == lt.INIT_BACKUP:
        assert (tmp_path / "codegen.cu.bak").read_text() == "stray"
    if status != lt.PATCHED:
        assert working.read_text() == new and original.read_text() == new


def test_unwritable_folder_warns_once_and_compiles(tmp_path, monkeypatch):
    monkeypatch.setattr(lt, "_warned_io", False)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    lt.enable("html", blocker / "trace")
    a = torch.arange(256, dtype=torch.float32)
    with pytest.warns(RuntimeWarning, match="cannot write the trace") as record:  # noqa: PT031
        k1 = tilewright.compile(add_one(), out_idx=[-1], target="cpu")
        k2 = tilewright.compile(add_one(512), out_idx=[-1], target="cpu")
    assert len([w for w in record if "cannot write" in str(w.message)]) == 1
    torch.testing.assert_close(k1(a), a + 1)
    assert k2 is not None


def test_environment_switch_is_read_at_import(tmp_path):
    script = tmp_path / "envtrace.py"
    here = str(Path(__file__).parent)
    script.write_text(
        f"import sys\nsys.path.insert(0, {here!r})\nimport tilewright\nfrom tool_kernels "
        "import add_one\ntilewright.compile(add_one(), out_idx=[-1], target='cpu')\n")
    env = {"TILEWRIGHT_LOWER_TRACE": "terminal", "TILEWRIGHT_LOWER_TRACE_DIR": str(tmp_path),
           "TILEWRIGHT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert re.search(r"\[lower_trace\] [o*] 06 lower_tile_ops/LowerTileOps  \+\d+ -\d+",
                     out.stdout)
    assert re.search(r"\[lower_trace\] # \d+ codegen/codegen", out.stdout)
    assert "more lines of generated source" in out.stdout
    bad = subprocess.run([sys.executable, "-c", "import tilewright"], check=False,
                         capture_output=True, text=True,
                         env={**env, "TILEWRIGHT_LOWER_TRACE": "fancy"}, timeout=60)
    assert bad.returncode != 0 and "valid modes" in bad.stderr


@pytest.mark.parametrize("kind", ["cuda", "ascend", "interp"])
def test_other_backends_are_traced_too(tmp_path, kind):
    from tilewright.plugin import get_manager
    from tilewright.tools import compile_kernel_source

    backends = [b for b in get_manager().backends().values() if kind in b.target_kinds]
    if not backends:
        pytest.skip(f"no installed backend claims target {kind!r}")
    lt.enable("html", tmp_path)
    text = compile_kernel_source(add_one(), kind)
    session = lt.last_sessions()[-1]
    assert session.info["backend"] == backends[0].name
    ext = backends[0].codegens[kind].file_ext
    assert (tmp_path / lt.script_name() / f"codegen.{ext}").read_text() == text
    phases = {r.phase for r in session.records}
    assert {p.name for p in backends[0].pipelines[kind].phases} & phases
    assert session.records[-1].status == "codegen"


def test_report_is_copied_where_links_are_impossible(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError("symlinks not supported here")

    monkeypatch.setattr(lt.os, "symlink", no_links)
    lt.enable("html", tmp_path)
    tilewright.compile(add_one(), out_idx=[-1], target="cpu")
    root = tmp_path / lt.script_name()
    link = root / "report.html"
    assert not link.is_symlink()
    assert link.read_text() == (_run_dir(root) / "report.html").read_text()
    assert 'class="tw-end"' in link.read_text()  # the final copy, not the first one
