"""The compute loop of benchmark kernels, read from their SASS: instructions per step, by
opcode (no GPU needed; the bundles' kernels as build_bundles.py builds them).

Run: python backend-cuda/bench/sass_loops.py PREFIX [PREFIX ...] [--quick] [--arch sm_90a]

One line per bundle whose name starts with a prefix: the kernel's instruction count, its compute
loop's (``sass.hot_loop``: the loop with the most tensor-core instructions), and the loop's
opcodes by count (``MUFU``, ``HGMMA`` ... without their modifiers). The numbers in RESULTS.md's
FlashAttention sections are these.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # sass.py, the cuobjdump wrapper

import build_bundles  # noqa: E402 - after the sys.path setup
import sass  # noqa: E402
from tilewright.jit import compile as tw_compile  # noqa: E402


def loop_line(name: str, text: str, most: int = 16) -> str:
    """One bundle's line: ``name: N instructions; loop L: OP=n ...``."""
    total = len(sass.instructions(text))
    loop = sass.hot_loop(text)
    if not loop:
        return f"{name}: {total} instructions, no loop with tensor-core instructions"
    counts = collections.Counter(op.split(".")[0] for op in loop)
    ops = " ".join(f"{op}={n}" for op, n in counts.most_common(most))
    return f"{name}: {total} instructions; loop {len(loop)}: {ops}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="+")
    parser.add_argument("--quick", action="store_true", help="the smoke run's sizes")
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args(argv)
    if (reason := sass.available()) is not None:
        sys.exit(f"sass_loops.py: {reason}")
    for name, _case, func, _expect, configs in build_bundles.cases(args.quick):
        if name.startswith(tuple(args.prefixes)):
            kernel = tw_compile(func, out_idx=[len(func.params) - 1],
                                target=f"cuda -arch={args.arch}", execution_backend="nvrtc",
                                pass_configs=configs)
            print(loop_line(name, sass.dump(kernel.executable.cubin)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
