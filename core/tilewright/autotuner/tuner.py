"""``@tilewright.autotune``: search compile-time parameters of a ``@tilewright.jit`` kernel.

The configs set some of the kernel's parameters, the call supplies the others; ``configs`` may
also be a callable that receives the call's arguments and returns the list (TileLang's form).
For a kernel factory the call returns the tuned kernel. For an eager kernel, a call with
tensors tunes on (copies of) those tensors and then runs the tuned kernel on them, returning
its outputs; ``.compile(...)`` (``T.const`` values by name) returns the tuned kernel. A call
that sets a tuned parameter itself is compiled as called, without searching (TileLang's rule:
the parameters it leaves out take their defaults), and says so in a warning.

The first call with a given key compiles every config (in parallel), measures
the ones that compiled, checks them against ``reference`` when one is given, prints the table
and returns the fastest kernel. The result is kept in memory and on disk
(``<cache>/autotuner/<key>.json``), keyed by the tilewright version, the kernel's source,
the configs, the call's arguments, backend, target and timing arguments (and the sources of
``reference`` and ``supply``); a later call with the same key compiles only the winner. A
record that does not describe exactly this search (:mod:`.record`) is discarded with a warning
and the search runs again.

Each config's compilation, and then its run, check and timing, run in a process of their own
with a time and a memory limit (:mod:`.executors`, :mod:`.isolation`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

from tqdm import tqdm

from ..engine import resolve_target
from ..errors import ConfigError, TilewrightError
from ..jit import JITFunction
from ..jit.cache import cache_root
from ..language.kernel import eager_consts
from ..profiler import do_bench
from ..utils.tensor import get_tensor_supply
from ..version import __version__
from . import record
from .executors import (
    EXECUTORS,
    PASS_CONFIGS,
    JitSpec,
    config_arguments,
    default_workers,
    import_ray,
    note_pass_configs,
    outcome_line,
    run_ray,
    search_local,
)
from .isolation import Limits
from .measure import Measurer, Outcome

_MEMORY: dict[str, AutotuneResult] = {}  # key -> result
_ANNOUNCED: set = set()  # (key, place) of the cache uses said on stderr
_AS_CALLED: set = set()  # (kernel, tuned parameters left out) of the calls compiled as called
_log = logging.getLogger(__name__)
_INPUTS = threading.local()


@contextlib.contextmanager
def set_autotune_inputs(*tensors):
    """``with set_autotune_inputs(a, b):`` (or a list): searches started inside the block
    run every config on these input tensors instead of generated ones."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    previous = getattr(_INPUTS, "tensors", None)
    _INPUTS.tensors = list(tensors)
    try:
        yield
    finally:
        _INPUTS.tensors = previous


def _given_inputs():
    tensors = getattr(_INPUTS, "tensors", None)
    return None if tensors is None else (lambda kernel: list(tensors))


@dataclass
class AutotuneResult:
    """The outcome of a search: the best config, its latency, every config's row; from
    :meth:`AutoTuner.run`, also the tuned ``kernel`` and the reference's latency
    (``ref_latency``, ms; None without a reference), under TileLang's names (``config``,
    ``latency``, ``kernel``, ``ref_latency``, ``libcode``, ``func``)."""

    best_config: dict
    best_latency_ms: float
    rows: list = field(default_factory=list)  # dicts: config, status, compile_s, latency_ms, error
    key: str = ""
    cached: bool = False
    seconds: float = 0.0
    compile_seconds: float = 0.0
    kernel: object = field(default=None, repr=False, compare=False)
    ref_latency: float | None = None

    @property
    def config(self) -> dict:
        return self.best_config

    @property
    def latency(self) -> float:
        return self.best_latency_ms

    @property
    def libcode(self) -> str | None:
        """The tuned kernel's generated source."""
        return None if self.kernel is None else self.kernel.get_kernel_source()

    @property
    def func(self):
        """The tuned kernel's tile program (a PrimFunc)."""
        return None if self.kernel is None else self.kernel.get_tir()

    def table(self) -> str:
        names = sorted({k for r in self.rows for k in r["config"]})
        head = [*names, "status", "compile s", "latency ms"]
        body = []
        for row in self.rows:
            latency = f"{row['latency_ms']:.4f}" if row["latency_ms"] is not None else "-"
            status = row["status"] + (" *" if row["config"] == self.best_config else "")
            body.append([*(str(row["config"].get(n, "")) for n in names), status,
                         f"{row['compile_s']:.2f}", latency])
        widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
                  for i, h in enumerate(head)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
        errors = [(i, r["error"]) for i, r in enumerate(self.rows) if r["error"]]
        lines += [f"config {i}: {e.splitlines()[0]}" for i, e in errors]
        if self.best_config:
            lines.append(f"best: {self.best_config} at {self.best_latency_ms:.4f} ms (* above)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"best_config": self.best_config, "best_latency_ms": self.best_latency_ms,
                "rows": self.rows, "key": self.key, "seconds": self.seconds,
                "compile_seconds": self.compile_seconds}


def _tuned_names(configs) -> set:
    """The kernel parameters that some config sets."""
    return {k for c in configs for k in config_arguments(c)}


class _Progress:
    """A tqdm progress bar on a terminal; elsewhere (a log keeps them) a start line, one line
    per config done (its config and outcome: :func:`.executors.outcome_line`) and an end
    line. The end line is printed on a terminal too, after the bar."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        # disable=None: tqdm draws only when the stream is a terminal
        self.bar = tqdm(total=total, desc=label, unit="config", file=self.stream,
                        disable=None if enabled else True)
        self.start, self.elapsed = time.perf_counter(), 0.0
        if enabled and self.bar.disable:
            print(f"{label}: {total} config(s)", file=self.stream)

    def advance(self, outcome: Outcome | None = None) -> None:
        self.done += 1
        self.bar.update()
        if self.enabled and self.bar.disable and outcome is not None:
            print(f"{self.label}: {self.done}/{self.total} {outcome_line(outcome)}",
                  file=self.stream)

    def close(self) -> None:
        self.bar.close()
        self.elapsed = time.perf_counter() - self.start
        if self.enabled:
            print(f"{self.label}: {self.done}/{self.total} done in {self.elapsed:.1f} s",
                  file=self.stream)


def _is_tensor(value) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "shape")


def _source(obj) -> str | None:
    if obj is None:
        return ""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


def _cache_dir():
    return cache_root() / "autotuner"


class AutoTuner:
    """What ``@autotune`` returns: call it like the kernel, minus the tuned keys."""

    def __init__(self, jit_fn, configs, warmup=25, rep=100, timer="wall", reference=None,
                 supply=None, rtol=None, atol=None, max_mismatch_ratio=None,
                 reduction_length=None, executor="process", workers=None, ray_address=None,
                 cache=True, progress=True, timeout=300, memory_limit="auto", key=None,
                 early_stop_factor=None):
        if not isinstance(jit_fn, JITFunction):
            raise ConfigError("@autotune decorates a @tilewright.jit kernel; put @autotune "
                              "above @tilewright.jit")
        self.jit_fn = jit_fn
        self._spec = JitSpec(jit_fn)  # builds a config's kernel (its own pass configs too)
        self.configs = configs if callable(configs) else self._validate(configs)
        self.key_names = self._key_names(key)
        if executor not in EXECUTORS:
            raise ConfigError(f"unknown autotune executor {executor!r}; choose one of "
                              f"{', '.join(EXECUTORS)}")
        if executor == "ray":
            import_ray()
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"workers must be a positive integer, got {workers!r}")
        self.executor, self.workers, self.ray_address = executor, workers, ray_address
        self.limits = Limits.parse(timeout, memory_limit, workers or default_workers())
        self.warmup, self.rep, self.timer = warmup, rep, timer
        self.reference, self.supply = reference, supply
        self.tolerances = (rtol, atol, max_mismatch_ratio, reduction_length)
        self.cache, self.progress = cache, progress
        self.early_stop_factor = self._early_stop(early_stop_factor)
        self.last_result: AutotuneResult | None = None
        self.__wrapped__ = jit_fn.fn
        self.__name__ = jit_fn.fn.__name__
        self.__doc__ = jit_fn.fn.__doc__

    # -- TileLang's object API ---------------------------------------------------------
    @classmethod
    def from_kernel(cls, kernel, configs):
        """``AutoTuner.from_kernel(factory, configs)``: TileLang's object API over a plain
        kernel factory (not decorated), then ``.set_compile_args(...)``,
        ``.set_profile_args(...)`` and ``.run(...)``, which returns the
        :class:`AutotuneResult`."""
        if not callable(kernel):
            raise ConfigError(f"AutoTuner.from_kernel takes the kernel factory, got "
                              f"{type(kernel).__name__}")
        return cls(JITFunction(kernel), configs)

    def set_compile_args(self, out_idx=None, target=None, execution_backend=None,
                         target_host=None, verbose=None, pass_configs=None) -> AutoTuner:
        """How each config compiles (the arguments of ``@tilewright.jit``); returns self."""
        self.jit_fn = JITFunction(self.jit_fn.fn, out_idx, target or "auto", pass_configs,
                                  execution_backend, target_host, verbose)
        self._spec = JitSpec(self.jit_fn)
        return self

    def set_profile_args(self, warmup: float = 25, rep: float = 100, timeout=None,
                         supply_type=None, ref_prog=None, supply_prog=None, rtol: float = 1e-2,
                         atol: float = 1e-2, max_mismatched_ratio: float = 0.01,
                         skip_check: bool = False, manual_check_prog=None,
                         cache_input_tensors: bool = False, backend: str = "event"
                         ) -> AutoTuner:
        """How each config is measured and checked, with TileLang's names and defaults
        (``rtol = atol = 1e-2``, 1% of the elements may differ); ``timeout``: seconds per
        step of a config unless ``run`` gives one; ``backend`` is the timer (CUDA events,
        CUPTI, graphs on a GPU; the wall clock on the host). ``manual_check_prog`` and
        ``cache_input_tensors`` have no counterpart here and are named in one log line.
        Returns self."""
        given = [n for n, v in (("manual_check_prog", manual_check_prog),
                                ("cache_input_tensors", cache_input_tensors)) if v]
        if given:
            _log.warning("AutoTuner.set_profile_args: TileLang option(s) %s have no effect "
                         "here", ", ".join(given))
        self.warmup, self.rep, self.timer = warmup, rep, backend
        self.reference = None if skip_check else ref_prog
        self.supply = _from_params(supply_prog) if supply_prog is not None else \
            None if supply_type is None else _supply_of(supply_type)
        self.tolerances = (rtol, atol, max_mismatched_ratio, None)
        if timeout is not None:
            self.limits = Limits.parse(timeout, "auto", self.workers or default_workers())
        return self

    def run(self, warmup: float | None = None, rep: float | None = None, timeout=None,
            early_stop: bool = False, early_stop_factor: float = 2.0,
            **tilelang_options) -> AutotuneResult:
        """Search the configs (or take the result from the tuning cache) and return the
        :class:`AutotuneResult` with the tuned ``kernel`` and, with a reference, its latency
        on the same inputs (``ref_latency``). ``warmup``/``rep``/``timeout`` override the
        profile arguments; ``early_stop``: a config whose first runs take over
        ``early_stop_factor`` times the best latency so far is not timed in full (TileLang's
        early stop; its row says "stopped early"). TileLang's scheduling options
        (``use_pipeline``, ``enable_grouped_compile``, ``group_compile_size``,
        ``benchmark_devices``, ``benchmark_multi_gpu``) have no counterpart (configs always
        compile in parallel here) and are named in one log line; any other keyword is a
        ConfigError."""
        unknown = sorted(set(tilelang_options) - set(RUN_OPTIONS))
        if unknown:
            raise ConfigError(f"AutoTuner.run got unexpected keyword argument(s) "
                              f"{', '.join(unknown)}")
        given = sorted(k for k, v in tilelang_options.items() if v not in (None, False))
        if given:
            _log.warning("AutoTuner.run: TileLang option(s) %s have no effect here",
                         ", ".join(given))
        self.early_stop_factor = self._early_stop(early_stop_factor) if early_stop else None
        self.warmup = self.warmup if warmup is None else warmup
        self.rep = self.rep if rep is None else rep
        if timeout is not None:
            self.limits = Limits.parse(timeout, "auto", self.workers or default_workers())
        configs = self._configs_for((), {})
        self._bind(configs, (), {})
        kernel = self._tuned(configs, (), {})
        result = dataclasses.replace(kernel.autotune_result, kernel=kernel)
        if self.reference is not None:
            inputs = self._measurer().inputs(kernel)
            result.ref_latency = float(do_bench(lambda: self.reference(*inputs),
                                                warmup=self.warmup, rep=self.rep,
                                                backend=self.timer))
        return result

    # -- validation -------------------------------------------------------------------
    @staticmethod
    def _early_stop(factor):
        if factor is not None and (isinstance(factor, bool) or
                                   not isinstance(factor, (int, float)) or not factor >= 1.0):
            raise ConfigError(f"early_stop_factor must be a number >= 1.0, got {factor!r}")
        return factor

    def _validate(self, configs) -> list[dict]:
        name = self.jit_fn.fn.__name__
        configs = list(configs) if configs is not None else []
        if not configs:
            raise ConfigError(f"autotune of {name}: the config list is empty")
        params = inspect.signature(self.jit_fn.fn).parameters
        open_ended = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for n, config in enumerate(configs):
            if not isinstance(config, dict):
                raise ConfigError(f"autotune of {name}: config {n} must be a dict, got "
                                  f"{type(config).__name__}")
            unknown = [k for k in config_arguments(config) if k not in params or
                       params[k].kind is inspect.Parameter.VAR_POSITIONAL]
            own = config.get(PASS_CONFIGS, {})
            if not isinstance(own, dict):
                raise ConfigError(f"autotune of {name}: config {n} {config}: its "
                                  f"{PASS_CONFIGS} must be a dict, got {type(own).__name__}")
            if unknown and not open_ended:
                raise ConfigError(f"autotune of {name}: config {n} {config} has key(s) "
                                  f"{', '.join(map(repr, unknown))} that {name} does not take; "
                                  f"its parameters are {', '.join(params)}")
        return configs

    def _key_names(self, key) -> tuple[str, ...] | None:
        if key is None:
            return None
        names = (key,) if isinstance(key, str) else tuple(key)
        params = inspect.signature(self.jit_fn.fn).parameters
        # configs given as a callable are known only at a call
        tuned = set() if callable(self.configs) else _tuned_names(self.configs)
        for name in names:
            if not isinstance(name, str) or name not in params:
                raise ConfigError(f"autotune of {self.jit_fn.fn.__name__}: key {name!r} is not "
                                  f"an argument of it; its arguments are {', '.join(params)}")
            if name in tuned:
                raise ConfigError(f"autotune of {self.jit_fn.fn.__name__}: key {name!r} is a "
                                  "tuned parameter; the key names arguments of the call")
        return names

    def _configs_for(self, args, kwargs) -> list[dict]:
        """The configs of this call: the list, or what the callable returns for the call's
        arguments (as TileLang calls it)."""
        if not callable(self.configs):
            return self.configs
        return self._validate(self.configs(*args, **kwargs))

    def _bind(self, configs, args, kwargs, partial: bool = False) -> None:
        """The call must bind with any config (``partial``: leave out parameters, the tensors
        of an eager call)."""
        signature = inspect.signature(self.jit_fn.fn)
        try:
            signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise ConfigError(f"{self.__name__}: {exc}") from None
        for n, config in enumerate(configs):
            try:
                (signature.bind_partial if partial else signature.bind)(
                    *args, **kwargs, **config_arguments(config))
            except TypeError as exc:
                raise ConfigError(f"{self.__name__}: config {n} {config} with this call: "
                                  f"{exc}") from None

    # -- keys and caches --------------------------------------------------------------
    def _call_arguments(self, args, kwargs, tensors) -> dict:
        """The call's arguments by name, defaults included: an eager call's ``tensors`` as
        their shapes and dtypes, its ``T.const`` values (no parameters) left out."""
        signature = inspect.signature(self.jit_fn.fn)
        bound = signature.bind_partial(
            *args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
        bound.apply_defaults()
        return {**bound.arguments,
                **{k: (tuple(v.shape), str(v.dtype)) for k, v in tensors.items()}}

    def _key(self, configs, args, kwargs, tensors) -> str | None:
        target, backend = resolve_target(self.jit_fn.target)
        sources = [_source(self.jit_fn.fn), _source(self.reference), _source(self.supply)]
        if any(s is None for s in sources):
            return None  # a callable without source has no stable identity
        if self.key_names is not None:  # only the named arguments' values count
            named = self._call_arguments(args, kwargs, tensors)
            args, kwargs = (), {n: named.get(n) for n in self.key_names}
        parts = {
            "tilewright": __version__, "sources": sources, "configs": configs,
            "args": repr(args), "kwargs": repr(sorted(kwargs.items())),
            "backend": backend.name, "backend_version": backend.version, "target": str(target),
            "out_idx": repr(self.jit_fn.out_idx), "pass_configs": repr(self.jit_fn.pass_configs),
            "timing": {"warmup": self.warmup, "rep": self.rep, "timer": self.timer},
            "tolerances": self.tolerances,
        }
        text = json.dumps(parts, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()

    def _load(self, key: str, configs) -> AutotuneResult | None:
        path = _cache_dir() / f"{key}.json"
        try:
            fields = record.check(path.read_text(), configs)
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, record.RecordError) as exc:
            warnings.warn(f"tilewright tuning record {path} {exc}; tuning again",
                          RuntimeWarning, stacklevel=3)
            path.unlink(missing_ok=True)
            return None
        return AutotuneResult(**fields, key=key, cached=True)

    def _store(self, key: str, result: AutotuneResult) -> None:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(result.to_json(), indent=1, default=repr))
        os.replace(tmp, folder / f"{key}.json")

    # -- the calls --------------------------------------------------------------------
    def _explicit(self, configs, args, kwargs) -> bool:
        """Whether the call sets a tuned parameter itself: then, as in TileLang, the call is
        compiled as it is (the tuned parameters it leaves out take their defaults), nothing
        is searched, and a warning says so (once per set of parameters in a process: an
        example times such calls in a loop)."""
        tuned = _tuned_names(configs)
        params = inspect.signature(self.jit_fn.fn).parameters
        given = {k for k in kwargs if k in params} | set(list(params)[:len(args)])
        if not tuned & given:
            return False
        rest = sorted(tuned - given)
        if (self.__name__, tuple(rest)) in _AS_CALLED:
            return True
        _AS_CALLED.add((self.__name__, tuple(rest)))
        _log.warning("autotune %s: the call sets tuned parameter(s) %s; compiled as called, "
                     "nothing searched%s", self.__name__, ", ".join(sorted(tuned & given)),
                     f" ({', '.join(rest)}: the default)" if rest else "")
        return True

    def __call__(self, *args, **kwargs):
        configs = self._configs_for(args, kwargs)
        if self._explicit(configs, args, kwargs):
            return self.jit_fn(*args, **kwargs)
        if self.jit_fn.factory:
            self._bind(configs, args, kwargs)
            return self._tuned(configs, args, kwargs)
        # an eager call: tune on copies of its tensors, then run the best kernel on them
        bound = inspect.signature(self.jit_fn.fn).bind_partial(*args, **kwargs).arguments
        tensors = {k: v for k, v in bound.items() if _is_tensor(v)}
        static = {k: v for k, v in bound.items() if k not in tensors}
        self._bind(configs, (), static, partial=True)
        consts = eager_consts(self.jit_fn.fn, {**static, **config_arguments(configs[0])},
                              tensors)

        def supply(kernel):
            return [tensors[p.name].clone() for p in kernel.signature.inputs]

        kernel = self._tuned(configs, (), {**static, **consts}, supply, tensors)
        return kernel(*[tensors[p.name] for p in kernel.signature.inputs])

    def compile(self, *args, **kwargs):
        """The tuned kernel, compiled and not run: a factory's arguments, or an eager kernel's
        compile-time arguments and ``T.const`` values by name (its inputs are generated, or
        given by ``set_autotune_inputs``)."""
        if self.jit_fn.factory:
            return self(*args, **kwargs)
        configs = self._configs_for(args, kwargs)
        if self._explicit(configs, args, kwargs):
            return self.jit_fn.compile(*args, **kwargs)
        return self._tuned(configs, args, kwargs)

    def _tuned(self, configs, args, kwargs, supply=None, tensors=None):
        """The best config's kernel for these compile arguments (and an eager call's input
        ``tensors``, which a ``key`` may name): from memory, from the tuning record on disk,
        or by searching."""
        key = self._key(configs, args, kwargs, tensors or {}) if self.cache else None
        result = _MEMORY.get(key) if key is not None else None
        if result is not None:
            result = self._used_cache(result, "memory")
        elif key is not None and (result := self._load(key, configs)) is not None:
            result = self._used_cache(result, str(_cache_dir() / f"{key}.json"))
        else:
            result = self.search(args, kwargs, configs, supply)
            result.key = key or ""
            if key is not None:
                self._store(key, result)
        # built for this call (the key may leave arguments out); the JIT's memo makes a
        # repeated call cheap
        kernel = self._spec(*args, **kwargs, **result.best_config)
        kernel.autotune_result = result
        # TileLang's names for the outcome
        kernel.config, kernel.latency = result.best_config, result.best_latency_ms
        self.last_result = result
        if key is not None:
            _MEMORY[key] = result
        return kernel

    def _used_cache(self, result: AutotuneResult, where: str) -> AutotuneResult:
        """``result`` marked as cached, after saying that the search was skipped: in the log,
        and on stderr with ``progress`` once per tuning key and place in this process (a
        tuned eager kernel called in a loop says it once)."""
        message = (f"autotune {self.__name__}: {result.best_config} "
                   f"({result.best_latency_ms:.4f} ms) from the tuning cache ({where}); "
                   "nothing measured (cache=False or `tilewright cache clear` tunes again)")
        _log.info("%s", message)
        if self.progress and (result.key, where) not in _ANNOUNCED:
            _ANNOUNCED.add((result.key, where))
            print(message, file=sys.stderr)
        return dataclasses.replace(result, cached=True)

    def search(self, args, kwargs, configs=None, supply=None) -> AutotuneResult:
        """Compile and measure every config (of this call: ``configs``, measured on the
        inputs ``supply(kernel)`` makes, the decorator's ``supply`` and
        ``set_autotune_inputs`` first); never reads or writes the tuning cache."""
        configs = self._configs_for(args, kwargs) if configs is None else configs
        start = time.perf_counter()
        measurer = self._measurer(supply)
        bars = {}

        def progress(stage: str, total: int) -> _Progress:
            bars[stage] = _Progress(total, f"autotune {self.__name__}: {stage}",
                                    enabled=bool(self.progress))
            return bars[stage]

        _, backend = resolve_target(self.jit_fn.target)
        note_pass_configs(self.jit_fn, configs, backend.name)
        if self.executor == "ray":
            outcomes = run_ray(self.jit_fn, args, kwargs, configs, measurer, backend,
                               self.limits, progress, self.ray_address)
        else:
            outcomes = search_local(self.jit_fn, args, kwargs, configs, measurer,
                                    self.limits, self.workers or default_workers(), progress)
        result = self._finish(outcomes, time.perf_counter() - start)
        result.compile_seconds = bars["compiling"].elapsed
        return result

    def _measurer(self, supply=None) -> Measurer:
        """How configs are measured: on the inputs of the decorator's ``supply``, else of
        ``set_autotune_inputs``, else of ``supply``, else random ones."""
        rtol, atol, ratio, length = self.tolerances
        return Measurer(self.warmup, self.rep, self.timer, self.reference,
                        self.supply or _given_inputs() or supply, rtol, atol, ratio, length,
                        early_stop_factor=self.early_stop_factor)

    def _finish(self, outcomes: list[Outcome], seconds: float) -> AutotuneResult:
        rows = [{"config": o.config, "status": o.status, "compile_s": round(o.compile_s, 4),
                 "latency_ms": o.latency_ms, "error": o.error} for o in outcomes]
        good = [o for o in outcomes if o.status == "ok"]
        if not good:
            result = AutotuneResult({}, float("nan"), rows, seconds=seconds)
            raise TilewrightError(f"autotune of {self.__name__}: no config compiled, ran and "
                                  f"passed the check\n{result.table()}")
        best = min(good, key=lambda o: o.latency_ms)
        result = AutotuneResult(best.config, best.latency_ms, rows, seconds=seconds)
        if self.progress:
            print(result.table(), file=sys.stderr)
        return result


RUN_OPTIONS = ("use_pipeline", "enable_grouped_compile", "group_compile_size",
               "benchmark_devices", "benchmark_multi_gpu")
TILELANG_IGNORED = ("manual_check_prog", "cache_input_tensors", "do_not_specialize")


def _from_params(supply_prog):
    """A ``supply(kernel)`` calling TileLang's ``supply_prog(params)``, which receives the
    kernel's input parameters (``shape``, ``dtype``) and returns the input tensors."""
    def supply(kernel):
        return supply_prog([p for p in kernel.params if not p.is_output])

    return supply


def _supply_of(supply_type):
    """A ``supply(kernel)`` making the kernel's inputs as ``supply_type`` says."""
    def supply(kernel):
        make = get_tensor_supply(supply_type, device=kernel.backend.device)
        return [make(p) for p in kernel.params if not p.is_output]

    return supply


def autotune(fn=None, *, configs=None, warmup: float = 25, rep: float = 100,
             timer: str = "wall", reference=None, supply=None, rtol=None, atol=None,
             max_mismatch_ratio=None, reduction_length: int | None = None,
             executor: str = "process", workers: int | None = None,
             ray_address=None, cache: bool = True, progress: bool = True,
             timeout: float | None = 300, memory_limit: int | str | None = "auto",
             key=None, ref_prog=None, supply_prog=None, supply_type=None, skip_check: bool = False,
             max_mismatched_ratio=None, early_stop: bool = False, early_stop_factor: float = 2.0,
             **tilelang_options):
    """Tune a ``@tilewright.jit`` kernel (a factory or an eager kernel) over ``configs``
    (dicts of its compile-time parameters, or a callable given the call's arguments that
    returns them).

    - ``warmup``/``rep``: ``do_bench`` time budgets (ms) per config; ``timer`` its timer;
    - ``reference(*inputs)``: expected outputs; a config whose outputs differ (tolerances from
      :func:`tilewright.testing.assert_close` with ``reduction_length``, the K of a GEMM, or
      ``rtol``/``atol``) is reported, not chosen;
    - ``supply(kernel)``: the input tensors (default: random, from the kernel's signature);
    - ``executor``: ``"process"`` (child processes on this machine, ``workers`` compiling at
      once, default one per core up to 8) or ``"ray"`` (``pip install 'tilewright[ray]'``;
      ``ray_address`` of a cluster, else a local one is started);
    - ``timeout``: seconds each step of a config (its compilation; its run, check and timing)
      may take, None for no limit; ``memory_limit``: what each step may allocate, in bytes or
      as ``"2 GiB"``, None for no limit, ``"auto"`` (default) for this machine's memory
      shared among the compiling processes (at least 1 GiB). Every step runs in a process of
      its own (:mod:`tilewright.autotuner.isolation`), so a config that raises, crashes,
      hangs or exhausts memory is a failed row with the reason and the search goes on;
    - ``cache``: keep results in memory and on disk (a call that reuses one says so on stderr
      with ``progress``, and in the log); ``progress``: progress bars and table on stderr;
    - ``key``: names of the kernel's arguments whose values decide the tuned config, as in
      Triton (``key=["M", "N"]``; a tensor of an eager kernel counts by its shape and dtype):
      calls that agree on them reuse one search; by default every argument of the call counts.

    TileLang's spellings are accepted: ``ref_prog``/``max_mismatched_ratio``
    (``reference``/``max_mismatch_ratio``; with ``ref_prog`` and no ``reduction_length``, the
    tolerances not given are TileLang's: ``rtol = atol = 1e-2``, 1% of the elements may
    differ), ``supply_prog(params)`` (as TileLang calls it: with
    the kernel's input parameters, each with ``shape`` and ``dtype``), ``supply_type`` (a
    :class:`~tilewright.TensorSupplyType` for the generated inputs), ``skip_check`` (no
    reference check), ``timeout`` (the same meaning), ``early_stop`` with
    ``early_stop_factor`` (a config whose first runs take over that factor times the best
    latency so far is not timed in full: "stopped early"); its other options
    (``manual_check_prog``, ``cache_input_tensors``, ``do_not_specialize``) have no
    counterpart here and are named in one log line; any other keyword is a ConfigError. A
    call that sets a tuned parameter itself is compiled as called, without searching, as in
    TileLang (the tuned parameters it leaves out take their defaults); ``set_autotune_inputs``
    gives the search its input tensors.
    """
    unknown = sorted(set(tilelang_options) - set(TILELANG_IGNORED))
    if unknown:
        raise ConfigError(f"autotune got unexpected keyword argument(s) {', '.join(unknown)}")
    given = sorted(k for k, v in tilelang_options.items() if v not in (None, False))
    if given:
        _log.warning("autotune: TileLang option(s) %s have no effect here", ", ".join(given))
    if supply is None and supply_prog is not None:
        supply = _from_params(supply_prog)
    if supply_type is not None and supply is None:
        supply = _supply_of(supply_type)
    if ref_prog is not None and reference is None and reduction_length is None:
        # TileLang's spelling, TileLang's tolerances where none is given
        rtol, atol = (1e-2 if rtol is None else rtol), (1e-2 if atol is None else atol)
        if max_mismatch_ratio is None and max_mismatched_ratio is None:
            max_mismatched_ratio = 0.01

    def wrap(jit_fn):
        return AutoTuner(jit_fn, configs, warmup, rep, timer,
                         None if skip_check else reference or ref_prog, supply,
                         rtol, atol, max_mismatch_ratio if max_mismatch_ratio is not None
                         else max_mismatched_ratio, reduction_length, executor,
                         workers, ray_address, cache, progress, timeout, memory_limit, key,
                         early_stop_factor if early_stop else None)

    return wrap(fn) if fn is not None else wrap
