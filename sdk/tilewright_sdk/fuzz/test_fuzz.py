"""The differential fuzzer as a pytest test (see :mod:`tilewright_sdk.fuzz`)."""

import hashlib
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Unsatisfiable

from ..conformance.runner import cannot_execute, missing_tile_ops
from .check import Mismatch, Refused, differential, load, module_source
from .gemm import fuzz_plan


def _pattern(message: str) -> str:
    """A refusal without its file, line and expression, so alike refusals count together."""
    text = message.split(": ", 1)[-1] if message.startswith("/") else message
    return text.split(" for ", 1)[0][:160]


def _kind(exc: BaseException) -> str:
    """What kind of failure ``exc`` is: any wrong result is one kind; any other failure is its
    type and the first line of its message without paths and numbers."""
    if isinstance(exc, Mismatch):
        return "Mismatch"
    line = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {re.sub(r'[^ ]*[/0-9][^ ]*', '#', line)[:200]}"


def test_backend_agrees_with_the_interpreter(tilewright_backend, tilewright_fuzz):
    stats = tilewright_fuzz.stats
    execute = not cannot_execute(tilewright_backend)
    last = {}
    scratch = tempfile.mkdtemp(prefix="tw-fuzz-")

    def check(program):
        last["program"] = program
        source = module_source(program, tilewright_backend.name, stats.seed)
        try:
            module = load(source, scratch)
        except Exception as exc:
            if not stats.found(_kind(exc)):
                reject()
            raise
        if missing_tile_ops(module.fuzz, tilewright_backend):
            stats.rejected += 1
            reject()
        stats.programs += 1
        stats.features.update(program.features)
        try:
            differential(module, tilewright_backend, stats.seed, execute)
        except Refused as exc:  # a clean refusal, not a wrong result
            stats.refused[_pattern(str(exc))] += 1
            reject()
        except Exception as exc:
            if not stats.found(_kind(exc)):
                reject()
            raise
        if execute:
            stats.executed += 1
            stats.executed_features.update(program.features)
        else:
            stats.compiled += 1

    plan = fuzz_plan(stats.examples, avoid=stats.avoided,
                     dtypes=tilewright_backend.capabilities.dtypes,
                     features=tilewright_backend.capabilities.features,
                     tile_ops=tilewright_backend.capabilities.tile_ops,
                     op_dtypes=tilewright_backend.capabilities.op_dtypes)
    stats.plan = {name: examples for name, _, examples in plan}
    try:
        for _, strategy, examples in plan:  # tile programs, then GEMM and attention kernels
            run = settings(max_examples=examples, deadline=None, database=None,
                           suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                           print_blob=False)(hypothesis_seed(stats.seed)(given(strategy)(check)))
            try:
                run()
            except Unsatisfiable:  # the backend refused every one (counted): the next part
                continue
    except Exception as exc:
        program = last.get("program")
        if program is None:
            raise
        note = f"{type(exc).__name__}: {exc}"
        source = module_source(program, tilewright_backend.name, stats.seed, note)
        folder = Path(tilewright_fuzz.folder)
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(source.encode()).hexdigest()[:10]
        path = folder / f"repro_{tilewright_backend.name}_{digest}.py"
        path.write_text(source)
        stats.failures.append({"reproducer": str(path), "message": note[:2000],
                               "features": sorted(program.features)})
        pytest.fail(f"backend {tilewright_backend.name!r} disagrees with the interpreter on a "
                    f"generated program (shrunk); reproducer: {path}\n{note}", pytrace=False)
    finally:
        stats.finish()
