"""Running one config: compile it, and measure it against the reference.

These functions are the steps that :mod:`.isolation` runs in a child process of their own,
on this machine or inside a Ray task. They take plain values and return plain records, so
every placement reports failures the same way. They log nothing about pass configs that have
no effect on the backend: the tuning process does, once per key
(:func:`.executors.note_pass_configs`).
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from dataclasses import dataclass, field

from .. import testing
from ..errors import ConfigError
from ..jit.cache import DiskCache
from ..plugin.passconfig import quiet_ignored
from ..profiler import do_bench
from ..utils.tensor import random_float4, with_declared_strides


@dataclass
class Outcome:
    """What happened to one config."""

    index: int
    config: dict
    status: str = "pending"  # compiled | ok | compile failed | run failed | check failed |
    # stopped early
    compile_s: float = 0.0
    latency_ms: float | None = None
    error: str = ""
    bundle: dict | None = field(default=None, repr=False)  # cache entry shipped by Ray


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


def compile_config(jit_fn, args, kwargs, index: int, config: dict,
                   bundle: bool = False) -> Outcome:
    """Compile one config (it lands in the disk cache); with ``bundle`` also return the cache
    entry's files, for a tuning process on another machine."""
    outcome = Outcome(index, config)
    start = time.perf_counter()
    try:
        with quiet_ignored():  # the tuning process said it once for every config
            kernel = jit_fn(*args, **kwargs, **config)
    except Exception as exc:  # noqa: BLE001 - a failing config is a row of the table
        outcome.status, outcome.error = "compile failed", _short(exc)
        outcome.compile_s = time.perf_counter() - start
        return outcome
    outcome.compile_s = time.perf_counter() - start
    outcome.status = "compiled"
    if bundle and getattr(kernel, "artifact_dir", None):
        from pathlib import Path

        path = Path(kernel.artifact_dir)
        outcome.bundle = {"key": path.name,
                          "files": {p.name: p.read_bytes() for p in path.iterdir()
                                    if p.is_file()}}
    return outcome


def install_bundle(bundle: dict | None) -> None:
    """Put a cache entry compiled elsewhere into this machine's disk cache (if absent)."""
    if not bundle:
        return
    cache = DiskCache()
    if cache.lookup(bundle["key"]) is not None:
        return
    staging = cache.staging()
    for name, data in bundle["files"].items():
        (staging / name).write_bytes(data)
    final = cache.entry(bundle["key"])
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def _as_list(value):
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


class Measurer:
    """Times configs on identical inputs and checks them against the reference.

    Inputs come from ``supply(kernel)`` or, by default, random tensors shaped by the kernel's
    signature; the reference's outputs are computed once and reused. With
    ``early_stop_factor`` (TileLang's early stop), a config whose first few runs already take
    longer than that factor times the best latency so far (``best_ms``, which the search sets
    before each measurement) is not timed in full: its row says "stopped early".
    """

    def __init__(self, warmup: float, rep: float, timer: str, reference=None, supply=None,
                 rtol=None, atol=None, max_mismatch_ratio=None, reduction_length=None,
                 seed: int = 0, early_stop_factor: float | None = None):
        self.early_stop_factor, self.best_ms = early_stop_factor, None
        self.warmup, self.rep, self.timer = warmup, rep, timer
        self.reference, self.supply = reference, supply
        self.rtol, self.atol, self.max_mismatch_ratio = rtol, atol, max_mismatch_ratio
        self.reduction_length = reduction_length
        self.seed = seed
        self._inputs = None
        self._expected = None

    def __getstate__(self):  # shipped to Ray workers without tensors
        return {**self.__dict__, "_inputs": None, "_expected": None}

    def inputs(self, kernel):
        if self._inputs is None:
            import torch

            torch.manual_seed(self.seed)
            self._inputs = list(self.supply(kernel) if self.supply is not None
                                else random_inputs(kernel))
        return self._inputs

    def check(self, kernel, outputs) -> None:
        if self.reference is None:
            return
        if self._expected is None:
            self._expected = _as_list(self.reference(*self.inputs(kernel)))
        got = _as_list(outputs)
        if len(got) != len(self._expected):
            raise ConfigError(f"the reference returned {len(self._expected)} output(s) but "
                              f"kernel {kernel.signature.name} returns {len(got)}")
        for n, (actual, expected) in enumerate(zip(got, self._expected)):
            if tuple(actual.shape) != tuple(expected.shape):
                raise ConfigError(f"the reference's output {n} has shape "
                                  f"{tuple(expected.shape)} but kernel "
                                  f"{kernel.signature.name} produces {tuple(actual.shape)}")
            testing.assert_close(actual, expected, rtol=self.rtol, atol=self.atol,
                                 max_mismatch_ratio=self.max_mismatch_ratio,
                                 reduction_length=self.reduction_length,
                                 name=f"output {n}")

    def measure(self, kernel, outcome: Outcome) -> Outcome:
        """Run, check and time ``kernel``; failures go into ``outcome``. A reference whose
        outputs cannot match any config (count or shape) raises :class:`ConfigError`."""
        inputs = self.inputs(kernel)
        try:
            outputs = kernel(*inputs)
        except Exception as exc:  # noqa: BLE001
            outcome.status, outcome.error = "run failed", _short(exc)
            return outcome
        try:
            self.check(kernel, outputs)
        except ConfigError:
            raise
        except AssertionError as exc:
            outcome.status, outcome.error = "check failed", _short(exc)
            return outcome
        try:
            if self.early_stop_factor is not None and self.best_ms is not None:
                estimate = float(do_bench(lambda: kernel(*inputs), _n_warmup=1, _n_repeat=3,
                                          backend=self.timer))
                if estimate > self.early_stop_factor * self.best_ms:
                    outcome.status, outcome.latency_ms = "stopped early", estimate
                    outcome.error = (f"stopped early: about {estimate:.4f} ms, over "
                                     f"{self.early_stop_factor:g} x the best "
                                     f"{self.best_ms:.4f} ms")
                    return outcome
            outcome.latency_ms = float(do_bench(lambda: kernel(*inputs), warmup=self.warmup,
                                                rep=self.rep, backend=self.timer))
        except Exception as exc:  # noqa: BLE001
            outcome.status, outcome.error = "run failed", _short(exc)
            return outcome
        outcome.status = "ok"
        return outcome


def random_inputs(kernel) -> list:
    """Random tensors for a kernel's inputs, shaped, typed (and strided, where a
    ``T.StridedTensor`` declares constant strides) by its signature."""
    import torch

    out = []
    for spec in kernel.signature.inputs:
        if spec.kind != "tensor" or not all(isinstance(d, int) for d in spec.host_shape):
            what = "a scalar" if spec.kind != "tensor" else f"shape {spec.shape}"
            raise ConfigError(f"cannot make an input for parameter {spec.name!r} of kernel "
                              f"{kernel.signature.name} ({what}); pass supply=callable(kernel) "
                              "returning the input tensors")
        dtype = getattr(torch, spec.host_dtype)
        device = kernel.backend.device
        shape = spec.host_shape
        if dtype == torch.float4_e2m1fn_x2:
            tensor = random_float4(shape, device)
        elif dtype.is_floating_point:
            tensor = torch.randn(shape, device=device).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.rand(shape, device=device) > 0.5
        else:
            tensor = torch.randint(-4, 5, shape, device=device).to(dtype)
        out.append(with_declared_strides(tensor, spec))
    return out


def measure_config(jit_fn, args, kwargs, outcome: Outcome, measurer: Measurer) -> Outcome:
    """Load a compiled config (from the cache entry shipped with it, if any) and measure it.
    A reference that cannot match any config makes the status ``fatal``."""
    try:
        install_bundle(outcome.bundle)
        outcome.bundle = None
        with quiet_ignored():
            kernel = jit_fn(*args, **kwargs, **outcome.config)
        return measurer.measure(kernel, outcome)
    except ConfigError as exc:
        outcome.status, outcome.error = "fatal", str(exc)
    except Exception as exc:  # noqa: BLE001
        outcome.status, outcome.error = "run failed", _short(exc)
        outcome.error += "\n" + traceback.format_exc(limit=3)
    return outcome
