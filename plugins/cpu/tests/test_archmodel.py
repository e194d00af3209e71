"""The CPU roofline model: measured once per machine and cached, checked for plausibility,
overridden from the environment."""

import json
from pathlib import Path

import pytest
from tilewright.errors import ConfigError
from tilewright_cpu import archmodel


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "tw-cache"))
    for name in (archmodel.PEAK_ENV, archmodel.BANDWIDTH_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(archmodel, "nominal_tflops", lambda: 1.0)
    archmodel.host_model.cache_clear()
    yield
    archmodel.host_model.cache_clear()


def fake_probe(monkeypatch, fp32, fp64, bandwidth=20.0, bursts=None):
    """Measurements replaced by given numbers (``bursts``: the GB/s and CPU share of each
    copy burst, else four unhindered bursts at ``bandwidth``); returns the list of
    measurements made."""
    made = []

    def peak(dtype):
        made.append(str(dtype))
        return fp32 if "32" in str(dtype) else fp64

    # 1 GB read and written per copy, on 2 threads: a copy at g GB/s takes 2 / g seconds
    bursts = bursts or [(bandwidth, 1.0)] * 4
    timed = [(2 / rate, 2 * 2 / rate * share) for rate, share in bursts]
    monkeypatch.setattr(archmodel, "_peak_tflops", peak)
    monkeypatch.setattr(archmodel, "_copy_bursts", lambda: (10 ** 9, 2, timed))
    return made


def test_a_plausible_measurement_is_cached_per_machine(monkeypatch):
    made = fake_probe(monkeypatch, 0.5, 0.25)
    model = archmodel.host_model()
    assert model.peak_tflops == {"float32": 0.5, "float64": 0.25}
    assert model.bandwidth_gbps == 20.0 and not model.details["estimated"]
    archmodel.host_model.cache_clear()  # a new process reads the file, measures nothing
    assert archmodel.host_model().peak_tflops["float32"] == 0.5 and len(made) == 2
    assert model.details["cache_file"].endswith(archmodel.cache_name())


def test_the_cached_record_says_how_the_bandwidth_was_measured(monkeypatch):
    fake_probe(monkeypatch, 0.5, 0.25, bursts=[(18.0, 0.9), (20.0, 0.95), (19.0, 1.0),
                                               (17.0, 0.8)])
    model = archmodel.host_model()
    assert model.bandwidth_gbps == 20.0 and not model.details["busy"]
    record = json.loads(Path(model.details["cache_file"]).read_text())
    bandwidth = record["bandwidth"]
    assert bandwidth["readings_gbps"] == [20.0, 19.0]
    assert bandwidth["cpu_share"] == pytest.approx(0.95)
    assert "wall clock, best of 4 bursts of 3 copies of 953 MiB on 2 thread(s)" in \
        bandwidth["method"]


@pytest.mark.parametrize("bursts, why", [
    ([(20.0, 1.0), (20.0, 1.0), (6.0, 1.0), (5.0, 1.0)], "readings disagree: 6 and 20"),
    ([(8.0, 0.4), (9.0, 0.5), (8.5, 0.45), (8.0, 0.5)], "had 50% of its threads' CPU time"),
])
def test_a_bandwidth_dragged_down_by_load_is_used_but_not_cached(monkeypatch, bursts, why):
    made = fake_probe(monkeypatch, 0.5, 0.25, bursts=bursts)
    with pytest.warns(RuntimeWarning, match=why):
        model = archmodel.host_model()
    assert model.details["busy"] and not model.details["cache_file"]
    archmodel.host_model.cache_clear()
    with pytest.warns(RuntimeWarning, match="not cached"):
        archmodel.host_model()
    assert len(made) == 4  # measured again


@pytest.mark.parametrize("fp32, fp64, bandwidth, estimated", [
    (30.0, 20.0, 20.0, ["float32", "float64"]),  # 30x the nominal peak: a too-short probe
    (0.5, 0.6, 20.0, ["float64"]),  # float64 faster than float32
    (0.5, 0.25, 0.01, ["bandwidth"]),
])
def test_an_implausible_measurement_is_replaced_and_not_cached(monkeypatch, fp32, fp64,
                                                               bandwidth, estimated):
    made = fake_probe(monkeypatch, fp32, fp64, bandwidth)
    with pytest.warns(RuntimeWarning, match="not cached"):
        model = archmodel.host_model()
    assert list(model.details["estimated"]) == estimated
    assert "estimated" in model.description
    assert model.peak_tflops["float32"] <= 1.5 and \
        model.peak_tflops["float64"] < model.peak_tflops["float32"]
    archmodel.host_model.cache_clear()
    with pytest.warns(RuntimeWarning):
        archmodel.host_model()
    assert len(made) == 4  # measured again


def test_a_busy_machine_is_used_but_not_cached(monkeypatch):
    fake_probe(monkeypatch, 0.1, 0.05)  # a tenth of the nominal peak
    with pytest.warns(RuntimeWarning, match="busy"):
        model = archmodel.host_model()
    assert model.details["busy"] and model.peak_tflops["float32"] == 0.1


def test_the_environment_overrides_the_model(monkeypatch):
    made = fake_probe(monkeypatch, 0.5, 0.25)
    monkeypatch.setenv(archmodel.PEAK_ENV, "float32=0.2,float64=0.1")
    monkeypatch.setenv(archmodel.BANDWIDTH_ENV, "12.5")
    model = archmodel.host_model()
    assert model.peak_tflops == {"float32": 0.2, "float64": 0.1}
    assert model.bandwidth_gbps == 12.5 and "from the environment" in model.description
    assert made == []  # every value given: nothing measured
    monkeypatch.setenv(archmodel.PEAK_ENV, "0.2")  # float64 and the bandwidth still measured
    monkeypatch.delenv(archmodel.BANDWIDTH_ENV)
    archmodel.host_model.cache_clear()
    model = archmodel.host_model()
    assert model.peak_tflops == {"float32": 0.2, "float64": 0.25} and len(made) == 2
    assert model.details["overridden"] == ("float32",)
    monkeypatch.setenv(archmodel.BANDWIDTH_ENV, "12.5")
    for name, text in ((archmodel.PEAK_ENV, "fast"), (archmodel.PEAK_ENV, "-1"),
                       (archmodel.BANDWIDTH_ENV, "0")):
        monkeypatch.setenv(name, text)
        archmodel.host_model.cache_clear()
        with pytest.raises(ConfigError, match=name):
            archmodel.host_model()
        monkeypatch.delenv(name)


def test_the_real_probe_is_plausible_or_says_why():
    """The probe itself on this machine (about a second): a plausible measurement, or one the
    check caught, with its reason."""
    try:
        values = archmodel.measure()
    except archmodel.Uncacheable as busy:
        values = busy.values
        assert values["notes"]
    fp32, fp64 = values["peak_tflops"]["float32"], values["peak_tflops"]["float64"]
    assert 0 < fp64 < fp32 <= 1.5 * values["nominal_tflops"] and values["bandwidth_gbps"] > 0
