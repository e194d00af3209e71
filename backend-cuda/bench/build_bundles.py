"""Build the GPU benchmark kernels here (no GPU needed) and export them as bundles.

Run: python backend-cuda/bench/build_bundles.py [--out backend-cuda/bench/bundles] [--quick]

Each bundle folder holds the cubin (sm_90a, CUDA 13.0 toolchain), its launch description, the
signature, and ``case.json`` telling the harness what the kernel computes and at which sizes.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from tilewright.jit import compile as tw_compile  # noqa: E402 - after the sys.path setup
from tilewright.language.kernel import _ParamSlot, trace_eager  # noqa: E402


def _eager(jitted, consts, **static):
    args = {}
    for name, p in inspect.signature(jitted.fn).parameters.items():
        if name in static:
            args[name] = static[name]
        elif p.default is not inspect.Parameter.empty:
            args[name] = p.default
        else:
            args[name] = _ParamSlot(name)
    return trace_eager(jitted.fn, args, consts)[0]


def cases(quick: bool):
    import elementwise_add
    import flash_attention
    import gemm
    import rmsnorm
    import softmax

    sizes = (1024,) if quick else (4096, 8192)
    for dtype in ("float16", "bfloat16"):
        for n in sizes:
            yield (f"gemm_{dtype}_{n}", {"kind": "gemm", "M": n, "N": n, "K": n, "dtype": dtype},
                   _eager(gemm.matmul, {"M": n, "N": n, "K": n}, dtype=dtype))
    b, h, s, d = (1, 4, 512, 128) if quick else (4, 32, 4096, 128)
    yield ("flash_attention_float16", {"kind": "attention", "batch": b, "heads": h, "seq": s,
                                       "dim": d, "causal": False, "dtype": "float16"},
           flash_attention.flashattn.fn(b, h, s, d, False, dtype="float16"))
    rows, cols = (1024, 1024) if quick else (16384, 16384)  # 1 GiB per float32 tensor
    yield ("elementwise_add_float32", {"kind": "add", "M": rows, "N": cols, "dtype": "float32"},
           _eager(elementwise_add.add, {"M": rows, "N": cols}))
    m, n = (1024, 1024) if quick else (16384, 4096)
    yield ("softmax_float32", {"kind": "softmax", "M": m, "N": n, "dtype": "float32"},
           softmax.softmax.fn(m, n))
    yield ("rmsnorm_float32", {"kind": "rmsnorm", "M": m, "N": n, "dtype": "float32",
                               "eps": 1e-6}, rmsnorm.rmsnorm.fn(m, n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "bundles")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--executor", default="nvrtc", choices=["nvrtc", "nvcc"])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, case, func in cases(args.quick):
        start = time.perf_counter()
        kernel = tw_compile(func, target=f"cuda -arch={args.arch}",
                            execution_backend=args.executor)
        path = kernel.export(args.out / name)
        (path / "case.json").write_text(json.dumps(case, indent=1))
        log = Path(kernel.artifact_dir or path) / "build.log"
        if log.exists():
            (path / "build.log").write_text(log.read_text())
        print(f"{name}: {time.perf_counter() - start:.1f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
