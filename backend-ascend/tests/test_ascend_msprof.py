"""``do_bench(..., backend="msprof", _n_warmup=, _n_repeat=)``: refused here with the reason
(no msprof, no NPU); with CANN's tools and ``torch_npu`` faked, the repetitions are timed
under the profiler and each one's device time is read from its ``kernel_details.csv``."""

import csv
import importlib.machinery
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from tilewright.errors import ConfigError
from tilewright.profiler import do_bench
from tilewright_ascend.profiler import repetitions_ms


def test_msprof_is_refused_with_the_reason_without_cann(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match="timer 'msprof' is not available here: msprof is not "
                                          "on PATH"):
        do_bench(lambda: None, backend="msprof", _n_warmup=30, _n_repeat=100)
    with pytest.raises(ConfigError, match="timer 'msprof_detail' is not available here"):
        do_bench(lambda: None, backend="msprof_detail")


def _fake_cann(tmp_path, monkeypatch, kernels):
    """msprof and bisheng on PATH, ASCEND_HOME_PATH, a torch_npu whose profiler records the
    durations ``kernels`` receives while it is active and writes them as the real one does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("msprof", "bisheng"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    recorded = []

    @contextmanager
    def profile(activities, on_trace_ready):
        assert activities == ["NPU"]
        kernels.recording = recorded
        yield
        kernels.recording = None
        on_trace_ready(recorded)

    def tensorboard_trace_handler(folder):
        def write(rows):
            out = Path(folder) / "host_1_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
            out.mkdir(parents=True)
            with open(out / "kernel_details.csv", "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["Name", "Duration(us)"])
                writer.writerows(rows)
            rows.clear()
        return write

    prof = types.ModuleType("torch_npu.profiler")
    prof.profile, prof.tensorboard_trace_handler = profile, tensorboard_trace_handler
    prof.ProfilerActivity = types.SimpleNamespace(NPU="NPU")
    npu = types.ModuleType("torch_npu")
    npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    npu.profiler = prof
    monkeypatch.setitem(sys.modules, "torch_npu", npu)
    monkeypatch.setitem(sys.modules, "torch_npu.profiler", prof)
    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(synchronize=lambda: None),
                        raising=False)


def test_msprof_times_each_repetition_from_the_profilers_kernel_details(tmp_path, monkeypatch):
    class Kernels:
        recording = None
        calls = 0

        def __call__(self):  # two kernels per call: 10 us + (5 * call) us
            self.calls += 1
            if self.recording is not None:
                self.recording += [("add", 10.0), ("scale", 5.0 * self.calls)]

    kernels = Kernels()
    _fake_cann(tmp_path, monkeypatch, kernels)
    samples = do_bench(kernels, backend="msprof", _n_warmup=3, _n_repeat=4, return_mode="all")
    # do_bench's estimate (1 warm-up + 5 timed) ran first: calls 1-6; then 3 warm-ups (7-9)
    assert kernels.calls == 6 + 3 + 4
    assert samples == pytest.approx([(10 + 5 * c) / 1000 for c in (10, 11, 12, 13)])


def test_msprof_kernel_counts_must_divide_into_repetitions():
    rows = [{"Name": "k", "Duration(us)": "3.0"}] * 5
    with pytest.raises(RuntimeError, match="5 kernels were recorded for 2 repetitions"):
        repetitions_ms(rows, 2)
    with pytest.raises(RuntimeError, match="no column 'Duration\\(us\\)'"):
        repetitions_ms([{"Name": "k", "Time": "1"}], 1)
    assert repetitions_ms(rows[:4], 2) == [0.006, 0.006]
