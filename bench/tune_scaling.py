"""Autotuning across worker processes: 32 configs of the CPU GEMM.

Tunes the same search three times, each in a fresh Python process so no in-memory cache
helps: with 1 worker process and an empty cache, with 2 worker processes and another empty
cache, and again with 2 workers on the second cache (the tuning result must come from disk).
Prints the seconds of each tuning call (imports excluded) and the ratio 2-worker / 1-worker.

    python bench/tune_scaling.py [--size 256] [--check]

``--check`` exits non-zero unless the ratio is at most 0.65 and the cached run takes under
1 s. Compilation dominates the search, so the ratio approaches 1/workers on idle cores; other
work on the machine makes it worse.

The kernel's annotations close over the factory's arguments, so this module must not use
``from __future__ import annotations``.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

CONFIGS = [dict(zip(("block_M", "block_N", "block_K"), values))
           for values in itertools.product((16, 32, 64, 128), (16, 32, 64, 128), (32, 64))]


def tune(size: int, workers: int) -> dict:
    import tilewright
    import tilewright.language as T
    import torch

    @tilewright.autotune(configs=CONFIGS, warmup=1, rep=5, workers=workers, progress=False,
                         reference=lambda a, b: a @ b, reduction_length=size)
    @tilewright.jit(out_idx=[-1], target="cpu")
    def matmul(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float32"):
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                 C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (
                    bx, by):
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_K, block_N), dtype)
                C_local = T.alloc_fragment((block_M, block_N), "float32")
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C[by * block_M, bx * block_N])

        return main

    torch.set_num_threads(1)
    start = time.perf_counter()
    kernel = matmul(size, size, size)
    seconds = time.perf_counter() - start
    result = kernel.autotune_result
    return {"seconds": seconds, "compile": result.compile_seconds, "cached": result.cached,
            "best": result.best_config,
            "ok": sum(r["status"] == "ok" for r in result.rows), "configs": len(result.rows)}


def _child(size: int, workers: int, cache: str) -> dict:
    env = {**os.environ, "TILEWRIGHT_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, __file__, "--child", str(workers), "--size",
                          str(size)], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"tuning with {workers} worker(s) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="M = N = K of the GEMM")
    parser.add_argument("--check", action="store_true", help="enforce the targets")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(tune(args.size, args.child)))
        return 0
    with tempfile.TemporaryDirectory(prefix="tw-tune-") as tmp:
        one = _child(args.size, 1, os.path.join(tmp, "one"))
        two = _child(args.size, 2, os.path.join(tmp, "two"))
        again = _child(args.size, 2, os.path.join(tmp, "two"))
    ratio = two["seconds"] / one["seconds"]
    print(f"{len(CONFIGS)} configs of a {args.size}^3 float32 GEMM on the CPU backend "
          f"({os.cpu_count()} cores)")
    for label, run in (("1 worker process  ", one), ("2 worker processes", two)):
        print(f"  {label}: {run['seconds']:6.2f} s, of which compiling {run['compile']:6.2f} s "
              f"({run['ok']} ok, best {run['best']})")
    print(f"  ratio             : {ratio:.2f}x (target <= 0.65x)")
    print(f"  second run, cached: {again['seconds']:6.3f} s (from disk: {again['cached']}; "
          "target < 1 s)")
    if args.check and (ratio > 0.65 or again["seconds"] >= 1 or not again["cached"]):
        print("FAILED: a target was missed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
