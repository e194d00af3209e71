"""What calling tilewright kernels through torch costs, on the CPU backend.

(a) per call: ``torch.ops.<ns>.<name>(...)`` against calling the kernel object directly, for a
    compiled kernel (``kernel.as_torch_op``) and an eager kernel (``@jit(torch_op=...)``);
    target: at most 5 us more. Both run in C++ through torch.ops (the operators' C++ kernel,
    :mod:`tilewright.jit.native_op`); the direct call checks its arguments in Python. For
    scale, the same rounds time ``torch.add`` of the same tensors (a peer: a torch operator
    with a C++ kernel), and operators defined through ``torch.library`` by hand, whose Python
    kernel calls the same kernel object (compiled or eager), or does nothing: torch's
    boundary between the dispatcher and a Python kernel;
(b) a model of tilewright kernels and torch ops compiled with ``torch.compile(fullgraph=True)``
    against the same model in eager mode; target: the compiled one is no slower.

The sides of each comparison are timed in rounds, in an order that rotates, and reported as
medians over the rounds, with the machine's load average at the start and the end, since
other work on the machine moves them all. Per
call costs are this process's CPU time (``time.process_time``), so time the scheduler gives
to other processes on a shared machine is not counted; the model is timed on the wall clock
and on CPU time, both printed.

Run: python bench/torch_op_overhead.py [--rounds 15]. Compiles into a private
TILEWRIGHT_CACHE_DIR; the operators' C++ extension comes from the user's cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

# kernels compile into a private cache; the operators' C++ extension (built once per machine)
# is taken from, or built into, the user's
os.environ.setdefault("TILEWRIGHT_TORCH_OP_DIR", os.environ.get("TILEWRIGHT_CACHE_DIR") or
                      os.path.expanduser("~/.cache/tilewright"))
os.environ.setdefault("TILEWRIGHT_CACHE_DIR", tempfile.mkdtemp(prefix="tw-bench-"))
# one TVM worker thread: the kernels' own launch cost then varies less with machine load,
# which is not what this benchmark measures
os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tilewright  # noqa: E402
import torch  # noqa: E402
from tilewright.jit import native_op as native  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from quickstart import vector_add  # noqa: E402
from rmsnorm import rmsnorm  # noqa: E402
from softmax import softmax  # noqa: E402

CALL_TARGET_US = 5.0
MODEL_TARGET_RATIO = 1.0


# the quickstart's vector add (eager style), registered as an operator when decorated
vadd = tilewright.jit(vector_add.fn, target="cpu", torch_op="tw_bench::vadd")


def noop(a, b):
    return a


def per_call_us(fn, args, calls: int, clock=time.process_time) -> float:
    start = clock()
    for _ in range(calls):
        fn(*args)
    return (clock() - start) / calls * 1e6


def compare(fns, args, rounds: int, calls: int, clock=time.process_time):
    """Medians over rounds of the per-call time of each of ``fns`` (us) on ``clock``; each
    round times them all, in an order that rotates from round to round."""
    for fn in fns:
        per_call_us(fn, args, calls // 4 + 1, clock)
    times = [[] for _ in fns]
    for r in range(rounds):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            times[i].append(per_call_us(fns[i], args, calls, clock))
    return [statistics.median(t) for t in times]


class Model(torch.nn.Module):
    """RMSNorm (tilewright), a projection (torch), softmax (tilewright), a residual."""

    def __init__(self, norm, attn, n):
        super().__init__()
        self.norm, self.attn = norm, attn
        self.w = torch.nn.Parameter(torch.randn(n), requires_grad=False)
        self.proj = torch.nn.Parameter(torch.randn(n, n) / n ** 0.5, requires_grad=False)

    def forward(self, x):
        h = self.norm(x, self.w)
        return x + self.attn(torch.relu(h @ self.proj) * 0.5 + 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    load = os.getloadavg()
    rows, ok = [], True

    n = 1024
    a, b = torch.randn(n), torch.randn(n)
    kernel = tilewright.compile(vadd.get_tir(M=n), target="cpu")
    op = kernel.as_torch_op("tw_bench::vadd_kernel")
    torch.testing.assert_close(op(a, b), a + b)
    # torch's part, for scale: operators defined through torch.library by hand, whose Python
    # kernel does nothing, or calls the same kernel object
    lib = torch.library.Library("tw_bench", "FRAGMENT")
    for name, fn in (("noop", noop), ("vadd_by_hand", kernel), ("eager_by_hand", vadd)):
        lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
        lib.impl(name, fn, "CPU")
    cases = [("compiled kernel (as_torch_op)", kernel, torch.ops.tw_bench.vadd_kernel, True),
             ("eager kernel (@jit(torch_op=))", vadd, torch.ops.tw_bench.vadd, True),
             ("torch.library: the kernel by hand", kernel, torch.ops.tw_bench.vadd_by_hand,
              False),
             ("torch.library: eager kernel by hand", vadd, torch.ops.tw_bench.eager_by_hand,
              False),
             ("torch.library: a no-op kernel", noop, torch.ops.tw_bench.noop, False)]
    for name, direct_fn, through_fn, checked in cases:
        direct, through, peer = compare((direct_fn, through_fn, torch.add), (a, b), args.rounds,
                                        2000)
        rows.append((name, direct, through, through - direct, through - peer, peer))
        ok = ok and (not checked or through - direct <= CALL_TARGET_US)

    m, n = 256, 512
    norm = rmsnorm(m, n).as_torch_op("tw_bench::rmsnorm")
    attn = softmax(m, n).as_torch_op("tw_bench::softmax")
    model = Model(norm, attn, n).eval()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(m, n)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        eager_us, compiled_us = compare((model, compiled), (x,), args.rounds, 50,
                                        time.perf_counter)
        eager_cpu, compiled_cpu = compare((model, compiled), (x,), args.rounds, 50)
    ratio = compiled_us / eager_us
    ok = ok and ratio <= MODEL_TARGET_RATIO

    end = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start, {end[0]:.1f} "
          f"{end[1]:.1f} {end[2]:.1f} at the end, on {os.cpu_count()} cores; medians of "
          f"{args.rounds} rounds; operators' C++ kernel: "
          f"{'built' if native.extension() is not None else 'NOT available'}\n")
    print(f"{'per call':<40}{'direct us':>11}{'torch.ops us':>14}{'extra us':>10}"
          f"{'vs torch.add':>14}")
    for name, d, t, extra, vs_peer, _ in rows:
        print(f"{name:<40}{d:>11.2f}{t:>14.2f}{extra:>10.2f}{vs_peer:>14.2f}")
    print(f"(extra: torch.ops less the direct call; vs torch.add: torch.ops less torch.add of "
          f"the same tensors, {statistics.median(r[5] for r in rows):.2f} us, timed in the "
          "same rounds)")
    print(f"\n{'model (rmsnorm, matmul, softmax)':<40}{'eager us':>11}{'compiled us':>14}"
          f"{'ratio':>10}")
    print(f"{f'{m}x{n} fp32, wall clock':<40}{eager_us:>11.1f}{compiled_us:>14.1f}"
          f"{ratio:>10.3f}")
    print(f"{f'{m}x{n} fp32, CPU time':<40}{eager_cpu:>11.1f}{compiled_cpu:>14.1f}"
          f"{compiled_cpu / eager_cpu:>10.3f}")
    print(f"\ntargets: at most {CALL_TARGET_US} us extra per call through torch.ops; compiled "
          f"model / eager <= {MODEL_TARGET_RATIO}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
