"""@autotune: validation, parallel compilation, failures in the table, caching."""

import builtins
import re

import pytest
import tilewright
import tilewright.language as T
import torch
from profiler_kernels import eager_scale, scaled_copy
from tilewright.autotuner import tuner
from tilewright.errors import ConfigError, TilewrightError

FAST = {"warmup": 1, "rep": 2}


@pytest.fixture(autouse=True)
def fresh_memory():
    tuner._MEMORY.clear()
    yield
    tuner._MEMORY.clear()


def no_search(*args, **kwargs):
    raise AssertionError("searched again")


def _identity(x):
    return x.clone()


def test_search_reports_failures_and_returns_the_fastest(capsys):
    configs = [{"block": 32}, {"block": 64}, {"scale": 2.0}, {"fail": True}]
    tuned = tilewright.autotune(configs=configs, reference=_identity, workers=2,
                                **FAST)(scaled_copy)
    kernel = tuned(200)
    result = kernel.autotune_result
    statuses = [row["status"] for row in result.rows]
    assert statuses == ["ok", "ok", "check failed", "compile failed"]
    assert "ValueError: this config cannot be built" in result.rows[3]["error"]
    assert "differ beyond tolerance" in result.rows[2]["error"]
    assert result.best_config in configs[:2] and not result.cached
    assert result.best_latency_ms == min(r["latency_ms"] for r in result.rows[:2])
    err = capsys.readouterr().err
    assert "autotune scaled_copy: compiling: 4/4 done" in err
    assert "check failed" in err and "compile failed" in err and "best: " in err
    # stderr is no terminal here: one line per config done, with its outcome
    assert "compiling: 4/4 " in err and "measuring: 3/3 " in err
    assert re.search(r"compiling: \d/4 \{'fail': True\}: compile failed: ValueError: this "
                     r"config cannot be built", err)
    assert re.search(r"measuring: 1/3 \{'block': 32\}: [\d.e+-]+ ms\n", err)
    assert re.search(r"measuring: 3/3 \{'scale': 2.0\}: check failed: ", err)
    x = __import__("torch").randn(200)
    assert (kernel(x) == x).all()


def test_second_call_hits_memory_then_disk(monkeypatch):
    configs = [{"block": 32}, {"block": 64}]
    first = tilewright.autotune(configs=configs, progress=False, workers=1, **FAST)(scaled_copy)
    kernel = first(100)
    assert first(100) is kernel  # in memory

    monkeypatch.setattr(tuner.AutoTuner, "search", no_search)
    tuner._MEMORY.clear()
    again = tilewright.autotune(configs=configs, progress=False, workers=1, **FAST)(scaled_copy)
    cached = again(100)
    assert cached.autotune_result.cached
    assert cached.autotune_result.best_config == kernel.autotune_result.best_config
    # other timing arguments, configs or call arguments are other keys
    for changed, call in (({"configs": configs, "warmup": 2, "rep": 2}, 100),
                          ({"configs": configs[:1], **FAST}, 100),
                          ({"configs": configs, **FAST}, 101)):
        other = tilewright.autotune(progress=False, workers=1, **changed)(scaled_copy)
        with pytest.raises(AssertionError, match="searched again"):
            other(call)


def test_cache_off_searches_every_time(monkeypatch):
    tuned = tilewright.autotune(configs=[{"block": 32}], cache=False, progress=False,
                                **FAST)(scaled_copy)
    tuned(64)
    monkeypatch.setattr(tuner.AutoTuner, "search",
                        lambda *a: (_ for _ in ()).throw(AssertionError("searched")))
    with pytest.raises(AssertionError, match="searched"):
        tuned(64)


def test_every_config_failing_is_an_error_with_the_table():
    tuned = tilewright.autotune(configs=[{"fail": True}, {"scale": 3.0}], reference=_identity,
                                progress=False, workers=1, **FAST)(scaled_copy)
    with pytest.raises(TilewrightError) as info:
        tuned(64)
    text = str(info.value)
    assert "no config compiled, ran and passed the check" in text
    assert "compile failed" in text and "check failed" in text


def test_reference_with_another_output_shape():
    tuned = tilewright.autotune(configs=[{"block": 32}], reference=lambda x: x[:10],
                                progress=False, workers=1, **FAST)(scaled_copy)
    with pytest.raises(ConfigError, match=r"reference's output 0 has shape \(10,\) but "
                                          r"kernel scaled_copy produces \(64,\)"):
        tuned(64)


@pytest.mark.parametrize("configs, words", [
    ([], "the config list is empty"),
    (None, "the config list is empty"),
    ([{"block": 32}, {"blok": 64}], ("config 1 {'blok': 64} has key(s) 'blok' that "
                                     "scaled_copy does not take; its parameters are N, "
                                     "block, scale, fail")),
    ([("block", 32)], "config 0 must be a dict"),
])
def test_bad_configs(configs, words):
    with pytest.raises(ConfigError) as info:
        tilewright.autotune(configs=configs)(scaled_copy)
    assert words in str(info.value)


def test_a_call_that_sets_a_tuned_parameter_is_compiled_as_called(caplog):
    tuner._AS_CALLED.clear()
    tuned = tilewright.autotune(configs=[{"block": 32}], progress=False)(scaled_copy)
    explicit = tuned(64, block=16)  # TileLang's explicit config: compiled, not searched
    assert not hasattr(explicit, "autotune_result")
    # TileLang's rule: one tuned parameter set by the call is enough, the others take their
    # defaults (its topk example passes blk_m while the configs tune blk_m and threads)
    tuned = tilewright.autotune(configs=[{"block": 32, "scale": 3.0}, {"block": 64, "scale": 2.0}],
                                progress=False)(scaled_copy)
    with caplog.at_level("WARNING", logger="tilewright.autotuner.tuner"):
        kernel = tuned(64, block=16)
        tuned(64, block=16)
    assert not hasattr(kernel, "autotune_result")
    x = torch.randn(64)
    torch.testing.assert_close(kernel(x), x)  # scale: the default 1.0, not a config's
    said = [r.getMessage() for r in caplog.records if "compiled as called" in r.getMessage()]
    assert said == ["autotune scaled_copy: the call sets tuned parameter(s) block; compiled "
                    "as called, nothing searched"] + [  # once per kind of call
                        "autotune scaled_copy: the call sets tuned parameter(s) block; compiled "
                        "as called, nothing searched (scale: the default)"]
    with pytest.raises(ConfigError, match="missing a required argument: 'N'"):
        tuned()


def test_decorator_misuse():
    with pytest.raises(ConfigError, match="put @autotune above @tilewright.jit"):
        tilewright.autotune(configs=[{"block": 1}])(lambda block: block)
    with pytest.raises(ConfigError, match="unknown autotune executor 'dask'"):
        tilewright.autotune(configs=[{"block": 32}], executor="dask")(scaled_copy)
    with pytest.raises(ConfigError, match="workers must be a positive integer"):
        tilewright.autotune(configs=[{"block": 32}], workers=0)(scaled_copy)


def test_ray_missing_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"executor='ray' needs Ray, which is not "
                                          r"installed: pip install 'tilewright\[ray\]'"):
        tilewright.autotune(configs=[{"block": 32}], executor="ray")(scaled_copy)


def test_dynamic_inputs_need_supply():
    import tilewright.language as T

    @tilewright.jit(out_idx=[-1], target="cpu")
    def dyn(block=64):
        n = T.dynamic("n")

        @T.prim_func
        def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        Y[bx * block + i] = X[bx * block + i]

        return main

    tuned = tilewright.autotune(configs=[{"block": 32}], progress=False, workers=1,
                                **FAST)(dyn)
    with pytest.raises(ConfigError, match="parameter 'X'.*pass supply=callable"):
        tuned()
    import torch

    supplied = tilewright.autotune(configs=[{"block": 32}, {"block": 64}], progress=False,
                                   workers=1, supply=lambda kernel: [torch.randn(100)],
                                   reference=_identity, **FAST)(dyn)
    assert supplied().autotune_result.best_config in ({"block": 32}, {"block": 64})


def _sleepy_step(fail: bool):
    """Stands in for a compilation that waits (1 s) rather than computes, so overlap shows
    even on a busy machine; returns its process id and when it ran."""
    import os
    import time

    start = time.time()
    time.sleep(1.0)
    if fail:
        raise SystemExit("no such tile")
    return os.getpid(), start, time.time()


def test_steps_run_concurrently_in_child_processes():
    import os

    from tilewright.autotuner import isolation

    finished = []
    results = isolation.run([(_sleepy_step, (i == 6,)) for i in range(7)],
                            isolation.Limits(120, None), workers=3,
                            done=lambda i, r: finished.append(i))
    assert sorted(finished) == list(range(7))
    assert results[6] == isolation.Failed("SystemExit: no such tile (sys.exit)")
    pids = [pid for pid, _, _ in results[:6]]
    assert len(set(pids)) == 6 and os.getpid() not in pids  # one process per step
    # how many steps ran at once, at the start of each step: several, never above workers
    at_once = [sum(s <= start < e for _, s, e in results[:6]) for _, start, _ in results[:6]]
    assert 2 <= max(at_once) <= 3, at_once


def test_cache_clear_forgets_tuning_records(cache_dir):
    from tilewright.jit.cache import DiskCache

    tuned = tilewright.autotune(configs=[{"block": 32}], progress=False, **FAST)(scaled_copy)
    tuned(32)
    assert list((cache_dir / "autotuner").glob("*.json"))
    DiskCache().clear()
    assert not (cache_dir / "autotuner").exists()


# -- eager kernels and configs as a callable (TileLang's forms) ----------------------------------
def test_eager_kernel_call_tunes_on_its_tensors_and_returns_the_outputs():
    tuned = tilewright.autotune(configs=[{"block": 32}, {"block": 128}], reference=_identity,
                                progress=False, **FAST)(eager_scale)
    x = torch.randn(200)
    torch.testing.assert_close(tuned(x), x)
    assert {row["config"]["block"] for row in tuned.last_result.rows} == {32, 128}
    assert tuned.last_result.best_config in ({"block": 32}, {"block": 128})
    torch.testing.assert_close(tuned(x, block=16), x)  # explicit config: no search


def test_eager_kernel_compile_by_const_values_with_given_inputs():
    seen = []

    def configs(*args, **kwargs):  # TileLang passes the call's arguments
        seen.append(kwargs)
        return [{"block": 64}, {"block": 256}]

    tuned = tilewright.autotune(configs=configs, progress=False, **FAST)(eager_scale)
    x = torch.randn(300)
    with tilewright.autotuner.set_autotune_inputs(x):
        kernel = tuned.compile(N=300)
    assert seen == [{"N": 300}]
    assert kernel.config in ({"block": 64}, {"block": 256}) and kernel.latency > 0
    torch.testing.assert_close(kernel(x), x)
    explicit = tuned.compile(N=300, block=32)
    assert not hasattr(explicit, "autotune_result")


def test_key_names_the_arguments_that_decide_the_config(monkeypatch, capsys, caplog):
    """As Triton's ``key=``: calls that agree on the key's arguments share one search, and a
    reuse of the cache is said on stderr and in the log."""
    import logging

    import torch

    tuned = tilewright.autotune(configs=[{"block": 32}, {"block": 64}], key=["N"], workers=1,
                                **FAST)(scaled_copy)
    first = tuned(100)
    assert "nothing measured" not in capsys.readouterr().err

    monkeypatch.setattr(tuner.AutoTuner, "search", no_search)
    with caplog.at_level(logging.INFO, logger="tilewright"):
        other_scale = tuned(100, scale=3.0)  # not in the key: the tuned config is reused
    assert "from the tuning cache (memory); nothing measured" in capsys.readouterr().err
    assert "from the tuning cache" in caplog.text
    assert other_scale.autotune_result.cached and other_scale is not first
    assert other_scale.config == first.config
    x = torch.randn(100)
    torch.testing.assert_close(other_scale(x), 3 * x)
    with pytest.raises(AssertionError, match="searched again"):
        tuned(101)  # N is in the key
    for bad, words in (("M", "key 'M' is not an argument of it"),
                       ("block", "key 'block' is a tuned parameter")):
        with pytest.raises(ConfigError, match=words):
            tilewright.autotune(configs=[{"block": 32}], key=[bad])(scaled_copy)


def test_key_of_an_eager_kernel_names_its_tensors(monkeypatch):
    """An eager kernel's key may name its tensors (their shapes and dtypes count); its
    ``T.const`` values are no arguments of the key."""
    tuned = tilewright.autotune(configs=[{"block": 32}, {"block": 64}], key=["X"], workers=1,
                                progress=False, **FAST)(eager_scale)
    x = torch.randn(200)
    torch.testing.assert_close(tuned(x), x)
    monkeypatch.setattr(tuner.AutoTuner, "search", no_search)
    y = torch.randn(200)
    torch.testing.assert_close(tuned(y), y)  # X of the same shape and dtype: no search
    with pytest.raises(AssertionError, match="searched again"):
        tuned(torch.randn(300))


@tilewright.jit(out_idx=[-1], target="cpu")
def relax(N, sweeps=1):
    """``sweeps`` passes of Y = Y / 2 + X: the time grows with ``sweeps``."""
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for _ in T.serial(sweeps):
                for i in T.Parallel(N):
                    Y[i] = Y[i] * 0.5 + X[i]

    return main


def test_early_stop_skips_the_full_timing_of_a_slow_config():
    """TileLang's early stop: a config whose first runs take over ``early_stop_factor`` times
    the best latency so far is not timed in full; its row says so and it cannot win."""
    tuned = tilewright.autotune(configs=[{"sweeps": 1}, {"sweeps": 4000}], early_stop=True,
                                early_stop_factor=2.0, cache=False, progress=False, workers=1,
                                **FAST)(relax)
    kernel = tuned(4096)
    rows = kernel.autotune_result.rows
    assert [r["status"] for r in rows] == ["ok", "stopped early"], rows
    assert "over 2 x the best" in rows[1]["error"] and kernel.config == {"sweeps": 1}
    with pytest.raises(ConfigError, match="early_stop_factor must be a number >= 1.0"):
        tilewright.autotune(configs=[{"sweeps": 1}], early_stop=True, early_stop_factor=0.5)(
            relax)


def test_foreign_pass_configs_are_logged_once_by_the_tuning_process(monkeypatch, caplog):
    """A pass config of another backend is logged once per key here, before the search; the
    steps (run in this process below, as a child would) stay quiet about it."""
    from tilewright.autotuner import measure
    from tilewright.plugin import passconfig

    monkeypatch.setattr(passconfig, "_NOTED", set())
    foreign = {tilewright.PassConfigKey.TL_DISABLE_TMA_LOWER: True}
    configs = [{"block": 32, "pass_configs": foreign}, {"block": 64, "pass_configs": foreign}]
    with caplog.at_level("WARNING", logger="tilewright"):
        tuner.note_pass_configs(scaled_copy, configs, "cpu")
        tuner.note_pass_configs(scaled_copy, configs, "cpu")
        noted = [r.getMessage() for r in caplog.records]
        passconfig._NOTED.clear()  # as in a fresh child process
        spec = tuner.JitSpec(scaled_copy)
        uncached = {"block": 32, "pass_configs": {**foreign, "tw.disable_cache": True}}
        outcome = measure.compile_config(spec, (200,), {}, 0, uncached)
    assert outcome.status == "compiled", outcome.error
    assert noted == ["pass config TL_DISABLE_TMA_LOWER (cuda.disable_tma_lower) belongs to "
                     "backend 'cuda' and has no effect on backend 'cpu'"], noted
    assert [r.getMessage() for r in caplog.records] == noted
