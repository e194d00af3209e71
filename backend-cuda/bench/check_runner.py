"""The correctness checks on the GPU (bundles of checks.py, built by build_bundles.py), run by
``harness.py``: torch, cuda-python and ``tilewright.testing`` only (no TVM).

Each check's bundle holds its arguments and torch's float64 results (``check.pt``); a run
copies the arguments to the GPU (outputs poisoned with NaN), calls the kernel, and compares
each output with the tolerance model of ``tilewright.testing`` (``compare``: the dtype's unit
roundoff, the reduction length), reporting the largest error and its ratio to what the model
allows.

Under ``compute-sanitizer`` the checks run in batches, one process per batch and tool:
first every check plainly (the results: a sanitizer's slowdown never costs the table a
row), then memcheck over every check and racecheck and synccheck over those with shared memory
and barriers, while the time budget lasts. A batch the tool passes clean clears all its checks.
A process that ends early (a hang, a crash, a check that loses the CUDA context, which then
stops its process) pins the check it ended on and goes on after it; a batch the sanitizer finds
errors in is split in halves until each error is pinned on one check. A clean run costs one
process per batch and tool, a bad check a few more. Without ``compute-sanitizer`` (or where it
refuses the device) the checks run plainly alone and the verdict says so.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck")
RESULT = "RESULT "


# -- one process: run checks, print a RESULT line per check -------------------------------------
def check_data(bundle) -> dict:
    """The arguments and expected values a check bundle stores (its ``check`` file)."""
    import torch

    return torch.load(io.BytesIO(bundle.files["check"]), weights_only=True)


def run_checks(root: Path, names: list[str]) -> int:
    """Run the named check bundles under ``root`` in this process (the GPU's), printing
    ``RESULT <json>`` for each; a check that raises gets an error result, the others go on."""
    import torch
    from tilewright.runtime import load, open_bundle

    for name in names:
        start = time.perf_counter()
        try:
            result = run_one(torch, load(root / name), open_bundle(root / name))
        except Exception as exc:  # noqa: BLE001 - reported as this check's result
            result = {"result": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
            if not context_alive(torch):
                result["fatal"] = True  # the checks after it would all fail: stop here
        result["seconds"] = round(time.perf_counter() - start, 2)
        print(RESULT + json.dumps({"name": name, **result}), flush=True)
        if result.get("fatal"):
            return CONTEXT_LOST
    return 0


CONTEXT_LOST = 3


def context_alive(torch) -> bool:
    """Whether the process's CUDA context still runs work (a kernel's illegal address or
    trap makes every later call fail with the same error)."""
    try:
        torch.cuda.synchronize()
        return float((torch.ones(1, device="cuda") + 1).item()) == 2.0
    except Exception:  # noqa: BLE001 - any failure means the context is gone
        return False


def run_one(torch, kernel, bundle) -> dict:
    """Every run of one check on the GPU; ``result`` ok or FAILED with the worst output."""
    from tilewright.testing import compare

    case = bundle.json("case")
    data = check_data(bundle)
    worst = {"result": "ok", "max_error": 0.0, "tolerance_ratio": 0.0}
    for r, run in enumerate(data["runs"]):
        args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in run["args"]]  # scalars
        kernel.function(*args)
        torch.cuda.synchronize()
        unordered = run.get("unordered", {})
        for position, want in zip(run["outputs"], run["expected"]):
            got = args[position].cpu()
            if position in unordered:
                got, want = (in_order(x, unordered[position]) for x in (got, want))
            comparison = compare(got, want,
                                 dtype=case.get("tolerance_dtype") or str(got.dtype),
                                 reduction_length=case["reduction"],
                                 accum_dtype=case.get("accum_dtype"))
            ratio = tolerance_ratio(torch, got, want, comparison.tolerance)
            if ratio >= worst["tolerance_ratio"]:
                worst.update(max_error=comparison.max_abs_error, tolerance_ratio=ratio,
                             tolerance=comparison.tolerance.why)
            if not comparison.ok and worst["result"] == "ok":
                worst.update(result="FAILED",
                             detail=comparison.describe(f"run {r} output {position}")[:400])
    return worst


ORDERS = ("all", "rows")


def in_order(x, order: str):
    """An output whose values atomics hand out in the order the GPU runs them, sorted: the
    whole tensor (``all``, a flat vector) or along its last dimension (``rows``)."""
    if order not in ORDERS:
        raise ValueError(f"unordered output: {order!r} is not one of {ORDERS}")
    return x.flatten().sort().values if order == "all" else x.sort(dim=-1).values


def tolerance_ratio(torch, got, want, tol) -> float:
    """The largest ``|got - want| / (atol + rtol |want|)`` (1 is the model's bound; NaN or an
    infinite error where a finite value was expected counts as infinite)."""
    got, want = got.double(), want.double()
    err = (got - want).abs()
    same = (got.isnan() & want.isnan()) | (want.isinf() & (got == want))
    err = torch.where(same, torch.zeros_like(err), err.nan_to_num(nan=float("inf")))
    allowed = tol.atol + tol.rtol * want.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return float((err / allowed).max()) if err.numel() else 0.0


# -- the parent: batches under the sanitizer ---------------------------------------------------
@dataclass
class Outcome:
    """What one process over a batch gave: each check's result (by name), the errors the
    sanitizer counted (None: no summary seen), whether every check reported."""

    results: dict
    errors: int | None
    complete: bool
    log: str = ""
    timed_out: bool = False
    out_of_time: bool = False  # stopped at the run's end (``stop_at``), not for its own time


Runner = Callable[[str | None, list[str]], Outcome]


def sanitizer_errors(text: str) -> int | None:
    """The errors a compute-sanitizer run reported: its ``ERROR SUMMARY: N errors`` lines
    (memcheck, synccheck) and racecheck's ``(N errors, M warnings)``; None when neither."""
    counts = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) errors?", text)]
    counts += [int(n) for n in re.findall(r"\((\d+) errors?, \d+ warnings?\)", text)]
    return sum(counts) if counts else None


def process_runner(harness: Path, root: Path, sanitizer: str | None, timeout: float,
                   stop_at: float | None = None) -> Runner:
    """A :data:`Runner` that starts ``harness.py --run-checks`` on a batch, under
    ``sanitizer --tool TOOL`` when a tool is given; each process gets ``timeout`` seconds, and
    none runs past ``stop_at`` (a ``time.monotonic()`` value: the end of the run's time)."""

    def run(tool: str | None, names: list[str]) -> Outcome:
        cmd = [sys.executable, str(harness), "--bundles", str(root), "--run-checks",
               ",".join(names)]
        if tool is not None:
            cmd = [sanitizer, "--tool", tool, "--report-api-errors", "no", *cmd]
        limit = timeout if stop_at is None else max(1.0, min(timeout, stop_at - time.monotonic()))
        out, code = group_run(cmd, limit)
        timed_out = code is None
        if timed_out:
            out += f"\n(timed out after {limit:.0f} s)"
        results = {}
        for line in out.splitlines():
            if line.startswith(RESULT):
                item = json.loads(line[len(RESULT):])
                results[item.pop("name")] = item
        errors = 0 if tool is None else sanitizer_errors(out)
        complete = code == 0 and set(results) == set(names)
        return Outcome(results, errors, complete, out, timed_out,
                       out_of_time=timed_out and limit < timeout)

    return run


GROUPS: set[int] = set()  # the process groups of the batches running now


def group_run(cmd: list[str], timeout: float) -> tuple[str, int | None]:
    """``cmd``'s output (stdout, then stderr) and exit status, None when it ran past
    ``timeout`` and was stopped. It runs in a process group of its own, which a timeout stops
    whole: compute-sanitizer's target process would outlive a sanitizer killed alone, and
    keep the GPU busy into the next step. :func:`stop_groups` stops the groups running."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    GROUPS.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    finally:
        GROUPS.discard(proc.pid)
    return out + err, code


def stop_groups(signum, frame) -> None:
    """A signal handler (the caller's time limit: SIGTERM): the batches' process groups,
    which the signal to the caller's group does not reach, stop with it."""
    for group in list(GROUPS):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


@dataclass
class Verdicts:
    """Per check: its result (from the first tool's runs) and each tool's verdict."""

    results: dict = field(default_factory=dict)
    tools: dict = field(default_factory=dict)  # name -> {tool: verdict}
    logs: list = field(default_factory=list)
    processes: int = 0


def attribute(run: Runner, tool: str | None, names: list[str], into: Verdicts,
              deadline: float | None = None) -> None:
    """Run ``names`` as one batch; clean clears them all, anything else is split in halves
    until it is pinned on single checks. Past ``deadline`` (a ``time.monotonic()`` value) no
    batch starts: its checks say so."""
    if deadline is not None and time.monotonic() > deadline:
        for name in names:
            into.tools.setdefault(name, {})[tool or "plain"] = "not run (time budget)"
        return
    outcome = run(tool, names)
    into.processes += 1
    for name, result in outcome.results.items():
        into.results.setdefault(name, result)
    label = tool or "plain"
    if outcome.out_of_time:  # the run's time ended under this process: no verdict on it
        for name in names:
            plain = tool is None and name in outcome.results
            into.tools.setdefault(name, {})[label] = ("not sanitized" if plain else
                                                      "not run (time budget)")
        return
    if outcome.complete and outcome.errors == 0:
        for name in names:
            into.tools.setdefault(name, {})[label] = "clean" if tool else "not sanitized"
        return
    stop = None if outcome.complete else culprit(names, outcome.results)
    if stop is not None:  # one check ended the process: pin it, go on around it
        pin(into, label, names[stop], outcome)
        if tool is None:
            for name in names[:stop]:
                into.tools.setdefault(name, {})[label] = "not sanitized"
        elif stop:  # ran under the tool, but the process ended before its summary
            attribute(run, tool, names[:stop], into, deadline)
        if names[stop + 1:]:
            attribute(run, tool, names[stop + 1:], into, deadline)
        return
    if len(names) == 1:
        pin(into, label, names[0], outcome)
        return
    half = len(names) // 2
    attribute(run, tool, names[:half], into, deadline)
    attribute(run, tool, names[half:], into, deadline)


def culprit(names: list[str], results: dict) -> int | None:
    """The position of the check that ended an incomplete process: the one that reported
    losing the CUDA context, else the first that never reported (a hang, or a crash that took
    the process); None when every check reported."""
    for i, name in enumerate(names):
        if name not in results or results[name].get("fatal"):
            return i
    return None


def pin(into: Verdicts, label: str, name: str, outcome: Outcome) -> None:
    """Record one check's bad verdict and the end of its process's output."""
    if outcome.results.get(name, {}).get("fatal"):
        verdict = "lost the CUDA context"
    elif outcome.timed_out:  # a hang, or a sanitizer slower than the batch's time
        verdict = "timed out"
    elif not outcome.complete:
        verdict = "crashed or timed out"
    elif outcome.errors is None:
        verdict = "no summary"
    else:
        verdict = f"{outcome.errors} errors"
    into.tools.setdefault(name, {})[label] = verdict
    into.logs.append(f"== {label} {name}: {verdict}\n{outcome.log[-6000:]}")


def batches(names: list[str], size: int) -> list[list[str]]:
    return [names[i:i + size] for i in range(0, len(names), size)]


def sanitize_all(run: Runner, cases: dict, tools: tuple[str, ...], batch: int,
                 deadline: float | None = None,
                 progress: Callable[[Verdicts], None] | None = None) -> Verdicts:
    """Every bundled check plainly (the results, always all of them), then, while ``deadline``
    (a ``time.monotonic()`` value) allows, each of ``tools`` in order (of :data:`TOOLS`:
    memcheck over every check, racecheck and synccheck over those with shared memory and
    barriers), each over the checks in the order of ``cases`` (a plan's first checks are
    reached first); checks a tool did not reach say so. ``progress`` is told the verdicts
    after each batch (a run stopped from outside keeps what it had)."""
    into = Verdicts()
    names = list(cases)  # in the caller's order: a plan's first checks get every tool first
    synced = [n for n in names if cases[n].get("shared_memory") and cases[n].get("barriers")]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        raise ValueError(f"unknown sanitizer tools {sorted(unknown)}; known: {TOOLS}")
    plan = [(None, names)] + [(tool, names if tool == "memcheck" else synced)
                              for tool in tools]
    for n, (tool, subset) in enumerate(plan):
        for group in batches(subset, batch):
            attribute(run, tool, group, into, deadline if n else None)
            if progress is not None:
                progress(into)
    return into


PROBE = "import torch; print(float((torch.ones(4, device='cuda') * 2).sum().item()))"


def sanitizer_refusal(sanitizer: str, timeout: float = 90.0) -> str | None:
    """Why ``sanitizer`` cannot check this machine's kernels (it refuses the device on some
    virtual machines), or None when memcheck ran a small torch program clean."""
    try:
        proc = subprocess.run([sanitizer, "--tool", "memcheck", "--report-api-errors", "no",
                               sys.executable, "-c", PROBE],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    out = proc.stdout + proc.stderr
    if proc.returncode == 0 and "8.0" in proc.stdout and sanitizer_errors(out) == 0:
        return None
    return " / ".join(out.strip().splitlines()[-4:])[:300] or f"exit status {proc.returncode}"


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in ("/usr/local/cuda",):
        candidate = Path(home) / "bin" / "compute-sanitizer"
        if candidate.exists():
            return str(candidate)
    return None


# -- the table ---------------------------------------------------------------------------------
def rows(index: dict, verdicts: Verdicts) -> list[dict]:
    """One row per check of the index: name, dtype, result, error against the tolerance
    model, sanitizer verdict."""
    out = []
    for name, entry in sorted(index.items()):
        row = {"check": name, "dtype": entry["dtype"], "group": entry["group"]}
        if entry["status"] != "bundled":
            row.update(result=entry["status"], error="-", sanitizer="-",
                       detail=entry.get("reason", ""))
        else:
            result = verdicts.results.get(name)
            tools = verdicts.tools.get(name, {})
            if result is None:  # never reported: its process ended, or the run's time did
                row.update(result="not run" if tools.get("plain") == "not run (time budget)"
                           else "crashed", error="-")
            else:
                row.update(result=result["result"], detail=result.get("detail", ""),
                           error=f"{result['max_error']:.2e} ({result['tolerance_ratio']:.2f} "
                                 "of tol)" if "max_error" in result else "-")
            row["sanitizer"] = ", ".join(f"{t} {v}" for t, v in tools.items()) or "-"
        out.append(row)
    return out


def table(rows_: list[dict]) -> str:
    """The rows as a Markdown table, then a count of each result."""
    lines = ["| check | dtype | result | max error (of the tolerance) | sanitizer |",
             "|---|---|---|---|---|"]
    counts: dict = {}
    for r in rows_:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
        lines.append(f"| {r['check']} | {r['dtype']} | {r['result']} | {r['error']} | "
                     f"{r['sanitizer']} |")
    lines.append("")
    lines.append("checks: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return "\n".join(lines)


def trouble(row: dict) -> bool:
    """Whether a row is a bundled check that did not pass, or that a sanitizer flagged
    (unsupported cases are not failures)."""
    return row["result"] not in ("ok", "unsupported") or any(
        bad in row["sanitizer"] for bad in ("errors", "crashed", "no summary"))


def healthy(rows_: list[dict]) -> bool:
    """Every bundled check ran ok and clean."""
    return not any(trouble(r) for r in rows_)
