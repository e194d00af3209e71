"""Compile latency of the standard GEMM on the CUDA backend, against TileLang 0.1.15.

The kernel: M = N = K = 1024, blocks 128x128x32, 3 stages (``T.Pipelined``), float16 in,
float32 accumulate, 128 threads. Each measurement runs in a fresh Python process with an
empty cache folder:

- ours: tracing the kernel plus ``tilewright.lower(func, "cuda -arch=sm_80")`` to CUDA source
  (imports are timed separately and not counted; the backend's plugin, which the first lowering
  of a process loads, is counted), then a second kernel (2048^3) in the same process: the
  latency once everything is loaded;
- NVRTC: building that source to an sm_80 cubin (``tilewright_cuda.executor.nvrtc_compile``,
  the first NVRTC call of the process included), with registers and spills from ptxas;
- TileLang, when ``$TILELANG_PYTHON`` names a Python with tilelang 0.1.15 (TileLang bundles its
  own tvm, so it runs in its own environment): the same two kernels through ``tilelang.lower``
  under an explicit ``cuda`` sm_80 target context. The target ratio is the first kernel's.

Medians of ``--runs`` fresh processes (default 3) are printed with the targets: ours at most
0.5x TileLang, NVRTC at most 2 s, no spills. ``--profile`` also prints where our lowering spends
its time (cProfile, cumulative, in one more fresh process).

Run: python bench/compile_latency.py [--runs 3] [--profile]
     TILELANG_PYTHON=/path/to/venv/bin/python python bench/compile_latency.py
Timings are wall-clock on a possibly shared machine: compare figures from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap

RATIO_TARGET = 0.5
NVRTC_TARGET_S = 2.0

# the kernel body is the same text for both; ``ACCUM`` is each project's name for float32
KERNEL = textwrap.dedent('''
    def matmul(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype=ACCUM):
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                 C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_K, block_N), dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C[by * block_M, bx * block_N])
        return main
''')

OURS = textwrap.dedent('''
    import json, sys, time
    t0 = time.perf_counter()
    import tilewright
    import tilewright.language as T
    from tilewright_cuda import arch, executor
    t1 = time.perf_counter()
    ACCUM = "float32"
''') + KERNEL + textwrap.dedent('''
    t2 = time.perf_counter()
    lowered = tilewright.lower(matmul(1024, 1024, 1024, 128, 128, 32), "cuda -arch=sm_80")
    t3 = time.perf_counter()
    tilewright.lower(matmul(2048, 2048, 2048, 128, 128, 32), "cuda -arch=sm_80")
    t4 = time.perf_counter()
    source = lowered.source.text
    out = {"import_s": t1 - t0, "lower_s": t3 - t2, "again_s": t4 - t3,
           "source_chars": len(source),
           "smem_bytes": lowered.source.payload["dynamic_smem_bytes"]}
    if sys.argv[1] == "build":
        workdir = sys.argv[2]
        open(workdir + "/kernel.cu", "w").write(source)
        t4 = time.perf_counter()
        cubin, log = executor.nvrtc_compile(source, arch.get("sm_80"), workdir)
        out.update(nvrtc_s=time.perf_counter() - t4, cubin_bytes=len(cubin), log=log)
    print("RESULT " + json.dumps(out))
''')

PROFILE = textwrap.dedent('''
    import cProfile, pstats
    import tilewright
    import tilewright.language as T
    ACCUM = "float32"
''') + KERNEL + textwrap.dedent('''
    profiler = cProfile.Profile()
    profiler.enable()
    tilewright.lower(matmul(1024, 1024, 1024, 128, 128, 32), "cuda -arch=sm_80")
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
''')

TILELANG = textwrap.dedent('''
    import json, time
    t0 = time.perf_counter()
    import tilelang
    import tilelang.language as T
    from tilelang import tvm
    t1 = time.perf_counter()
    ACCUM = "float"
''') + KERNEL + textwrap.dedent('''
    t2 = time.perf_counter()
    func = matmul(1024, 1024, 1024, 128, 128, 32)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    with target:
        artifact = tilelang.lower(func, target=target)
    t3 = time.perf_counter()
    with target:
        tilelang.lower(matmul(2048, 2048, 2048, 128, 128, 32), target=target)
    t4 = time.perf_counter()
    print("RESULT " + json.dumps({"import_s": t1 - t0, "lower_s": t3 - t2, "again_s": t4 - t3,
                                  "version": tilelang.__version__,
                                  "source_chars": len(artifact.kernel_source)}))
''')


def _run(python: str, script: str, *args: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="tw-compile-latency-") as tmp:
        env = {**os.environ, "TILEWRIGHT_CACHE_DIR": os.path.join(tmp, "cache"),
               "TILELANG_CACHE_DIR": os.path.join(tmp, "tl-cache")}
        path = os.path.join(tmp, "kernel_script.py")  # kernels must be defined in a file
        with open(path, "w") as f:
            f.write(script)
        result = subprocess.run([python, path, *args, tmp], capture_output=True,
                                text=True, env=env, check=False)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    if result.returncode or not lines:
        raise SystemExit(f"{python} failed (exit {result.returncode}):\n"
                         f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _each(results, key="lower_s") -> str:
    return ", ".join(f"{r[key]:.3f}" for r in results)


def _ptxas(log: str) -> tuple[int, int]:
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    return max(registers, default=-1), max(spills, default=-1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per measurement")
    parser.add_argument("--profile", action="store_true", help="cProfile our lowering once")
    args = parser.parse_args()

    ours = [_run(sys.executable, OURS, "build" if i == 0 else "lower") for i in range(args.runs)]
    lower_s = statistics.median(r["lower_s"] for r in ours)
    first = ours[0]
    registers, spills = _ptxas(first["log"])
    print(f"standard GEMM 1024^3, 128x128x32, 3 stages, fp16 -> fp32, 128 threads, sm_80; "
          f"{args.runs} fresh process(es) each")
    again_s = statistics.median(r["again_s"] for r in ours)
    print(f"  ours:     lower to CUDA source {lower_s:.3f} s median "
          f"({_each(ours)}); imports "
          f"{statistics.median(r['import_s'] for r in ours):.2f} s (not counted); "
          f"{first['source_chars']} chars, {first['smem_bytes']} B shared memory")
    print(f"            a second kernel in the same process (2048^3): {again_s:.3f} s median "
          f"({_each(ours, 'again_s')})")
    nvrtc_ok = first["nvrtc_s"] <= NVRTC_TARGET_S
    print(f"  NVRTC:    cubin in {first['nvrtc_s']:.3f} s ({first['cubin_bytes']} B), "
          f"{registers} registers, {spills} bytes spilled; target <= {NVRTC_TARGET_S} s: "
          f"{'met' if nvrtc_ok else 'MISSED'}; no spills: {'met' if spills == 0 else 'MISSED'}")
    ok = nvrtc_ok and spills == 0
    tl_python = os.environ.get("TILELANG_PYTHON")
    if tl_python:
        theirs = [_run(tl_python, TILELANG, "lower") for _ in range(args.runs)]
        tl_s = statistics.median(r["lower_s"] for r in theirs)
        ratio = lower_s / tl_s
        tl_again = statistics.median(r["again_s"] for r in theirs)
        print(f"  TileLang {theirs[0]['version']}: tilelang.lower {tl_s:.3f} s median "
              f"({_each(theirs)}); imports "
              f"{statistics.median(r['import_s'] for r in theirs):.2f} s (not counted); "
              f"a second kernel {tl_again:.3f} s ({_each(theirs, 'again_s')})")
        print(f"  ratio ours / TileLang = {ratio:.2f}x (the first kernel of a process; a "
              f"second: {again_s / tl_again:.2f}x); target <= {RATIO_TARGET}x: "
              f"{'met' if ratio <= RATIO_TARGET else 'MISSED'}")
        ok = ok and ratio <= RATIO_TARGET
    else:
        print("  TileLang: not measured (set TILELANG_PYTHON to a Python with tilelang 0.1.15)")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="tw-compile-latency-") as tmp:
            path = os.path.join(tmp, "profile_script.py")
            with open(path, "w") as f:
                f.write(PROFILE)
            result = subprocess.run([sys.executable, path], capture_output=True, text=True,
                                    env={**os.environ, "TILEWRIGHT_CACHE_DIR": tmp},
                                    check=False)
        print(result.stdout[-6000:] or result.stderr[-3000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
