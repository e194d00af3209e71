"""The GPU correctness checks without a GPU: bench/checks.py covers the whole conformance
catalogue, every example and the dialect and benchmark kernels; build_bundles.py builds them
into bundles that ``harness.py --list`` accepts (and rejects when broken); the harness's
sanitizer batching (bench/check_runner.py) pins errors, crashes and hangs on single checks,
tried with a fake runner."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
ROOT = BENCH.parents[1]
sys.path.insert(0, str(BENCH))

import build_bundles  # noqa: E402 - after the sys.path setup
import check_runner  # noqa: E402
import checks  # noqa: E402
import cuda_cases  # noqa: E402
import harness  # noqa: E402
from tilewright.jit.signature import signature_of  # noqa: E402
from tilewright.runtime import load, open_bundle  # noqa: E402
from tilewright.runtime.signature import ParamSpec  # noqa: E402
from tilewright.testing import compare, tolerance  # noqa: E402
from tilewright_sdk.conformance.catalogue import cases  # noqa: E402


def test_every_catalogue_case_example_and_dialect_kernel_is_checked():
    every = checks.every_check()
    names = [c.name for c in every]
    assert len(names) == len(set(names))
    assert {f"conformance-{c.id}" for c in cases()} <= set(names)
    assert {f"example-{n}" for n in cuda_cases.NAMES} <= set(names)
    # torch_package.py defines no kernel: it lists other examples' kernels for a wheel
    examples = {p.stem for p in (ROOT / "examples").glob("*.py")} - {"torch_package"}
    covered = {n.split("-", 1)[1] for n in names if n.startswith("example-")}
    assert all(any(c.startswith(e) for c in covered) for e in examples), examples
    dialect = {n for n in names if n.startswith("dialect-")}
    assert {"dialect-ws_gemm", "dialect-cluster_scale", "dialect-bench_gemm_float16_multicast",
            "dialect-bench_attention_float16_multicast",
            "dialect-bench_gemm_float16_persistent"} <= dialect
    # the features the host emulation tests alone (their kernels imported from those tests)
    assert {"dialect-tma_column_blocks", "dialect-tma_wide_store", "dialect-named_barrier_break",
            "dialect-spread_layernorm_bwd", "dialect-ws_role_fragments", "dialect-topk_selector",
            "dialect-block_atomic_tickets", "dialect-use_swizzle_col",
            "dialect-sync_reversed_rows", "dialect-sync_compaction_tickets",
            "dialect-wgmma_stage_k_halves",
            "dialect-tma_scores_through_shared", "dialect-gemv_5_rows_int8",
            "dialect-mla_decode"} <= dialect


def _late_bound_names(tree: ast.Module) -> list[str]:
    """Names a lambda of a module-level function reads free where the function binds them
    again after the lambda, or where they are the target of a loop around the lambda: the
    lambda would read the last binding when the check is built, not the one it was written
    beside (it resized the fp8 checks once, and several GEMM checks before that)."""
    found = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        bound, loops = {}, []
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.For, ast.AugAssign)) else []
            for name in (n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                bound.setdefault(name.id, []).append(node.lineno)
            if isinstance(node, ast.For):
                loops.append(node)
        for lam in (n for n in ast.walk(fn) if isinstance(n, ast.Lambda)):
            own = {a.arg for a in lam.args.args}
            around = {n.id for loop in loops if loop.lineno < lam.lineno <= loop.end_lineno
                      for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
            for name in (n.id for n in ast.walk(lam.body) if isinstance(n, ast.Name)):
                if name not in own and (name in around or any(
                        line > lam.lineno for line in bound.get(name, ()))):
                    found.append(f"{fn.name}:{lam.lineno} {name}")
    return found


def test_no_check_lambda_reads_a_name_bound_again_later():
    assert _late_bound_names(ast.parse((BENCH / "checks.py").read_text())) == []
    # ... and the scan sees the defect it is for
    bad = "def f():\n    m = 1\n    g = lambda: m\n    for m in (2, 3):\n        h = lambda: m\n"
    assert _late_bound_names(ast.parse(bad)) == ["f:3 m", "f:5 m"]


def test_emulated_features_runs_fit_their_kernels():
    """Each checks.emulated() run has an argument per kernel parameter, of its dtype and
    shape, an expected value per output, and sorts only outputs (no build: the kernels are
    parsed, not lowered; their runs pass in host emulation in the tests they come from)."""
    for check in checks.emulated():
        params = signature_of(check.make(), None).params
        for run in check.runs():
            assert harness.check_arguments({"runs": [vars(run)]}, params) == [], check.name


def test_unordered_outputs_compare_sorted_and_are_checked():
    tickets = torch.tensor([[3, 0, 5], [1, 4, 2]], dtype=torch.int32)
    want = torch.arange(6).reshape(2, 3).double()
    assert torch.equal(check_runner.in_order(tickets, "all").double(),
                       check_runner.in_order(want, "all"))
    rows = check_runner.in_order(torch.tensor([[9, 1, 5], [2, 8, 0]]), "rows")
    assert rows.tolist() == [[1, 5, 9], [0, 2, 8]]
    with pytest.raises(ValueError, match="'cols' is not one of"):
        check_runner.in_order(tickets, "cols")
    # a ticket handed out twice (a lost atomic) still fails once sorted
    twice = torch.tensor([[3, 0, 5], [1, 3, 2]], dtype=torch.int32)
    assert not compare(check_runner.in_order(twice, "all"), check_runner.in_order(want, "all"),
                       dtype="int32").ok
    params = [ParamSpec("C", (1,), "int32"), ParamSpec("T", (2, 3), "int32")]
    run = {"args": [torch.zeros(1, dtype=torch.int32), tickets], "outputs": [0, 1],
           "expected": [want[:1, :1].flatten(), want]}
    assert harness.check_arguments({"runs": [{**run, "unordered": {1: "all"}}]}, params) == []
    bad = harness.check_arguments({"runs": [{**run, "unordered": {2: "all"}}]}, params)
    assert bad and "unordered output 2" in bad[0]
    # a scalar parameter (test_cuda_emulate.while_rows' row count) takes a number
    rows = [*params, ParamSpec("rows", (), "int32", kind="scalar")]
    assert harness.check_arguments({"runs": [{**run, "args": [*run["args"], 192]}]}, rows) == []
    bad = harness.check_arguments({"runs": [{**run, "args": [*run["args"], tickets]}]}, rows)
    assert bad and "argument rows is Tensor, the kernel takes a scalar of dtype int32" in bad[0]


def test_a_dynamic_case_runs_at_the_suites_two_sizes():
    check = next(c for c in checks.conformance() if c.name.endswith("-dynamic"))
    runs = check.runs()
    assert len(runs) == 2 and runs[0].args[0].shape != runs[1].args[0].shape
    for run in runs:  # outputs poisoned, one expected value per output
        assert all(run.args[i].isnan().all() for i in run.outputs)
        assert len(run.outputs) == len(run.expected)


def _list(bundles: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "core")}
    return subprocess.run([sys.executable, str(BENCH / "harness.py"), "--bundles",
                           str(bundles), "--list"], capture_output=True, text=True, env=env,
                          check=False, timeout=300)


@pytest.mark.nvrtc
def test_checks_build_into_bundles_the_harness_lists(tmp_path, monkeypatch):
    # dialect-block_atomic_tickets: tickets compared sorted; dialect-sync_scaled_difference:
    # judged by the float16 tolerance model; float4_casts: a packed float4 argument;
    # dialect-mla_decode: 128 float32 accumulators a thread beside the loop's addresses, listed
    # only when ptxas spills nothing
    only = ("conformance-copy-float16-full,example-row_reduce,dialect-block_atomic_tickets,"
            "dialect-sync_scaled_difference,conformance-float4_casts-float4_e2m1fn-full,"
            "dialect-mla_decode")
    monkeypatch.setattr(sys, "argv", ["build_bundles.py", "--out", str(tmp_path), "--checks",
                                      "only", "--only", only])
    assert build_bundles.main() == 0
    index = json.loads((tmp_path / "checks" / "index.json").read_text())
    assert sorted(index) == sorted(only.split(","))
    assert {e["status"] for e in index.values()} == {"bundled"}
    good = _list(tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "6 bundles" in good.stdout and "0 broken" in good.stdout
    mla = open_bundle(tmp_path / "checks" / "dialect-mla_decode").json("case")["build"]
    assert not mla["spill_bytes"] and mla["registers"] <= 255, mla
    # stored as the compiled kernel takes it (the harness calls it so): one code a byte
    codes = check_runner.check_data(open_bundle(
        tmp_path / "checks" / "conformance-float4_casts-float4_e2m1fn-full"))["runs"][0]["args"][0]
    assert codes.dtype == torch.uint8 and list(codes.shape) == [16] and int(codes.max()) < 16
    tickets = open_bundle(tmp_path / "checks" / "dialect-block_atomic_tickets")
    assert check_runner.check_data(tickets)["runs"][0]["unordered"] == {1: "all"}
    scaled = open_bundle(tmp_path / "checks" / "dialect-sync_scaled_difference")
    assert scaled.json("case")["tolerance_dtype"] == "float16"
    # a stored argument that no longer fits the kernel is caught (a changed file fails the
    # bundle's own checks: tests/reliability)
    bundle = open_bundle(tmp_path / "checks" / "example-row_reduce")
    data = check_runner.check_data(bundle)
    params = load(bundle.path).signature.params
    assert harness.check_arguments(data, params) == []
    data["runs"][0]["args"][0] = data["runs"][0]["args"][0][:5]
    assert "the kernel takes float32 [20, 300]" in harness.check_arguments(data, params)[0]
    # the child process reports the check; here, without a GPU, as an error that leaves no
    # CUDA context to run the next one in (the process stops after it)
    run = check_runner.process_runner(BENCH / "harness.py", tmp_path / "checks", None, 300)
    outcome = run(None, ["example-row_reduce", "conformance-copy-float16-full"])
    first = outcome.results["example-row_reduce"]
    if first["result"] == "ok":
        assert outcome.complete and outcome.errors == 0
    else:
        assert first["fatal"] and list(outcome.results) == ["example-row_reduce"]
        assert not outcome.complete and not outcome.timed_out
    # rebuilding one check keeps the other's bundle and row
    monkeypatch.setattr(sys, "argv", ["build_bundles.py", "--out", str(tmp_path), "--checks",
                                      "only", "--only", "example-row_reduce"])
    assert build_bundles.main() == 0
    index = json.loads((tmp_path / "checks" / "index.json").read_text())
    assert sorted(index) == sorted(only.split(","))
    assert (tmp_path / "checks" / "conformance-copy-float16-full" / "manifest.json").exists()


def test_sanitizer_summaries_are_counted():
    assert check_runner.sanitizer_errors("========= ERROR SUMMARY: 0 errors\n") == 0
    assert check_runner.sanitizer_errors("========= ERROR SUMMARY: 3 errors\n") == 3
    assert check_runner.sanitizer_errors(
        "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n") == 1
    assert check_runner.sanitizer_errors("no summary at all") is None


def _fake(bad: dict):
    """A runner whose checks are ok, except ``bad``: name -> "errors" (the sanitizer counts
    two), "crash" (the process ends there, unreported) or "fatal" (reported, then the process
    stops: the CUDA context is lost)."""
    calls = []

    def run(tool, names):
        calls.append((tool, list(names)))
        ended = [n for n in names if bad.get(n) in ("crash", "fatal")]
        reached = names[:names.index(ended[0])] if ended else names
        results = {n: {"result": "ok", "max_error": 0.0, "tolerance_ratio": 0.1}
                   for n in reached}
        if ended and bad[ended[0]] == "fatal":
            results[ended[0]] = {"result": "error", "detail": "illegal address", "fatal": True}
        errors = sum(bad.get(n) == "errors" for n in reached) * 2 if tool else 0
        return check_runner.Outcome(results, errors, not ended, "log")

    return run, calls


def test_errors_and_crashes_are_pinned_on_single_checks():
    names = [f"c{i}" for i in range(16)]
    run, calls = _fake({"c3": "errors", "c12": "crash"})
    into = check_runner.Verdicts()
    check_runner.attribute(run, "memcheck", names, into)
    assert into.tools["c3"] == {"memcheck": "2 errors"}
    assert into.tools["c12"] == {"memcheck": "crashed or timed out"}
    assert all(into.tools[n] == {"memcheck": "clean"} for n in names if n not in ("c3", "c12"))
    assert "c12" not in into.results and into.results["c0"]["result"] == "ok"
    # the crash is pinned at once (the first check that never reported); the errors bisected
    assert calls[1] == ("memcheck", names[:12]) and calls[-1] == ("memcheck", names[13:])
    assert len(calls) <= 3 + 2 * 4
    clean, calls = _fake({})
    check_runner.attribute(clean, "memcheck", names, check_runner.Verdicts())
    assert len(calls) == 1


def test_a_check_that_loses_the_context_or_hangs_costs_one_process_not_a_bisection():
    names = [f"c{i}" for i in range(64)]
    run, calls = _fake({"c5": "fatal", "c40": "crash"})
    into = check_runner.Verdicts()
    check_runner.attribute(run, None, names, into)
    assert [c[1][0] for c in calls] == ["c0", "c6", "c41"]
    assert into.tools["c5"] == {"plain": "lost the CUDA context"}
    assert into.results["c5"]["detail"] == "illegal address"
    assert into.tools["c40"] == {"plain": "crashed or timed out"}
    assert "c40" not in into.results
    assert all(into.tools[n] == {"plain": "not sanitized"} for n in names
               if n not in ("c5", "c40"))
    assert all(into.results[n]["result"] == "ok" for n in names if n not in ("c5", "c40"))
    assert check_runner.culprit(["a", "b"], {"a": {}, "b": {}}) is None


def test_a_run_out_of_time_stops_its_process_and_keeps_every_finished_batch(tmp_path):
    # the plan's step limit: the process running at the end is stopped (its checks: not
    # run), the batches before it keep their verdicts, and each batch's end is saved
    slow = tmp_path / "slow.py"
    slow.write_text("import time; time.sleep(60)\n")
    start = check_runner.time.monotonic()
    run = check_runner.process_runner(slow, tmp_path, None, 300, stop_at=start + 1.0)
    outcome = run(None, ["a"])
    assert outcome.out_of_time and outcome.timed_out and not outcome.complete
    assert check_runner.time.monotonic() - start < 30
    fake, _ = _fake({})

    def ends_in_racecheck(tool, names):
        if tool == "racecheck":
            return check_runner.Outcome({}, None, False, "log", True, out_of_time=True)
        return fake(tool, names)

    cases = {n: {"shared_memory": True, "barriers": True} for n in ("a", "b", "c")}
    saved = []
    into = check_runner.sanitize_all(ends_in_racecheck, cases, ("memcheck", "racecheck"), 2,
                                     progress=lambda v: saved.append(dict(v.tools["a"])))
    assert into.tools["a"] == {"plain": "not sanitized", "memcheck": "clean",
                               "racecheck": "not run (time budget)"}
    assert saved[0] == {"plain": "not sanitized"} and len(saved) == 6  # 3 tools x 2 batches
    assert not any(check_runner.trouble(r) for r in check_runner.rows(
        {n: {"status": "bundled", "dtype": "float16", "group": "g"} for n in cases}, into))
    # a plain run the time ended: its checks that never reported did not run (not "crashed")
    cut = check_runner.sanitize_all(
        lambda tool, names: check_runner.Outcome(
            {"a": {"result": "ok", "max_error": 0.0, "tolerance_ratio": 0.1}}, 0, False, "log",
            True, out_of_time=True), {"a": {}, "b": {}}, (), 8)
    rows = check_runner.rows({n: {"status": "bundled", "dtype": "float16", "group": "g"}
                              for n in "ab"}, cut)
    assert [(r["result"], r["sanitizer"]) for r in rows] == [
        ("ok", "plain not sanitized"), ("not run", "plain not run (time budget)")]


def test_a_stopped_batch_takes_the_sanitizers_target_process_with_it(tmp_path):
    # compute-sanitizer runs the checks in a child process: a timeout stops both
    pid = tmp_path / "pid"
    out, code = check_runner.group_run(
        ["bash", "-c", f"sleep 60 & echo $! > {pid}; echo started; wait"], 1.0)
    assert code is None and "started" in out and not check_runner.GROUPS
    check_runner.time.sleep(0.2)
    stat = Path(f"/proc/{int(pid.read_text())}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith("Z")  # or a zombie
    assert check_runner.group_run(["bash", "-c", "echo ok; exit 3"], 10) == ("ok\n", 3)


def test_race_and_sync_checks_cover_shared_memory_with_barriers_within_the_budget():
    cases = {"a": {"shared_memory": True, "barriers": True},
             "b": {"shared_memory": False, "barriers": False}}
    run, calls = _fake({})
    into = check_runner.sanitize_all(run, cases, check_runner.TOOLS, batch=8)
    assert [tool for tool, _ in calls] == [None, "memcheck", "racecheck", "synccheck"]
    assert into.tools["a"] == {"plain": "not sanitized", **{t: "clean" for t in
                                                            check_runner.TOOLS}}
    assert into.tools["b"] == {"plain": "not sanitized", "memcheck": "clean"}
    into = check_runner.sanitize_all(run, cases, check_runner.TOOLS, batch=8, deadline=0)
    assert into.results["a"]["result"] == "ok"  # the plain run is never cut by the budget
    assert into.tools["a"]["memcheck"] == "not run (time budget)"
    assert into.tools["a"]["racecheck"] == "not run (time budget)"
    plain = check_runner.sanitize_all(run, cases, (), batch=8)
    assert plain.tools["b"] == {"plain": "not sanitized"}
    calls.clear()
    check_runner.sanitize_all(run, cases, ("synccheck",), batch=8)
    assert calls == [(None, ["a", "b"]), ("synccheck", ["a"])]
    with pytest.raises(ValueError, match="unknown sanitizer tools"):
        check_runner.sanitize_all(run, cases, ("initcheck",), batch=8)


def test_a_sanitizer_that_refuses_the_device_is_named_not_used(tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\necho '========= Error: Device not supported'\nexit 1\n")
    fake.chmod(0o755)
    assert "Device not supported" in check_runner.sanitizer_refusal(str(fake))


def test_the_table_has_a_row_per_check_with_result_error_and_verdict():
    index = {"x": {"group": "conformance", "dtype": "float16", "status": "bundled"},
             "y": {"group": "conformance", "dtype": "float32", "status": "unsupported",
                   "reason": "does not declare op foo"},
             "z": {"group": "example", "dtype": "float32", "status": "bundled"}}
    verdicts = check_runner.Verdicts(
        results={"x": {"result": "ok", "max_error": 1e-3, "tolerance_ratio": 0.25}},
        tools={"x": {"memcheck": "clean"}, "z": {"memcheck": "crashed or timed out"}})
    rows = check_runner.rows(index, verdicts)
    text = check_runner.table(rows)
    assert "| x | float16 | ok | 1.00e-03 (0.25 of tol) | memcheck clean |" in text
    assert "| y | float32 | unsupported | - | - |" in text
    assert "| z | float32 | crashed | - | memcheck crashed or timed out |" in text
    assert not check_runner.healthy(rows)
    assert check_runner.healthy(rows[:2])


def test_the_tolerance_ratio_is_one_at_the_models_bound():
    want = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    tol = tolerance("float16")
    edge = want + (tol.atol + tol.rtol * want.abs())
    assert check_runner.tolerance_ratio(torch, edge, want, tol) == pytest.approx(1.0)
    nan = torch.tensor([float("nan"), 0.0, 0.0], dtype=torch.float64)
    assert check_runner.tolerance_ratio(torch, nan, want, tol) == float("inf")


def _round_mantissa(x, bits: int):
    """``x`` rounded to ``bits`` significant bits (a model of a narrow accumulator)."""
    mantissa, exponent = torch.frexp(x)
    return torch.ldexp(torch.round(mantissa * 2.0 ** bits) / 2.0 ** bits, exponent)


def test_fp8_tensor_core_accumulation_has_its_own_model():
    # The H200 (2026-12-04) put fp8 wgmma's products 127x past float32's model at K = 512:
    # its accumulator keeps about 14 bits. A 14-bit accumulator, rounded after each k32 step,
    # passes the fp8_tensor_core model and fails float32's; a wrong element fails both.
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn).double()
    b = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn).double()
    want = a @ b.T
    acc = torch.zeros_like(want)
    for k in range(0, 512, 32):
        acc = _round_mantissa(acc + a[:, k:k + 32] @ b[:, k:k + 32].T, 14)
    got = acc.float()
    assert compare(got, want, reduction_length=512, accum_dtype="fp8_tensor_core").ok
    assert not compare(got, want, reduction_length=512).ok
    got[3, 5] += 1.0
    assert not compare(got, want, reduction_length=512, accum_dtype="fp8_tensor_core").ok
    low = [c for c in checks.dialect() if c.name.startswith("dialect-gemm_low_precision_f")]
    assert low and {c.accum_dtype for c in low} == {"fp8_tensor_core"}


def test_a_wrong_matrix_says_which_tiles_and_where_inside_them(monkeypatch):
    monkeypatch.setattr(harness, "torch", torch, raising=False)
    want = torch.randn(256, 512, generator=torch.Generator().manual_seed(0))
    assert harness.where_wrong(want.clone(), want, 2e-2, 1e-2, (128, 128)) is None
    got = want.clone()
    got[128:256, :128] += 5.0  # one whole tile
    got[5, 300] = float("nan")  # one element of another
    wrong = harness.where_wrong(got, want, 2e-2, 1e-2, (128, 128))
    assert (wrong["wrong"], wrong["tiles"]) == (128 * 128 + 1, 8)
    assert (wrong["tiles_all_wrong"], wrong["tiles_partly"]) == (1, 1)
    assert wrong["by_16_rows"][0] == 16 * 128 + 1 and wrong["by_8_cols"][5] == 128 * 8 + 1
    assert wrong["worst"][:2] == [5, 300]


def test_pack_archives_the_bundles_and_run_unpacks_them(tmp_path):
    # the check bundles exceed what a device run carries: pack them here, unpack them there
    bench = tmp_path / "backend-cuda" / "bench"
    (bench / "bundles" / "checks" / "a").mkdir(parents=True)
    (bench / "bundles" / "quick").mkdir()
    (bench / "bundles" / "checks" / "a" / "case.json").write_text('{"x": 1}')
    (bench / "bundles" / "quick" / "q.json").write_text("{}")
    script = bench / "run_h200.sh"
    script.write_text((BENCH / "run_h200.sh").read_text())
    (tmp_path / ".git" / "info").mkdir(parents=True)
    subprocess.run(["bash", str(script), "pack"], check=True, capture_output=True)
    assert (tmp_path / ".devpack" / "bundles.tar.xz").exists()
    assert "/.devpack/" in (tmp_path / ".git" / "info" / "exclude").read_text()
    shutil.rmtree(bench / "bundles")
    subprocess.run(["bash", str(script), "run", str(tmp_path / "out")], check=True,
                   capture_output=True, env={**os.environ, "PYTHON": "true"})
    assert (bench / "bundles" / "checks" / "a" / "case.json").read_text() == '{"x": 1}'
    assert not (bench / "bundles" / "quick").exists()  # the quick sizes only with --quick


def test_pack_with_a_plan_takes_only_its_bundles_and_refuses_what_cannot_be_carried(tmp_path):
    bench = tmp_path / "backend-cuda" / "bench"
    for name in ("row_a", "row_b", "checks/c1", "checks/c2", "checks/c3", "checks/conf-x",
                 "checks/conf-y", "checks/dialect-bench_z", "checks/dialect-block_w",
                 "checks/dialect-tma_v"):
        (bench / "bundles" / name).mkdir(parents=True)
        (bench / "bundles" / name / "x.bin").write_bytes(os.urandom(4096))
    (bench / "bundles" / "checks" / "index.json").write_text("{}")
    script = bench / "run_h200.sh"
    script.write_text((BENCH / "run_h200.sh").read_text())
    (tmp_path / ".git" / "info").mkdir(parents=True)
    plan = bench / "test.plan"
    plan.write_text("ROWS=row_a\nCHECKS=c1\nSWEEP=c3,conf-*,dialect-[!b]*,dialect-block*\n"
                    "NCU_ROWS=row_a\n")
    subprocess.run(["bash", str(script), "pack", "--plan", str(plan)], check=True,
                   capture_output=True)
    listed = subprocess.run(["tar", "-tJf", str(tmp_path / ".devpack" / "bundles.tar.xz")],
                            check=True, capture_output=True, text=True).stdout.split()
    tops = {"/".join(n.split("/")[:3 if n.startswith("bundles/checks/") else 2])
            for n in listed}
    assert sorted(tops) == [
        "bundles/checks/c1", "bundles/checks/c3", "bundles/checks/conf-x",
        "bundles/checks/conf-y", "bundles/checks/dialect-block_w", "bundles/checks/dialect-tma_v",
        "bundles/checks/index.json", "bundles/row_a"]
    # a plan naming what is not built, and an archive over the limit, are refused
    plan.write_text("ROWS=row_z\n")
    bad = subprocess.run(["bash", str(script), "pack", "--plan", str(plan)],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "names bundles/row_z, which is not built" in bad.stderr
    plan.write_text("SWEEP=nothing-*\n")  # a pattern that picks nothing is a mistake too
    bad = subprocess.run(["bash", str(script), "pack", "--plan", str(plan)],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "names bundles/checks/nothing-*, which is not" in bad.stderr
    big = subprocess.run(["bash", str(script), "pack"], capture_output=True, text=True,
                         env={**os.environ, "PACK_LIMIT_MB": "0"})
    assert big.returncode == 1 and "over the 0 MiB a device run can carry" in big.stderr


def test_the_next_plan_packs_within_what_a_device_run_carries():
    # what pack --plan takes for next-run.plan: its rows and named checks, never "all" (the
    # whole catalogue's checks are over the limit)
    settings = dict(line.split("=", 1) for line in (BENCH / "next-run.plan").read_text()
                    .splitlines() if line and not line.startswith("#"))
    assert settings.get("CHECKS") != "all" and settings.get("SWEEP") != "all"


FAKE_NCU = """#!/usr/bin/env bash
# records its arguments; a profile writes the -o report, an import prints its page
echo "$@" >> "$(dirname "$0")/calls"
if [ "$1" = --import ]; then echo "page of $2"; exit 0; fi
while [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2.ncu-rep"; shift; done
"""


def test_ncu_profiles_each_row_and_writes_its_pages(tmp_path):
    # run_h200.sh ncu OUTDIR ROW ...: one Nsight Compute profile of each row's kernel through
    # the harness's --child, then its details page and its stall samples per SASS instruction
    bench = tmp_path / "backend-cuda" / "bench"
    (bench / "bundles" / "gemm_b").mkdir(parents=True)  # a kernel sequence: its first kernel
    (bench / "bundles" / "gemm_b" / "manifest.json").write_text(
        '{"arch": "sm_90a", "entry": "main_0_kernel,main_1_kernel"}')
    script = bench / "run_h200.sh"
    script.write_text((BENCH / "run_h200.sh").read_text())
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ncu").write_text(FAKE_NCU)
    (tools / "ncu").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "PYTHON": "true"}
    out = tmp_path / "out"
    subprocess.run(["bash", str(script), "ncu", str(out), "gemm_a", "gemm_b"], check=True,
                   capture_output=True, env=env)
    calls = (tools / "calls").read_text().splitlines()
    assert len(calls) == 6  # per row: the profile, the details page, the source page
    assert "--child gemm_a" in calls[0] and "-k main_kernel" in calls[0]
    assert "--section SourceCounters" in calls[0] and calls[1].startswith("--import")
    assert "--print-source sass" in calls[2] and "--child gemm_b" in calls[3]
    assert "-k main_0_kernel --launch-skip 2" in calls[3]
    assert "page of" in (out / "gemm_b.txt").read_text()
    assert (out / "gemm_a.sass.csv").read_text().startswith("page of")
    usage = subprocess.run(["bash", str(script), "ncu", str(out)], capture_output=True,
                           text=True, env=env)
    assert usage.returncode == 2 and "ROW" in usage.stderr


FAKE_PYTHON = """#!/usr/bin/env bash
# records the harness's arguments; SLEEP makes the benchmark step overrun its limit; the
# benchmark step writes one row's results; targets.py runs for real
case "$1" in *targets.py) exec "$REAL_PYTHON" "$@";; esac
echo "$@" >> "$(dirname "$0")/calls"
case "$*" in *"--checks none"*)
  sleep "${SLEEP:-0}"
  out="$(echo "$*" | sed 's/.*--out \\([^ ]*\\).*/\\1/')"
  mkdir -p "$out"
  case='{"kind": "gemm", "dtype": "float16", "M": 4096, "N": 4096, "K": 4096}'
  echo '{"results": {"gemm_float16_4096": {"status": "ok", "ratio": 1.01, "case": '"$case"'}}}' \\
    > "$out/results.json";;
esac
"""


def _plan_run(tmp_path, plan: str, sleep: int = 0):
    bench = tmp_path / "backend-cuda" / "bench"
    (bench / "bundles").mkdir(parents=True)
    script = bench / "run_h200.sh"
    script.write_text((BENCH / "run_h200.sh").read_text())
    (bench / "targets.py").write_text((BENCH / "targets.py").read_text())
    (bench / "test.plan").write_text(plan)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in (("ncu", FAKE_NCU), ("python", FAKE_PYTHON)):
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "PYTHON": str(tools / "python"),
           "SLEEP": str(sleep), "REAL_PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    out = tmp_path / "out"
    subprocess.run(["bash", str(script), "plan", str(out), str(bench / "test.plan")],
                   check=True, capture_output=True, env=env)
    return out, (tools / "calls").read_text().splitlines()


def test_plan_runs_rows_checks_and_both_profiles_in_order(tmp_path):
    # run_h200.sh plan OUTDIR PLAN: one device session from a file of settings
    out, calls = _plan_run(tmp_path, "ROWS=gemm_a,gemm_b\nCHECKS=all\nNCU_ROWS=gemm_a\n"
                                     "NCU_PEER_ROWS=gemm_a,gemm_b\nSWEEP=all\n")
    assert "--only gemm_a,gemm_b" in calls[0] and "--checks none" in calls[0]
    assert "--checks only" in calls[1] and "--only" not in calls[1]  # all checks
    assert "--tools memcheck,racecheck,synccheck" in calls[1]
    assert "--checks-stop 110" in calls[1]  # the step's 120 s less the time to write
    assert "-k main_kernel" in calls[2] and "--child gemm_a" in calls[2]
    peer = [c for c in calls[3:] if "--child" in c]
    assert [c.split("--child ")[1].split()[0] for c in peer] == ["gemm_a", "gemm_b"]
    assert all("regex:nvjet" in c and "main_kernel" not in c for c in peer)
    log = (out / "plan.log").read_text().splitlines()
    assert [line.split(":")[0] for line in log] == ["bench", "checks", "ncu", "ncu-peer",
                                                    "sweep"]
    assert "--checks only" in calls[-1] and "--only" not in calls[-1]  # the sweep: all
    assert "--tools memcheck,racecheck " in calls[-1]
    assert all(line.endswith("exit 0") for line in log)
    # what comes back from a device run: at most 8 files, the steps' files in one archive
    assert sorted(p.name for p in out.iterdir()) == [
        "ncu-peer-reports.tar", "ncu-reports.tar", "plan.log", "results.tar.xz", "targets.md"]
    listed = subprocess.run(["tar", "-tJf", str(out / "results.tar.xz")], check=True,
                            capture_output=True, text=True).stdout.split()
    assert {"./plan.txt", "./plan.log", "./bench.out", "./bench/results.json",
            "./ncu/gemm_a.txt", "./ncu-peer/gemm_b.txt"} <= set(listed)
    assert not any(name.endswith(".ncu-rep") for name in listed)
    reports = [subprocess.run(["tar", "-tf", str(out / f"{step}-reports.tar")], check=True,
                              capture_output=True, text=True).stdout.split()
               for step in ("ncu", "ncu-peer")]
    assert reports == [["ncu/gemm_a.ncu-rep"], ["ncu-peer/gemm_a.ncu-rep",
                                                "ncu-peer/gemm_b.ncu-rep"]]
    assert "| GEMM float16 4096^3 vs cuBLAS | >= 1.0 |" in (out / "targets.md").read_text()


def test_plan_step_over_its_limit_costs_only_that_step(tmp_path):
    out, calls = _plan_run(tmp_path, "ROWS=gemm_a\nBENCH_S=1\nCHECKS=check_x\n", sleep=5)
    log = (out / "plan.log").read_text().splitlines()
    assert log[0].startswith("bench: 1s limit") and log[0].endswith("exit 124")
    assert log[1].startswith("checks:") and log[1].endswith("exit 0")
    assert "--only check_x" in calls[1] and len(log) == 2  # no ncu rows: no ncu step


def test_next_run_plan_names_built_rows():
    # the committed plan names benchmark rows build_bundles.py builds
    settings = dict(line.split("=", 1) for line in (BENCH / "next-run.plan").read_text()
                    .splitlines() if line and not line.startswith("#"))
    built = {name for name, *_ in build_bundles.cases(quick=False)}
    for key in ("ROWS", "NCU_ROWS", "NCU_PEER_ROWS"):
        assert set(settings[key].split(",")) <= built, key
    # ... and checks checks.py makes (or all)
    named = [c.name for c in checks.every_check()]
    for key in ("CHECKS", "SWEEP"):
        if settings.get(key, "all") != "all":
            for item in settings[key].split(","):  # a name, or a pattern picking some
                assert harness.chosen(named, [item]), (key, item)


def test_checks_and_rows_are_picked_by_name_or_pattern_in_the_order_given():
    names = ["conformance-a", "conformance-b", "dialect-bench_x", "dialect-block_y",
             "dialect-tma_z", "example-e"]
    assert harness.chosen(names, []) == sorted(names)
    assert harness.chosen(names, ["example-e", "conformance-*", "dialect-[!b]*",
                                  "dialect-block*", "conformance-a", "gone"]) == [
        "example-e", "conformance-a", "conformance-b", "dialect-tma_z", "dialect-block_y"]


def test_a_check_the_plan_did_not_carry_is_reported_not_run(tmp_path):
    root = tmp_path / "checks"
    root.mkdir()
    (root / "index.json").write_text(json.dumps(
        {"c1": {"status": "bundled", "dtype": "float16", "group": "g"}}))
    args = harness.argparse.Namespace(bundles=tmp_path, out=tmp_path, sanitizer=None,
                                      batch_timeout=10, checks_stop=None, tools="", batch=8,
                                      checks_budget=10)
    assert not harness.device_checks(args, ["c*"])
    rows = json.loads((tmp_path / "checks.json").read_text())
    assert rows[0]["result"] == "not carried" and "no bundle" in rows[0]["detail"]
