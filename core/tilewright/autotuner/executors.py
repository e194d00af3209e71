"""Where the search runs: child processes on this machine, or tasks on a Ray cluster.

Every step of every config -- its compilation, then its run, reference check and timing --
runs in a process of its own with the search's time and memory limits (:mod:`.isolation`), so
a config that raises, crashes, hangs or exhausts memory is one failed row and the others go
on. Compilation runs ``workers`` configs at a time and lands in the disk cache; measurement
runs one config at a time, so timings never compete with each other. The tuning process then
loads the winner from the cache.

On Ray, each step is a task (never retried) whose body runs the step through
:mod:`.isolation` on its worker, so the worker survives what the config does and the memory
limit applies there. A task that does not answer within the time limit plus
:data:`RAY_GRACE` seconds (the worker's start and its helper process) is cancelled with
``ray.cancel(force=True)`` and recorded as timed out; at most as many tasks as the cluster
has CPUs are in flight, so that the clock of a task starts close to the task itself.
"""

from __future__ import annotations

import inspect
import os
import time

from ..errors import ConfigError
from ..jit import JITFunction
from ..plugin import passconfig
from ..plugin.guard import describe
from . import isolation
from .isolation import Failed, Limits, memory_reason
from .measure import Outcome, compile_config, install_bundle, measure_config

EXECUTORS = ("process", "ray")
RAY_GRACE = 300.0


PASS_CONFIGS = "pass_configs"  # TileLang's config key: pass configs of that config alone


def config_arguments(config: dict) -> dict:
    """The kernel's arguments that a config sets (all its keys but ``pass_configs``)."""
    return {k: v for k, v in config.items() if k != PASS_CONFIGS}


class JitSpec:
    """A ``@jit`` kernel as a child process or a Ray task receives it: the function
    and every option it was made with (the arguments of ``JITFunction``, which keeps each
    under its own name), without the compiled kernels the tuning process holds (in that
    process the ``@jit`` object itself is used, with its memo)."""

    def __init__(self, jit_fn):
        names = list(inspect.signature(JITFunction).parameters)
        self.options = {name: getattr(jit_fn, name) for name in names}
        self._jits = {None: jit_fn}  # a config's own pass configs (frozen) -> its @jit

    def __getstate__(self):
        return {"options": self.options, "_jits": {}}

    def __call__(self, *args, **kwargs):
        """The compiled kernel (an eager kernel is compiled, not run). A ``pass_configs``
        keyword (a config's own, as in TileLang) is merged over the decorator's."""
        jit = self._jit(kwargs.pop(PASS_CONFIGS, None))
        return jit(*args, **kwargs) if jit.factory else jit.compile(*args, **kwargs)

    def _jit(self, pass_configs):
        if pass_configs is not None and not isinstance(pass_configs, dict):
            raise ConfigError(f"a config's {PASS_CONFIGS} must be a dict, got "
                              f"{type(pass_configs).__name__}")
        key = None if not pass_configs else tuple(sorted(pass_configs.items(), key=repr))
        if key not in self._jits:
            options = dict(self.options)
            if key is not None:
                options["pass_configs"] = {**(options["pass_configs"] or {}), **pass_configs}
            self._jits[key] = JITFunction(**options)
        return self._jits[key]


def note_pass_configs(jit_fn, configs, backend: str) -> None:
    """Log here, once per key and backend, each pass config of the search (the kernel's and
    each config's own) that has no effect on ``backend``; the steps log none. A config whose
    pass configs are invalid is left to its step, which fails with the reason."""
    for config in configs:
        try:
            merged = passconfig.validate({**(getattr(jit_fn, "pass_configs", None) or {}),
                                          **(config.get(PASS_CONFIGS) or {})})
        except (ConfigError, TypeError):
            continue
        passconfig.note_ignored(merged, backend)


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _compiled(result, index: int, config: dict, limits: Limits) -> Outcome:
    if isinstance(result, Failed):
        return Outcome(index, config, "compile failed", error=result.reason)
    result.error = memory_reason(result.error, limits)
    return result


def _measured(result, outcome: Outcome, limits: Limits) -> Outcome:
    if isinstance(result, Failed):
        outcome.status, outcome.error, outcome.bundle = "run failed", result.reason, None
        return outcome
    if result.status == "fatal":
        raise ConfigError(result.error)
    result.error = memory_reason(result.error, limits)
    return result


LINE_ERROR = 120  # characters of a failure that a progress line keeps


def outcome_line(outcome: Outcome) -> str:
    """One short line for a config done: its config, then its compile time, latency or
    failure (the first line of the error, cut at :data:`LINE_ERROR` characters)."""
    if outcome.status == "compiled":
        what = f"compiled in {outcome.compile_s:.1f} s"
    elif outcome.status == "ok":
        what = f"{outcome.latency_ms:.4g} ms"
    else:
        error = (outcome.error.splitlines() or [""])[0]
        if len(error) > LINE_ERROR:
            error = error[:LINE_ERROR - 3] + "..."
        what = f"{outcome.status}: {error}" if error else outcome.status
    return f"{outcome.config}: {what}"


def _note_best(measurer, outcome: Outcome) -> None:
    """The best latency measured so far, for the measurer's early stop."""
    if outcome.status == "ok" and (measurer.best_ms is None or
                                   outcome.latency_ms < measurer.best_ms):
        measurer.best_ms = outcome.latency_ms


def search_local(jit_fn, args, kwargs, configs, measurer, limits: Limits, workers: int,
                 progress) -> list[Outcome]:
    """Compile every config (``workers`` at a time), then measure the compiled ones one at a
    time; ``progress(stage, total)`` makes the progress bar of each stage."""
    spec = JitSpec(jit_fn)
    bar = progress("compiling", len(configs))
    steps = [(compile_config, (spec, args, kwargs, i, c)) for i, c in enumerate(configs)]
    outcomes = _compile_all(configs, limits, bar, lambda done: isolation.run(
        steps, limits, workers, done=done))
    compiled = [o for o in outcomes if o.status == "compiled"]
    bar = progress("measuring", len(compiled))
    for outcome in compiled:
        (result,) = isolation.run([(measure_config, (spec, args, kwargs, outcome, measurer))],
                                  limits)
        outcomes[outcome.index] = _measured(result, outcome, limits)
        _note_best(measurer, outcomes[outcome.index])
        bar.advance(outcomes[outcome.index])
    bar.close()
    return outcomes


def _compile_all(configs, limits: Limits, bar, run) -> list[Outcome]:
    """The outcomes of ``run(done)``, which compiles every config and calls ``done(i,
    result)`` as each ends; the bar advances with each outcome, then closes."""
    outcomes: list = [None] * len(configs)

    def done(index, result):
        outcomes[index] = _compiled(result, index, configs[index], limits)
        bar.advance(outcomes[index])

    run(done)
    bar.close()
    return outcomes


# -- Ray ---------------------------------------------------------------------------------------
def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("executor='ray' needs Ray, which is not installed: pip install "
                          "'tilewright[ray]'") from None
    return ray


def isolated_step(limits: Limits, fn, *args):
    """A Ray task body: ``fn(*args)`` in a child process of this worker."""
    (result,) = isolation.run([(fn, args)], limits)
    return result


def _device_resources(backend) -> dict:
    """Ray resources a measurement task needs to sit next to the target device."""
    if not backend.accelerator:
        return {}
    if backend.device == "cuda":
        return {"num_gpus": 1}
    return {"resources": {backend.device: 1}}


def _ray_steps(ray, task, calls: list[tuple], limits: Limits, in_flight: int, done) -> list:
    """Run ``task.remote(limits, *call)`` for each call, ``in_flight`` at a time; a task that
    fails or passes its deadline is a :class:`Failed` result."""
    results: list = [None] * len(calls)
    pending, running = list(range(len(calls))), {}
    allowed = None if limits.timeout is None else limits.timeout + RAY_GRACE
    while pending or running:
        while pending and len(running) < in_flight:
            index = pending.pop(0)
            running[task.remote(limits, *calls[index])] = (index, time.monotonic())
        wait = None if allowed is None else max(
            0.0, min(start + allowed for _, start in running.values()) - time.monotonic())
        ready, _ = ray.wait(list(running), num_returns=1, timeout=wait)
        for ref in ready:
            index, _ = running.pop(ref)
            try:
                results[index] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a task that died is one failed row
                cause = getattr(exc, "cause", None) or exc  # what a RayTaskError wraps
                results[index] = Failed(f"the Ray task failed: {describe(cause)}")
            done(index, results[index])
        for ref, (index, start) in list(running.items()):
            if allowed is not None and time.monotonic() - start > allowed:
                ray.cancel(ref, force=True)
                del running[ref]
                results[index] = Failed(f"timed out after {limits.timeout:g} s (the Ray task "
                                        f"gave no answer within {allowed:g} s; cancelled)")
                done(index, results[index])
    return results


def run_ray(jit_fn, args, kwargs, configs, measurer, backend, limits: Limits, progress,
            address=None) -> list[Outcome]:
    """Compile every config on any Ray worker, then measure the compiled ones one at a time on
    workers that hold the target device. Returns the outcomes in config order."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    spec = JitSpec(jit_fn)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    compile_task = ray.remote(num_cpus=1, max_retries=0)(isolated_step)
    calls = [(compile_config, spec, args, kwargs, i, c, True) for i, c in enumerate(configs)]
    bar = progress("compiling", len(configs))
    outcomes = _compile_all(configs, limits, bar, lambda done: _ray_steps(
        ray, compile_task, calls, limits, cpus, done))
    compiled = [o for o in outcomes if o.status == "compiled"]
    measure_task = ray.remote(num_cpus=1, max_retries=0,
                              **_device_resources(backend))(isolated_step)
    bar = progress("measuring", len(compiled))
    for outcome in compiled:
        bundle = outcome.bundle
        (result,) = _ray_steps(ray, measure_task, [(measure_config, spec, args, kwargs,
                                                    outcome, measurer)], limits, 1,
                               lambda i, r: None)
        result = _measured(result, outcome, limits)
        result.bundle = bundle
        outcomes[result.index] = result
        _note_best(measurer, result)
        bar.advance(result)
    bar.close()
    for outcome in outcomes:  # the winner is loaded here, from the cache entry it shipped
        if outcome.status == "ok":
            install_bundle(outcome.bundle)
        outcome.bundle = None
    return outcomes
