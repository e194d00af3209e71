"""The conformance report: a terminal table, a JSON file and a self-contained HTML matrix
(kernel and its ops x dtype -> pass / fail / unsupported), generated from the recorded results."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

ORDER = ("failed", "xfailed", "unverified", "passed", "unsupported", "unavailable", "skipped")
SHORT = {"passed": "pass", "failed": "FAIL", "xfailed": "known", "unverified": "unverif",
         "unsupported": "unsup", "unavailable": "n/a", "skipped": "skip"}
COLOURS = {"passed": "#c8efc8", "failed": "#f5b5b5", "xfailed": "#f7d6b5",
           "unverified": "#dde8f5", "unsupported": "#e4e4e4", "unavailable": "#fbe7b0",
           "skipped": "#f0f0f0"}


def _cell(results: list[dict]) -> str:
    """The worst status in a cell, with how many of its variants have it."""
    counts = Counter(r["status"] for r in results)
    worst = next(s for s in ORDER if counts[s])
    return f"{SHORT[worst]} {counts[worst]}/{len(results)}"


def matrix(results: list[dict]):
    """(kernels in order, dtypes in order, {(kernel, dtype): [results]})."""
    kernels, dtypes, cells = [], [], {}
    for r in results:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
        if r["dtype"] not in dtypes:
            dtypes.append(r["dtype"])
        cells.setdefault((r["kernel"], r["dtype"]), []).append(r)
    return kernels, dtypes, cells


def summary(results: list[dict]) -> dict:
    counts = Counter(r["status"] for r in results)
    return {s: counts.get(s, 0) for s in ORDER}


def op_coverage(results: list[dict]) -> dict:
    """Tile op -> dtype -> the worst status of the cases using it."""
    out: dict = {}
    for r in results:
        for op in r["ops"]:
            slot = out.setdefault(op, {}).setdefault(r["dtype"], [])
            slot.append(r)
    return {op: {d: next(s for s in ORDER if any(x["status"] == s for x in rs))
                 for d, rs in by_dtype.items()} for op, by_dtype in sorted(out.items())}


def terminal_table(results: list[dict]) -> list[str]:
    kernels, dtypes, cells = matrix(results)
    width = max(len(k) for k in kernels) + 2
    lines = ["kernel".ljust(width) + "".join(d.ljust(14) for d in dtypes)]
    for k in kernels:
        lines.append(k.ljust(width) + "".join(
            (_cell(cells[(k, d)]) if (k, d) in cells else "-").ljust(14) for d in dtypes))
    counts = summary(results)
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(results)}")
    for status in ("failed", "unsupported", "unavailable"):
        listed = [r for r in results if r["status"] == status]
        if listed:
            lines.append(f"{status}:")
            lines += [f"  {r['kernel']}-{r['dtype']}-{r['variant']}: "
                      f"{r['detail'].splitlines()[0] if r['detail'] else ''}"[:160]
                      for r in listed]
    return lines


def to_json(results: list[dict], backend: str, mode: str) -> dict:
    return {"backend": backend, "mode": mode, "summary": summary(results),
            "op_coverage": op_coverage(results), "results": results}


def to_html(results: list[dict], backend: str, mode: str) -> str:
    kernels, dtypes, cells = matrix(results)
    esc = html.escape
    ops = {r["kernel"]: ", ".join(r["ops"]) for r in results}
    rows = []
    for k in kernels:
        tds = []
        for d in dtypes:
            rs = cells.get((k, d), [])
            if not rs:
                tds.append("<td>-</td>")
                continue
            worst = next(s for s in ORDER if any(r["status"] == s for r in rs))
            tip = "\n".join(f"{r['variant']}: {r['status']} {r['detail']}"[:400] for r in rs)
            tds.append(f'<td style="background:{COLOURS[worst]}" title="{esc(tip)}">'
                       f"{esc(_cell(rs))}</td>")
        rows.append(f"<tr><th>{esc(k)}</th><td class=ops>{esc(ops[k])}</td>{''.join(tds)}</tr>")
    cover = op_coverage(results)
    op_rows = "".join(
        f"<tr><th>{esc(op)}</th>" + "".join(
            f'<td style="background:{COLOURS[by.get(d, "skipped")]}">'
            f"{esc(SHORT.get(by.get(d, ''), '-'))}</td>" for d in dtypes) + "</tr>"
        for op, by in cover.items())
    details = "".join(
        f"<tr><td>{esc(r['kernel'])}-{esc(r['dtype'])}-{esc(r['variant'])}</td>"
        f"<td>{esc(r['status'])}</td><td><pre>{esc(r['detail'])}</pre></td></tr>"
        for r in results if r["status"] != "passed")
    counts = ", ".join(f"{n} {s}" for s, n in summary(results).items() if n)
    head = "".join(f"<th>{esc(d)}</th>" for d in dtypes)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tilewright conformance: {esc(backend)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #999;padding:4px 8px;text-align:left}}td.ops{{color:#555}}
pre{{margin:0;white-space:pre-wrap;max-width:80em}}</style></head><body>
<h1>Conformance of backend <code>{esc(backend)}</code>, mode <code>{esc(mode)}</code></h1>
<p>{esc(counts)} of {len(results)} cases. Hover a cell for each shape variant.</p>
<h2>Kernels</h2><table><tr><th>kernel</th><th>tile ops</th>{head}</tr>{''.join(rows)}</table>
<h2>Tile ops</h2><table><tr><th>op</th>{head}</tr>{op_rows}</table>
<h2>Not passed</h2><table><tr><th>case</th><th>status</th><th>detail</th></tr>{details}</table>
</body></html>
"""


def write_reports(results: list[dict], directory, backend: str, mode: str) -> list[Path]:
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"conformance-{backend}-{mode}"
    json_path, html_path = stem.with_suffix(".json"), stem.with_suffix(".html")
    json_path.write_text(json.dumps(to_json(results, backend, mode), indent=1))
    html_path.write_text(to_html(results, backend, mode))
    return [json_path, html_path]
