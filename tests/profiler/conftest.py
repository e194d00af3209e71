"""Fixtures for the profiling tests: architecture models that need no device, and a plugin
manager with a fake accelerator plugin that registers timers and architecture models."""

import types

import pytest
from tilewright.plugin import ArchModel, Availability, PluginManager, Timer, hookimpl, set_manager

# A GPU-like model with round numbers, so expected times can be computed by hand.
GPU = ArchModel("testgpu", {"float16": 100.0, "float32": 10.0}, 1000.0,
                description="test fixture: 100 TFLOP/s fp16, 10 fp32, 1 TB/s",
                compute_units=100, shared_memory_bytes=160 * 1024, register_budget=65536,
                mma_shape=(16, 8, 16), transaction_bytes=128, unit_partitions=4)


@pytest.fixture
def gpu_arch():
    return GPU


def _fake_plugin(calls: list):
    def measure(fn, n_warmup, n_repeat, flush=None):
        calls.append(("measure", n_warmup, n_repeat, flush is not None))
        return [1.0] * n_repeat

    module = types.ModuleType("fake_accel_plugin")

    @hookimpl
    def tilewright_timers():
        return [Timer("event", lambda: Availability(False, "no CUDA device is visible"),
                      measure, "device events"),
                Timer("fixed", lambda: Availability(True), measure, "always 1 ms")]

    @hookimpl
    def tilewright_arch_models():
        return [GPU]

    module.tilewright_timers = tilewright_timers
    module.tilewright_arch_models = tilewright_arch_models
    return module


@pytest.fixture
def fake_plugins():
    """A plugin manager with the CPU backend and a fake accelerator plugin (timer ``event``
    unavailable, timer ``fixed`` returning 1 ms, arch model ``testgpu``). Yields the list of
    ``measure`` calls the fake timers saw."""
    import tilewright_cpu.plugin as cpu

    calls: list = []
    manager = PluginManager(entry_points=[])
    manager.register(cpu, "cpu")
    manager.register(_fake_plugin(calls), "fake")
    manager.load()
    previous = set_manager(manager)
    try:
        yield calls
    finally:
        set_manager(previous)
