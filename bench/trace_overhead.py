"""Cost of the debug tools on the standard GEMM (1024^3, blocks 128x128x32, 3 stages, fp16 in /
fp32 accumulate), compiled for the CPU backend without the disk cache.

(a) compile time with no tool enabled, against a baseline taken before the tools module was
    imported (tracing off must cost nothing);
(b) compile time with the HTML lower trace on: target at most 2x the untraced time
    (TileLang 0.1.15: 2.7x), and the report's size: target under 2 MB (TileLang: 4.8 MB);
(c) ``plot_layout`` of the 128x128 accumulator fragment to png, in a fresh process: target at
    most 5 s and 500 MB (TileLang 0.1.15: 99 s and 9.2 GB).

Run: python bench/trace_overhead.py [--repeat N] [--json]. Times are medians of interleaved
runs; on a shared machine they still move with its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

RATIO_TARGET = 2.0
REPORT_MB_TARGET = 2.0
PLOT_S_TARGET = 5.0
PLOT_MB_TARGET = 500.0

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def _compile_seconds(func) -> float:
    import tilewright

    start = time.perf_counter()
    tilewright.compile(func, out_idx=[-1], target="cpu",
                       pass_configs={"tw.disable_cache": True})
    return time.perf_counter() - start


PLOT = textwrap.dedent("""
    import json, resource, sys, time
    from tilewright.tools import plot_layout
    from tilewright.layout.view import default_fragment
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    out = plot_layout(default_fragment((128, 128), 128), "C_local", formats="png",
                      out_dir=sys.argv[1], verbose=False)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_mb": peak / 1024,
                      "grown_mb": (peak - base) / 1024, "png": out["png"]}))
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("TILEWRIGHT_CACHE_DIR", tempfile.mkdtemp(prefix="tw-bench-cache-"))
    from gemm import matmul

    func = matmul.compile(M=1024, N=1024, K=1024).get_tir()  # the tile program
    _compile_seconds(func)  # warm up TVM and LLVM

    baseline = [_compile_seconds(func) for _ in range(args.repeat)]
    from tilewright.tools import lower_trace

    trace_dir = tempfile.mkdtemp(prefix="tw-bench-trace-")
    off, on, sizes = [], [], []
    for _ in range(args.repeat):
        lower_trace.disable()
        off.append(_compile_seconds(func))
        lower_trace.enable("html", trace_dir)
        on.append(_compile_seconds(func))
        session = lower_trace.last_sessions()[-1]
        sizes.append((session.run_dir / "report.html").stat().st_size / 2**20)
        records = len(session.records)
    lower_trace.disable()

    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", PLOT, tmp], capture_output=True, text=True,
                              check=True)
        plot = json.loads(proc.stdout.strip().splitlines()[-1])

    result = {
        "compile_s_baseline": statistics.median(baseline),
        "compile_s_tracing_off": statistics.median(off),
        "compile_s_tracing_html": statistics.median(on),
        "trace_ratio": statistics.median(on) / statistics.median(off),
        "off_vs_baseline": statistics.median(off) / statistics.median(baseline),
        "report_mb": max(sizes), "records": records,
        "plot_png_s": plot["seconds"], "plot_peak_mb": plot["peak_mb"],
        "plot_grown_mb": plot["grown_mb"],
    }
    result["ok"] = (result["trace_ratio"] <= RATIO_TARGET and
                    result["report_mb"] < REPORT_MB_TARGET and
                    result["plot_png_s"] <= PLOT_S_TARGET and
                    result["plot_peak_mb"] <= PLOT_MB_TARGET)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"compile, no tools imported: {result['compile_s_baseline']:.3f} s")
        print(f"compile, tracing off:       {result['compile_s_tracing_off']:.3f} s "
              f"({result['off_vs_baseline']:.2f}x baseline)")
        print(f"compile, HTML trace on:     {result['compile_s_tracing_html']:.3f} s "
              f"({result['trace_ratio']:.2f}x; target <= {RATIO_TARGET}x, TileLang 2.7x)")
        print(f"report: {result['report_mb']:.2f} MB, {records} records (target < "
              f"{REPORT_MB_TARGET} MB, TileLang 4.8 MB)")
        print(f"plot_layout 128x128 png: {result['plot_png_s']:.2f} s, peak RSS "
              f"{result['plot_peak_mb']:.0f} MB (targets {PLOT_S_TARGET} s, {PLOT_MB_TARGET} MB;"
              f" TileLang 99 s, 9.2 GB)")
        print("OK" if result["ok"] else "MISSED a target")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
