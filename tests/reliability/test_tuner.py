"""The tuner survives its configs: a config that segfaults, hangs, exhausts memory, raises or
exits -- while compiling or while running -- is a failed row with the reason, every other
config is still measured, and the best is right. Tuning records that are corrupt or do not
match the search are rebuilt with a warning."""

from __future__ import annotations

import json

import pytest
import tilewright
import torch
from tilewright.autotuner import record, tuner
from tilewright.errors import ConfigError
from tuner_kernels import copy_or_misbehave

N = 300
FAST = {"warmup": 1, "rep": 2, "progress": False}
GOOD = [{"block": 32}, {"block": 64}]


@pytest.fixture(autouse=True)
def fresh_memory():
    tuner._MEMORY.clear()
    yield
    tuner._MEMORY.clear()


def _supply(kernel):
    inputs = [torch.randn(N)]
    if len(kernel.signature.inputs) == 2:  # the wild gather: indices 2^40 elements away
        inputs.append(torch.full((N,), 1 << 40, dtype=torch.int64))
    return inputs


def _identity(x, *indices):
    return x.clone()


def _compile_here(configs) -> None:
    """Compile the well-behaved configs in this process first: their steps in the child
    processes are then disk-cache hits, well within the short time limits of these tests."""
    for config in configs:
        if config.get("mode", "copy") == "copy":
            copy_or_misbehave(N, **config)


def _tuned(configs, **options):
    options = {"supply": _supply, "reference": _identity, **FAST, **options}
    return tilewright.autotune(configs=configs, **options)(copy_or_misbehave)


def test_misbehaving_configs_fail_alone_and_the_best_is_right(capsys):
    bad = {"segfault": "killed by SIGSEGV",
           "hang": "timed out after 8 s",
           "hog": "exceeded the 1 GiB memory limit (MemoryError",
           "raise": "RuntimeError: this config raises",
           "exit": "SystemExit: 5 (sys.exit)"}
    # the gather's indices leave X: unguarded (TileLang's switch, this config's alone), the
    # loads crash the measuring process (guarded, they would read 0 and fail the check)
    wild = {"mode": "wild", "pass_configs": {"tl.disable_safe_memory_legalize": True}}
    configs = [GOOD[0], *({"mode": m} for m in bad), wild, GOOD[1]]
    _compile_here(configs)
    tuned = _tuned(configs, timeout=8, memory_limit="1 GiB", workers=2, progress=True)
    kernel = tuned(N)
    rows = kernel.autotune_result.rows
    assert [r["status"] for r in rows] == ["ok", *["compile failed"] * 5, "run failed", "ok"]
    for row, reason in zip(rows[1:], bad.values()):
        assert row["error"].startswith(reason), (row["error"], reason)
    assert rows[6]["error"] == "killed by SIGSEGV"  # the gather crashed while measured
    best = kernel.autotune_result
    assert best.best_config in GOOD
    assert best.best_latency_ms == min(rows[0]["latency_ms"], rows[-1]["latency_ms"])
    x = torch.randn(N)
    assert torch.equal(kernel(x), x)
    err = capsys.readouterr().err
    assert "compiling: 8/8 done" in err and "measuring: 3/3 done" in err


def test_ray_tasks_that_crash_or_hang_fail_alone(local_cluster):
    configs = [{"mode": "segfault"}, GOOD[0], {"mode": "hang"}, GOOD[1]]
    _compile_here(configs)
    # Ray ships functions of this module by reference, and its workers cannot import it:
    # lambdas travel by value
    kernel = _tuned(configs, executor="ray", timeout=8, supply=lambda kernel: [torch.randn(N)],
                    reference=lambda x: x.clone())(N)
    rows = kernel.autotune_result.rows
    assert [(r["status"], r["error"]) for r in rows] == [
        ("compile failed", "killed by SIGSEGV"), ("ok", ""),
        ("compile failed", "timed out after 8 s"), ("ok", "")]
    assert kernel.autotune_result.best_config in GOOD


def test_ray_tasks_past_their_deadline_are_cancelled(local_cluster, monkeypatch):
    from tilewright.autotuner import executors
    from tilewright.errors import TilewrightError

    # the task's own limit (in its child process) normally fires first; here the deadline of
    # the task itself passes first: 0.5 s after it was handed to Ray
    monkeypatch.setattr(executors, "RAY_GRACE", -7.5)
    tuned = _tuned([{"mode": "hang"}], executor="ray", timeout=8)
    with pytest.raises(TilewrightError, match=r"timed out after 8 s \(the Ray task gave no "
                                              r"answer within 0\.5 s; cancelled\)"):
        tuned(N)


def test_limits_are_checked():
    with pytest.raises(ConfigError, match="timeout must be a positive number of seconds"):
        _tuned(GOOD, timeout=0)
    with pytest.raises(ConfigError, match="memory_limit must be a positive number of bytes or "
                                          "a size such as '2 GiB'"):
        _tuned(GOOD, memory_limit="lots")
    limits = _tuned(GOOD, timeout=None, memory_limit="512MiB").limits
    assert limits.timeout is None and limits.memory == 512 << 20


SOUND = {"best_config": {"block": 64}, "best_latency_ms": 0.01, "key": "k", "seconds": 2.0,
         "compile_seconds": 1.0,
         "rows": [{"config": {"block": 32}, "status": "ok", "compile_s": 0.5, "latency_ms": 0.02,
                   "error": ""},
                  {"config": {"block": 64}, "status": "ok", "compile_s": 0.5, "latency_ms": 0.01,
                   "error": ""}]}


@pytest.mark.parametrize("damage, reason", [
    (lambda data: "{not json", "is not valid JSON"),
    (lambda data: [], "holds a JSON list, not an object"),
    (lambda data: {**data, "rows": data["rows"][:1]}, "has 1 rows for a search over 2 configs"),
    (lambda data: {**data, "rows": data["rows"][::-1]},
     "has row 0 for config {'block': 64}, but config 0 of this search is {'block': 32}"),
    (lambda data: {**data, "best_config": {"block": 128}},
     "names best config {'block': 128}, which is not in the search space"),
    (lambda data: {**data, "best_config": {"block": 32}, "best_latency_ms": 0.02},
     "names best config {'block': 32} at 0.02 ms, which is not the fastest config that passed"),
    (lambda data: {**data, "rows": [{**r, "status": "fine"} for r in data["rows"]]},
     "has a malformed row 0"),
    (lambda data: {**data, "rows": [{**r, "latency_ms": None} for r in data["rows"]]},
     "has row 0 with status 'ok' and latency None"),
    (lambda data: {**data, "seconds": "long"}, "has malformed durations"),
])
def test_corrupt_or_inconsistent_records_are_refused(damage, reason):
    damaged = damage(json.loads(json.dumps(SOUND)))
    text = damaged if isinstance(damaged, str) else json.dumps(damaged)
    with pytest.raises(record.RecordError) as exc:
        record.check(text, GOOD)
    assert str(exc.value).startswith(reason)


def test_a_sound_record_gives_the_search_space_config():
    configs = [{"block": 32}, {"block": 64}]
    fields = record.check(json.dumps(SOUND), configs)
    assert fields["best_config"] is configs[1] and fields["best_latency_ms"] == 0.01


def test_a_refused_record_is_rebuilt_with_a_warning(cache_dir):
    tuned = _tuned(GOOD, workers=2)
    first = tuned(N).autotune_result
    (path,) = (cache_dir / "autotuner").glob("*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "best_config": {"block": 7}}))
    tuner._MEMORY.clear()
    with pytest.warns(RuntimeWarning) as warned:
        again = _tuned(GOOD, workers=2)(N).autotune_result
    assert str(warned[0].message) == (f"tilewright tuning record {path} names best config "
                                      "{'block': 7}, which is not in the search space; tuning "
                                      "again")
    assert not again.cached and again.best_config in GOOD and first.best_config in GOOD
    assert json.loads(path.read_text())["best_config"] == again.best_config  # rewritten


def _identity_under(lock, x, *indices):
    with lock:
        return x.clone()


def test_a_reference_that_cannot_travel_is_a_clear_error():
    import functools
    import threading

    tuned = _tuned(GOOD[:1], reference=functools.partial(_identity_under, threading.Lock()))
    with pytest.raises(ConfigError, match=r"cannot send measure_config and its arguments \(the "
                                          r"kernel factory, reference, supply \.\.\.\) to the "
                                          r"process that runs it: TypeError: cannot pickle "
                                          r"'_thread.lock' object"):
        tuned(N)
