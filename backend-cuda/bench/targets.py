"""The issues' numbers from a device run: which benchmark rows compete for each target, the
best of them against the number wanted, and the defaults a run says to change.

    python backend-cuda/bench/targets.py OUT/bench/results.json [MORE.json ...] [--bundles DIR]

Each row's result names its case (``case``: kind, sizes, dtypes; harness.py writes it), which
says the target it competes for (:data:`TARGETS`); results of older runs, without it, take
their rows' cases from ``--bundles`` (the built bundles' ``case.json``). With several files
(runs, oldest first), a row's ratio is its median over the runs that measured the same
kernel (its ``binary``; a later run of a row whose kernel changed replaces the earlier, and
older results without it count as the same kernel). The table gives, per target, the default
row (kernels.py's choice today) and the best row with their ratios against the peer of their
own run, whether the best meets the number, and the runner-ups; a row that failed is listed
apart. It prints Markdown, for RESULTS.md.

A best row more than :data:`NOISE` ahead of the default is a candidate for the default (the
same cuBLAS call moved 0.193-0.221 ms between rows of one run on 2026-12-04: differences of a
few percent between rows are within a run's noise; compare rows measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

NOISE = 0.02


@dataclass(frozen=True)
class Target:
    issue: str
    what: str
    case: dict  # the keys a row's case must have, with these values
    wanted: float  # the ratio against the row's peer
    default: str  # the row of kernels.py's default

    def takes(self, case: dict) -> bool:
        return all(case.get(key) == value for key, value in self.case.items())


def _gemm(dtype: str, n: int) -> Target:
    return Target("18", f"GEMM {dtype} {n}^3 vs cuBLAS",
                  {"kind": "gemm", "dtype": dtype, "M": n, "N": n, "K": n}, 1.0,
                  f"gemm_{dtype}_{n}")


TARGETS = (
    *(_gemm(dtype, n) for n in (4096, 8192) for dtype in ("float16", "bfloat16")),
    Target("18", "FlashAttention fp16 forward vs SDPA's fastest backend",
           {"kind": "attention", "dtype": "float16"}, 0.9, "flash_attention_float16"),
    *(Target("18", f"elementwise add {dtype} vs copy bandwidth",
             {"kind": "add", "dtype": dtype}, 0.95, f"elementwise_add_{dtype}")
      for dtype in ("float32", "float16", "bfloat16")),
    *(Target("23", f"fp8 GEMM 128x128 block scales {n}^3 vs torch._scaled_mm",
             {"kind": "fp8_gemm", "layout": "block", "M": n, "N": n, "K": n}, 0.9,
             f"fp8_gemm_block_{n}") for n in (4096, 8192)),
    *(Target("23", f"W4A16 M = {m}, N = K = 8192 vs fp16 torch.matmul",
             {"kind": "w4a16", "M": m, "N": 8192, "K": 8192}, 2.5, f"w4a16_m{m}_8192")
      for m in (1, 16)),
    Target("23", "2:4 sparse fp16 8192^3 vs dense cuBLAS",
           {"kind": "gemm_sp", "dtype": "float16", "M": 8192, "N": 8192, "K": 8192}, 1.3,
           "gemm_sp_float16_8192"),
)

# what a case is, without how it is built (the variants of one case share these)
NOT_IDENTITY = ("config", "build", "pass_configs", "tickets")


def identity(case: dict) -> dict:
    return {k: v for k, v in case.items() if k not in NOT_IDENTITY}


@dataclass
class Row:
    name: str
    ratios: list
    failures: list
    binary: str | None = None  # the kernel's cubin (a prefix of its sha256), where known

    @property
    def ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None


def collect(results: list[dict], bundles: Path | None) -> dict[str, tuple[dict, Row]]:
    """Per row name: its case and its ratios (one a run) and failures."""
    rows: dict[str, tuple[dict, Row]] = {}
    for run in results:
        for name, result in run["results"].items():
            case = result.get("case")
            if case is None and bundles is not None and (bundles / name / "case.json").exists():
                case = identity(json.loads((bundles / name / "case.json").read_text()))
            if case is None:
                continue  # a row whose case no one knows competes for nothing
            binary = result.get("binary")
            if name not in rows or rows[name][1].binary != binary:  # a new kernel: anew
                rows[name] = (case, Row(name, [], [], binary))
            row = rows[name][1]
            if result.get("status") == "ok" and result.get("ratio") is not None:
                row.ratios.append(result["ratio"])
            else:
                row.failures.append(result.get("status", "no status"))
    return rows


@dataclass
class Verdict:
    target: Target
    default: Row | None
    ranked: list  # the rows measured, best first
    failed: list  # the rows that never measured

    @property
    def best(self) -> Row | None:
        return self.ranked[0] if self.ranked else None

    @property
    def met(self) -> bool:
        return self.best is not None and self.best.ratio >= self.target.wanted

    @property
    def change(self) -> bool:
        """Whether the best row beats the default by more than the noise."""
        if self.best is None or self.best.name == self.target.default:
            return False
        return self.default is None or self.default.ratio is None or \
            self.best.ratio > self.default.ratio * (1 + NOISE)


def verdicts(rows: dict[str, tuple[dict, Row]]) -> list[Verdict]:
    out = []
    for target in TARGETS:
        mine = [row for case, row in rows.values() if target.takes(case)]
        ranked = sorted((r for r in mine if r.ratio is not None), key=lambda r: -r.ratio)
        failed = [r for r in mine if r.ratio is None]
        default = next((r for r in mine if r.name == target.default), None)
        out.append(Verdict(target, default, ranked, failed))
    return out


def _ratio(row: Row | None) -> str:
    if row is None:
        return "not run"
    if row.ratio is None:
        return f"`{row.name}` failed"
    runs = f" ({len(row.ratios)} runs)" if len(row.ratios) > 1 else ""
    return f"`{row.name}` {row.ratio:.2f}{runs}"


def table(found: list[Verdict], others: int = 4) -> str:
    lines = ["| issue | target | wanted | default | best | met | next best |",
             "|---|---|---|---|---|---|---|"]
    for v in found:
        met = "-" if v.best is None else ("**yes**" if v.met else "no")
        rest = ", ".join(_ratio(r) for r in v.ranked[1:1 + others])
        lines.append(f"| {v.target.issue} | {v.target.what} | >= {v.target.wanted} | "
                     f"{_ratio(v.default)} | {_ratio(v.best)} | {met} | {rest} |")
    changes = [v for v in found if v.change]
    if changes:
        lines += ["", f"Defaults to change (the best row more than {NOISE:.0%} ahead of the "
                      "default, in the same run):"]
        lines += [f"- {v.target.what}: `{v.target.default}` -> `{v.best.name}` "
                  f"({_ratio(v.default)} -> {v.best.ratio:.2f})" for v in changes]
    failed = [(v.target.what, r) for v in found for r in v.failed]
    if failed:
        lines += ["", "Rows that did not measure:"]
        lines += [f"- `{r.name}` ({what}): {'; '.join(sorted(set(r.failures)))[:160]}"
                  for what, r in failed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="harness.py's results.json")
    parser.add_argument("--bundles", type=Path, default=None,
                        help="the built bundles: the cases of rows whose results lack them")
    parser.add_argument("--others", type=int, default=4, help="runner-ups shown a target")
    args = parser.parse_args(argv)
    results = [json.loads(path.read_text()) for path in args.results]
    print(table(verdicts(collect(results, args.bundles)), args.others))
    return 0


if __name__ == "__main__":
    sys.exit(main())
