"""The CUDA backend as backend ``cuda_emu`` whose kernels run in the host emulation
(:mod:`hostemu`), for differential fuzzing without a GPU: the same pipeline and code
generation as ``cuda`` (sm_80 unless ``-arch`` says otherwise), an executor that compiles the
generated CUDA C++ with g++ against the emulation shim and runs it on host tensors.

A pytest plugin: ``PYTHONPATH=backend-cuda/tests pytest -p fuzz_emulated --pyargs
tilewright_sdk.fuzz --tilewright-backend cuda_emu --examples N --seed S``.
"""

from __future__ import annotations

import dataclasses
import types

import hostemu
import pytest
from tilewright.plugin import Availability, Executor, get_manager, hookimpl
from tilewright_cuda.plugin import BACKEND

NAME = "cuda_emu"


def _available() -> Availability:
    reason = hostemu.available()
    return Availability(reason is None, reason or "g++ with C++20")


def _build(source, ctx, workdir):
    hostemu.build(source.text, source.payload, workdir)  # build errors surface here

    def run(*args):
        hostemu.run(source.text, source.payload, workdir, *args)

    return run


EMULATED = dataclasses.replace(
    BACKEND, name=NAME, target_kinds=(NAME,),
    pipelines={NAME: BACKEND.pipelines["cuda"]}, codegens={NAME: BACKEND.codegens["cuda"]},
    executors=(Executor("hostemu", _available, _build, doc="g++ and the emulation shim"),),
    accelerator=False, device="cpu", device_available=lambda: Availability(True),
    target_defaults=lambda kind: {"arch": "sm_80"},
    description="the CUDA backend's code run by the host emulation (tests only)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    module = types.ModuleType("tilewright_cuda_emulated")
    module.tilewright_backends = hookimpl(lambda: [EMULATED])
    get_manager().register(module, NAME)
