"""Throughput of the example kernels on the CPU backend against the torch expression doing the
same work, measured in one run with the same thread count.

Run: python bench/cpu_kernels.py [--check]
With --check, exits non-zero when softmax, RMSNorm or FlashAttention fall below 0.5x torch.
"""

import argparse
import os
import sys
from pathlib import Path

# torch's OpenMP workers spin for a while after each call and would take the cores from the
# kernel timed next (tilewright's TVM workers do not spin): let them sleep, for fair timings.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import flash_attention  # noqa: E402
import gemm  # noqa: E402
import rmsnorm  # noqa: E402
import softmax  # noqa: E402
from tilewright.profiler import do_bench  # noqa: E402

TARGETS = {"softmax": 0.5, "rmsnorm": 0.5, "flash attention": 0.5}


def measure(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    rows = []

    # tile sizes are the kernels' compile-time parameters: these suit a CPU's caches
    gemm_tiles = dict(block_M=96, block_N=256, block_K=256, dtype="float32")
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.testing.assert_close(gemm.matmul(a, b, **gemm_tiles), a @ b, rtol=1e-4, atol=1e-3)
    rows.append(("gemm 1024^3 fp32", measure(lambda: gemm.matmul(a, b, **gemm_tiles)),
                 measure(lambda: a @ b)))

    x = torch.randn(4096, 1024)
    sm = softmax.softmax(4096, 1024)
    torch.testing.assert_close(sm(x), torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    rows.append(("softmax", measure(lambda: sm(x)), measure(lambda: torch.softmax(x, 1))))

    w = torch.randn(1024)
    rn = rmsnorm.rmsnorm(4096, 1024)
    torch.testing.assert_close(rn(x, w), rmsnorm.reference(x, w, 1e-6), rtol=1e-5, atol=1e-5)
    rows.append(("rmsnorm", measure(lambda: rn(x, w)),
                 measure(lambda: rmsnorm.reference(x, w, 1e-6))))

    shape = (1, 1024, 8, 64)
    q, k, v = (torch.randn(shape) for _ in range(3))
    fa = flash_attention.flashattn(1, 8, 1024, 64, False, block_M=256, block_N=128)
    torch.testing.assert_close(fa(q, k, v).double(), flash_attention.reference(q, k, v, False),
                               rtol=1e-4, atol=1e-4)
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows.append(("flash attention", measure(lambda: fa(q, k, v)),
                 measure(lambda: sdpa(qt, kt, vt))))

    print(f"CPU backend vs torch, {threads} threads (median ms; ratio = torch time / ours)")
    print(f"{'kernel':<20}{'tilewright':>12}{'torch':>10}{'ratio':>8}{'target':>8}")
    failed = []
    for name, ours, theirs in rows:
        ratio = theirs / ours
        target = TARGETS.get(name)
        mark = "" if target is None else f"{target:.1f}x"
        print(f"{name:<20}{ours:>12.3f}{theirs:>10.3f}{ratio:>7.2f}x{mark:>8}")
        if target is not None and ratio < target:
            failed.append(name)
    if args.check and failed:
        print(f"below target: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
