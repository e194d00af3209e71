"""How well the tolerance model of tilewright.testing fits measured errors.

For float16 and bfloat16 inputs, a GEMM of reduction length K is accumulated in float32 (as
the kernels do) and compared with the float64 product of the same inputs. Two errors are
measured, each normalised the way ``tilewright.testing.compare`` judges them,
``|err| / (rms(expected) + |expected|)``:

- accumulation: the float32 result before rounding, against the budget ``u32 * sqrt(K)``;
- output: the result rounded to the input dtype, against the ``rtol`` that
  ``tilewright.testing.tolerance(dtype, reduction_length=K)`` gives.

A ratio (measured / budget) below 1 means the model holds; far below 1 means it is loose.
``--backend cpu`` (or ``interp``) also runs the conformance GEMM kernel on that backend.

Run: python bench/tolerance_model.py [--ks 16,64,256,1024,4096] [--backend cpu]
"""

import argparse
import math

import torch
from tilewright.testing import tolerance, unit_roundoff


def normalised(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    err = (actual.double() - expected).abs()
    rms = expected.pow(2).mean().sqrt()
    return err / (rms + expected.abs())


def measure(dtype: str, k: int, m: int = 64, n: int = 64, seed: int = 0, kernel=None) -> dict:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(getattr(torch, dtype))
    b = torch.randn(k, n, generator=gen).to(getattr(torch, dtype))
    exact = a.double() @ b.double()
    acc32 = a.float() @ b.float()
    out = kernel(a, b) if kernel is not None else acc32.to(a.dtype)
    acc_err = normalised(acc32, exact)
    out_err = normalised(out, exact)
    acc_budget = unit_roundoff("float32") * math.sqrt(k)
    rtol = tolerance(dtype, reduction_length=k).rtol
    return {"dtype": dtype, "K": k,
            "acc_max": acc_err.max().item(), "acc_budget": acc_budget,
            "out_max": out_err.max().item(), "out_p999": out_err.flatten().quantile(0.999).item(),
            "rtol": rtol}


def backend_kernel(name: str, dtype: str, k: int, m: int = 64, n: int = 64):
    import tilewright
    from tilewright_sdk.conformance.catalogue import _gemm

    compiled = tilewright.compile(_gemm(dtype, m, n, k), out_idx=[-1], target=name)
    return compiled


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="16,64,256,1024,4096")
    parser.add_argument("--backend", default=None, help="also measure a backend's GEMM kernel")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    header = (f"{'dtype':9s} {'K':>6s} {'acc err':>10s} {'u32*sqrtK':>10s} {'ratio':>6s}   "
              f"{'out err':>10s} {'p99.9':>10s} {'rtol':>10s} {'ratio':>6s}")
    print(header)
    worst = 0.0
    for dtype in ("float16", "bfloat16"):
        for k in ks:
            kernel = backend_kernel(args.backend, dtype, k) if args.backend else None
            r = measure(dtype, k, kernel=kernel)
            acc_ratio, out_ratio = r["acc_max"] / r["acc_budget"], r["out_max"] / r["rtol"]
            worst = max(worst, out_ratio)
            print(f"{dtype:9s} {k:6d} {r['acc_max']:10.3g} {r['acc_budget']:10.3g} "
                  f"{acc_ratio:6.2f}   {r['out_max']:10.3g} {r['out_p999']:10.3g} "
                  f"{r['rtol']:10.3g} {out_ratio:6.2f}")
    source = f"backend {args.backend}" if args.backend else "torch, float32 accumulation"
    verdict = "holds" if worst < 1 else "is VIOLATED"
    print(f"tolerance model {verdict} ({source}): worst output error is {worst:.2f} of rtol")


if __name__ == "__main__":
    main()
