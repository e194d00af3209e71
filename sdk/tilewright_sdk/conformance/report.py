"""The conformance report: a terminal table, and JSON and HTML files (jinja2 templates).

One session writes ``conformance-NAME-MODE.json`` (or ``fuzz-NAME.json``) and its own HTML
page into the report folder, then rebuilds ``index.html`` from every JSON file there, so
several runs given the same ``--tilewright-report`` folder (one per backend) make one report
with a capability matrix across the backends. ``tilewright-sdk report DIR`` rebuilds it.
Every view is computed from the recorded results: coverage by language name and by dtype, the
kernels, the fuzzing statistics with their reproducers.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jinja2

ORDER = ("failed", "xfailed", "unverified", "passed", "unsupported", "unavailable", "skipped")
SHORT = {"passed": "pass", "failed": "FAIL", "xfailed": "known", "unverified": "unverif",
         "unsupported": "unsup", "unavailable": "n/a", "skipped": "skip"}
LABEL = {"passed": "passed", "failed": "failed", "xfailed": "known bug (strict xfail)",
         "unverified": "compiled, not verified", "unsupported": "unsupported",
         "unavailable": "unavailable here", "skipped": "skipped"}
COLOURS = {"passed": "#c8efc8", "failed": "#f5b5b5", "xfailed": "#f7d6b5",
           "unverified": "#dde8f5", "unsupported": "#e4e4e4", "unavailable": "#fbe7b0",
           "skipped": "#f0f0f0"}
INDEX = "index.html"


def worst(statuses) -> str:
    statuses = set(statuses)
    return next(s for s in ORDER if s in statuses)


def _cell(results: list[dict]) -> str:
    """The worst status in a cell, with how many of its variants have it."""
    counts = Counter(r["status"] for r in results)
    bad = worst(counts)
    return f"{SHORT[bad]} {counts[bad]}/{len(results)}"


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


def _coverage(results: list[dict], key: str) -> dict:
    out: dict = {}
    for r in results:
        for item in r.get(key, ()):
            out.setdefault(item, {}).setdefault(r["dtype"], []).append(r["status"])
    return {item: {d: worst(s) for d, s in by.items()} for item, by in sorted(out.items())}


def op_coverage(results: list[dict]) -> dict:
    """Tile op -> dtype -> the worst status of the cases using it."""
    return _coverage(results, "ops")


def name_coverage(results: list[dict]) -> dict:
    """Name of ``tilewright.language`` -> dtype -> the worst status of the cases using it."""
    return _coverage(results, "names")


def terminal_table(results: list[dict]) -> list[str]:
    kernels, dtypes, cells = matrix(results)
    width = max(len(k) for k in kernels) + 2
    lines = ["kernel".ljust(width) + "".join(d[:13].ljust(14) for d in dtypes)]
    for k in kernels:
        lines.append(k.ljust(width) + "".join(
            (_cell(cells[(k, d)]) if (k, d) in cells else "-").ljust(14) for d in dtypes))
    counts = summary(results)
    lines.append(", ".join(f"{n} {LABEL[s]}" for s, n in counts.items() if n) +
                 f" of {len(results)}")
    for status in ("failed", "xfailed", "unsupported", "unavailable"):
        listed = [r for r in results if r["status"] == status]
        if listed:
            lines.append(f"{LABEL[status]}:")
            lines += [f"  {r['kernel']}-{r['dtype']}-{r['variant']}: "
                      f"{r['detail'].splitlines()[0] if r['detail'] else ''}"[:160]
                      for r in listed]
    return lines


def session_json(state) -> dict:
    """The JSON of one session (a conformance run, a fuzzing run, or both)."""
    data = {"backend": state.name, "mode": state.mode}
    if state.target:
        data["target"] = state.target
    if state.results:
        data.update(summary=summary(state.results), name_coverage=name_coverage(state.results),
                    op_coverage=op_coverage(state.results), results=state.results)
    if state.fuzz is not None:
        data["fuzz"] = state.fuzz.to_json()
    return data


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("tilewright_sdk.conformance"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             trim_blocks=True, lstrip_blocks=True)
    env.globals.update(SHORT=SHORT, LABEL=LABEL, COLOURS=COLOURS, ORDER=ORDER)
    return env


def _view(runs: list[dict]) -> dict:
    """What the template shows for ``runs`` (session JSONs)."""
    conformance = [r for r in runs if r.get("results")]
    names = sorted({n for r in conformance for n in r["name_coverage"]})
    dtypes = []
    for r in conformance:
        for res in r["results"]:
            if res["dtype"] not in dtypes:
                dtypes.append(res["dtype"])
    columns = [f"{r['backend']} ({r['mode']})" for r in conformance]
    capability = {n: [worst(r["name_coverage"][n].values()) if n in r["name_coverage"]
                      else None for r in conformance] for n in names}
    for r in conformance:
        kernels, _, cells = matrix(r["results"])
        ops = {x["kernel"]: x["ops"] for x in r["results"]}
        r["kernel_rows"] = [(k, ops[k], [cells.get((k, d)) for d in dtypes]) for k in kernels]
        r["not_passed"] = [x for x in r["results"] if x["status"] != "passed"]
    return {"runs": runs, "conformance": conformance, "columns": columns, "names": names,
            "dtypes": dtypes, "capability": capability,
            "fuzz": [r["fuzz"] for r in runs if r.get("fuzz")]}


def render_html(runs: list[dict]) -> str:
    return _environment().get_template("report.html.j2").render(**_view(runs),
                                                                 cell=_cell, worst=worst)


def write_reports(state, directory) -> list[Path]:
    """Write this session's JSON and HTML into ``directory`` and rebuild its index."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{state.name}-{state.target}" if state.target else state.name
    stem = f"conformance-{name}-{state.mode}" if state.results else f"fuzz-{name}"
    data = session_json(state)
    json_path, html_path = folder / f"{stem}.json", folder / f"{stem}.html"
    json_path.write_text(json.dumps(data, indent=1))
    html_path.write_text(render_html([data]))
    return [json_path, html_path, rebuild_index(folder)]


def rebuild_index(directory) -> Path:
    """``index.html`` of every session JSON in ``directory``: one report across backends."""
    folder = Path(directory)
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    path = folder / INDEX
    path.write_text(render_html(runs))
    return path
