"""The kit for the first machine that has CANN.

``python -m tilewright_ascend.kit.cann --out DIR`` writes every source of the source set
(:mod:`.sources`) to ``DIR/sources``, compiles each with bisheng for dav-2201 (the command the
bisheng executor uses), and, where torch_npu reports a device (an NPU, or the CANN simulator
behind torch_npu), runs the conformance suite on the ``bisheng`` executor and the seed examples
against torch. It writes ``DIR/RESULTS.md``: one row per kernel (compiled or the first error
line, seconds) and one per run (passed, failed or skipped with the reason), and keeps every
log under ``DIR/logs``. Nothing runs where a tool is missing: the table says which.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..executor import bisheng_command
from .sources import REPO, source_set

NPU_PROBE = ("import torch, torch_npu; "
             "print('npu' if torch.npu.is_available() else 'none')")


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    what: str
    kind: str  # compile, conformance, seed
    status: str  # ok, failed, skipped
    detail: str = ""
    seconds: float = 0.0


def toolchain() -> str | None:
    """Why bisheng cannot compile here, or None."""
    if not os.environ.get("ASCEND_HOME_PATH"):
        return "ASCEND_HOME_PATH is not set (source ascend-toolkit/set_env.sh)"
    if shutil.which("bisheng") is None:
        return "bisheng is not on PATH"
    return None


def device() -> str | None:
    """Why no kernel can run here, or None when torch_npu reports a device."""
    proc = subprocess.run([sys.executable, "-c", NPU_PROBE], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["torch_npu does not import"])[-1]
        return f"torch_npu is not usable: {tail}"
    if proc.stdout.strip() != "npu":
        return "torch_npu reports no device (no NPU, no simulator)"
    return None


def compile_one(name: str, text: str, out: Path) -> Row:
    stem = name.replace("/", "__")
    source = out / "sources" / f"{stem}.cpp"
    library = out / "build" / f"{stem}.so"
    source.write_text(text)
    reason = toolchain()
    if reason:
        return Row(name, "compile", "skipped", reason)
    start = time.time()
    proc = subprocess.run(bisheng_command(os.environ["ASCEND_HOME_PATH"], source, library),
                          capture_output=True, text=True)
    seconds = time.time() - start
    (out / "logs" / f"{stem}.bisheng.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        return Row(name, "compile", "failed", (errors or ["bisheng failed"])[0][:200], seconds)
    return Row(name, "compile", "ok", "", seconds)


def compile_all(out: Path, only=(), jobs: int = 2) -> list[Row]:
    for sub in ("sources", "build", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    kernels = [k for k in source_set() if not only or k.name in only]
    sources = {}
    rows = []
    for k in kernels:
        try:
            sources[k.name] = k.source()
        except Exception as exc:  # noqa: BLE001 - the table reports what did not lower
            rows.append(Row(k.name, "compile", "failed", f"does not lower: {exc}"[:200]))
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        rows += list(pool.map(lambda item: compile_one(*item, out), sources.items()))
    return rows


def conformance_command(junit: Path) -> list[str]:
    """The conformance suite on the Ascend backend, executing (the bisheng executor is the
    first available one where an NPU is)."""
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
            "tilewright_sdk.conformance", "--tilewright-backend", "ascend",
            "--tilewright-mode", "execute", f"--junitxml={junit}", "-q"]


def run_conformance(out: Path) -> list[Row]:
    junit = out / "logs" / "conformance.xml"
    proc = subprocess.run(conformance_command(junit), capture_output=True, text=True)
    (out / "logs" / "conformance.log").write_text(proc.stdout + proc.stderr)
    if not junit.exists():
        return [Row("conformance suite", "conformance", "failed", "pytest wrote no report")]
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        status, detail = "ok", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, detail = "failed", (child.get("message") or "")[:200]
            elif child.tag == "skipped":
                status, detail = "skipped", (child.get("message") or "")[:200]
        rows.append(Row(case.get("name", "?"), "conformance", status, detail,
                        float(case.get("time", 0))))
    return rows


def run_seed(out: Path, repo: Path = REPO) -> list[Row]:
    script = repo / "backend-ascend" / "examples" / "ascend_kernels.py"
    start = time.time()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    (out / "logs" / "seed.log").write_text(proc.stdout + proc.stderr)
    tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1]
    return [Row("backend-ascend/examples/ascend_kernels.py", "seed",
                "failed" if proc.returncode else "ok", tail[:200], time.time() - start)]


def table(rows: list[Row]) -> str:
    counts = {}
    for r in rows:
        counts[(r.kind, r.status)] = counts.get((r.kind, r.status), 0) + 1
    summary = ", ".join(f"{kind} {status}: {n}" for (kind, status), n in sorted(counts.items()))
    lines = ["# tilewright-ascend on CANN", "", summary, "",
             "| kernel or case | step | result | seconds | detail |", "|---|---|---|---|---|"]
    for r in rows:
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.what} | {r.kind} | {r.status} | {r.seconds:.1f} | {detail} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for sources, logs and "
                                                                 "RESULTS.md")
    parser.add_argument("--only", nargs="*", default=(), help="kernel names to compile "
                                                             "(default: the whole source set)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    out = args.out
    rows = compile_all(out, tuple(args.only), args.jobs)
    reason = toolchain() or device()
    if reason:
        rows += [Row("conformance suite", "conformance", "skipped", reason),
                 Row("seed examples", "seed", "skipped", reason)]
    else:
        rows += run_conformance(out) + run_seed(out)
    (out / "RESULTS.md").write_text(table(rows))
    failed = [r for r in rows if r.status == "failed"]
    print(f"{len(rows)} rows, {len(failed)} failed: {out / 'RESULTS.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
