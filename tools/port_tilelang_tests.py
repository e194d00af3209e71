"""Port TileLang's own language tests to tilewright mechanically and run them.

    python tools/port_tilelang_tests.py --checkout /path/to/tilelang --target cpu

The second public corpus beside the examples (tools/port_tilelang_examples.py, whose port
this reuses: imports renamed, CUDA devices mapped to the host, the same shim): the test files
of TileLang's ``testing/python/language``, each run by pytest with ``TILEWRIGHT_TARGET``
naming the backend and ``$TILEWRIGHT_TESTING_ASSUME_CUDA`` set, so that TileLang's
``requires_cuda*`` decorators let its tests run on that backend. A file using a GPU-only API
(the examples' list) is not run. The table gives each file's passed / failed / skipped counts
and each failed test with the first line of its error; ``--json FILE`` writes them. A failure
is either a gap of tilewright's (a missing name, a refusal, a wrong answer) or a test that
checks what only TileLang's CUDA backend makes (its generated source's text): read the error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from port_tilelang_examples import GPU_ONLY, SHIM, port_source

TESTS = Path("testing/python/language")


@dataclass
class FileResult:
    test_file: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    not_portable: str = ""
    failures: dict = field(default_factory=dict)  # test -> first line of its error


def gpu_only(source: str) -> str:
    return ", ".join(reason for pattern, reason in GPU_ONLY if re.search(pattern, source, re.M))


def _first_line(case) -> str:
    """The error's first line: pytest's ``E`` line of the exception where the report has one
    (a collection error's message says only "collection failure")."""
    for kind in ("failure", "error"):
        node = case.find(kind)
        if node is not None:
            raised = [line[1:].strip() for line in (node.text or "").splitlines()
                      if line.startswith("E ") and line[1:].strip()]
            message = (node.get("message") or "").strip().splitlines()
            first = raised[-1] if raised and (not message or "collection" in message[0]) \
                else (message[0] if message else kind)
            return first[:200]
    return ""


def run_file(path: Path, work: Path, target: str, timeout: float) -> FileResult:
    result = FileResult(path.name)
    source = path.read_text(errors="replace")
    result.not_portable = gpu_only(source)
    if result.not_portable:
        return result
    (work / path.name).write_text(port_source(source))
    report = work / f"{path.stem}.xml"
    # the caller's PYTHONPATH after the shim: a checkout named there is the one tested
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work / "_shim"),
                                                        os.environ.get("PYTHONPATH", "")]),
           "TILEWRIGHT_TARGET": target,
           "TILEWRIGHT_TESTING_ASSUME_CUDA": "9.0"}
    try:
        subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "-o", "addopts=", f"--junitxml={report}", path.name], cwd=work,
                       env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        result.failures["(file)"] = f"timeout: over {timeout:.0f} s"
        result.failed += 1
        return result
    if not report.exists():
        result.failures["(file)"] = "pytest wrote no report"
        result.failed += 1
        return result
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "?")
        if case.find("skipped") is not None:
            result.skipped += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            result.failed += 1
            result.failures[name] = _first_line(case)
        else:
            result.passed += 1
    return result


def table(results: list[FileResult]) -> str:
    lines = []
    for r in results:
        if r.not_portable:
            lines.append(f"{r.test_file}: not portable ({r.not_portable})")
            continue
        lines.append(f"{r.test_file}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped")
        lines += [f"    {name}: {message}" for name, message in r.failures.items()]
    run = [r for r in results if not r.not_portable]
    passed, failed = sum(r.passed for r in run), sum(r.failed for r in run)
    clean = sum(1 for r in run if r.failed == 0 and r.passed)
    lines.append("")
    lines.append(f"files: {len(results)}, portable: {len(run)}, all passing: {clean}; "
                 f"tests passed: {passed}, failed: {failed}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True,
                        help="a TileLang source tree (its testing/python/language)")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--only", action="append", default=[],
                        help="run the files whose name contains this text (repeatable)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    files = sorted((args.checkout / TESTS).glob("test_*.py"))
    if args.only:
        files = [f for f in files if any(o in f.name for o in args.only)]
    if not files:
        parser.error(f"no test files under {args.checkout / TESTS}")
    results = []
    with tempfile.TemporaryDirectory(prefix="tw-port-tests-") as tmp:
        work = Path(tmp)
        (work / "_shim").mkdir()
        (work / "_shim" / "sitecustomize.py").write_text(SHIM)
        for path in files:
            results.append(run_file(path, work, args.target, args.timeout))
            print(table(results[-1:]).split("\n\n")[0], flush=True)
        shutil.rmtree(work / "_shim")
    print()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
