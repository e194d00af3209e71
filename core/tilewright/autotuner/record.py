"""Tuning records on disk are checked before they are trusted.

A record (``<cache>/autotuner/<key>.json``) is used only when it describes exactly the search
that asks for it: JSON of the right shape, one row per config of the search space in order,
each row naming its config, and a best config that is in the search space, passed, and is the
fastest of the rows that passed. Anything else -- bad JSON, a missing or mistyped field, rows
that do not match the configs, a best config from outside the search space -- is a
:class:`RecordError` saying what is wrong; the tuner then searches again.
"""

from __future__ import annotations

import json
import math

STATUSES = ("ok", "compile failed", "run failed", "check failed")
_ROW = ("config", "status", "compile_s", "latency_ms", "error")


class RecordError(Exception):
    """What is wrong with a tuning record."""


def plain(config: dict):
    """``config`` as it reads back from a record (tuples become lists, others their repr)."""
    return json.loads(json.dumps(config, default=repr))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value >= 0


def _check_row(n: int, row, config) -> None:
    if not isinstance(row, dict) or set(row) != set(_ROW):
        raise RecordError(f"has a malformed row {n} (a row holds {', '.join(_ROW)})")
    if row["config"] != config:
        raise RecordError(f"has row {n} for config {row['config']}, but config {n} of this "
                          f"search is {config}")
    if row["status"] not in STATUSES or not isinstance(row["error"], str) or \
            not _number(row["compile_s"]):
        raise RecordError(f"has a malformed row {n}")
    latency = row["latency_ms"]
    if (row["status"] == "ok" or latency is not None) and not _number(latency):
        raise RecordError(f"has row {n} with status {row['status']!r} and latency "
                          f"{row['latency_ms']!r}")


def check(text: str, configs: list[dict]) -> dict:
    """The fields of an ``AutotuneResult`` from a record's ``text``, for the search over
    ``configs``; ``best_config`` is the search's own config object."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"holds a JSON {type(data).__name__}, not an object")
    rows, wanted = data.get("rows"), [plain(c) for c in configs]
    if not isinstance(rows, list) or len(rows) != len(configs):
        count = len(rows) if isinstance(rows, list) else "no"
        raise RecordError(f"has {count} rows for a search over {len(configs)} configs")
    for n, (row, config) in enumerate(zip(rows, wanted)):
        _check_row(n, row, config)
    best = data.get("best_config")
    if best not in wanted:
        raise RecordError(f"names best config {best!r}, which is not in the search space")
    index = wanted.index(best)
    latency = data.get("best_latency_ms")
    fastest = min(r["latency_ms"] for r in rows if r["status"] == "ok") \
        if any(r["status"] == "ok" for r in rows) else None
    if rows[index]["status"] != "ok" or latency != rows[index]["latency_ms"] or \
            latency != fastest:
        raise RecordError(f"names best config {best!r} at {latency!r} ms, which is not the "
                          "fastest config that passed")
    seconds = [data.get(k, 0.0) for k in ("seconds", "compile_seconds")]
    if not all(_number(s) for s in seconds):
        raise RecordError("has malformed durations")
    return {"best_config": configs[index], "best_latency_ms": latency, "rows": rows,
            "seconds": seconds[0], "compile_seconds": seconds[1]}
