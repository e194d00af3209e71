"""How many random tile programs the differential fuzzer generates and checks per minute on
the CPU backend (each: traced, run on the interpreter, compiled for and run on the backend,
compared). Target: at least 20 per minute on 2 cores.

Run: python bench/fuzz_rate.py [--examples N] [--seed S] [--backend NAME]. The fuzzer runs in
a subprocess exactly as a backend author runs it (pytest --pyargs tilewright_sdk.fuzz) with a
private cache, so every program is compiled; the rate counts the fuzzing test alone, not
pytest's start-up. The load average is printed with it: on a shared machine other processes
take cores from the fuzzer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_PER_MINUTE = 20.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tw-fuzz-rate-") as tmp:
        env = {**os.environ, "TILEWRIGHT_CACHE_DIR": str(Path(tmp) / "cache")}
        load_before = os.getloadavg()[0]
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
             "tilewright_sdk.fuzz", "--tilewright-backend", args.backend, "--examples",
             str(args.examples), "--seed", str(args.seed), "--tilewright-report", tmp,
             "--tilewright-fuzz-dir", str(Path(tmp) / "repro")],
            capture_output=True, text=True, env=env, check=False)
        load_after = os.getloadavg()[0]
        report = Path(tmp) / f"fuzz-{args.backend}.json"
        if not report.exists():
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            return 2
        stats = json.loads(report.read_text())["fuzz"]
    checked = stats["executed"] + stats["compiled"]
    rate = stats["programs_per_minute"]
    print(json.dumps({"backend": args.backend, "seed": args.seed, "programs": stats["programs"],
                      "checked": checked, "refused": sum(stats["refused"].values()),
                      "seconds": stats["seconds"], "programs_per_minute": rate,
                      "target_per_minute": TARGET_PER_MINUTE, "cores": os.cpu_count(),
                      "load_average": [round(load_before, 1), round(load_after, 1)],
                      "failures": len(stats["failures"])}, indent=1))
    verdict = "meets" if rate >= TARGET_PER_MINUTE else "misses"
    print(f"{rate:.1f} programs/minute on {args.backend} ({checked} checked in "
          f"{stats['seconds']} s) {verdict} the target of {TARGET_PER_MINUTE:g}; "
          f"{os.cpu_count()} cores, load average {load_before:.1f} -> {load_after:.1f}")
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
