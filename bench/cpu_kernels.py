"""Throughput of kernels written for a GPU (TileLang's usual tiles) on the CPU backend against
the torch expression doing the same work, with the same thread count.

Each row times tilewright and torch alternately, call by call, and compares their medians, so
that other load on the machine slows both alike; the header gives the load average. The last
row ("core 0 busy") runs while a competing process spins on core 0, both sides timed under it.

Run: python bench/cpu_kernels.py [--check] [--budget SECONDS]
With --check, exits non-zero when a row with a target falls below it (the targets of an idle
machine: on a loaded one they say little).
"""

import argparse
import os
import sys
from functools import partial
from pathlib import Path

# torch's OpenMP workers spin for a while after each call and would take the cores from the
# kernel timed next: let them sleep, for fair timings.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import flash_attention  # noqa: E402
import gemm  # noqa: E402
import rmsnorm  # noqa: E402
import softmax  # noqa: E402
from cpu_timing import compare, competing_process, load_average  # noqa: E402

SIZE = 1024
ATTENTION = (1, 8, 1024, 64)  # batch, heads, sequence, head dim


def gemm_rows(budget):
    rows = []
    a32, b32 = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    for tiles, dtype, target in (((128, 128, 32), "float32", 0.9),
                                 ((128, 128, 32), "float16", 0.9),
                                 ((64, 64, 32), "float32", None),
                                 ((64, 64, 32), "float16", None),
                                 ((96, 256, 256), "float32", None)):
        a, b = a32.to(getattr(torch, dtype)), b32.to(getattr(torch, dtype))
        blocks = dict(zip(("block_M", "block_N", "block_K"), tiles))
        c = gemm.matmul(a, b, **blocks, dtype=dtype)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2,
                                   atol=1e-3 if dtype == "float32" else 0.5)
        name = f"gemm {SIZE}^3 {'x'.join(map(str, tiles))} {dtype}"
        ours = partial(gemm.matmul, a, b, **blocks, dtype=dtype)
        rows.append((name, "torch.matmul", *compare(ours, partial(torch.matmul, a, b), budget),
                     target))
        if dtype == "float16" and tiles == (128, 128, 32):
            # without float16 arithmetic a CPU computes in float32: the stricter bar
            rows.append((name, "matmul float32",
                         *compare(ours, partial(torch.matmul, a32, b32), budget), None))
    return rows


def attention_rows(budget):
    rows = []
    q, k, v = (torch.randn(*ATTENTION[:1], ATTENTION[2], ATTENTION[1], ATTENTION[3])
               for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    batch, heads, seq, dim = ATTENTION
    for block in (64, 128):
        fa = flash_attention.flashattn(batch, heads, seq, dim, False, block_M=block,
                                       block_N=block)
        torch.testing.assert_close(fa(q, k, v).double(),
                                   flash_attention.reference(q, k, v, False), rtol=1e-4,
                                   atol=1e-4)
        rows.append((f"flash attention {block}x{block} {'x'.join(map(str, ATTENTION))}",
                     "SDPA", *compare(partial(fa, q, k, v), partial(sdpa, qt, kt, vt), budget),
                     0.9))
    return rows


def norm_rows(budget):
    x, w = torch.randn(4096, 1024), torch.randn(1024)
    sm = softmax.softmax(4096, 1024)  # the example's block_M
    torch.testing.assert_close(sm(x), torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    rn = rmsnorm.rmsnorm(4096, 1024)
    torch.testing.assert_close(rn(x, w), rmsnorm.reference(x, w, 1e-6), rtol=1e-5, atol=1e-5)
    return [("softmax 4096x1024 block_M 4", "torch.softmax",
             *compare(lambda: sm(x), lambda: torch.softmax(x, 1), budget), 0.5),
            ("rmsnorm 4096x1024 block_M 4", "torch expression",
             *compare(lambda: rn(x, w), lambda: rmsnorm.reference(x, w, 1e-6), budget), 0.5)]


def loaded_row(budget):
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    blocks = {"block_M": 128, "block_N": 128, "block_K": 32}
    gemm.matmul(a, b, **blocks, dtype="float32")
    with competing_process(core=0):
        ours, theirs = compare(lambda: gemm.matmul(a, b, **blocks, dtype="float32"),
                               lambda: torch.matmul(a, b), budget)
    return [(f"gemm {SIZE}^3 128x128x32 float32, core 0 busy", "torch.matmul",
             ours, theirs, 0.8)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--budget", type=float, default=4.0,
                        help="seconds of timing per row (at least 3 rounds)")
    args = parser.parse_args()
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    before = load_average()
    rows = []
    for make in (gemm_rows, attention_rows, norm_rows, loaded_row):
        rows += make(args.budget)

    print(f"CPU backend vs torch, {threads} threads; median ms of alternating calls; "
          f"ratio = torch time / ours")
    print(f"before: {before}; after: {load_average()}")
    print(f"{'kernel':<46}{'torch side':<18}{'tilewright':>11}{'torch':>10}{'ratio':>8}"
          f"{'target':>8}")
    failed = []
    for name, reference, ours, theirs, target in rows:
        ratio = theirs / ours
        mark = "" if target is None else f"{target:.1f}x"
        print(f"{name:<46}{reference:<18}{ours:>11.3f}{theirs:>10.3f}{ratio:>7.2f}x{mark:>8}")
        if target is not None and ratio < target:
            failed.append(name)
    if args.check and failed:
        print(f"below target: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
