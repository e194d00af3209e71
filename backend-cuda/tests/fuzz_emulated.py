"""The CUDA backend as backend ``cuda_emu`` whose kernels run in the host emulation
(:mod:`hostemu`), for differential fuzzing without a GPU: the same pipeline and code
generation as ``cuda`` for the architecture ``--cuda-emu-arch`` names (default sm_80; sm_90a
for TMA loads, wgmma and the producer warpgroup), an executor that compiles the generated CUDA
C++ with g++ against the emulation shim and runs it on host tensors.

A pytest plugin: ``PYTHONPATH=backend-cuda/tests pytest -p fuzz_emulated --pyargs
tilewright_sdk.fuzz --tilewright-backend cuda_emu [--cuda-emu-arch sm_90a] --examples N
--seed S``.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections import Counter

import hostemu
import pytest
from tilewright.plugin import Availability, Executor, get_manager, hookimpl
from tilewright_cuda.plugin import BACKEND

NAME = "cuda_emu"
# the gemm functions (include/tw_mma.h, tw_wgmma.h) the built kernels call, counted per call
# site: which instruction the fuzzed gemms took
GEMM_CALLS = Counter()


def _available() -> Availability:
    reason = hostemu.available()
    return Availability(reason is None, reason or "g++ with C++20")


def _build(source, ctx, workdir):
    hostemu.build(source.text, source.payload, workdir)  # build errors surface here
    GEMM_CALLS.update(re.findall(r"\b(tw_gemm_\w+)<\d", source.text))

    def run(*args):
        hostemu.run(source.text, source.payload, workdir, *args)

    return run


def emulated(arch: str):
    """The backend ``cuda_emu`` compiling for ``arch``."""
    return dataclasses.replace(
        BACKEND, name=NAME, target_kinds=(NAME,),
        pipelines={NAME: BACKEND.pipelines["cuda"]}, codegens={NAME: BACKEND.codegens["cuda"]},
        executors=(Executor("hostemu", _available, _build, doc="g++ and the emulation shim"),),
        accelerator=False, device="cpu", device_available=lambda: Availability(True),
        target_defaults=lambda kind: {"arch": arch},
        description=f"the CUDA backend's code for {arch} run by the host emulation (tests "
                    "only)")


def pytest_addoption(parser):
    parser.addoption("--cuda-emu-arch", default="sm_80", metavar="ARCH",
                     help="fuzz_emulated: the architecture cuda_emu compiles for (sm_80)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    backend = emulated(config.getoption("--cuda-emu-arch"))
    module = types.ModuleType("tilewright_cuda_emulated")
    module.tilewright_backends = hookimpl(lambda: [backend])
    get_manager().register(module, NAME)


def pytest_terminal_summary(terminalreporter):
    if GEMM_CALLS:
        terminalreporter.write_line("cuda_emu gemm call sites built: " + ", ".join(
            f"{name} {n}" for name, n in GEMM_CALLS.most_common()))
