"""Where the search runs: this process, a pool of forked worker processes, or a Ray cluster.

Compilation is embarrassingly parallel and lands in the disk cache, so local workers only
report success or the error; the tuning process then loads each kernel from the cache.
Measurement always runs one config at a time, so timings never compete with each other.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..errors import ConfigError
from .measure import Outcome, compile_config, install_bundle, run_remote_measure

EXECUTORS = ("process", "ray")
# jobs handed to forked workers: the fork copies this table, so nothing is pickled but ids
_JOBS: dict[int, tuple] = {}
_job_ids = itertools.count(1)


def _compile_job(job: int, index: int) -> Outcome:
    jit_fn, args, kwargs, configs = _JOBS[job]
    return compile_config(jit_fn, args, kwargs, index, configs[index])


def _prime_cache_keys(jit_fn) -> None:
    """Compute the compiler fingerprints that cache keys hold before forking, so the workers
    and this process agree on every key even while the sources are being edited."""
    from ..engine import resolve_target
    from ..jit.kernel import _fingerprint

    target, backend = resolve_target(jit_fn.target)
    _fingerprint("tilewright")
    _fingerprint(backend.codegens[target.kind].generate.__module__.split(".")[0])


def compile_local(jit_fn, args, kwargs, configs, workers: int, progress) -> list[Outcome]:
    """Compile every config; ``workers > 1`` uses that many forked processes."""
    if workers <= 1 or len(configs) == 1 or "fork" not in multiprocessing.get_all_start_methods():
        outcomes = []
        for index, config in enumerate(configs):
            outcomes.append(compile_config(jit_fn, args, kwargs, index, config))
            progress.advance()
        return outcomes
    _prime_cache_keys(jit_fn)
    outcomes: list[Outcome | None] = [None] * len(configs)
    # The first config compiles here: the lazy imports and initialisation of a first
    # compilation then happen once, and the forked workers inherit them.
    outcomes[0] = compile_config(jit_fn, args, kwargs, 0, configs[0])
    progress.advance()
    job = next(_job_ids)
    _JOBS[job] = (jit_fn, args, kwargs, configs)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(configs) - 1),
                                 mp_context=context) as pool:
            futures = {pool.submit(_compile_job, job, i): i for i in range(1, len(configs))}
            for future in as_completed(futures):
                index = futures[future]
                try:
                    outcomes[index] = future.result()
                except Exception as exc:  # noqa: BLE001 - a worker that died
                    outcomes[index] = Outcome(index, configs[index], "compile failed",
                                              error=f"worker process failed: {exc!r}")
                progress.advance()
    finally:
        del _JOBS[job]
    return outcomes


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


# -- Ray ---------------------------------------------------------------------------------------
def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("executor='ray' needs Ray, which is not installed: pip install "
                          "'tilewright[ray]'") from None
    return ray


class JitSpec:
    """A ``@jit`` kernel factory as Ray ships it: the function and its options, without the
    compiled kernels the tuning process holds."""

    def __init__(self, jit_fn):
        self.options = (jit_fn.fn, jit_fn.out_idx, jit_fn.target, jit_fn.pass_configs,
                        jit_fn.execution_backend)
        self._jit = None

    def __getstate__(self):
        return {"options": self.options, "_jit": None}

    def __call__(self, *args, **kwargs):
        if self._jit is None:
            from ..jit import JITFunction

            self._jit = JITFunction(*self.options)
        return self._jit(*args, **kwargs)


def _device_resources(backend) -> dict:
    """Ray resources a measurement task needs to sit next to the target device."""
    if not backend.accelerator:
        return {}
    if backend.device == "cuda":
        return {"num_gpus": 1}
    return {"resources": {backend.device: 1}}


def run_ray(jit_fn, args, kwargs, configs, measurer, backend, progress, address=None):
    """Compile every config on any Ray worker, then measure the compiled ones one at a time on
    workers that hold the target device. Returns the outcomes in config order."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    jit_fn = JitSpec(jit_fn)
    compile_task = ray.remote(num_cpus=1)(compile_config)
    refs = [compile_task.remote(jit_fn, args, kwargs, i, c, True) for i, c in enumerate(configs)]
    outcomes: list[Outcome] = [None] * len(configs)  # type: ignore[list-item]
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        outcome = ray.get(done[0])
        outcomes[outcome.index] = outcome
        progress.advance()
    measure_task = ray.remote(num_cpus=1, **_device_resources(backend))(run_remote_measure)
    for outcome in outcomes:
        if outcome.status != "compiled":
            continue
        bundle = outcome.bundle
        result = ray.get(measure_task.remote(jit_fn, args, kwargs, outcome, measurer))
        if result.status == "fatal":
            raise ConfigError(result.error)
        result.bundle = bundle
        outcomes[result.index] = result
    for outcome in outcomes:  # the winner is loaded here, from the cache entry it shipped
        if outcome.status == "ok":
            install_bundle(outcome.bundle)
        outcome.bundle = None
    return outcomes
