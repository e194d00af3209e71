"""Lowering time (tracing + ``tilewright.lower`` to source, no build) of a fixed set of kernels
per backend, in one process after a warm-up.

The kernels:

- ``cuda-bench``: the CUDA benchmark kernels at the issue's sizes, as
  ``backend-cuda/bench/build_bundles.py`` builds them (sm_90a, with each bundle's pass
  configs);
- ``cuda``, ``cpu``, ``ascend``: a sample of the conformance catalogue, one case per
  catalogue kernel (the first the backend declares support for, ``full`` variants first;
  ``--all-cases``: every such case); cuda lowers for sm_80 (as the host emulation tests do),
  ascend for the A2/A3 target.

A warm-up lowers one kernel per backend first (plugin loading, first-call caches), then every
kernel is traced and lowered once; the per-kernel times (tracing included), the 5 slowest and
the totals per backend are printed, with the wall time of each pipeline phase and of codegen
summed over the backend's kernels, and the process's CPU time. ``--profile`` profiles the
measured loop with cProfile and prints its top entries (cumulative and own time).
``--hashes FILE`` writes the SHA-256 of every generated source to FILE (JSON), to check that a
change keeps the generated code byte-identical: run it before and after and compare.

Run: python bench/lowering_time.py [--backends cuda-bench,cuda,cpu,ascend] [--profile]
        [--top 30] [--hashes FILE] [--all-cases] [--quiet]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend-cuda" / "bench"))

import build_bundles  # noqa: E402 - after the sys.path setup
import tilewright  # noqa: E402
from tilewright.plugin.manager import get_manager  # noqa: E402
from tilewright_sdk.conformance.catalogue import cases  # noqa: E402
from tilewright_sdk.conformance.runner import missing_capabilities  # noqa: E402

BACKENDS = ("cuda-bench", "cuda", "cpu", "ascend")
TARGETS = {"cuda": "cuda -arch=sm_80", "cpu": "cpu", "ascend": "ascend"}


def bench_kernels():
    """(name, PrimFunc, tracing seconds, target, pass configs) of the CUDA benchmark bundles."""
    # build_bundles.cases traces each kernel as it yields it: that step is its tracing time
    out = []
    gen = build_bundles.cases(False)
    while True:
        start = time.process_time()
        try:
            name, _case, func, _sass, configs = next(gen)
        except StopIteration:
            break
        out.append((name, func, time.process_time() - start, "cuda -arch=sm_90a", configs))
    return out


def catalogue_kernels(backend_name: str, all_cases: bool):
    """(name, case) of the catalogue sample ``backend_name`` declares support for."""
    backend = get_manager().backends()[backend_name]
    chosen, seen = [], set()
    ordered = sorted(cases(), key=lambda c: c.variant != "full")
    for case in ordered:
        if not all_cases and case.kernel.name in seen:
            continue
        case = case.narrowed(backend.capabilities.dtypes)
        if missing_capabilities(case, backend):
            continue
        seen.add(case.kernel.name)
        chosen.append((case.id, case))
    chosen.sort(key=lambda item: item[0])
    return chosen


def lower_one(func, target, configs, phases: dict) -> str:
    """The source of ``func`` lowered for ``target``; adds the phases' times to ``phases``."""
    lowered = tilewright.lower(func, target, pass_configs=configs or None)
    for phase, seconds in lowered.ctx.timings.items():
        phases[phase] = phases.get(phase, 0.0) + seconds
    return lowered.source.text


def measure(backends, all_cases: bool, profiler):
    """{backend: [(kernel name, seconds, source sha256)]}, {backend: {phase: wall seconds}}."""
    results, phase_times = {}, {}
    for backend in backends:
        phases = phase_times[backend] = {}
        if backend == "cuda-bench":
            kernels = bench_kernels()
            lower_one(kernels[0][1], kernels[0][3], kernels[0][4], {})  # warm-up
            rows = []
            for name, func, trace_s, target, configs in kernels:
                if profiler:
                    profiler.enable()
                start = time.process_time()
                text = lower_one(func, target, configs, phases)
                spent = time.process_time() - start + trace_s
                if profiler:
                    profiler.disable()
                rows.append((name, spent, hashlib.sha256(text.encode()).hexdigest()))
        else:
            kernels = catalogue_kernels(backend, all_cases)
            first = kernels[0][1]
            lower_one(first.kernel.make(first.dtype, **first.dims), TARGETS[backend], None, {})
            rows = []
            for name, case in kernels:
                if profiler:
                    profiler.enable()
                start = time.process_time()
                func = case.kernel.make(case.dtype, **case.dims)
                try:
                    text = lower_one(func, TARGETS[backend], None, phases)
                except Exception as exc:  # a case the backend refuses at lowering
                    text = f"refused: {type(exc).__name__}: {exc}"
                spent = time.process_time() - start
                if profiler:
                    profiler.disable()
                rows.append((name, spent, hashlib.sha256(text.encode()).hexdigest()))
        results[backend] = rows
    return results, phase_times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated, of {', '.join(BACKENDS)}")
    parser.add_argument("--profile", action="store_true", help="cProfile the measured loop")
    parser.add_argument("--top", type=int, default=30, help="profile entries to print")
    parser.add_argument("--hashes", help="write the sources' SHA-256 to this JSON file")
    parser.add_argument("--all-cases", action="store_true",
                        help="every catalogue case, not one per kernel")
    parser.add_argument("--quiet", action="store_true", help="no per-kernel lines")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose of {', '.join(BACKENDS)}")

    profiler = cProfile.Profile() if args.profile else None
    cpu0 = time.process_time()
    results, phase_times = measure(backends, args.all_cases, profiler)
    cpu = time.process_time() - cpu0
    grand = 0.0
    for backend, rows in results.items():
        total = sum(r[1] for r in rows)
        grand += total
        if not args.quiet:
            for name, spent, _ in rows:
                print(f"  {backend:10s} {name:48s} {spent:7.3f} s")
        slowest = sorted(rows, key=lambda r: -r[1])[:5]
        print(f"{backend}: {len(rows)} kernels, {total:.2f} s CPU; slowest: "
              + ", ".join(f"{n} {s:.2f}" for n, s, _ in slowest))
        phases = sorted(phase_times[backend].items(), key=lambda item: -item[1])
        print("  phases (wall s): " + ", ".join(f"{p} {s:.2f}" for p, s in phases))
    print(f"total lowering {grand:.2f} s CPU; process CPU in the measured part {cpu:.2f} s")
    if args.hashes:
        Path(args.hashes).write_text(json.dumps(
            {b: {n: h for n, _, h in rows} for b, rows in results.items()}, indent=1))
    if profiler:
        for key in ("cumulative", "tottime"):
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
