"""What a fuzzing session did: programs generated, executed or only compiled, rejected, the
features they covered, and the failures with their reproducers."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class FuzzStats:
    backend: str
    seed: int
    examples: int
    avoided: list = field(default_factory=list)
    plan: dict = field(default_factory=dict)  # examples asked of each kind of program
    programs: int = 0
    executed: int = 0
    compiled: int = 0
    rejected: int = 0
    features: Counter = field(default_factory=Counter)
    executed_features: Counter = field(default_factory=Counter)  # of the programs executed
    refused: Counter = field(default_factory=Counter)  # refusal message -> count
    failures: list = field(default_factory=list)  # {"reproducer", "message", "features"}
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    first_failure_after: float | None = None  # seconds to the first failing program
    programs_to_first_failure: int | None = None
    # the kind of the first failure (see ``found``); other kinds seen while shrinking it
    failure_kind: str | None = None
    other_failures: Counter = field(default_factory=Counter)

    def found(self, kind: str) -> bool:
        """A program failed with a failure of ``kind``. The first one was found (time and
        count recorded); while it is shrunk, a failure of another kind is counted and answers
        False: the shrinker keeps to the bug it found instead of sliding to another one."""
        if self.failure_kind is None:
            self.failure_kind = kind
            self.first_failure_after = round(time.monotonic() - self.started, 1)
            self.programs_to_first_failure = self.programs
        if kind != self.failure_kind:
            self.other_failures[kind] += 1
            return False
        return True

    def finish(self) -> None:
        self.seconds = round(time.monotonic() - self.started, 1)

    @property
    def per_minute(self) -> float:
        return 60.0 * (self.executed + self.compiled) / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict:
        return {"backend": self.backend, "seed": self.seed, "examples": self.examples,
                "avoided_features": sorted(self.avoided), "plan": dict(self.plan),
                "programs": self.programs,
                "executed": self.executed, "compiled": self.compiled,
                "rejected": self.rejected, "refused": dict(self.refused),
                "seconds": self.seconds,
                "programs_per_minute": round(self.per_minute, 1),
                "first_failure_after_seconds": self.first_failure_after,
                "programs_to_first_failure": self.programs_to_first_failure,
                "failure_kind": self.failure_kind,
                "other_failures_while_shrinking": dict(self.other_failures),
                "features": dict(sorted(self.features.items())),
                "executed_features": dict(sorted(self.executed_features.items())),
                "failures": self.failures}

    @classmethod
    def from_json(cls, data: dict) -> FuzzStats:
        """The statistics :meth:`to_json` wrote (how a pytest-xdist worker's session reaches
        the controller that prints and writes the report)."""
        return cls(data["backend"], data["seed"], data["examples"],
                   avoided=list(data["avoided_features"]), plan=dict(data["plan"]),
                   programs=data["programs"], executed=data["executed"],
                   compiled=data["compiled"], rejected=data["rejected"],
                   features=Counter(data["features"]),
                   executed_features=Counter(data["executed_features"]),
                   refused=Counter(data["refused"]), failures=list(data["failures"]),
                   seconds=data["seconds"],
                   first_failure_after=data["first_failure_after_seconds"],
                   programs_to_first_failure=data["programs_to_first_failure"],
                   failure_kind=data["failure_kind"],
                   other_failures=Counter(data["other_failures_while_shrinking"]))

    def lines(self) -> list[str]:
        done = f"{self.executed} executed" + (f", {self.compiled} compiled only"
                                              if self.compiled else "")
        out = [f"{self.programs} programs ({done}, {self.rejected} rejected) in "
               f"{self.seconds:g} s: {self.per_minute:.1f} programs/minute; seed {self.seed}",
               f"features covered: {len(self.features)}: " +
               ", ".join(f"{k} {v}" for k, v in sorted(self.features.items()))]
        if self.plan:
            out.append("asked: " + ", ".join(f"{k} {v}" for k, v in self.plan.items()))
        gemms = {k: self.executed_features[k] for k in ("gemm", "pipelined_gemm", "gemm_kernel",
                                                         "attention")}
        out.append("executed: " + ", ".join(f"{k} {v}" for k, v in gemms.items()))
        out += [f"refused by the backend ({n}): {why}" for why, n in self.refused.items()]
        if self.avoided:
            out.append("not generated (known bugs of this backend): " +
                       ", ".join(sorted(self.avoided)))
        if self.first_failure_after is not None:
            out.append(f"first failing program: number {self.programs_to_first_failure}, "
                       f"after {self.first_failure_after:g} s (then shrunk)")
        out += [f"another failure seen while shrinking ({n}): {kind}"
                for kind, n in self.other_failures.items()]
        out += [f"FAILURE, reproducer {f['reproducer']}" for f in self.failures]
        return out
