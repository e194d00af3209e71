"""Known backend bugs: one table, each row a catalogue case pattern (and the fuzzer features)
that fails on one backend until the owning branch's fix is merged.

The conformance suite turns a matching case into a strict xfail naming the bug, so the suite
stays green while the bug is open and fails as soon as the fix lands (an unexpected pass):
then delete the row. The fuzzer stops generating a row's ``fuzz`` features for that backend
unless ``--tilewright-fuzz-known`` asks it to look for known bugs too.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class KnownFailure:
    """``backend`` fails the cases whose id matches ``cases`` (an fnmatch pattern).

    ``when``: ``"build"`` (lowering or compiling fails), ``"run"`` (wrong results, seen only
    where the backend executes) or ``"crash"`` (running it takes the process down: the suite
    skips it, naming the bug, instead of running it as a strict xfail); ``fuzz``: the fuzzer
    features that trigger the bug.
    """

    backend: str
    cases: str
    cause: str
    when: str = "run"
    fuzz: tuple[str, ...] = ()

    def reason(self) -> str:
        return f"known {self.backend} bug: {self.cause}"


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
)


def known_failure(backend: str, case_id: str, executes: bool) -> KnownFailure | None:
    """The row that predicts ``case_id`` fails on ``backend`` (``executes``: whether the
    backend runs kernels here, so wrong results can show)."""
    for row in KNOWN_FAILURES:
        if row.backend == backend and fnmatchcase(case_id, row.cases) and \
                (row.when == "build" or executes):
            return row
    return None


def avoided_features(backend: str) -> set[str]:
    """The fuzzer features known to fail on ``backend``."""
    return {f for row in KNOWN_FAILURES if row.backend == backend for f in row.fuzz}
