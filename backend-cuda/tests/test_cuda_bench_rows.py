"""The benchmark rows without a GPU: harness.py runs them in the order a plan gives, in
worker processes (bench/row_runner.py) that a hang, a crash or a lost CUDA context costs one
row, tried with a fake worker."""

import json
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import build_bundles  # noqa: E402 - after the sys.path setup
import harness  # noqa: E402
import row_runner  # noqa: E402
import targets  # noqa: E402

# a worker as harness.py --child is one: ROW, log lines, RESULT for each name it is given;
# a name says how the row goes wrong
FAKE_WORKER = r"""
import json, os, sys, time
names = sys.argv[1].split(",")
with open(sys.argv[2], "a") as starts:
    starts.write(sys.argv[1] + "\n")
if names[0] == "boot_crash":
    sys.exit("ImportError: no torch here")
for name in names:
    print("ROW " + name, flush=True)
    print("  log of " + name, flush=True)
    if name == "hang":
        sys.stdout.write("half a line")
        sys.stdout.flush()
        time.sleep(60)
    if name == "crash":
        print("Segmentation fault in the driver", file=sys.stderr, flush=True)
        os._exit(139)
    result = {"name": name, "status": "ok", "ours_ms": 1.0}
    if name == "fatal":
        result = {"name": name, "status": "FAILED: illegal address", "fatal": True}
    print("RESULT " + json.dumps(result), flush=True)
    if result.get("fatal"):
        sys.exit(3)
"""


def _run(tmp_path, names, timeout=5.0):
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE_WORKER)
    starts = tmp_path / "starts"
    starts.touch()
    logged = []
    rows = list(row_runner.run_rows(
        lambda pending: [sys.executable, str(worker), ",".join(pending), str(starts)],
        names, timeout, logged.append))
    return rows, starts.read_text().split(), logged


def test_rows_run_in_one_worker_in_the_order_given(tmp_path):
    rows, starts, logged = _run(tmp_path, ["b", "a", "c"])
    assert [name for name, _ in rows] == ["b", "a", "c"]
    assert all(r["status"] == "ok" and r["seconds"] >= 0 for _, r in rows)
    assert starts == ["b,a,c"]  # one process for the whole run
    assert logged[:2] == ["b:", "    log of b"]


def test_a_hang_a_crash_and_a_lost_context_cost_one_row_each(tmp_path):
    started = time.monotonic()
    rows, starts, logged = _run(tmp_path, ["a", "hang", "b", "crash", "c", "fatal", "d"],
                                timeout=2.0)
    got = {name: r["status"] for name, r in rows}
    assert [name for name, _ in rows] == ["a", "hang", "b", "crash", "c", "fatal", "d"]
    assert got["hang"] == "FAILED: timed out after 2 s (a hang?)"
    assert got["crash"] == "FAILED: Segmentation fault in the driver"
    assert got["fatal"] == "FAILED: illegal address"
    assert all(got[n] == "ok" for n in "abcd")
    # a fresh worker after each: the rest of the names, in order
    assert starts == ["a,hang,b,crash,c,fatal,d", "b,crash,c,fatal,d", "c,fatal,d", "d"]
    assert "  [stderr] Segmentation fault in the driver" in logged
    assert "    half a line" not in logged and time.monotonic() - started < 20


def test_a_worker_that_cannot_start_blames_one_row_at_a_time(tmp_path):
    rows, starts, _ = _run(tmp_path, ["boot_crash", "a"])
    assert rows[0] == ("boot_crash", {"status": "FAILED: ImportError: no torch here",
                                      "seconds": rows[0][1]["seconds"]})
    assert rows[1][1]["status"] == "ok" and starts == ["boot_crash,a", "a"]


def test_a_worker_that_prints_nothing_and_hangs_costs_its_first_row(tmp_path):
    worker = tmp_path / "silent.py"
    worker.write_text("import time; time.sleep(60)\n")
    rows = list(row_runner.run_rows(lambda pending: [sys.executable, str(worker)], ["x"],
                                    1.0, lambda line: None))
    assert rows == [("x", {"status": "FAILED: timed out after 1 s (a hang?)",
                           "seconds": rows[0][1]["seconds"]})]


def test_the_harness_measures_the_ceilings_then_the_rows_in_the_plans_order(
        tmp_path, monkeypatch):
    bundles = tmp_path / "bundles"
    for name in ("gemm_a", "gemm_b", "gemm_c"):
        (bundles / name).mkdir(parents=True)
        (bundles / name / "manifest.json").write_text("{}")
    (bundles / "checks" / "check_x").mkdir(parents=True)
    seen = {}

    def fake_rows(command, names, timeout, log):
        seen.update(names=names, command=command(names), timeout=timeout)
        yield "ceilings", {"status": "ok", "copy_tbps": 4.0, "gpu": "H200 (132 SMs)",
                           "torch": "2", "cuda": "13", "bf16_matmul_tflops": 740.0}
        for name in names[1:]:
            yield name, {"status": "ok", "ours_ms": 1.0, "peer_ms": 1.0, "ratio": 1.0,
                         "ours_tflops": 1.0, "peer": "cuBLAS", "seconds": 1.0}

    monkeypatch.setattr(row_runner, "run_rows", fake_rows)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", [
        "harness.py", "--bundles", str(bundles), "--out", str(out), "--checks", "none",
        "--timeout", "40", "--only", "gemm_c,gemm_a,check_x,gemm_zz,gemm_c"])
    assert harness.main() == 1  # gemm_zz is not built
    assert seen["names"] == ["ceilings", "gemm_c", "gemm_a"] and seen["timeout"] == 40
    assert seen["command"][-2:] == ["--child", "ceilings,gemm_c,gemm_a"]
    results = json.loads((out / "results.json").read_text())
    assert list(results["results"]) == ["gemm_zz", "gemm_c", "gemm_a"]
    assert results["results"]["gemm_zz"]["status"] == "FAILED: not built"
    assert results["ceilings"]["copy_tbps"] == 4.0


@pytest.mark.parametrize("only,want", [("", ["a", "b", "c"]), ("c,a", ["c", "a"])])
def test_bundles_keep_the_order_they_are_named_in(tmp_path, only, want):
    for name in "bac":
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    (tmp_path / "d").mkdir()  # not a bundle
    only = [s for s in only.split(",") if s]
    assert [p.name for p in harness.bundles_in(tmp_path, only)] == want


def test_a_worker_prints_each_row_and_stops_after_one_that_lost_the_context(
        tmp_path, monkeypatch, capsys):
    # harness.py --child a,b,c: the worker's side of the protocol, torch's CUDA faked
    alive = {"a": True, "b": False}

    class Bundle:
        manifest = {"files": {"binary": {"sha256": "ab" * 32}}}

        def __init__(self, path):
            self.name = Path(path).name

        def json(self, _):
            return {"kind": "gemm", "M": 64, "config": {"block_M": 64}, "build": {}}

    def fake_case(name, kernel, case, ceil):
        if name == "b":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return {"ours_ms": 2.0, "ceil": ceil["copy_tbps"]}

    monkeypatch.setattr(harness, "load", lambda path: None)
    monkeypatch.setattr(harness, "open_bundle", Bundle)
    monkeypatch.setattr(harness, "run_case", fake_case)
    monkeypatch.setattr(harness.check_runner, "context_alive",
                        lambda torch: alive[current[-1]])
    current = []
    real_measure = harness.measure

    def measure(path, ceil):
        current.append(path.name)
        return real_measure(path, ceil)

    monkeypatch.setattr(harness, "measure", measure)
    monkeypatch.setattr(harness, "torch", None)  # child() imports it
    args = harness.argparse.Namespace(bundles=tmp_path, budget=0.1, child="a,b,c",
                                      ceilings=json.dumps({"copy_tbps": 4.0}))
    assert harness.child(args) == harness.check_runner.CONTEXT_LOST
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith(("ROW ", "RESULT "))]
    assert lines[0] == "ROW a" and lines[2] == "ROW b" and len(lines) == 4  # c never starts
    first, second = (json.loads(line[len("RESULT "):]) for line in (lines[1], lines[3]))
    assert first == {"name": "a", "ours_ms": 2.0, "ceil": 4.0, "status": "ok",
                     "case": {"kind": "gemm", "M": 64}, "binary": "ab" * 8}
    assert second["status"].startswith("FAILED: RuntimeError: CUDA error: an illegal")
    assert second["fatal"] is True


def _result(ratio, binary="k1", m=4096, kind="gemm", dtype="float16", status="ok"):
    case = {"kind": kind, "dtype": dtype, "M": m, "N": 8192 if kind == "w4a16" else m,
            "K": 8192 if kind == "w4a16" else m}
    return {"status": status, "ratio": ratio if status == "ok" else None, "case": case,
            "binary": binary}


def test_targets_rank_each_issues_rows_and_say_which_default_to_change(tmp_path):
    run1 = {"results": {"gemm_float16_4096": _result(0.94),
                        "gemm_float16_4096_pio": _result(0.98),
                        "gemm_float16_4096_sk": _result(0.80, binary="old"),
                        "w4a16_m1_8192": _result(2.6, m=1, kind="w4a16"),
                        "int8_gemm_4096": _result(1.1, kind="int8_gemm", dtype="int8")}}
    run2 = {"results": {"gemm_float16_4096": _result(0.96),
                        "gemm_float16_4096_pio": _result(1.02),
                        "gemm_float16_4096_sk": _result(0.99, binary="new"),
                        "gemm_float16_4096_mc": _result(None, status="FAILED: timed out")}}
    found = targets.verdicts(targets.collect([run1, run2], None))
    gemm = next(v for v in found if v.target.default == "gemm_float16_4096")
    # the median of the runs of one kernel; a row rebuilt since counts its new kernel only
    assert [(r.name, r.ratio) for r in gemm.ranked] == [
        ("gemm_float16_4096_pio", 1.0), ("gemm_float16_4096_sk", 0.99),
        ("gemm_float16_4096", 0.95)]
    assert gemm.met and gemm.change and [r.name for r in gemm.failed] == ["gemm_float16_4096_mc"]
    w4 = next(v for v in found if v.target.default == "w4a16_m1_8192")
    assert w4.met and not w4.change  # the default is the best
    text = targets.table(found)
    assert "`gemm_float16_4096` -> `gemm_float16_4096_pio`" in text
    assert "`gemm_float16_4096_mc` (GEMM float16 4096^3 vs cuBLAS): FAILED: timed out" in text
    assert "int8" not in text  # no target: no row
    (tmp_path / "r.json").write_text(json.dumps(run1))
    assert targets.main([str(tmp_path / "r.json")]) == 0


def test_older_results_take_their_cases_from_the_bundles(tmp_path):
    (tmp_path / "gemm_bfloat16_8192").mkdir()
    (tmp_path / "gemm_bfloat16_8192" / "case.json").write_text(json.dumps(
        {"kind": "gemm", "dtype": "bfloat16", "M": 8192, "N": 8192, "K": 8192,
         "config": {}, "build": {}}))
    old = {"results": {"gemm_bfloat16_8192": {"status": "ok", "ratio": 0.99},
                       "gone_row": {"status": "ok", "ratio": 9.0}}}
    found = targets.verdicts(targets.collect([old], tmp_path))
    bf16 = next(v for v in found if v.target.default == "gemm_bfloat16_8192")
    assert [r.name for r in bf16.ranked] == ["gemm_bfloat16_8192"] and not bf16.met
    assert all(r.name != "gone_row" for v in found for r in v.ranked)


def test_every_targets_default_row_is_built():
    built = {name: case for name, case, *_ in build_bundles.cases(quick=False)}
    for target in targets.TARGETS:
        assert target.default in built, target
        assert target.takes(targets.identity(built[target.default])), target
