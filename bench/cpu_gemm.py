"""float32 GEMM as a tile kernel on the CPU backend, against ``torch.matmul``.

Both sides use the same number of threads, every core by default (``torch.set_num_threads``;
TVM's thread pool gets the count through ``TVM_NUM_THREADS``). Their timed calls alternate;
the table shows the median and the best time of each and the ratio of torch's time to ours.
With ``--check`` the exit status is 1 when the median ratio is below ``--min-ratio`` (0.8).
Other load on the machine slows both sides alike only roughly: the table says what the load
was.

    python bench/cpu_gemm.py [--size 1024] [--block 96 256 256] [--threads 2] [--check]

The kernel's annotations close over the factory's arguments, so this module must not use
``from __future__ import annotations``.
"""

import argparse
import os
import statistics
import sys
import time

# torch's OpenMP workers spin for a while after each call and would take the cores from the
# kernel timed next (tilewright's TVM workers do not spin): let them sleep, for fair timings.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
import torch  # noqa: E402
from cpu_timing import alternate, load_average  # noqa: E402

BLOCK = (96, 256, 256)


@tilewright.jit(out_idx=[-1], target="cpu")
def matmul(M, N, K, block_M, block_N, block_K, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs="+", default=[1024],
                        help="M [N K]; one value means a square problem")
    parser.add_argument("--block", type=int, nargs=3, default=list(BLOCK),
                        metavar=("BM", "BN", "BK"))
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads for both sides (default: every core)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when tilewright / torch is below --min-ratio")
    parser.add_argument("--min-ratio", type=float, default=0.8)
    args = parser.parse_args(argv)

    m, n, k = (args.size * 3)[:3] if len(args.size) == 1 else args.size
    threads = args.threads
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's thread pool starts
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)

    start = time.perf_counter()
    kernel = matmul(m, n, k, *args.block)
    compile_s = time.perf_counter() - start
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-3)

    out = torch.empty(m, n)
    tw, ref = alternate([lambda: kernel(a, b), lambda: torch.matmul(a, b, out=out)],
                        args.warmup, args.runs)
    tw_s, torch_s = statistics.median(tw), statistics.median(ref)
    flops = 2.0 * m * n * k
    ratio = torch_s / tw_s
    print(f"float32 GEMM {m}x{n}x{k}, blocks {tuple(args.block)}, {threads} threads "
          f"(TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}), compile {compile_s:.2f} s")
    print(f"{'':12} {'median ms':>10} {'GFLOP/s':>9} {'best ms':>9} {'GFLOP/s':>9}")
    for name, t in (("tilewright", tw), ("torch", ref)):
        med, best = statistics.median(t), min(t)
        print(f"{name:12} {med * 1e3:10.2f} {flops / med / 1e9:9.1f} {best * 1e3:9.2f} "
              f"{flops / best / 1e9:9.1f}")
    print(f"{'ratio':12} {ratio:10.2f}x {'':9} {min(ref) / min(tw):8.2f}x")
    print(load_average())
    if args.check and ratio < args.min_ratio:
        print(f"FAIL: ratio {ratio:.2f} < {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
